/* Checking a host function's arguments against the signature its code declares
 * (MP_EXPORT_TYPED_* in modpack/backend.h), so host code reading `x->data` as `float[n]` never
 * sees a float64, a longer or shorter array, a strided view or device memory.
 *
 * The signature is a string, one entry per parameter, separated by commas:
 *
 *   "x: float32[n] cpu, out: float32[n] cpu, k"
 *
 * An entry is the parameter's name, and for an array `: dtype[dims] flags...`:
 *   dtype   bool, int8..int64, uint8..uint64, float16/32/64, bfloat16, complex64/128, the
 *           float8, float6 and float4 names of mp_dtype_string (float8_e4m3fn, float6_e2m3fn,
 *           float4_e2m1fn: packed, two values a byte, dims counting values;
 *           float4_e2m1fn_x2: pairs, dims counting bytes), or `any`;
 *   dims    comma-separated: a number (that extent), a name (an extent shared by every place
 *           the name appears, in this and later parameters), `*` (any extent); `[]` is rank 0,
 *           `[...]` or no brackets any rank and shape;
 *   flags   device type names (`cpu`, `cuda`, `opencl`: the array must be on one of them) and
 *           `strided` (accept any strides; without it the array must be compact row-major).
 * Every array must also be aligned to its element size, and reach only addressable bytes (the
 * rules of modpack/tensor_span.h: no extent, stride or byte_offset whose bytes overflow, no data
 * its elements wrap around from). Entries without a type (scalars) are named only; their C type
 * is checked by the wrapper. */
#ifndef MODPACK_DEVICE_SIGNATURE_H_
#define MODPACK_DEVICE_SIGNATURE_H_

#include "modpack/abi.h"

/* MP_OK if |args| match |signature|; otherwise MP_ERR_INVALID_ARGUMENT with a message naming
 * |function|, the argument's index and name, what it must be and what it is. A malformed
 * signature (a bug in the host code) is reported the same way, saying where it is wrong. */
mp_status_t mp_signature_check(const char* function, const char* signature, const mp_value_t* args,
                               int32_t num_args);

#endif /* MODPACK_DEVICE_SIGNATURE_H_ */
