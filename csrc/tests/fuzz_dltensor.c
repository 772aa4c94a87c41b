/* libFuzzer target over the arrays host code receives: DLTensors crafted from the input bytes
 * (any rank up to 33, shape, strides, byte_offset, dtype, device; data in real memory, at an
 * arbitrary address or NULL), checked against a signature by mp_signature_check (the function
 * the module context's check_args slot holds, so what mp_backend_check_args and every
 * MP_EXPORT_TYPED_* wrapper run), by the array converter of the untyped wrappers
 * (modpack/backend.h) and copied with mp_array_copy.
 *
 * What counts as a finding (the target aborts, or a sanitizer stops it):
 *   - mp_tensor_span (modpack/tensor_span.h) disagrees with a reference computed here in 128-bit
 *     arithmetic, independently: it must accept exactly the arrays whose bytes are addressable,
 *     with the same sizes; mp_array_nbytes must be the reference's size or 0;
 *   - the checker, or an untyped wrapper, accepts an array the reference refuses;
 *   - AddressSanitizer: an array "in real memory" gets a heap buffer of exactly the bytes its
 *     span says it reaches, placed where the span says, so when the checker accepts it the
 *     target reads every byte of that span and the elements at the corners, at the addresses
 *     host code computes from data, byte_offset, shape and strides: a span that undercounts is
 *     a read outside the buffer. (A buffer of a size chosen apart from the array could not
 *     work: no checker can know from a pointer how much memory is behind it, so an honest
 *     shape [100] over 16 bytes is accepted.) The same for what mp_array_copy writes;
 *   - UndefinedBehaviorSanitizer: any overflow in the checker, the span or the target's own
 *     host-style address arithmetic.
 *
 * Input: [signature][arguments...], every field read from the bytes left (zeros past the end).
 *   signature  1 byte: < SIGNATURES one of the list below; otherwise 1 byte of length, then that
 *              many bytes of signature text. The number of arguments is the signature's number
 *              of entries (at most MAX_ARGS).
 *   argument   1 byte of kind: % 8 < 6 an array, 6 an int, 7 None. An array is
 *                ndim     1 byte, % 34;
 *                dtype    1 byte: < DTYPES one of the table, else code, bits (1 byte each) and
 *                         lanes (2 bytes, little-endian);
 *                device   1 byte: % 4 = 0 cpu:0, 1 opencl:0, 2 cuda:0, 3 then type and id
 *                         (4 bytes each);
 *                flags    1 byte: bit 0 strides; bit 1 no shape; bits 2-3 data: 0 and 1 in real
 *                         memory, 2 at an address read next (a value), 3 NULL;
 *                byte_offset, shape[ndim], strides[ndim] (with bit 0), then the address: values.
 *   value      1 byte: < 128 an interesting number (the table below, modulo its size);
 *              otherwise the next 8 bytes, little-endian.
 * make_dltensor_corpus.py writes the seeds: well-formed calls and the audit's overflow cases. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/signature.h"
#include "modpack/backend.h"
#include "modpack/modpack.h"
#include "modpack/tensor_span.h"

enum {
  MAX_ARGS = 8,
  MAX_NDIM = 33,
  MAX_SIGNATURE = 200,
  REAL_LIMIT = 1 << 16, /* the largest span given real memory */
};

static const char* const signatures[] = {
    "x: float32[n] cpu",
    "x: float32[n] cpu, out: float32[n] cpu",
    "m: float64[rows, cols] strided, column",
    "rgb: uint8[*, 3], scalar: float32[], anything: any[...]",
    "a: float32[n, k], b: float32[k, m], c: float32[n, m]",
    "x: any[...] strided",
    "x: any",
    "x: int8[...] strided cpu opencl cuda",
    "x: complex64[*, *] strided, y: bfloat16[2, 2, 2]",
    "x: any[*, *, *, *] strided, y: any[...], k",
    "w: float4_e2m1fn_x2[n, k] cpu, x: float8_e4m3fn[n] strided",
    "p: float4_e2m1fn[*, *] strided, q: float6_e3m2fn[...]",
};
enum { SIGNATURES = sizeof signatures / sizeof signatures[0] };

