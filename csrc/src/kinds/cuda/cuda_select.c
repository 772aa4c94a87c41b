/* The variant-selection rule of the cuda kind (modpack/kinds/cuda.h): arch names, how well
 * each fits a compute capability, and the ranking the runtime and mp_cuda_select_variant use. */
#include "kinds/cuda/cuda_select.h"

#include <string.h>

#include "core/error.h"
#include "kinds/common/variant_rank.h"

bool mp_cuda_parse_arch(const char* name, mp_cuda_arch_t* out) {
  const char* p;
  if (strncmp(name, "sm_", 3) == 0) {
    out->ptx = false;
    p = name + 3;
  } else if (strncmp(name, "compute_", 8) == 0) {
    out->ptx = true;
    p = name + 8;
  } else {
    return false;
  }
  int digits = 0, number = 0;
  while (p[digits] >= '0' && p[digits] <= '9' && digits < 4) {
    number = number * 10 + (p[digits] - '0');
    ++digits;
  }
  if (digits < 2 || digits > 3 || number < 10) return false;
  p += digits;
  out->suffix = '\0';
  if (*p == 'a' || *p == 'f') out->suffix = *p++;
  if (*p != '\0') return false;
  out->major = number / 10;
  out->minor = number % 10;
  return true;
}

/* How well |a| fits a device of compute capability |major|.|minor|: -1 when it cannot run,
 * else a score where higher is better (tier, then version, then specialisation). */
static int64_t fitness(const mp_cuda_arch_t* a, int32_t major, int32_t minor) {
  int64_t version = (int64_t)a->major * 10 + a->minor;
  int64_t special = a->suffix == 'a' ? 2 : a->suffix == 'f' ? 1 : 0;
  if (!a->ptx) {
    if (a->major != major) return -1;
    if (a->minor == minor) return 3000000 + special; /* exact SASS */
    if (a->minor < minor && a->suffix != 'a') return 2000000 + version * 10 + special;
    return -1;
  }
  bool same = a->major == major && a->minor == minor;
  bool not_newer = a->major < major || (a->major == major && a->minor <= minor);
  if (!not_newer) return -1;
  if (a->suffix == 'a' && !same) return -1;
  if (a->suffix == 'f' && a->major != major) return -1;
  return 1000000 + version * 10 + special; /* PTX JIT */
}

/* Candidate indices into |arches| that can run, best first (ties keep the earlier). */
mp_status_t mp_cuda_rank_arches(const char* const* arches, uint32_t count, int32_t major,
                                int32_t minor, uint32_t* order, int64_t* scores,
                                uint32_t* out_usable) {
  uint32_t usable = 0;
  for (uint32_t i = 0; i < count; ++i) {
    mp_cuda_arch_t a;
    if (!arches[i] || !mp_cuda_parse_arch(arches[i], &a))
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "'%s' is not a CUDA architecture name (expected sm_XY, sm_XYa, sm_XYf, "
                       "compute_XY, compute_XYa or compute_XYf, e.g. sm_80 or compute_90)",
                       arches[i] ? arches[i] : "(null)");
    int64_t score = fitness(&a, major, minor);
    if (score < 0) continue;
    mp_variant_rank_insert(i, score, order, scores, &usable);
  }
  *out_usable = usable;
  return MP_OK;
}

const char* const mp_cuda_selection_rule =
    "SASS sm_XY runs on compute capability X.Y and on X.Z with Z > Y (never an 'a' variant "
    "such as sm_90a), PTX compute_XY on any X.Y or newer";

mp_status_t mp_cuda_select_variant(const char* const* arches, uint32_t count, int32_t cc_major,
                                   int32_t cc_minor, int32_t* out_index) {
  *out_index = -1;
  if (count > MP_CUDA_MAX_VARIANTS)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%u variants are too many (at most %d)", count,
                     MP_CUDA_MAX_VARIANTS);
  uint32_t order[MP_CUDA_MAX_VARIANTS];
  int64_t scores[MP_CUDA_MAX_VARIANTS];
  uint32_t usable = 0;
  MP_RETURN_IF_ERROR(
      mp_cuda_rank_arches(arches, count, cc_major, cc_minor, order, scores, &usable));
  if (usable > 0) {
    *out_index = (int32_t)order[0];
    return MP_OK;
  }
  char list[1024];
  mp_variant_list(arches, count, list, sizeof list);
  return mp_errorf(MP_ERR_UNAVAILABLE,
                   "no binary for this GPU: no variant runs on compute capability %d.%d "
                   "(variants: %s; %s); rebuild with a target for sm_%d%d or PTX for "
                   "compute_%d%d or lower",
                   (int)cc_major, (int)cc_minor, count ? list : "none", mp_cuda_selection_rule,
                   (int)cc_major, (int)cc_minor, (int)cc_major, (int)cc_minor);
}
