/*
 * modpack/kinds/cuda.h — the "cuda" kind: one or several binary variants of CUDA kernels
 * (SASS cubin, PTX, fatbin), each holding all of the module's kernels or (version 2) some of
 * them, a function-info record per kernel (modpack/kinds/kernel.h), and the public rule for
 * choosing a variant.
 *
 * Payload (little-endian):
 *   header (mp_cuda_header_v1_t: u32 version, u32 reserved, u32 variant_count >= 1)
 *   version 2 only: u32 name_size (<= MP_MODULE_MAX_NAME; 0: unnamed), the module's name
 *   variant_count variant headers, each:
 *       u32 kind (MP_CUDA_VARIANT_*)  u32 arch_count (1 for cubin and ptx, <= 64 for fatbin)
 *       arch_count x {u32 size, bytes}  ("sm_80", "sm_90a", "compute_80", ...; < 32 bytes)
 *       u64 size
 *       version 2 only: u32 count, count x u32 kernel index (increasing): the kernels the
 *       variant's image defines, 0 for all of them (images made one kernel at a time, as
 *       Triton makes them); every kernel must be defined by some variant
 *   u32 kernel_count, kernel_count function-info records (record version 1 in a version 1
 *       payload, 2 in a version 2 one: a C++ name expression's lowered symbol, a fixed block
 *       size and dynamic shared memory, hidden NULL pointers)
 *   then each variant's bytes in order, each starting at the next multiple of
 *   MP_CUDA_VARIANT_ALIGNMENT from the start of the payload (zero padding between), and
 *   nothing after the last. A cubin starts with the ELF magic, a fatbin with 50 ED 55 BA, and
 *   PTX text ends with the NUL that cuModuleLoadData needs (counted in its size).
 *
 * Kernels take their declared arguments followed by one integer per launch tag
 * (mp_kind_launch_tag("cuda", i)): "blockIdx.x|y|z" (grid), "threadIdx.x|y|z" (block) and
 * optionally "dyn_shared_memory" (bytes of dynamic shared memory).
 *
 * A "cuda" module carries one or several variants of its kernels: SASS (cubin) for given
 * architectures, PTX, or fatbins holding several of both. When a kernel is first called on a
 * device, the runtime picks, among the variants that define it, the one for that device's
 * compute capability X.Y with this rule, loads it with the driver (once per device, for every
 * kernel it defines) and falls back to the next acceptable variant only if the driver refuses
 * the image:
 *
 *   1. exact SASS:      sm_XY, sm_XYa or sm_XYf for exactly X.Y (sm_XYa preferred, then
 *                       sm_XYf, then sm_XY);
 *   2. compatible SASS: sm_XZ or sm_XZf with the same major X and a lower minor Z < Y, the
 *                       highest Z first; never an 'a' (architecture-specific) variant, which
 *                       runs on exactly its own compute capability;
 *   3. PTX, compiled by the driver's JIT: compute_VW with V.W <= X.Y, the highest first;
 *                       compute_VWa only when V.W == X.Y, compute_VWf only when V == X;
 *   4. otherwise an error naming the device's compute capability and every variant.
 *
 * Ties keep the earlier variant. Arch names have two or three digits: sm_75 is 7.5, sm_100 is
 * 10.0, sm_121 is 12.1.
 */
#ifndef MODPACK_KINDS_CUDA_H_
#define MODPACK_KINDS_CUDA_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_CUDA_PAYLOAD_VERSION = 2, /* the newest; version 1 is read too */
  MP_CUDA_VARIANT_CUBIN = 0,
  MP_CUDA_VARIANT_PTX = 1,
  MP_CUDA_VARIANT_FATBIN = 2,
  MP_CUDA_VARIANT_ALIGNMENT = 64,
  MP_CUDA_MAX_VARIANTS = 1024,
  MP_CUDA_MAX_ARCHES_PER_VARIANT = 64,
  MP_CUDA_MAX_ARCH_NAME = 32,
};

typedef struct {
  uint32_t version;       /* MP_CUDA_PAYLOAD_VERSION */
  uint32_t reserved;      /* must be 0 */
  uint32_t variant_count; /* 1..MP_CUDA_MAX_VARIANTS */
} mp_cuda_header_v1_t;

/* Apply the rule above to the |count| arch names in |arches| ("sm_80", "sm_90a",
 * "compute_80", ...) for a device of compute capability |cc_major|.|cc_minor|, and set
 * |*out_index| to the chosen one. MP_ERR_UNAVAILABLE, with a message naming the compute
 * capability and every arch, when none can run; MP_ERR_INVALID_ARGUMENT for a name that is
 * not a CUDA arch. */
MP_API mp_status_t mp_cuda_select_variant(const char* const* arches, uint32_t count,
                                          int32_t cc_major, int32_t cc_minor, int32_t* out_index);
/* MP_API_END */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_cuda_header_v1_t) == 12, "cuda payload header must be 12 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_CUDA_H_ */
