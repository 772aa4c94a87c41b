/* ctest: the bytes an array of DLPack 1.1's sub-byte types reaches (modpack/tensor_span.h),
 * their sizes through the runtime (mp_array_empty, mp_array_nbytes, mp_array_copy) and their
 * names (mp_dtype_string). Packed 4- and 6-bit values take ceil(count * bits / 8) bytes, with
 * strides counted in values; a width over a byte that is not whole bytes is refused by its
 * rule; whole-byte types keep the sizes they always had. Public API only. */
#include "modpack/modpack.h"
#include "modpack/tensor_span.h"
#include "test_util.h"

static const DLDataType FP4 = {kDLFloat4_e2m1fn, 4, 1};
static const DLDataType FP4X2 = {kDLFloat4_e2m1fn, 4, 2};
static const DLDataType FP6 = {kDLFloat6_e2m3fn, 6, 1};

/* mp_tensor_span of |ndim| extents (and strides, unless NULL) at |data| + |offset|. */
static mp_span_status_t span_of(DLDataType dtype, int32_t ndim, int64_t* shape, int64_t* strides,
                                void* data, uint64_t offset, mp_tensor_span_t* out) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, dtype, shape, strides, offset};
  return mp_tensor_span(&t, out);
}

static void packed_sizes(void) {
  static uint8_t memory[64];
  mp_tensor_span_t s;
  /* Odd counts: the last byte half used. */
  int64_t odd[] = {3, 5};
  CHECK(span_of(FP4, 2, odd, NULL, memory, 0, &s) == MP_SPAN_OK, "fp4 [3, 5]");
  CHECK(s.elements == 15 && s.nbytes == 8 && s.above == 8 && s.below == 0, "%llu %llu",
        (unsigned long long)s.elements, (unsigned long long)s.nbytes);
  CHECK(s.itemsize == 0 && s.bits == 4, "packed: no whole-byte item size");
  /* Pairs: the same bytes counted as bytes (torch.float4_e2m1fn_x2). */
  int64_t pairs[] = {3, 4};
  CHECK(span_of(FP4X2, 2, pairs, NULL, memory, 0, &s) == MP_SPAN_OK, "fp4x2 [3, 4]");
  CHECK(s.itemsize == 1 && s.nbytes == 12 && s.bits == 8, "%llu", (unsigned long long)s.nbytes);
  /* 6-bit values straddle bytes: 4 in 3 bytes, 7 in 6 (42 bits). */
  int64_t seven[] = {7};
  CHECK(span_of(FP6, 1, seven, NULL, memory, 0, &s) == MP_SPAN_OK && s.nbytes == 6, "fp6 [7]");
  int64_t four[] = {4};
  CHECK(span_of(FP6, 1, four, NULL, memory, 0, &s) == MP_SPAN_OK && s.nbytes == 3, "fp6 [4]");
  /* A scalar and an empty array. */
  CHECK(span_of(FP4, 0, NULL, NULL, memory, 0, &s) == MP_SPAN_OK && s.nbytes == 1, "fp4 []");
  int64_t empty[] = {0, 5};
  CHECK(span_of(FP4, 2, empty, NULL, memory, 0, &s) == MP_SPAN_OK && s.nbytes == 0, "empty");
}

static void packed_strides(void) {
  static uint8_t memory[64];
  mp_tensor_span_t s;
  /* Rows reversed: the lowest value is 10 values (5 bytes) below the first; the highest ends
   * 5 values (3 bytes, the last half used) past its start. */
  int64_t shape[] = {3, 5}, reversed[] = {-5, 1};
  CHECK(span_of(FP4, 2, shape, reversed, memory + 32, 0, &s) == MP_SPAN_OK, "fp4 reversed");
  CHECK(s.below == 5 && s.above == 3, "below %llu above %llu", (unsigned long long)s.below,
        (unsigned long long)s.above);
  /* 6-bit values 7 apart, backwards: 14 values (84 bits, 11 bytes) below. */
  int64_t fp6_shape[] = {4, 3}, fp6_strides[] = {1, -7};
  CHECK(span_of(FP6, 2, fp6_shape, fp6_strides, memory + 32, 0, &s) == MP_SPAN_OK, "fp6");
  CHECK(s.below == 11 && s.above == 3, "below %llu above %llu", (unsigned long long)s.below,
        (unsigned long long)s.above);
  /* Starting 11 bytes below address 16 wraps. */
  CHECK(span_of(FP6, 2, fp6_shape, fp6_strides, (void*)(uintptr_t)8, 0, &s) == MP_SPAN_WRAPS,
        "below address 0");
}

