/* Facts about DLPack dtypes and tensors that several layers need: names for messages, which
 * element widths a type code allows, and whether a tensor is compact (row-major). The public
 * mp_dtype_string is declared in modpack.h; the names of mp_value_t's type codes are
 * mp_type_code_name in modpack/abi.h. */
#ifndef MODPACK_CORE_DTYPE_H_
#define MODPACK_CORE_DTYPE_H_

#include <stdbool.h>

#include "modpack/modpack.h"

/* Whether an array of |dtype| can be stored (a const module's arrays, a weight file's): the
 * element widths each DLPack type code allows (int8..64, float16..64, bfloat16, complex64/128,
 * bool as 8 bits, the float8 formats as 8 bits, float6 as 6, float4 as 4, as DLPack 1.1 fixes
 * them), with lanes >= 1, in elements of whole bytes: a stored array's size is its element
 * count times its element's bytes. So float4 is stored in pairs (float4_e2m1fn_x2, lanes 2) and
 * float6 in fours; a lone packed float4_e2m1fn (lanes 1) passes through calls
 * (modpack/tensor_span.h sizes it) but is not stored. */
bool mp_dtype_is_valid(DLDataType dtype);
/* True if |t| has no strides or row-major ones (dimensions of extent 1 may have any stride). */
bool mp_tensor_is_compact(const DLTensor* t);

#endif /* MODPACK_CORE_DTYPE_H_ */
