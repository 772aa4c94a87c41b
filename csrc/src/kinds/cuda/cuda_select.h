/* CUDA architecture names ("sm_80", "sm_90a", "compute_90") and the rule that picks a variant
 * for a device (modpack/kinds/cuda.h states it; mp_cuda_select_variant is its public face). */
#ifndef MODPACK_KINDS_CUDA_SELECT_H_
#define MODPACK_KINDS_CUDA_SELECT_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/kinds/cuda.h"

typedef struct {
  bool ptx; /* compute_XY rather than sm_XY */
  int32_t major;
  int32_t minor;
  char suffix; /* '\0', 'a' or 'f' */
} mp_cuda_arch_t;

/* The rule in one sentence, for messages. */
extern const char* const mp_cuda_selection_rule;

/* Parses sm_XY[a|f] or compute_XY[a|f] (two or three digits). */
bool mp_cuda_parse_arch(const char* name, mp_cuda_arch_t* out);
/* The indices into |arches| that can run on compute capability |major|.|minor|, best first
 * (ties keep the earlier), into |order| (and their scores into |scores|), both |count| long;
 * MP_ERR_INVALID_ARGUMENT for a name that is not an arch. */
mp_status_t mp_cuda_rank_arches(const char* const* arches, uint32_t count, int32_t major,
                                int32_t minor, uint32_t* order, int64_t* scores,
                                uint32_t* out_usable);

#endif /* MODPACK_KINDS_CUDA_SELECT_H_ */
