/* DLPack dtype names and checks, and tensor layout checks (core/dtype.h). */
#include "core/dtype.h"

#include <stdio.h>

const char* mp_dtype_string(DLDataType dtype, char* buffer, size_t capacity) {
  /* Indexed by DLPack type code; codes from 7 on are the float8, float6 and float4 formats,
   * whose name says its width. A vector of one ("float4_e2m1fn_x2": two 4-bit values in a
   * byte) is spelt as PyTorch spells its packed pair; the others as "float32x4". */
  static const char* const names[] = {
      "int",
      "uint",
      "float",
      "handle",
      "bfloat",
      "complex",
      "bool",
      "float8_e3m4",
      "float8_e4m3",
      "float8_e4m3b11fnuz",
      "float8_e4m3fn",
      "float8_e4m3fnuz",
      "float8_e5m2",
      "float8_e5m2fnuz",
      "float8_e8m0fnu",
      "float6_e2m3fn",
      "float6_e3m2fn",
      "float4_e2m1fn",
  };
  enum { NAMED = sizeof names / sizeof names[0], FIRST_FORMAT = 7 };
  const bool format = dtype.code >= FIRST_FORMAT && dtype.code < NAMED;
  const char* base = dtype.code < NAMED ? names[dtype.code] : "unknown";
  char bits[8] = "";
  if (!format) snprintf(bits, sizeof bits, "%u", dtype.bits);
  if (dtype.lanes == 1)
    snprintf(buffer, capacity, "%s%s", base, bits);
  else
    snprintf(buffer, capacity, "%s%s%sx%u", base, bits, format ? "_" : "", dtype.lanes);
  return buffer;
}

bool mp_dtype_is_valid(DLDataType dtype) {
  if (dtype.lanes == 0) return false;
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
      return dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLFloat:
      return dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLBfloat:
      return dtype.bits == 16;
    case kDLComplex:
      return dtype.bits == 64 || dtype.bits == 128;
    case kDLBool:
      return dtype.bits == 8;
    case kDLFloat6_e2m3fn:
    case kDLFloat6_e3m2fn: /* whole bytes: 4 values in 3 */
      return dtype.bits == 6 && dtype.lanes % 4 == 0;
    case kDLFloat4_e2m1fn: /* whole bytes: float4_e2m1fn_x2, 2 values a byte */
      return dtype.bits == 4 && dtype.lanes % 2 == 0;
    default: /* the float8 formats, DLPack codes 7-14 */
      return dtype.code >= 7 && dtype.code <= 14 && dtype.bits == 8;
  }
}

bool mp_tensor_is_compact(const DLTensor* t) {
  if (!t->strides) return true;
  /* Once the product of the inner extents overflows, no stride can equal it, so only
   * dimensions of extent 1 (whose stride does not matter) can follow. */
  int64_t expected = 1;
  bool overflowed = false;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && (overflowed || t->strides[d] != expected)) return false;
    overflowed = overflowed || __builtin_mul_overflow(expected, t->shape[d], &expected);
  }
  return true;
}