static void packed_limits(void) {
  mp_tensor_span_t s;
  static uint8_t memory[1];
  /* 2^62 4-bit values are 2^61 bytes: a size that fits, though count * bits passes 2^64. */
  int64_t big[] = {(int64_t)1 << 62};
  CHECK(mp_tensor_layout(&(DLTensor){memory, {kDLCPU, 0}, 1, FP4, big, NULL, 0}, &s) ==
            MP_SPAN_OK,
        "2^62 fp4");
  CHECK(s.nbytes == (uint64_t)1 << 61, "%llu", (unsigned long long)s.nbytes);
  /* 2^63 of them: more elements than PTRDIFF_MAX (an index must fit in int64). */
  int64_t bigger[] = {(int64_t)1 << 62, 2};
  DLTensor t = {memory, {kDLCPU, 0}, 2, FP4, bigger, NULL, 0};
  CHECK(mp_tensor_layout(&t, &s) == MP_SPAN_TOO_LARGE && s.dim == 1, "2^63 fp4");
  char why[400];
  mp_tensor_span_describe(&t, MP_SPAN_TOO_LARGE, &s, why, sizeof why);
  CHECK(strstr(why, "of 4-bit packed elements is more than 9223372036854775807 elements or bytes"),
        "%s", why);
  /* Strides that reach 2 * 2^62 values of 6 bits: 3 * 2^61 bytes, which fit; 3 * 2^62 of
   * them are 9 * 2^60 bytes, past PTRDIFF_MAX, though the count fits in 64 bits. */
  int64_t three[] = {3}, far[] = {(int64_t)1 << 62};
  CHECK(mp_tensor_layout(&(DLTensor){memory, {kDLCPU, 0}, 1, FP6, three, far, 0}, &s) ==
            MP_SPAN_OK,
        "2 * 2^62 values away");
  CHECK(s.above == 3 * ((uint64_t)1 << 61) + 1, "%llu", (unsigned long long)s.above);
  int64_t four[] = {4};
  CHECK(mp_tensor_layout(&(DLTensor){memory, {kDLCPU, 0}, 1, FP6, four, far, 0}, &s) ==
            MP_SPAN_STRIDES_TOO_LARGE,
        "3 * 2^62 values away");
}

static void bad_packing(void) {
  static uint8_t memory[16];
  mp_tensor_span_t s;
  int64_t shape[] = {4};
  DLTensor t = {memory, {kDLCPU, 0}, 1, {kDLFloat4_e2m1fn, 4, 3}, shape, NULL, 0};
  CHECK(mp_tensor_span(&t, &s) == MP_SPAN_BAD_PACKING && s.bits == 12, "4 bits x 3 lanes");
  char why[400];
  mp_tensor_span_describe(&t, MP_SPAN_BAD_PACKING, &s, why, sizeof why);
  CHECK(strstr(why, "its elements are 12 bits (4 bits x 3 lanes), which do not pack"), "%s", why);
  CHECK(mp_array_nbytes(&t) == 0, "no size for what does not pack");
  DLTensor* array = NULL;
  mp_status_t status = mp_array_empty(shape, 1, t.dtype, (DLDevice){kDLCPU, 0}, &array);
  CHECK(status == MP_ERR_INVALID_ARGUMENT && !array, "mp_array_empty refuses it");
  CHECK(strstr(mp_error_message(), "do not pack"), "%s", mp_error_message());
  /* Whole-byte widths are unchanged: 4 bits x 4 lanes is 2 bytes, 8 x 3 is 3. */
  t.dtype = (DLDataType){kDLFloat4_e2m1fn, 4, 4};
  CHECK(mp_tensor_span(&t, &s) == MP_SPAN_OK && s.itemsize == 2 && s.nbytes == 8, "fp4x4");
  t.dtype = (DLDataType){kDLUInt, 8, 3};
  CHECK(mp_tensor_span(&t, &s) == MP_SPAN_OK && s.itemsize == 3 && s.nbytes == 12, "uint8x3");
}

static void runtime_arrays(void) {
  /* An array of 9 packed values is 5 bytes, allocated, sized and copied as such. */
  int64_t shape[] = {9};
  DLTensor *a = NULL, *b = NULL;
  CHECK(mp_array_empty(shape, 1, FP4, (DLDevice){kDLCPU, 0}, &a) == MP_OK, "%s",
        mp_error_message());
  CHECK(mp_array_empty(shape, 1, FP4, (DLDevice){kDLCPU, 0}, &b) == MP_OK, "%s",
        mp_error_message());
  if (!a || !b) return;
  CHECK(mp_array_nbytes(a) == 5, "%llu", (unsigned long long)mp_array_nbytes(a));
  memcpy(a->data, "\x21\x43\x65\x87\x09", 5);
  memset(b->data, 0, 5);
  CHECK(mp_array_copy(a, b) == MP_OK, "%s", mp_error_message());
  CHECK(memcmp(b->data, "\x21\x43\x65\x87\x09", 5) == 0, "copied");
  mp_array_release(a);
  mp_array_release(b);
}

static void names(void) {
  char buffer[64];
  const struct {
    DLDataType dtype;
    const char* name;
  } cases[] = {
      {{kDLFloat4_e2m1fn, 4, 1}, "float4_e2m1fn"},
      {{kDLFloat4_e2m1fn, 4, 2}, "float4_e2m1fn_x2"},
      {{kDLFloat6_e2m3fn, 6, 1}, "float6_e2m3fn"},
      {{kDLFloat6_e3m2fn, 6, 1}, "float6_e3m2fn"},
      {{kDLFloat8_e4m3fn, 8, 1}, "float8_e4m3fn"},
      {{kDLFloat8_e5m2, 8, 4}, "float8_e5m2_x4"},
      {{kDLFloat, 32, 4}, "float32x4"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    CHECK(strcmp(mp_dtype_string(cases[i].dtype, buffer, sizeof buffer), cases[i].name) == 0,
          "%s, not %s", buffer, cases[i].name);
}

int main(void) {
  packed_sizes();
  packed_strides();
  packed_limits();
  bad_packing();
  runtime_arrays();
  names();
  if (failures) printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
