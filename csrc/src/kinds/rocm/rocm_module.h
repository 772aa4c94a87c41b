/* The rocm kind's module state, shared by its payload parser (rocm_payload.c) and its
 * per-device loading and launching (rocm_module.c). */
#ifndef MODPACK_KINDS_ROCM_MODULE_H_
#define MODPACK_KINDS_ROCM_MODULE_H_

#include <stdbool.h>

#include "kinds/common/code.h"
#include "kinds/common/device_module.h"
#include "kinds/rocm/rocm_abi.h"
#include "kinds/rocm/rocm_select.h"
#include "modpack/kinds/rocm.h"

/* The launch slots, in the order of the kind's launch tags: grid x, y, z, block x, y, z,
 * dynamic shared memory. */
enum { MP_ROCM_SLOT_SHARED = 6, MP_ROCM_SLOT_COUNT = 7 };

/* A kernel's facts in one code object (its metadata). */
typedef struct {
  uint32_t kernarg_segment_size, group_segment_fixed_size, private_segment_fixed_size;
  uint32_t max_flat_workgroup_size, wavefront_size, sgpr_count, vgpr_count;
} mp_rocm_facts_t;

typedef struct {
  char target[MP_ROCM_MAX_TARGET]; /* as stored: "gfx90a:xnack-" */
  const uint8_t* data;             /* the code object in the library mapping, as stored */
  uint64_t size;                   /* stored (a code frame in a framed payload) */
  mp_code_t code;                  /* the code object: in place, or decoded at its first load */
  mp_rocm_facts_t* facts; /* per kernel */
} mp_rocm_variant_t;

/* Where each argument of a kernel lies in its argument segment. */
typedef struct {
  uint32_t explicit_size;
  uint32_t* offsets; /* per argument of the record */
  uint32_t* sizes;
} mp_rocm_layout_t;

typedef struct {
  mp_device_module_t base; /* first: kernels, name, payload, lock (kinds/common) */
  uint32_t variant_count;
  uint64_t head_size; /* the payload's head: everything before the code objects */
  mp_rocm_variant_t* variants;
  mp_rocm_layout_t* layouts; /* per kernel */
  /* Per device, made at its first launch (guarded by base.lock): the chosen code object, its
   * module and each kernel's function once resolved. */
  int32_t chosen[MP_ROCM_MAX_DEVICES]; /* variant + 1; 0: not chosen yet */
  hipModule_t images[MP_ROCM_MAX_DEVICES];
  hipFunction_t* functions[MP_ROCM_MAX_DEVICES]; /* [device][kernel] */
} mp_rocm_module_t;

/* Parse and validate the head of |payload| (everything before the code objects: header, name,
 * target IDs, records, layouts, facts) into |m| (a zeroed state), and set *|out_end| to where
 * the head ends. |payload| may be a prefix of the payload: a failure then may only mean the
 * head is longer. No driver call. */
mp_status_t mp_rocm_payload_parse_head(mp_rocm_module_t* m, const mp_kind_t* kind,
                                       mp_const_byte_span_t payload, uint64_t* out_end);
/* The whole payload: the head, then each code object in place (checked). */
mp_status_t mp_rocm_payload_parse(void* m, const mp_kind_t* kind, mp_const_byte_span_t payload);
/* The code objects of |m| that run on |device|, best first (mp_rocm_rank_targets): what the
 * loader tries, in order, and what modpack preflight reports. */
mp_status_t mp_rocm_module_rank(const mp_rocm_module_t* m, const mp_rocm_target_t* device,
                                uint32_t* order, uint32_t* out_usable);
/* Frees what the parser made (not the base: mp_device_module_free). */
void mp_rocm_payload_free(mp_rocm_module_t* m);
/* Code object |v|, decoded (and checked) the first time when compressed. */
mp_status_t mp_rocm_code_object(mp_rocm_module_t* m, uint32_t v, const uint8_t** out_code);

#endif /* MODPACK_KINDS_ROCM_MODULE_H_ */
