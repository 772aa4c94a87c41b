/* The cuda kind's module state, shared by its payload parser (cuda_payload.c) and its
 * per-device loading and launching (cuda_module.c). */
#ifndef MODPACK_KINDS_CUDA_MODULE_H_
#define MODPACK_KINDS_CUDA_MODULE_H_

#include <pthread.h>
#include <stdbool.h>

#include "kinds/common/code.h"
#include "kinds/common/device_module.h"
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
  const uint8_t* data; /* in the library mapping, as stored (a code frame in a framed payload) */
  uint64_t size;       /* stored */
  mp_code_t code;      /* the image: in place, or decoded at its first load */
  char ptx_isa[16];      /* PTX ".version", "" when unknown or not PTX */
  uint32_t kernel_count; /* the kernels this image defines; 0: every kernel of the module */
  uint32_t* kernels;     /* their indices, increasing */
} mp_cuda_variant_t;

/* Whether |variant|'s image defines kernel |k|. */
bool mp_cuda_variant_defines(const mp_cuda_variant_t* variant, uint32_t k);

typedef struct {
  mp_device_module_t base; /* first: kernels, name, payload, lock (kinds/common) */
  uint32_t variant_count;
  mp_cuda_variant_t* variants;
  uint64_t head_size; /* the payload's head: everything before the variants' bytes */
  /* Per device, made at its first launch (guarded by base.lock): the images loaded so far, by
   * variant, each kernel's function once resolved (NULL before) and its opted-in dynamic
   * shared memory. */
  CUcontext contexts[MP_CUDA_MAX_DEVICES];     /* the context the images are loaded into */
  CUmodule* images[MP_CUDA_MAX_DEVICES];       /* [device][variant] */
  CUfunction* functions[MP_CUDA_MAX_DEVICES];  /* [device][kernel] */
  uint32_t* shared_optin[MP_CUDA_MAX_DEVICES]; /* [device][kernel]: opted-in bytes */
} mp_cuda_module_t;

/* Parse and validate the head of |payload| (everything before the variants' bytes: header,
 * name, variant headers, records) into |m| (a zeroed state) and set *|out_end| to where it
 * ends. |payload| may be a prefix of the payload (modpack preflight reads no more). */
mp_status_t mp_cuda_payload_parse_head(mp_cuda_module_t* m, const mp_kind_t* kind,
                                       mp_const_byte_span_t payload, uint64_t* out_end);
/* The candidates for kernel |k|: one per (variant that defines it, arch it holds), into
 * |arches| and |owner| (the variant), both MP_CUDA_MAX_VARIANTS long; returns their number. The
 * loader and modpack preflight rank them with mp_cuda_rank_arches. */
uint32_t mp_cuda_candidates(const mp_cuda_module_t* m, uint32_t k, const char** arches,
                            uint32_t* owner);
/* Parse and validate |payload| into |m| (a zeroed state: variants and kernels, whose launch
 * tags must be |kind|'s; the variants' bytes stay in place). No driver call. On failure |m|
 * holds what was read, for mp_cuda_payload_free. */
mp_status_t mp_cuda_payload_parse(void* m, const mp_kind_t* kind, mp_const_byte_span_t payload);
/* Frees what the parser made (not the base: mp_device_module_free). */
void mp_cuda_payload_free(mp_cuda_module_t* m);
/* Variant |v|'s image, decoded (and checked) the first time when compressed. */
mp_status_t mp_cuda_variant_image(mp_cuda_module_t* m, uint32_t v, const uint8_t** out_image);

#endif /* MODPACK_KINDS_CUDA_MODULE_H_ */