static const DLDataType dtypes[] = {
    {kDLFloat, 32, 1}, {kDLFloat, 64, 1},   {kDLUInt, 8, 1},    {kDLInt, 8, 1},
    {kDLInt, 64, 1},   {kDLComplex, 64, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 4},
    {kDLBool, 8, 1},   {kDLInt, 4, 1},      {kDLFloat, 0, 1},   {kDLInt, 8, 0},
    /* DLPack 1.1's sub-byte formats: packed (lanes 1), a packed pair, one that does not pack */
    {kDLFloat4_e2m1fn, 4, 1}, {kDLFloat4_e2m1fn, 4, 2}, {kDLFloat6_e2m3fn, 6, 1},
    {kDLFloat8_e4m3fn, 8, 1}, {kDLFloat4_e2m1fn, 4, 3},
};
enum { DTYPES = sizeof dtypes / sizeof dtypes[0] };

static const int64_t interesting[] = {
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    16,
    255,
    256,
    4096,
    65536,
    INT32_MAX,
    (int64_t)1 << 31,
    UINT32_MAX,
    (int64_t)1 << 32,
    ((int64_t)1 << 32) + 1,
    (int64_t)1 << 40,
    (int64_t)1 << 47,
    (int64_t)1 << 60,
    (int64_t)1 << 61,
    ((int64_t)1 << 61) + 1,
    (int64_t)1 << 62,
    INT64_MAX,
    INT64_MAX / 2,
    INT64_MAX / 4 + 1,
    INT64_MAX - 4095,
    INT64_MIN,
    INT64_MIN + 1,
    -1,
    -2,
    -4,
    -4096,
    -((int64_t)1 << 32),
    -((int64_t)1 << 62),
    (int64_t)0x7ffffffff000,      /* near the top of user space */
    (int64_t)-4096,               /* 0xfffffffffffff000: the last page */
    (int64_t)0xffff800000000000u, /* kernel space */
};
enum { INTERESTING = sizeof interesting / sizeof interesting[0] };

typedef struct {
  const uint8_t* data;
  size_t size, pos;
} input_t;

static uint8_t byte(input_t* in) {
  return in->pos < in->size ? in->data[in->pos++] : 0;
}

static uint64_t raw64(input_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)byte(in) << (8 * i);
  return v;
}

static uint64_t value(input_t* in) {
  uint8_t tag = byte(in);
  return tag < 128 ? (uint64_t)interesting[tag % INTERESTING] : raw64(in);
}

/* ---- the reference: an array's reach in 128-bit arithmetic --------------------------------- */

typedef unsigned __int128 u128;
#define CAP ((u128)1 << 100) /* saturate here: past any 64-bit answer, far from 2^128 */

static u128 sat(u128 v) {
  return v > CAP ? CAP : v;
}

static u128 sat_mul(u128 a, u128 b) { /* a, b <= CAP */
  return a && b > CAP / a ? CAP : a * b;
}

typedef struct {
  bool layout_ok, ok;
  u128 itemsize, bits, nbytes, below, above;
} reference_t;

/* ceil(count * bits / 8): the bytes of |count| elements, whole bytes each or packed. */
static u128 bytes_of(u128 count, u128 bits) { /* count <= CAP, bits < 2^24 */
  return sat((sat_mul(count, bits) + 7) / 8);
}

