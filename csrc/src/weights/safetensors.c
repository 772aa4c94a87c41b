/* The index of a safetensors file (weights/foreign_index.h), read from its header.
 *
 * The format (https://github.com/huggingface/safetensors): a little-endian u64 N, then N bytes
 * of JSON (UTF-8, which writers pad with spaces to a multiple of 8), then the data. The JSON is
 * an object mapping each tensor's name to {"dtype": "F32", "shape": [2, 3], "data_offsets":
 * [begin, end]}, its bytes [begin, end) counted from the start of the data (byte 8 + N), and an
 * optional "__metadata__" to an object of strings (or null). What is checked, as the
 * safetensors library checks it (its Rust crate, safetensors/src/tensor.rs) and then some:
 *   - N is at most MP_SAFETENSORS_MAX_HEADER (100 MB, the library's limit), refused unread, and
 *     the file holds it;
 *   - the JSON is valid UTF-8 and parses (core/json_reader.h: strict RFC 8259, only spaces
 *     after it), with exactly the fields above and no field twice; numbers are whole numbers
 *     where the format has them;
 *   - names are 1..MP_WEIGHTS_MAX_NAME bytes without NUL, and unique (the library silently
 *     keeps the last of two entries of one name, so two readers could see different tensors:
 *     refused); metadata keys are unique too;
 *   - each tensor's dtype is one of the table below (another: MP_ERR_INCOMPATIBLE naming it),
 *     its shape at most MP_WEIGHTS_MAX_NDIM extents, each at most INT64_MAX, their product and
 *     its bytes too (also when another extent is 0, as modpack/tensor_span.h asks of arrays),
 *     its values fill whole bytes (the library's rule for sub-byte types), and
 *     end - begin = product(shape) * bits / 8;
 *   - sorted by offset, the ranges start at 0, each where the last ended (no gap, no overlap;
 *     empty tensors may share an offset), and the last ends where the file does.
 * The data is not read. Tensors in other orders than their offsets (older writers sorted by
 * name) are accepted, as the library accepts them, and handed out in the order of offsets.
 *
 * Types. Each safetensors dtype is handed out as the DLPack dtype below, one element per
 * value, except the sub-byte ones:
 *   BOOL bool8          U8/I8 uint8/int8      U16/I16 U32/I32 U64/I64 (u)int16/32/64
 *   F16 float16         BF16 bfloat16         F32 float32     F64 float64    C64 complex64
 *   F8_E4M3 float8_e4m3fn (10)                F8_E5M2 float8_e5m2 (12)
 *   F8_E4M3FNUZ float8_e4m3fnuz (11)          F8_E5M2FNUZ float8_e5m2fnuz (13)
 *   F8_E8M0 float8_e8m0fnu (14)
 *   F4 float4_e2m1fn (17), in pairs: bits 4, lanes 2
 *   F6_E2M3 / F6_E3M2 float6_e2m3fn / float6_e3m2fn (15 / 16), in fours: bits 6, lanes 4
 * Rationale for the pairs: DLPack 1.1 describes a lone float4_e2m1fn (lanes 1) as packed two a
 * byte, low nibble first, with its shape in values; but modpack stores and hands out arrays in
 * elements of whole bytes (core/dtype.h: float4 as float4_e2m1fn_x2, float6 in fours), which
 * is also how PyTorch loads an F4 tensor (float4_e2m1fn_x2, the header's last dimension
 * halved). So an F4 tensor of header shape [..., n] is handed out as {17, 4, 2} of shape
 * [..., n / 2], the same bytes; F6 as {15 or 16, 6, 4} of shape [..., n / 4]. Its shape in
 * values stays in logical_shape, and block_elements/block_bytes say the grouping (2 values in
 * 1 byte, 4 in 3). A tensor whose last dimension does not divide (rows that share a byte) has
 * no such form and is refused (MP_ERR_INCOMPATIBLE), as PyTorch's loader refuses it.
 * safetensors defines no bit order within F6's bytes: they are handed out as the file holds
 * them.
 *
 * The index: format SAFETENSORS, version 0, header_size = data_offset = 8 + N (header: those
 * bytes as read and parsed), data_size = file_size - data_offset, alignment 8 (what writers pad
 * the header to; the format promises no alignment of a tensor, and none is checked), type_name
 * the dtype's name, type_id 0, metadata_json the "__metadata__" object re-written in its order
 * ("{}" when there is none). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/json.h"
#include "core/json_reader.h"
#include "files/file.h"
#include "weights/foreign_index.h"

enum {
  SIZE_FIELD = 8,       /* the u64 N before the JSON */
  ALIGNMENT = 8,        /* what writers pad the header to */
  SHOWN_NAME = 200,     /* the most of a name a message shows */
  FIRST_CAPACITY = 16,  /* tensors or metadata entries, before growing */
};

