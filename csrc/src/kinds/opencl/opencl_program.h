/* Building OpenCL programs: from a prebuilt binary that matches the device, else from source,
 * with the compiler's log in the error when a build fails. */
#ifndef MODPACK_KINDS_OPENCL_PROGRAM_H_
#define MODPACK_KINDS_OPENCL_PROGRAM_H_

#include <stdbool.h>
#include <stdint.h>

#include "files/kernel_cache.h"
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
 * and the driver accepts it, else from the kernel cache's entry for |source| on this device
 * (files/kernel_cache.h; unless |load_flags| has MP_LOAD_NO_KERNEL_CACHE), else from |source|;
 * |options| are the OpenCL build options. |library_path| (may be NULL) names the library in
 * the cache's log lines. |slot| is the caller's: after a build from source with the cache on,
 * *|out_keep| is true and the slot is open (its key's build lock held) for
 * mp_opencl_program_keep after the program's first launch; else it is closed. */
mp_status_t mp_opencl_program_build(const mp_opencl_t* cl, int32_t device, const char* source,
                                    uint64_t source_size, const char* options,
                                    mp_opencl_binary_t* binaries, uint32_t binary_count,
                                    uint32_t load_flags, const char* library_path,
                                    mp_kernel_cache_slot_t* slot, bool* out_keep,
                                    cl_program* out_program);

/* Keep |program|'s binary for |device| in the cache's |slot|, and close it. Called after the
 * program's first launch has run (the caller waited for it): a driver that
 * compiles a kernel for its launch's sizes only when it runs (PoCL) puts that code in the
 * binary too, which the next process then runs without compiling. */
void mp_opencl_program_keep(const mp_opencl_t* cl, int32_t device, cl_program program,
                            mp_kernel_cache_slot_t* slot);

/* What the kernel cache keys a build of |source_size| bytes at |source| with |options| on
 * |device| by (|driver|: room for the driver's version, filled in); the opencl kind's build and
 * modpack preflight make the same. */
void mp_opencl_cache_input(const mp_opencl_t* cl, int32_t device, const uint8_t* source,
                           uint64_t source_size, const char* options, char* driver,
                           size_t driver_capacity, mp_kernel_cache_input_t* out_input);

#endif /* MODPACK_KINDS_OPENCL_PROGRAM_H_ */
