/*
 * modpack/kinds/opencl.h — the "opencl" kind: OpenCL C source, a function-info record per
 * kernel (modpack/kinds/kernel.h) and optional prebuilt program binaries per device.
 *
 * Payload (little-endian):
 *   header (mp_opencl_header_v1_t: u32 version, u32 reserved, u64 source_size), source bytes
 *   version 2 only: u32 options_size (<= MP_OPENCL_MAX_BUILD_OPTIONS), the build options
 *       passed to every build of the source ("-DT=float -cl-mad-enable"; no NUL), then
 *       u32 name_size (<= MP_MODULE_MAX_NAME; 0: unnamed), the module's name
 *   u32 kernel_count, kernel_count function-info records (record version 1 in a version 1
 *       payload, 2 in a version 2 one)
 *   u32 binary_count, each: u32 key_size (1..MP_OPENCL_MAX_BINARY_KEY), key
 *       ("platform/device/driver", as mp_device_name gives it), u64 size, bytes
 *
 * Kernels take their declared arguments followed by one integer per launch tag: global x, y,
 * z and local x, y, z (mp_kind_launch_tag("opencl", i); a local size of 0 lets the driver
 * choose).
 */
#ifndef MODPACK_KINDS_OPENCL_H_
#define MODPACK_KINDS_OPENCL_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_OPENCL_PAYLOAD_VERSION = 2, /* the newest; version 1 (no build options) is read too */
  MP_OPENCL_MAX_BINARY_KEY = 255,
  MP_OPENCL_MAX_BUILD_OPTIONS = 4096,
};

typedef struct {
  uint32_t version;     /* MP_OPENCL_PAYLOAD_VERSION */
  uint32_t reserved;    /* must be 0 */
  uint64_t source_size; /* the source bytes follow */
} mp_opencl_header_v1_t;

/* Build OpenCL C |source| with |build_options| (may be NULL) for OpenCL device |device_id| and
 * return the program binary, to store in an opencl module (with the same build options) so that
 * loading on the same device skips the compile. Writes at most |capacity| bytes to |buffer| and
 * the full size to |out_size| (call with capacity 0 to size the buffer; the build is repeated).
 * The binary's key is mp_device_name(). */
MP_API mp_status_t mp_opencl_build_binary(const char* source, uint64_t source_size,
                                          const char* build_options, int32_t device_id,
                                          uint8_t* buffer, uint64_t capacity, uint64_t* out_size);
/* MP_API_END */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_opencl_header_v1_t) == 16, "opencl payload header must be 16 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_OPENCL_H_ */