typedef struct {
  const char* name;
  DLDataType dtype; /* as handed out */
  uint32_t values;  /* values per handed-out element: 1, 2 (F4), 4 (F6) */
  uint32_t bits;    /* of one value */
} dtype_info_t;

static const dtype_info_t DTYPES[] = {
    {"BOOL", {kDLBool, 8, 1}, 1, 8},
    {"U8", {kDLUInt, 8, 1}, 1, 8},
    {"I8", {kDLInt, 8, 1}, 1, 8},
    {"U16", {kDLUInt, 16, 1}, 1, 16},
    {"I16", {kDLInt, 16, 1}, 1, 16},
    {"U32", {kDLUInt, 32, 1}, 1, 32},
    {"I32", {kDLInt, 32, 1}, 1, 32},
    {"U64", {kDLUInt, 64, 1}, 1, 64},
    {"I64", {kDLInt, 64, 1}, 1, 64},
    {"F16", {kDLFloat, 16, 1}, 1, 16},
    {"BF16", {kDLBfloat, 16, 1}, 1, 16},
    {"F32", {kDLFloat, 32, 1}, 1, 32},
    {"F64", {kDLFloat, 64, 1}, 1, 64},
    {"C64", {kDLComplex, 64, 1}, 1, 64},
    {"F8_E4M3", {kDLFloat8_e4m3fn, 8, 1}, 1, 8},
    {"F8_E5M2", {kDLFloat8_e5m2, 8, 1}, 1, 8},
    {"F8_E4M3FNUZ", {kDLFloat8_e4m3fnuz, 8, 1}, 1, 8},
    {"F8_E5M2FNUZ", {kDLFloat8_e5m2fnuz, 8, 1}, 1, 8},
    {"F8_E8M0", {kDLFloat8_e8m0fnu, 8, 1}, 1, 8},
    {"F6_E2M3", {kDLFloat6_e2m3fn, 6, 4}, 4, 6},
    {"F6_E3M2", {kDLFloat6_e3m2fn, 6, 4}, 4, 6},
    {"F4", {kDLFloat4_e2m1fn, 4, 2}, 2, 4},
};
enum { DTYPE_COUNT = sizeof DTYPES / sizeof DTYPES[0] };
_Static_assert(sizeof "F8_E4M3FNUZ" <= MP_FOREIGN_MAX_TYPE_NAME, "type names fit type_name");

static const char KNOWN_DTYPES[] =
    "BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64, C64, F8_E4M3, F8_E5M2, "
    "F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, F6_E2M3, F6_E3M2, F4";

/* A tensor being read: its end is kept in |size| until the ranges are checked. */
#define END size

/* A metadata entry, kept for the duplicate check and re-written in order. */
typedef struct {
  char* key;
  uint64_t key_size;
  char* value;
  uint64_t value_size;
} meta_entry_t;

typedef struct {
  const char* path;
  mp_json_reader_t json;
  uint64_t data_size;
  mp_foreign_index_t* out;
  uint64_t capacity; /* of out->arrays */
  meta_entry_t* meta;
  uint64_t meta_count, meta_capacity;
  bool meta_seen;
} parse_t;

/* |name| for a message: as is, or cut between characters to what |capacity| holds (at most
 * SHOWN_NAME bytes) and "...". */