static reference_t reference(const DLTensor* t) {
  reference_t r = {0};
  const u128 limit = (u128)PTRDIFF_MAX;
  if (t->ndim < 0 || (t->ndim > 0 && !t->shape) || t->dtype.bits == 0 || t->dtype.lanes == 0)
    return r;
  r.bits = (u128)t->dtype.bits * t->dtype.lanes;
  if (r.bits > 8 && r.bits % 8 != 0) return r; /* neither packed nor whole bytes */
  r.itemsize = r.bits % 8 == 0 ? r.bits / 8 : 0;
  u128 count = 1;
  bool empty = false;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0) return r;
    if (t->shape[d] == 0)
      empty = true;
    else
      count = sat_mul(count, (u128)t->shape[d]);
  }
  u128 product = bytes_of(count, r.bits);
  if (count > limit || product > limit) return r;
  if (!empty) {
    r.nbytes = product;
    if (!t->strides) {
      r.above = product;
    } else {
      u128 below = 0, above = 0;
      for (int32_t d = 0; d < t->ndim; ++d) {
        u128 last = (u128)(t->shape[d] - 1);
        int64_t s = t->strides[d];
        u128 magnitude = s < 0 ? (u128)(-(__int128)s) : (u128)s;
        if (s < 0)
          below = sat(below + sat_mul(last, magnitude));
        else
          above = sat(above + sat_mul(last, magnitude));
      }
      r.below = bytes_of(below, r.bits);
      r.above = bytes_of(above + 1, r.bits);
      if (r.below + r.above > limit) return r;
    }
  }
  r.layout_ok = true;
  if (t->byte_offset > limit || t->byte_offset + r.above > limit) return r;
  u128 first = (u128)(uintptr_t)t->data + t->byte_offset;
  if (first > UINT64_MAX || first < r.below || first + r.above > UINT64_MAX) return r;
  r.ok = true;
  return r;
}

/* The array being looked at, printed with a failed requirement. */
static const DLTensor* current;

static void dump(const DLTensor* t) {
  if (!t) return;
  fprintf(stderr, "  data %p, byte_offset %llu, device %d:%d, dtype %u/%u/%u, ndim %d\n", t->data,
          (unsigned long long)t->byte_offset, (int)t->device.device_type,
          (int)t->device.device_id, (unsigned)t->dtype.code, (unsigned)t->dtype.bits,
          (unsigned)t->dtype.lanes, (int)t->ndim);
  for (int32_t d = 0; d < t->ndim && t->shape; ++d)
    fprintf(stderr, "  shape[%d] %lld stride %lld\n", (int)d, (long long)t->shape[d],
            t->strides ? (long long)t->strides[d] : 0LL);
}

