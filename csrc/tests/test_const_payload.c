/* ctest: the "const" kind's payload parser (layout: modpack/kinds/const.h). A valid payload
 * loads as zero-copy views; every malformed one is refused with a message naming the problem;
 * no truncation loads. Public API only. */
#include <stddef.h>

#include "modpack/kinds/const.h"
#include "test_util.h"

#define RECORD(i) (sizeof(mp_const_header_v1_t) + (i) * sizeof(mp_const_record_v1_t))
#define FIELD(i, f) (RECORD(i) + offsetof(mp_const_record_v1_t, f))

/* Two arrays: "w", float32 [2, 3], and "b", an int64 scalar. */
static void valid(buf_t* b) {
  memset(b, 0, sizeof *b);
  put_u32(b, MP_CONST_PAYLOAD_VERSION);
  put_u32(b, 0);
  put_u64(b, 2);
  const size_t shapes = RECORD(2), names = shapes + 2 * 8;
  const size_t data_w = (names + 2 + 63) / 64 * 64, data_b = (data_w + 24 + 63) / 64 * 64;
  /* w */
  put_u64(b, names);
  put_u32(b, 1);
  put_u8(b, kDLFloat), put_u8(b, 32), put_u16(b, 1);
  put_u32(b, 2), put_u32(b, 0);
  put_u64(b, shapes), put_u64(b, data_w), put_u64(b, 2 * 3 * 4);
  /* b: ndim 0 */
  put_u64(b, names + 1);
  put_u32(b, 1);
  put_u8(b, kDLInt), put_u8(b, 64), put_u16(b, 1);
  put_u32(b, 0), put_u32(b, 0);
  put_u64(b, shapes + 16), put_u64(b, data_b), put_u64(b, 8);
  put_u64(b, 2), put_u64(b, 3);
  put(b, "wb", 2);
  pad_to(b, 64);
  for (int i = 0; i < 6; ++i) {
    float f = (float)i;
    put(b, &f, 4);
  }
  pad_to(b, 64);
  put_u64(b, (uint64_t)-7);
}

typedef void (*damage_fn)(buf_t*);
static void bad_version(buf_t* b) {
  set_u32(b, 0, 2);
}
static void header_reserved(buf_t* b) {
  set_u32(b, 4, 1);
}
static void too_many(buf_t* b) {
  set_u64(b, 8, 1000);
}
static void record_reserved(buf_t* b) {
  set_u32(b, FIELD(0, reserved), 9);
}
static void empty_name(buf_t* b) {
  set_u32(b, FIELD(0, name_size), 0);
}
static void long_name(buf_t* b) {
  set_u32(b, FIELD(0, name_size), MP_CONST_MAX_NAME + 1);
}
static void name_outside(buf_t* b) {
  set_u64(b, FIELD(0, name_offset), 1 << 20);
}
static void name_with_nul(buf_t* b) {
  b->data[RECORD(2) + 16] = 0;
}
static void too_many_dims(buf_t* b) {
  set_u32(b, FIELD(0, ndim), MP_CONST_MAX_NDIM + 1);
}
static void misaligned(buf_t* b) {
  set_u64(b, FIELD(0, data_offset), 130);
}
static void data_outside(buf_t* b) {
  set_u64(b, FIELD(1, data_offset), 1 << 20);
}
static void wrong_size(buf_t* b) {
  set_u64(b, FIELD(0, data_size), 20);
}
static void odd_width(buf_t* b) {
  b->data[FIELD(0, dtype_bits)] = 12;
}
static void zero_lanes(buf_t* b) {
  b->data[FIELD(0, dtype_lanes)] = 0;
}
static void bool_width(buf_t* b) {
  b->data[FIELD(1, dtype_code)] = kDLBool; /* bool is 8 bits, not 64 */
}
/* "b" (8 bytes) as DLPack 1.1's float4/float6: stored arrays hold whole bytes per element,
 * so packed lanes-1 values and widths that do not fill bytes are refused. */
static void set_dtype(buf_t* b, uint8_t code, uint8_t bits, uint16_t lanes) {
  b->data[FIELD(1, dtype_code)] = code;
  b->data[FIELD(1, dtype_bits)] = bits;
  b->data[FIELD(1, dtype_lanes)] = (uint8_t)lanes;
  b->data[FIELD(1, dtype_lanes) + 1] = (uint8_t)(lanes >> 8);
}
static void fp4_lanes_1(buf_t* b) {
  set_dtype(b, kDLFloat4_e2m1fn, 4, 1);
}
static void fp4_lanes_3(buf_t* b) {
  set_dtype(b, kDLFloat4_e2m1fn, 4, 3);
}
static void fp4_of_8_bits(buf_t* b) {
  set_dtype(b, kDLFloat4_e2m1fn, 8, 8);
}
static void fp6_lanes_2(buf_t* b) {
  set_dtype(b, kDLFloat6_e3m2fn, 6, 2);
}
static void overflowing_shape(buf_t* b) {
  set_u64(b, RECORD(2), (uint64_t)1 << 62);
  set_u64(b, RECORD(2) + 8, (uint64_t)1 << 62);
}