static const char* shown(const char* name, char* buffer, size_t capacity) {
  size_t n = strlen(name), room = capacity > SHOWN_NAME + 4 ? SHOWN_NAME : capacity - 4;
  if (n < capacity && n <= SHOWN_NAME) {
    memcpy(buffer, name, n + 1);
    return buffer;
  }
  n = room;
  while (n > 0 && ((uint8_t)name[n] & 0xC0) == 0x80) --n; /* not inside a character */
  snprintf(buffer, capacity, "%.*s...", (int)n, name);
  return buffer;
}

static mp_status_t invalid(const parse_t* p, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static mp_status_t invalid(const parse_t* p, const char* fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return mp_errorf(MP_ERR_FORMAT, "'%s' is not a valid safetensors file: %s", p->path, what);
}

/* Grow |*items| (of |size|-byte items, |*capacity| of them) to hold one more. */
static mp_status_t grow(void** items, uint64_t* capacity, uint64_t count, size_t size,
                        const char* what) {
  if (count < *capacity) return MP_OK;
  uint64_t wanted = *capacity ? *capacity * 2 : FIRST_CAPACITY, bytes;
  if (!mp_mul_u64(wanted, size, &bytes) || bytes > SIZE_MAX) return mp_out_of_memory(what);
  void* grown = realloc(*items, (size_t)bytes);
  if (!grown) return mp_out_of_memory(what);
  *items = grown;
  *capacity = wanted;
  return MP_OK;
}

/* ---- one tensor ------------------------------------------------------------------------- */

/* The dtype, filling |a|'s dtype (as handed out), type_name and block (the values in one
 * handed-out element, and their bytes). */
static mp_status_t read_dtype(parse_t* p, mp_foreign_array_t* a) {
  char* text;
  uint64_t size;
  MP_RETURN_IF_ERROR(mp_json_read_string(&p->json, "the dtype of tensor", &text, &size));
  const dtype_info_t* type = NULL;
  for (int i = 0; i < DTYPE_COUNT && !type; ++i)
    if (strlen(DTYPES[i].name) == size && memcmp(DTYPES[i].name, text, size) == 0)
      type = &DTYPES[i];
  if (!type) {
    char shown_name[SHOWN_NAME + 4], shown_type[40];
    mp_errorf(MP_ERR_INCOMPATIBLE,
              "'%s': tensor '%s' is of dtype '%s', which this runtime does not read (it reads "
              "%s): convert the tensor to one of those, or upgrade modpack",
              p->path, shown(a->name, shown_name, sizeof shown_name),
              shown(memchr(text, 0, size) ? "(with a NUL)" : text, shown_type, sizeof shown_type),
              KNOWN_DTYPES);
    free(text);
    return MP_ERR_INCOMPATIBLE;
  }
  free(text);
  a->dtype = type->dtype;
  memcpy(a->type_name, type->name, strlen(type->name) + 1);
  a->block_elements = type->values;
  a->block_bytes = type->values * type->bits / 8;
  return MP_OK;
}

static mp_status_t read_shape(parse_t* p, mp_foreign_array_t* a) {
  const char* context = "the shape of tensor";
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '[', context, "'['"));
  if (mp_json_accept(&p->json, ']')) return MP_OK;
  do {
    char shown_name[SHOWN_NAME + 4];
    if (a->logical_ndim == MP_WEIGHTS_MAX_NDIM)
      return mp_errorf(MP_ERR_INCOMPATIBLE,
                       "'%s': tensor '%s' has more than %d dimensions, more than modpack "
                       "handles",
                       p->path, shown(a->name, shown_name, sizeof shown_name),
                       MP_WEIGHTS_MAX_NDIM);
    uint64_t extent;
    MP_RETURN_IF_ERROR(mp_json_read_u64(&p->json, context, &extent));
    if (extent > (uint64_t)INT64_MAX)
      return invalid(p, "tensor '%s' has an extent of %" PRIu64 ", over 2^63 - 1",
                     shown(a->name, shown_name, sizeof shown_name), extent);
    a->logical_shape[a->logical_ndim++] = (int64_t)extent;
  } while (mp_json_accept(&p->json, ','));
  return mp_json_expect(&p->json, ']', context, "',' or ']'");
}

