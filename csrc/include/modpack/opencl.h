/*
 * modpack/opencl.h — OpenCL-specific runtime calls.
 */
#ifndef MODPACK_OPENCL_H_
#define MODPACK_OPENCL_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
/* Build OpenCL C |source| for OpenCL device |device_id| and return the program binary, to
 * store in an opencl module so that loading on the same device skips the compile. Writes at
 * most |capacity| bytes to |buffer| and the full size to |out_size| (call with capacity 0 to
 * size the buffer; the build is repeated). The binary's key is mp_device_name(). */
MP_API mp_status_t mp_opencl_build_binary(const char* source, uint64_t source_size,
                                          int32_t device_id, uint8_t* buffer, uint64_t capacity,
                                          uint64_t* out_size);
/* MP_API_END */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_OPENCL_H_ */