int main(void) {
  static buf_t b;
  valid(&b);
  mp_module_t* m = load("const", b.data, b.size);
  if (m) {
    CHECK(mp_module_array_count(m) == 2, "%llu arrays",
          (unsigned long long)mp_module_array_count(m));
    const char* name;
    const DLTensor* t;
    CHECK(mp_module_array_at(m, 0, &name, &t) == MP_OK && strcmp(name, "w") == 0, "array 0");
    CHECK(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3, "w's shape");
    CHECK(t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1, "w's dtype");
    CHECK(t->data == b.data + 192, "w is a view into the payload (zero copy)");
    CHECK(((const float*)t->data)[5] == 5.0f, "w's data");
    CHECK(t->device.device_type == kDLCPU && t->strides == NULL && t->byte_offset == 0, "w");
    CHECK(mp_module_array_at(m, 1, &name, &t) == MP_OK && strcmp(name, "b") == 0, "array 1");
    CHECK(t->ndim == 0 && *(const int64_t*)t->data == -7, "b is the scalar -7");
    CHECK(mp_module_get_array(m, "b", 0, &t) == MP_OK, "lookup by name");
    CHECK(mp_module_get_array(m, "nope", 0, &t) == MP_ERR_NOT_FOUND, "absent name");
    CHECK(mp_module_array_at(m, 2, &name, &t) == MP_ERR_INVALID_ARGUMENT, "index past the end");
    CHECK(strcmp(describe(m), "{}") == 0, "const describes nothing more: %s", describe(m));
    mp_module_release(m);
  }

  static const struct {
    const char* what;
    damage_fn damage;
    mp_status_t code;
    const char* needle;
  } cases[] = {
      {"version 2", bad_version, MP_ERR_INCOMPATIBLE, "version 2 is not supported"},
      {"reserved header field", header_reserved, MP_ERR_FORMAT, "reserved header field"},
      {"more records than fit", too_many, MP_ERR_FORMAT, "do not fit"},
      {"reserved record field", record_reserved, MP_ERR_FORMAT, "reserved field"},
      {"empty name", empty_name, MP_ERR_FORMAT, "name of 0 bytes"},
      {"name too long", long_name, MP_ERR_FORMAT, "name of 4097 bytes"},
      {"name outside", name_outside, MP_ERR_FORMAT, "name lies outside"},
      {"name with NUL", name_with_nul, MP_ERR_FORMAT, "NUL"},
      {"33 dimensions", too_many_dims, MP_ERR_FORMAT, "ndim 33"},
      {"misaligned data", misaligned, MP_ERR_FORMAT, "misaligned or outside"},
      {"data outside", data_outside, MP_ERR_FORMAT, "misaligned or outside"},
      {"size not matching shape", wrong_size, MP_ERR_FORMAT, "do not match its shape"},
      {"12-bit float", odd_width, MP_ERR_FORMAT, "invalid dtype"},
      {"0 lanes", zero_lanes, MP_ERR_FORMAT, "invalid dtype"},
      {"64-bit bool", bool_width, MP_ERR_FORMAT, "invalid dtype"},
      {"shape overflowing", overflowing_shape, MP_ERR_FORMAT, "shape overflows"},
      {"packed float4 values", fp4_lanes_1, MP_ERR_FORMAT, "invalid dtype (code 17, bits 4, "},
      {"float4 in threes", fp4_lanes_3, MP_ERR_FORMAT, "invalid dtype"},
      {"an 8-bit float4", fp4_of_8_bits, MP_ERR_FORMAT, "invalid dtype"},
      {"float6 in twos", fp6_lanes_2, MP_ERR_FORMAT, "invalid dtype"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    valid(&b);
    cases[i].damage(&b);
    expect_refused(cases[i].what, "const", b.data, b.size, cases[i].code, cases[i].needle);
  }
  /* 16 float4 values in pairs of pairs (4 bits x 16 lanes: 8 bytes) and 8 float8: stored. */
  const DLDataType stored[] = {{kDLFloat4_e2m1fn, 4, 16}, {kDLFloat8_e4m3fn, 8, 8}};
  for (size_t i = 0; i < 2; ++i) {
    valid(&b);
    set_dtype(&b, stored[i].code, stored[i].bits, stored[i].lanes);
    m = load("const", b.data, b.size);
    const char* name;
    const DLTensor* t;
    CHECK(m && mp_module_array_at(m, 1, &name, &t) == MP_OK && t->dtype.code == stored[i].code &&
              t->dtype.lanes == stored[i].lanes,
          "stored dtype %zu", i);
    mp_module_release(m);
  }
  valid(&b);
  every_prefix_refused("const", &b);
  return finish("test_const_payload");
}