static mp_status_t read_offsets(parse_t* p, mp_foreign_array_t* a) {
  const char* context = "the data_offsets of tensor";
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '[', context, "'[' ([begin, end])"));
  MP_RETURN_IF_ERROR(mp_json_read_u64(&p->json, context, &a->offset));
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, ',', context, "',' and the end offset"));
  MP_RETURN_IF_ERROR(mp_json_read_u64(&p->json, context, &a->END));
  return mp_json_expect(&p->json, ']', context, "']' (two numbers: begin, end)");
}

/* The object of tensor |a| (its name set), fields in any order, each once. Messages are
 * formatted only when one is needed: this runs for every tensor. */
static mp_status_t read_tensor(parse_t* p, mp_foreign_array_t* a) {
  const char* context = "the fields of tensor";
  char shown_name[SHOWN_NAME + 4], shown_field[40];
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '{', context, "'{'"));
  enum { DTYPE = 1, SHAPE = 2, OFFSETS = 4 };
  unsigned seen = 0;
  if (!mp_json_accept(&p->json, '}')) {
    do {
      char* field;
      uint64_t size;
      MP_RETURN_IF_ERROR(mp_json_read_string(&p->json, context, &field, &size));
      unsigned which = size == 5 && memcmp(field, "dtype", 5) == 0          ? DTYPE
                       : size == 5 && memcmp(field, "shape", 5) == 0          ? SHAPE
                       : size == 12 && memcmp(field, "data_offsets", 12) == 0 ? OFFSETS
                                                                               : 0;
      if (!which || (seen & which)) {
        shown(memchr(field, 0, size) ? "(with a NUL)" : field, shown_field, sizeof shown_field);
        free(field);
        shown(a->name, shown_name, sizeof shown_name);
        if (!which)
          return invalid(p, "tensor '%s' has a field '%s': safetensors defines only dtype, "
                         "shape and data_offsets", shown_name, shown_field);
        return invalid(p, "tensor '%s' has '%s' twice", shown_name, shown_field);
      }
      free(field);
      seen |= which;
      MP_RETURN_IF_ERROR(mp_json_expect(&p->json, ':', context, "':'"));
      if (which == DTYPE) MP_RETURN_IF_ERROR(read_dtype(p, a));
      if (which == SHAPE) MP_RETURN_IF_ERROR(read_shape(p, a));
      if (which == OFFSETS) MP_RETURN_IF_ERROR(read_offsets(p, a));
    } while (mp_json_accept(&p->json, ','));
    MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '}', context, "',' or '}'"));
  }
  if (seen != (DTYPE | SHAPE | OFFSETS))
    return invalid(p, "tensor '%s' has no '%s'", shown(a->name, shown_name, sizeof shown_name),
                   !(seen & DTYPE) ? "dtype" : !(seen & SHAPE) ? "shape" : "data_offsets");
  return MP_OK;
}

static mp_status_t check_name(parse_t* p, const char* name, uint64_t size) {
  char shown_name[SHOWN_NAME + 4];
  if (size == 0) return invalid(p, "a tensor's name is empty");
  if (memchr(name, 0, size))
    return invalid(p, "tensor '%s' has a NUL character (\\u0000) in its name, which modpack "
                   "refuses", shown(name, shown_name, sizeof shown_name));
  if (size > MP_WEIGHTS_MAX_NAME)
    return invalid(p, "tensor '%s' has a name of %" PRIu64 " bytes, more than the %d modpack "
                   "allows", shown(name, shown_name, sizeof shown_name), size,
                   MP_WEIGHTS_MAX_NAME);
  return MP_OK;
}

/* ---- the metadata ------------------------------------------------------------------------ */

static mp_status_t read_metadata(parse_t* p) {
  const char* context = "__metadata__";
  if (p->meta_seen) return invalid(p, "its header has \"__metadata__\" twice");
  p->meta_seen = true;
  if (mp_json_accept_null(&p->json)) return MP_OK;
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '{', context, "an object of strings, or null"));
  if (mp_json_accept(&p->json, '}')) return MP_OK;
  do {
    MP_RETURN_IF_ERROR(grow((void**)&p->meta, &p->meta_capacity, p->meta_count, sizeof *p->meta,
                            "a safetensors file's metadata"));
    meta_entry_t* m = &p->meta[p->meta_count];
    *m = (meta_entry_t){0};
    ++p->meta_count; /* freed from here on */
    MP_RETURN_IF_ERROR(mp_json_read_string(&p->json, context, &m->key, &m->key_size));
    MP_RETURN_IF_ERROR(mp_json_expect(&p->json, ':', context, "':'"));
    MP_RETURN_IF_ERROR(mp_json_read_string(&p->json, context, &m->value, &m->value_size));
  } while (mp_json_accept(&p->json, ','));
  return mp_json_expect(&p->json, '}', context, "',' or '}'");
}

