/*
 * modpack/cuda.h — the CUDA module kind's public rule for choosing a binary variant.
 *
 * A "cuda" module carries one or several variants of the same kernels: SASS (cubin) for given
 * architectures, PTX, or fatbins holding several of both. When a kernel is first called on a
 * device, the runtime picks the variant for that device's compute capability X.Y with this
 * rule, loads it with the driver and falls back to the next acceptable variant only if the
 * driver refuses the image:
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
#ifndef MODPACK_CUDA_H_
#define MODPACK_CUDA_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
/* Apply the rule above to the |count| arch names in |arches| ("sm_80", "sm_90a",
 * "compute_80", ...) for a device of compute capability |cc_major|.|cc_minor|, and set
 * |*out_index| to the chosen one. MP_ERR_UNAVAILABLE, with a message naming the compute
 * capability and every arch, when none can run; MP_ERR_INVALID_ARGUMENT for a name that is
 * not a CUDA arch. */
MP_API mp_status_t mp_cuda_select_variant(const char* const* arches, uint32_t count,
                                          int32_t cc_major, int32_t cc_minor, int32_t* out_index);
/* MP_API_END */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_CUDA_H_ */