#define REQUIRE(cond, ...)                           \
  do {                                               \
    if (!(cond)) {                                   \
      fprintf(stderr, "fuzz_dltensor: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                  \
      fputc('\n', stderr);                           \
      dump(current);                                 \
      abort();                                       \
    }                                                \
  } while (0)

/* mp_tensor_span, mp_tensor_layout and mp_array_nbytes against the reference. */
static void compare_with_reference(const DLTensor* t) {
  current = t;
  reference_t r = reference(t);
  mp_tensor_span_t layout, span;
  mp_span_status_t layout_status = mp_tensor_layout(t, &layout);
  mp_span_status_t status = mp_tensor_span(t, &span);
  char why[400];
  mp_tensor_span_describe(t, status, &span, why, sizeof why); /* formats any case cleanly */
  REQUIRE((layout_status == MP_SPAN_OK) == r.layout_ok, "layout status %d", (int)layout_status);
  REQUIRE((status == MP_SPAN_OK) == r.ok, "span status %d: %s", (int)status, why);
  REQUIRE(mp_array_nbytes(t) == (r.layout_ok ? (uint64_t)r.nbytes : 0), "mp_array_nbytes %llu",
          (unsigned long long)mp_array_nbytes(t));
  if (!r.layout_ok) return;
  REQUIRE(layout.itemsize == r.itemsize && layout.bits == r.bits && layout.nbytes == r.nbytes &&
              layout.below == r.below && layout.above == r.above,
          "span below %llu above %llu nbytes %llu", (unsigned long long)layout.below,
          (unsigned long long)layout.above, (unsigned long long)layout.nbytes);
}

/* ---- building arrays -------------------------------------------------------------------- */

typedef struct {
  DLTensor tensor;
  int64_t shape[MAX_NDIM];
  int64_t strides[MAX_NDIM];
  uint8_t* buffer; /* real memory: exactly the bytes its span reaches */
  size_t buffer_size;
} array_t;

static void build_array(input_t* in, array_t* a) {
  memset(a, 0, sizeof *a);
  DLTensor* t = &a->tensor;
  t->ndim = byte(in) % (MAX_NDIM + 1);
  uint8_t d = byte(in);
  if (d < DTYPES) {
    t->dtype = dtypes[d];
  } else {
    t->dtype.code = byte(in);
    t->dtype.bits = byte(in);
    t->dtype.lanes = (uint16_t)(byte(in) | byte(in) << 8);
  }
  static const DLDevice devices[] = {{kDLCPU, 0}, {kDLOpenCL, 0}, {kDLCUDA, 0}};
  uint8_t device = byte(in) % 4;
  if (device < 3) {
    t->device = devices[device];
  } else {
    t->device.device_type = (DLDeviceType)(int32_t)(uint32_t)raw64(in);
    t->device.device_id = (int32_t)(uint32_t)raw64(in);
  }
  uint8_t flags = byte(in);
  t->byte_offset = value(in);
  for (int32_t i = 0; i < t->ndim; ++i) a->shape[i] = (int64_t)value(in);
  if (flags & 1)
    for (int32_t i = 0; i < t->ndim; ++i) a->strides[i] = (int64_t)value(in);
  t->shape = (flags & 2) && t->ndim > 0 ? NULL : a->shape;
  t->strides = flags & 1 ? a->strides : NULL;
  int placement = (flags >> 2) & 3;
  if (placement == 2) {
    t->data = (void*)(uintptr_t)value(in);
    return;
  }
  if (placement == 3) return; /* NULL */
  /* Real memory: a buffer of exactly the bytes the span reaches, with data + byte_offset
   * |below| bytes into it. Arrays too large for that point into a small real buffer (and are
   * never read: their span would reach past it). */
  static uint8_t small[4096];
  mp_tensor_span_t span;
  if (mp_tensor_layout(t, &span) != MP_SPAN_OK || span.below + span.above > REAL_LIMIT) {
    t->data = small;
    return;
  }
  a->buffer_size = (size_t)(span.below + span.above);
  a->buffer = malloc(a->buffer_size ? a->buffer_size : 1);
  if (!a->buffer) abort();
  memset(a->buffer, 0x5a, a->buffer_size);
  t->data = (void*)((uintptr_t)a->buffer + (uintptr_t)span.below - (uintptr_t)t->byte_offset);
}

/* ---- reading what the checker accepted -------------------------------------------------- */

static volatile uint8_t sink;

static void read_element(const DLTensor* t, const int64_t* index) {
  /* As host code addresses it: data + byte_offset + (sum of index * stride) * itemsize, the
   * strides row-major when there are none (their products fit: the span was accepted); an
   * element under a byte (packed) at bit (sum of index * stride) * bits from there, read as
   * the bytes that hold its bits. */
  int64_t offset = 0, stride = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    int64_t s = t->strides ? t->strides[d] : stride;
    offset += index[d] * s;
    if (!t->strides) stride *= t->shape[d];
  }
  int64_t bits = (int64_t)t->dtype.bits * t->dtype.lanes;
  int64_t first_bit = offset * bits; /* (a span of at most REAL_LIMIT bytes: no overflow) */
  int64_t byte = first_bit >= 0 ? first_bit / 8 : -((7 - first_bit) / 8); /* floor */
  int64_t count = (first_bit - byte * 8 + bits + 7) / 8;
  const uint8_t* p = (const uint8_t*)t->data + t->byte_offset + byte;
  for (int64_t b = 0; b < count; ++b) sink ^= p[b];
}

/* Every byte of its span, then the elements at the corners: all indices 0, the last index of
 * each dimension alone, and the lowest and the highest element. */
static void read_array(const array_t* a) {
  const DLTensor* t = &a->tensor;
  for (size_t b = 0; b < a->buffer_size; ++b) sink ^= a->buffer[b];
  for (int32_t d = 0; d < t->ndim; ++d)
    if (t->shape[d] == 0) return; /* empty: no element */
  int64_t index[MAX_NDIM] = {0};
  read_element(t, index);
  for (int32_t d = 0; d < t->ndim; ++d) {
    index[d] = t->shape[d] - 1;
    read_element(t, index);
    index[d] = 0;
  }
  for (int high = 0; high < 2 && t->strides; ++high) {
    for (int32_t d = 0; d < t->ndim; ++d)
      index[d] = (t->strides[d] > 0) == high ? t->shape[d] - 1 : 0;
    read_element(t, index);
  }
}

/* Which entries of |signature| declare arrays (a colon), split at top-level commas as the
 * checker does; returns the number of entries. */
static int32_t array_entries(const char* signature, bool* is_array) {
  int32_t entries = 0, depth = 0;
  bool blank = true, colon = false;
  for (const char* p = signature; *p; ++p) {
    blank = blank && (*p == ' ' || *p == '\t' || *p == '\n');
    depth += (*p == '[') - (*p == ']');
    if (*p == ',' && depth == 0) {
      if (entries < MAX_ARGS) is_array[entries] = colon;
      ++entries;
      colon = false;
    } else if (*p == ':') {
      colon = true;
    }
  }
  if (blank) return 0;
  if (entries < MAX_ARGS) is_array[entries] = colon;
  return entries + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  input_t in = {data, size, 0};
  char text[MAX_SIGNATURE + 1];
  const char* signature;
  uint8_t choice = byte(&in);
  if (choice < SIGNATURES) {
    signature = signatures[choice];
  } else {
    size_t length = byte(&in) % (MAX_SIGNATURE + 1);
    size_t i = 0;
    for (; i < length && in.pos < in.size; ++i) text[i] = (char)byte(&in);
    text[i] = '\0';
    signature = text;
  }
  bool is_array[MAX_ARGS] = {false};
  int32_t entries = array_entries(signature, is_array);
  int32_t count = entries < MAX_ARGS ? entries : MAX_ARGS;

  static array_t arrays[MAX_ARGS];
  mp_value_t args[MAX_ARGS];
  bool tensor[MAX_ARGS] = {false};
  for (int32_t i = 0; i < count; ++i) {
    uint8_t kind = byte(&in) % 8;
    if (kind < 6) {
      build_array(&in, &arrays[i]);
      args[i] = mp_tensor(&arrays[i].tensor);
      tensor[i] = true;
      compare_with_reference(&arrays[i].tensor);
      /* What an untyped wrapper does with it: refused exactly when the reference says so. */
      DLTensor* converted = NULL;
      mp_status_t untyped = mp_backend__arg_const_tensor(&args[i], &converted, "fuzz", i);
      REQUIRE((untyped == MP_OK) == reference(&arrays[i].tensor).ok, "untyped status %d",
              (int)untyped);
    } else if (kind == 6) {
      args[i] = mp_int((int64_t)value(&in));
    } else {
      args[i] = (mp_value_t){.type_code = MP_TYPE_NONE};
    }
  }

  static int verbose = -1; /* MODPACK_FUZZ_VERBOSE=1: each check's outcome on stderr */
  if (verbose < 0) verbose = getenv("MODPACK_FUZZ_VERBOSE") != NULL;
  mp_status_t checked = mp_signature_check("fuzz", signature, args, count);
  if (verbose)
    fprintf(stderr, "\"%s\": %s\n", signature, checked ? mp_error_message() : "accepted");
  if (checked == MP_OK) {
    for (int32_t i = 0; i < count; ++i) {
      if (!is_array[i]) continue; /* a scalar entry: the checker says nothing about it */
      REQUIRE(tensor[i], "argument %d accepted as an array", (int)i);
      const array_t* a = &arrays[i];
      current = &a->tensor;
      REQUIRE(reference(&a->tensor).ok, "argument %d accepted by \"%s\"", (int)i, signature);
      if (a->buffer) read_array(a);
    }
  } else {
    sink ^= (uint8_t)mp_error_message()[0];
  }

  /* A copy between the first two arrays when both are in real memory on the CPU: whatever
   * mp_array_copy accepts, it must read and write inside their buffers. */
  if (count >= 2 && tensor[0] && tensor[1] && arrays[0].buffer && arrays[1].buffer &&
      arrays[0].tensor.device.device_type == kDLCPU &&
      arrays[1].tensor.device.device_type == kDLCPU &&
      arrays[0].tensor.device.device_id == 0 && arrays[1].tensor.device.device_id == 0)
    mp_array_copy(&arrays[0].tensor, &arrays[1].tensor);

  for (int32_t i = 0; i < count; ++i) free(arrays[i].buffer);
  memset(arrays, 0, sizeof arrays);
  return 0;
}