static int by_key(const void* a, const void* b) {
  const meta_entry_t* x = *(const meta_entry_t* const*)a;
  const meta_entry_t* y = *(const meta_entry_t* const*)b;
  uint64_t n = x->key_size < y->key_size ? x->key_size : y->key_size;
  int c = memcmp(x->key, y->key, (size_t)n);
  return c ? c : (x->key_size > y->key_size) - (x->key_size < y->key_size);
}

/* Keys unique (found by sorting, n log n), then the object re-written in its order. */
static mp_status_t write_metadata(parse_t* p) {
  if (p->meta_count > 1) {
    const meta_entry_t** sorted = malloc((size_t)p->meta_count * sizeof *sorted);
    if (!sorted) return mp_out_of_memory("a safetensors file's metadata");
    for (uint64_t i = 0; i < p->meta_count; ++i) sorted[i] = &p->meta[i];
    qsort(sorted, (size_t)p->meta_count, sizeof *sorted, by_key);
    const meta_entry_t* twice = NULL;
    for (uint64_t i = 1; i < p->meta_count && !twice; ++i)
      if (by_key(&sorted[i - 1], &sorted[i]) == 0) twice = sorted[i];
    free(sorted);
    if (twice) {
      char shown_key[SHOWN_NAME + 4];
      return invalid(p, "its __metadata__ has the key '%s' twice",
                     shown(memchr(twice->key, 0, twice->key_size) ? "(with a NUL)" : twice->key,
                           shown_key, sizeof shown_key));
    }
  }
  mp_json_t json = {NULL, 0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    mp_json_printf(&json, "{");
    for (uint64_t i = 0; i < p->meta_count; ++i) {
      if (i) mp_json_printf(&json, ", ");
      mp_json_string_n(&json, p->meta[i].key, p->meta[i].key_size);
      mp_json_printf(&json, ": ");
      mp_json_string_n(&json, p->meta[i].value, p->meta[i].value_size);
    }
    mp_json_printf(&json, "}");
    if (pass == 0) {
      uint64_t size = json.length + 1;
      if (size > SIZE_MAX || !(json.buffer = malloc((size_t)size)))
        return mp_out_of_memory("a safetensors file's metadata");
      json = (mp_json_t){json.buffer, size, 0};
    }
  }
  p->out->metadata_json = json.buffer;
  return MP_OK;
}

/* ---- the header -------------------------------------------------------------------------- */

static mp_status_t read_json(parse_t* p) {
  const char* context = "the header";
  MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '{', context, "'{' (an object of tensors)"));
  if (!mp_json_accept(&p->json, '}')) {
    do {
      char* name;
      uint64_t size;
      MP_RETURN_IF_ERROR(mp_json_read_string(&p->json, "a tensor's name", &name, &size));
      if (size == 12 && memcmp(name, "__metadata__", 12) == 0) {
        free(name);
        MP_RETURN_IF_ERROR(mp_json_expect(&p->json, ':', "__metadata__", "':'"));
        MP_RETURN_IF_ERROR(read_metadata(p));
        continue;
      }
      mp_status_t status = check_name(p, name, size);
      mp_foreign_index_t* out = p->out;
      if (status == MP_OK)
        status = grow((void**)&out->arrays, &p->capacity, out->count, sizeof *out->arrays,
                      "a safetensors file's index");
      if (status != MP_OK) {
        free(name);
        return status;
      }
      mp_foreign_array_t* a = &out->arrays[out->count++];
      memset(a, 0, sizeof *a);
      a->name = name; /* freed with the index from here on */
      p->json.subject = name; /* in the reader's messages */
      MP_RETURN_IF_ERROR(mp_json_expect(&p->json, ':', "after the name of tensor", "':'"));
      MP_RETURN_IF_ERROR(read_tensor(p, a));
      p->json.subject = NULL;
    } while (mp_json_accept(&p->json, ','));
    MP_RETURN_IF_ERROR(mp_json_expect(&p->json, '}', context, "',' or '}'"));
  }
  return mp_json_end(&p->json);
}

