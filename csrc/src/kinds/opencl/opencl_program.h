/* Building OpenCL programs: from a prebuilt binary that matches the device, else from source,
 * with the compiler's log in the error when a build fails. */
#ifndef MODPACK_KINDS_OPENCL_PROGRAM_H_
#define MODPACK_KINDS_OPENCL_PROGRAM_H_

#include <stdint.h>

#include "kinds/common/code.h"
#include "kinds/opencl/opencl_abi.h"

/* A prebuilt program binary, keyed by the device it was built for ("platform/device/driver",
 * as mp_device_name gives it). */
typedef struct {
  char* key;           /* owned copy */
  const uint8_t* data; /* in the library mapping, as stored (a code frame in a framed payload) */
  uint64_t size;       /* stored */
  mp_code_t code;      /* the binary: in place, or decoded when a device first uses it */
} mp_opencl_binary_t;

/* The program for |device|: built from the binary whose key is the device's, if one is there
 * and the driver accepts it, else from |source|; |options| are the OpenCL build options. */
mp_status_t mp_opencl_program_build(const mp_opencl_t* cl, int32_t device, const char* source,
                                    uint64_t source_size, const char* options,
                                    mp_opencl_binary_t* binaries, uint32_t binary_count,
                                    cl_program* out_program);

#endif /* MODPACK_KINDS_OPENCL_PROGRAM_H_ */
