/* The opencl kind's module state, shared by its payload parser (opencl_payload.c) and its
 * per-device building and launching (opencl_module.c). */
#ifndef MODPACK_KINDS_OPENCL_MODULE_H_
#define MODPACK_KINDS_OPENCL_MODULE_H_

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kinds/common/device_module.h"
#include "kinds/opencl/opencl_abi.h"
#include "kinds/opencl/opencl_program.h"
#include "modpack/kinds/opencl.h"

typedef struct {
  mp_device_module_t base; /* first: kernels, name, payload, lock (kinds/common) */
  char* source;            /* a NUL-terminated copy, or NULL while compressed (source_code) */
  uint64_t source_size;    /* the source's size (raw) */
  mp_code_t source_code;   /* the source as stored */
  uint64_t source_offset; /* in the payload, and each binary's (tools write them out) */
  char* build_options;    /* "" when the payload has none (version 1) */
  uint32_t binary_count;
  mp_opencl_binary_t* binaries;
  /* Per device, built at its first launch (guarded by base.lock, which also guards
   * clSetKernelArg + enqueue on the shared kernels). */
  cl_program programs[MP_OPENCL_MAX_DEVICES];
  cl_kernel* kernels[MP_OPENCL_MAX_DEVICES]; /* [device][kernel] */
} mp_opencl_module_t;

/* Parse and validate |payload| into |m| (a zeroed state; kernels' launch tags must be
 * |kind|'s). No OpenCL call. On failure |m| holds what was read, for mp_opencl_payload_free. */
mp_status_t mp_opencl_payload_parse(void* m, const mp_kind_t* kind, mp_const_byte_span_t payload);
/* The part after the source (version 2: build options and name; the kernel records) at |r|,
 * into |m|; |r| advances past it. modpack preflight parses it alone. */
mp_status_t mp_opencl_payload_parse_build(mp_opencl_module_t* m, const mp_kind_t* kind,
                                          uint32_t version, mp_reader_t* r);
/* Whether the prebuilt binary keyed |key| is the one for a device of key |device_key| (the
 * loader's choice, which modpack preflight reports). */
bool mp_opencl_binary_for(const char* key, const char* device_key);
/* Frees what the parser made (not the base: mp_device_module_free). */
void mp_opencl_payload_free(mp_opencl_module_t* m);

#endif /* MODPACK_KINDS_OPENCL_MODULE_H_ */
