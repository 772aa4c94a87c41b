/*
 * modpack/kinds/rocm.h — the "rocm" kind: AMD GPU code objects (HSA code objects, ".hsaco": ELF
 * files for EM_AMDGPU) for one or several target IDs, a function-info record per kernel
 * (modpack/kinds/kernel.h) with where each argument lies in the kernel's argument segment, and
 * the public rule for choosing a code object.
 *
 * Payload (little-endian). Everything a choice of code object needs (the target IDs) comes
 * first, so that a reader of the first bytes (modpack preflight) can answer without the code:
 *   header (mp_rocm_header_v1_t: u32 version, u32 reserved, u32 variant_count >= 1)
 *   u32 name_size (<= MP_MODULE_MAX_NAME; 0: unnamed), the module's name
 *   variant_count variant headers, each:
 *       u32 target_size (1..MP_ROCM_MAX_TARGET - 1), the code object's target ID: a processor
 *       ("gfx90a", "gfx1100") or a generic target ("gfx11-generic"), then optionally
 *       ":sramecc+|-" and ":xnack+|-" (in that order; absent: built for either setting)
 *       u64 size of the code object
 *   u32 kernel_count, kernel_count function-info records (record version 2: the symbol is the
 *       kernel's name in the code object when it is not the record's name; arguments are
 *       buffers, scalars and NULL pointers, no local memory)
 *   kernel_count argument layouts, in the records' order, each:
 *       u32 explicit_size: bytes of the argument segment the call's arguments fill
 *       per argument of the record: u32 offset, u32 size (a buffer or NULL pointer: 8; a
 *       scalar: its dtype's size), increasing offsets, each a multiple of its size (at most
 *       8), ending within explicit_size
 *   variant_count x kernel_count kernel facts (per variant, per kernel, MP_ROCM_FACTS_SIZE
 *       bytes each, from the code object's metadata): u32 kernarg_segment_size (>=
 *       explicit_size), u32 group_segment_fixed_size, u32 private_segment_fixed_size, u32
 *       max_flat_workgroup_size, u32 wavefront_size, u32 sgpr_count, u32 vgpr_count, u32 0
 *   then each code object in order, each starting at the next multiple of
 *   MP_ROCM_CODE_ALIGNMENT from the start of the payload (zero padding between), and nothing
 *   after the last. Each is a 64-bit little-endian ELF file for EM_AMDGPU (224) and the
 *   AMDGPU HSA OS ABI (64), whose e_flags' xnack and sramecc settings (code object v4 and
 *   later) are those its target ID names. Every code object defines every kernel.
 *
 * Kernels take their declared arguments followed by one integer per launch tag
 * (mp_kind_launch_tag("rocm", i)): "blockIdx.x|y|z" (grid, in blocks), "threadIdx.x|y|z"
 * (block) and optionally "dyn_shared_memory" (bytes of dynamic LDS). The launch lays the
 * arguments out at their offsets in a zeroed buffer of the chosen code object's
 * kernarg_segment_size and passes it to hipModuleLaunchKernel (HIP_LAUNCH_PARAM_BUFFER_POINTER,
 * size explicit_size); the HIP runtime fills the hidden arguments.
 *
 * Choosing a code object for a device whose target ID is, say, "gfx90a:sramecc+:xnack-" (as
 * HIP's gcnArchName reports it):
 *   1. the processor: the code object's must be the device's, or a generic target covering
 *      it (gfx9-generic: gfx900 gfx902 gfx904 gfx906 gfx909 gfx90c; gfx9-4-generic: gfx940
 *      gfx941 gfx942 gfx950; gfx10-1-generic: gfx1010..gfx1013; gfx10-3-generic:
 *      gfx1030..gfx1036; gfx11-generic: gfx1100..gfx1103, gfx1150..gfx1153; gfx12-generic:
 *      gfx1200 gfx1201);
 *   2. each feature (sramecc, xnack): a code object built for either setting runs with both;
 *      one built "+" needs the device's setting on, "-" off; a device that does not state a
 *      feature (or lacks it) runs only code objects built for either;
 *   3. among those that run: the device's own processor before a generic target, then the
 *      code object that states more of the device's settings; ties keep the earlier.
 */
#ifndef MODPACK_KINDS_ROCM_H_
#define MODPACK_KINDS_ROCM_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_ROCM_PAYLOAD_VERSION = 1,
  MP_ROCM_MAX_VARIANTS = 256,
  MP_ROCM_MAX_TARGET = 64, /* a target ID is shorter */
  MP_ROCM_CODE_ALIGNMENT = 64,
  MP_ROCM_FACTS_SIZE = 32,
  MP_ROCM_EM_AMDGPU = 224,
  MP_ROCM_ELFOSABI_AMDGPU_HSA = 64,
};

typedef struct {
  uint32_t version;       /* MP_ROCM_PAYLOAD_VERSION */
  uint32_t reserved;      /* must be 0 */
  uint32_t variant_count; /* 1..MP_ROCM_MAX_VARIANTS */
} mp_rocm_header_v1_t;

/* Apply the rule above to the |count| code-object target IDs in |targets| for a device whose
 * target ID is |device| ("gfx90a:sramecc+:xnack-"), and set |*out_index| to the chosen one.
 * MP_ERR_UNAVAILABLE, with a message naming the device and every target, when none can run;
 * MP_ERR_INVALID_ARGUMENT for a name that is not a target ID (or a generic device). */
MP_API mp_status_t mp_rocm_select_variant(const char* const* targets, uint32_t count,
                                          const char* device, int32_t* out_index);
/* MP_API_END */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_rocm_header_v1_t) == 12, "rocm payload header must be 12 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_ROCM_H_ */
