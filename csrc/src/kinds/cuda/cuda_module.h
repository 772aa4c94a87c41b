/* The cuda kind's module state, shared by its payload parser (cuda_payload.c) and its
 * per-device loading and launching (cuda_module.c). */
#ifndef MODPACK_KINDS_CUDA_MODULE_H_
#define MODPACK_KINDS_CUDA_MODULE_H_

#include <pthread.h>

#include "kinds/common/kernel_table.h"
#include "kinds/cuda/cuda_abi.h"
#include "modpack/kinds/cuda.h"

/* The launch slots, in the order of the kind's launch tags: grid x, y, z, block x, y, z,
 * dynamic shared memory. */
enum { MP_CUDA_SLOT_SHARED = 6, MP_CUDA_SLOT_COUNT = 7 };

/* "cubin", "ptx", "fatbin", by MP_CUDA_VARIANT_*. */
extern const char* const mp_cuda_variant_kind_names[3];

typedef struct {
  uint32_t kind; /* MP_CUDA_VARIANT_* */
  uint32_t arch_count;
  char** arches;
  const uint8_t* data; /* in the library mapping */
  uint64_t size;
  char ptx_isa[16]; /* PTX ".version", "" when unknown or not PTX */
} mp_cuda_variant_t;

typedef struct {
  mp_kernel_table_t table; /* first: the kernel table's vtable entries read it from impl */
  char* name;              /* NULL when unnamed */
  uint32_t variant_count;
  mp_cuda_variant_t* variants;
  pthread_mutex_t lock; /* guards the per-device state below */
  CUmodule modules[MP_CUDA_MAX_DEVICES];
  CUcontext contexts[MP_CUDA_MAX_DEVICES]; /* the context each module was loaded into */
  int32_t loaded_variant[MP_CUDA_MAX_DEVICES];
  CUfunction* functions[MP_CUDA_MAX_DEVICES];  /* [device][kernel] */
  uint32_t* shared_optin[MP_CUDA_MAX_DEVICES]; /* [device][kernel]: opted-in bytes */
} mp_cuda_module_t;

/* Parse and validate |payload| into |m| (variants and kernels, whose launch tags must be
 * |kind|'s; the variants' bytes stay in place). No driver call. On failure |m| holds what was
 * read, for mp_cuda_payload_free. */
mp_status_t mp_cuda_payload_parse(mp_cuda_module_t* m, const mp_kind_t* kind,
                                  mp_const_byte_span_t payload);
void mp_cuda_payload_free(mp_cuda_module_t* m);

#endif /* MODPACK_KINDS_CUDA_MODULE_H_ */