/* ---- the ranges -------------------------------------------------------------------------- */

/* "[2, 3]" (cut with "...]" past |capacity|). */
static const char* shape_text(const int64_t* shape, int32_t ndim, char* buffer, size_t capacity) {
  size_t n = (size_t)snprintf(buffer, capacity, "[");
  for (int32_t d = 0; d < ndim && n < capacity; ++d)
    n += (size_t)snprintf(buffer + n, capacity - n, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (n + 1 < capacity) snprintf(buffer + n, capacity - n, "]");
  else if (capacity > 5) snprintf(buffer + capacity - 5, 5, "...]");
  return buffer;
}

/* A refusal of tensor |a| after it was read: "tensor 'w' (F32 [2, 3], data_offsets [0, 20]):
 * <what is wrong>", as MP_ERR_FORMAT ("'<path>' is not a valid safetensors file: ...") or
 * MP_ERR_INCOMPATIBLE ("'<path>': ..."). Formatted only here: checks run for every tensor. */
static mp_status_t tensor_refused(const parse_t* p, const mp_foreign_array_t* a,
                                  mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static mp_status_t tensor_refused(const parse_t* p, const mp_foreign_array_t* a,
                                  mp_status_t code, const char* fmt, ...) {
  char shown_name[SHOWN_NAME + 4], shape[160], what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return mp_errorf(code, "'%s'%s: tensor '%s' (%s %s, data_offsets [%" PRIu64 ", %" PRIu64
                   "]): %s", p->path, code == MP_ERR_FORMAT ? " is not a valid safetensors file"
                   : "", shown(a->name, shown_name, sizeof shown_name), a->type_name,
                   shape_text(a->logical_shape, a->logical_ndim, shape, sizeof shape),
                   a->offset, a->END, what);
}

/* Tensor |a|'s range against the data and its shape, then what is handed out of it. */
static mp_status_t check_tensor(parse_t* p, mp_foreign_array_t* a) {
  const uint64_t begin = a->offset, end = a->END;
  if (end < begin) return tensor_refused(p, a, MP_ERR_FORMAT, "its range ends before it begins");
  if (end > p->data_size)
    return tensor_refused(p, a, MP_ERR_FORMAT, "its range ends past the file's %" PRIu64
                          " bytes of data (the file is truncated, or its header damaged)",
                          p->data_size);
  /* Its values and their bytes, counting only the non-zero extents (an empty tensor's other
   * extents still size the rows code computes). */
  const uint64_t bits_per_value = a->block_bytes * 8u / a->block_elements;
  uint64_t values = 1, bits = 0;
  bool empty = false;
  for (int32_t d = 0; d < a->logical_ndim; ++d) {
    if (a->logical_shape[d] == 0) empty = true;
    else if (!mp_mul_u64(values, (uint64_t)a->logical_shape[d], &values) ||
             values > (uint64_t)INT64_MAX)
      return tensor_refused(p, a, MP_ERR_FORMAT, "its shape holds more than 2^63 - 1 values");
  }
  if (!mp_mul_u64(values, bits_per_value, &bits) || bits / 8 > (uint64_t)INT64_MAX)
    return tensor_refused(p, a, MP_ERR_FORMAT, "its shape holds more than 2^63 - 1 bytes");
  if (!empty && bits % 8 != 0)
    return tensor_refused(p, a, MP_ERR_FORMAT, "%" PRIu64 " values of %" PRIu64 " bits do not "
                          "fill whole bytes", values, bits_per_value);
  const uint64_t bytes = empty ? 0 : bits / 8;
  if (bytes != end - begin)
    return tensor_refused(p, a, MP_ERR_FORMAT, "its shape is %" PRIu64 " bytes, its range %"
                          PRIu64, bytes, end - begin);
  /* As handed out: whole-byte elements, the last dimension grouped for F4 and F6. */
  a->ndim = a->logical_ndim;
  memcpy(a->shape, a->logical_shape, sizeof a->shape);
  if (a->block_elements > 1) {
    if (a->ndim == 0 || a->shape[a->ndim - 1] % a->block_elements != 0)
      return tensor_refused(p, a, MP_ERR_INCOMPATIBLE,
                            "its last dimension is not a multiple of %u, so its rows share "
                            "bytes; modpack hands %s out in whole bytes, %u values in %u along "
                            "the last dimension (%s): save it with a last dimension that "
                            "divides", a->block_elements, a->type_name, a->block_elements,
                            a->block_bytes,
                            a->block_elements == 2 ? "float4_e2m1fn_x2, as PyTorch loads F4"
                                                   : "as modpack stores float6");
    a->shape[a->ndim - 1] /= a->block_elements;
  }
  return MP_OK;
}

static int by_name(const void* x, const void* y, void* arrays) {
  const mp_foreign_array_t* a = arrays;
  return strcmp(a[*(const uint64_t*)x].name, a[*(const uint64_t*)y].name);
}

static int by_range(const void* x, const void* y, void* arrays) {
  const mp_foreign_array_t* a = &((const mp_foreign_array_t*)arrays)[*(const uint64_t*)x];
  const mp_foreign_array_t* b = &((const mp_foreign_array_t*)arrays)[*(const uint64_t*)y];
  if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
  if (a->END != b->END) return a->END < b->END ? -1 : 1;
  return strcmp(a->name, b->name); /* empty tensors at one offset: in the order of names */
}

/* Put arrays[order[i]] at i for every i, following the permutation's cycles (no copy of the
 * arrays; |order| is spent). */
static void permute(mp_foreign_array_t* arrays, uint64_t* order, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    if (order[i] == i) continue;
    mp_foreign_array_t first = arrays[i];
    uint64_t j = i;
    for (;;) {
      uint64_t k = order[j];
      order[j] = j;
      if (k == i) {
        arrays[j] = first;
        break;
      }
      arrays[j] = arrays[k];
      j = k;
    }
  }
}

/* Names unique; the ranges, in the order of offsets, tile the data exactly. */
static mp_status_t check_ranges(parse_t* p) {
  mp_foreign_index_t* out = p->out;
  for (uint64_t i = 0; i < out->count; ++i) MP_RETURN_IF_ERROR(check_tensor(p, &out->arrays[i]));
  if (out->count > SIZE_MAX / sizeof(uint64_t)) return mp_out_of_memory("sorting tensors");
  uint64_t* order = malloc((size_t)(out->count ? out->count : 1) * sizeof *order);
  if (!order) return mp_out_of_memory("sorting tensors");
  for (uint64_t i = 0; i < out->count; ++i) order[i] = i;
  qsort_r(order, (size_t)out->count, sizeof *order, by_name, out->arrays);
  for (uint64_t i = 1; i < out->count; ++i)
    if (by_name(&order[i - 1], &order[i], out->arrays) == 0) {
      char shown_name[SHOWN_NAME + 4];
      shown(out->arrays[order[i]].name, shown_name, sizeof shown_name);
      free(order);
      return invalid(p, "two tensors are named '%s' (the safetensors library would silently "
                     "take the last; modpack refuses the ambiguity)", shown_name);
    }
  for (uint64_t i = 0; i < out->count; ++i) order[i] = i;
  qsort_r(order, (size_t)out->count, sizeof *order, by_range, out->arrays);
  permute(out->arrays, order, out->count);
  free(order);
  uint64_t at = 0; /* where the next tensor must begin, in the data */
  for (uint64_t i = 0; i < out->count; ++i) {
    mp_foreign_array_t* a = &out->arrays[i];
    char shown_name[SHOWN_NAME + 4], shown_other[SHOWN_NAME + 4];
    if (a->offset > at)
      return invalid(p, "bytes [%" PRIu64 ", %" PRIu64 ") of its data belong to no tensor (a gap "
                     "before tensor '%s')", at, a->offset,
                     shown(a->name, shown_name, sizeof shown_name));
    if (a->offset < at)
      return invalid(p, "tensors '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]) and '%s' "
                     "([%" PRIu64 ", %" PRIu64 "]) overlap",
                     shown(out->arrays[i - 1].name, shown_other, sizeof shown_other),
                     out->arrays[i - 1].offset, out->arrays[i - 1].END,
                     shown(a->name, shown_name, sizeof shown_name), a->offset, a->END);
    at = a->END;
  }
  if (at != p->data_size)
    return invalid(p, "its tensors end at byte %" PRIu64 " of its data, but the file holds %" PRIu64
                   " bytes of data: %" PRIu64 " bytes after them belong to no tensor", at,
                   p->data_size, p->data_size - at);
  for (uint64_t i = 0; i < out->count; ++i) {
    mp_foreign_array_t* a = &out->arrays[i];
    a->size = a->END - a->offset; /* (END is size: this replaces the end) */
    a->offset += out->data_offset;
  }
  return MP_OK;
}

/* ---- reading ----------------------------------------------------------------------------- */

mp_status_t mp_safetensors_read_index(int fd, uint64_t file_size, const char* path,
                                      mp_const_byte_span_t head, mp_foreign_index_t* out) {
  memset(out, 0, sizeof *out);
  uint8_t size_field[SIZE_FIELD];
  if (file_size < SIZE_FIELD)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a safetensors file: it is %" PRIu64 " bytes, too short for the "
                     "8-byte size of the header a safetensors file begins with",
                     path, file_size);
  if (head.size >= SIZE_FIELD)
    memcpy(size_field, head.data, SIZE_FIELD);
  else if (!mp_file_read_at(fd, size_field, sizeof size_field, 0))
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  const uint64_t n = mp_load_le64(size_field);
  if (n > MP_SAFETENSORS_MAX_HEADER)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a valid safetensors file: its first 8 bytes claim a header of "
                     "%" PRIu64 " bytes, more than the %d a safetensors header may be (it is "
                     "damaged, or not a safetensors file)",
                     path, n, MP_SAFETENSORS_MAX_HEADER);
  if (n > file_size - SIZE_FIELD)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a valid safetensors file: its first 8 bytes claim a header of "
                     "%" PRIu64 " bytes, but only %" PRIu64 " follow (it is truncated, or not a "
                     "safetensors file)",
                     path, n, file_size - SIZE_FIELD);
  out->format = MP_WEIGHTS_FORMAT_SAFETENSORS;
  out->version = 0;
  out->header_size = out->data_offset = SIZE_FIELD + n;
  out->data_size = file_size - out->data_offset;
  out->alignment = ALIGNMENT;
  out->header = malloc((size_t)out->header_size);
  if (!out->header) return mp_out_of_memory("a safetensors header");
  memcpy(out->header, size_field, SIZE_FIELD); /* the bytes parsed, not a second read of them */
  mp_status_t status = MP_OK;
  uint64_t given = head.size > SIZE_FIELD ? head.size - SIZE_FIELD : 0;
  if (given > n) given = n;
  if (given) memcpy(out->header + SIZE_FIELD, head.data + SIZE_FIELD, (size_t)given);
  if (given < n && !mp_file_read_at(fd, out->header + SIZE_FIELD + given, (size_t)(n - given),
                                    SIZE_FIELD + given))
    status = mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                       errno ? strerror(errno) : "the file shrank");
  char what[4200];
  snprintf(what, sizeof what, "'%s': its JSON header", path);
  parse_t p = {.path = path, .data_size = out->data_size, .out = out};
  if (status == MP_OK)
    status = mp_json_reader_init(&p.json, out->header + SIZE_FIELD, n, what);
  if (status == MP_OK) status = read_json(&p);
  if (status == MP_OK) status = check_ranges(&p);
  if (status == MP_OK) status = write_metadata(&p);
  for (uint64_t i = 0; i < p.meta_count; ++i) {
    free(p.meta[i].key);
    free(p.meta[i].value);
  }
  free(p.meta);
  if (status != MP_OK) mp_foreign_index_free(out);
  return status;
}
