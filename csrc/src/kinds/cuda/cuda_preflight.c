/* modpack preflight for the cuda kind: which variant a GPU of a given compute capability would
 * get, from the payload's head (header, variant headers, records: never a variant's bytes),
 * parsed by the loader's own parser and ranked by the loader's own rule (mp_cuda_candidates,
 * mp_cuda_rank_arches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kinds/common/preflight.h"
#include "kinds/cuda/cuda_abi.h"
#include "kinds/cuda/cuda_module.h"
#include "kinds/cuda/cuda_select.h"

static mp_status_t parse_device(const char* arch, char* canonical, size_t capacity) {
  mp_cuda_arch_t a;
  if (!arch || !mp_cuda_parse_arch(arch, &a) || a.ptx || a.suffix)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a CUDA device is named by its compute capability as cuda:sm_XY (cuda:sm_80 "
                     "for 8.0, cuda:sm_90, cuda:sm_120), not %s%s",
                     arch ? "cuda:" : "'cuda' alone", arch ? arch : "");
  snprintf(canonical, capacity, "sm_%d%d", (int)a.major, (int)a.minor);
  return MP_OK;
}

static mp_status_t host_device(int32_t id, char* canonical, size_t capacity) {
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  snprintf(canonical, capacity, "sm_%d%d", (int)cuda->cc_major[id], (int)cuda->cc_minor[id]);
  return MP_OK;
}

typedef struct {
  const mp_kind_t* kind;
  mp_cuda_module_t m;
} head_t;

static mp_status_t parse(void* state, mp_const_byte_span_t bytes) {
  head_t* h = state;
  uint64_t end;
  return mp_cuda_payload_parse_head(&h->m, h->kind, bytes, &end);
}

static void reset(void* state) {
  head_t* h = state;
  mp_cuda_payload_free(&h->m);
  mp_kernel_table_free(&h->m.base.table);
  free(h->m.base.name);
  memset(&h->m, 0, sizeof h->m);
}

static const char* tier(int64_t score) {
  return score >= 3000000   ? "SASS for exactly this compute capability"
         : score >= 2000000 ? "SASS of the same major and an older minor, which runs on it"
                            : "PTX, compiled for it by the driver's JIT at the first launch";
}

/* The ranked candidates of kernel |k|, as JSON members. */
static bool answer_kernel(const mp_cuda_module_t* m, uint32_t k, int32_t major, int32_t minor,
                          mp_json_t* out) {
  const char* arches[MP_CUDA_MAX_VARIANTS];
  uint32_t owner[MP_CUDA_MAX_VARIANTS], order[MP_CUDA_MAX_VARIANTS], usable = 0;
  int64_t scores[MP_CUDA_MAX_VARIANTS];
  uint32_t count = mp_cuda_candidates(m, k, arches, owner);
  if (mp_cuda_rank_arches(arches, count, major, minor, order, scores, &usable) != MP_OK)
    usable = 0; /* the parser checked every name */
  if (usable) {
    mp_json_printf(out, "\"fits\": true, \"variant\": ");
    mp_json_string(out, arches[order[0]]);
    mp_json_printf(out, ", \"kind\": \"%s\", \"reason\": ",
                   mp_cuda_variant_kind_names[m->variants[owner[order[0]]].kind]);
    mp_json_string(out, tier(scores[0]));
    mp_json_printf(out, ", \"fallbacks\": [");
    for (uint32_t r = 1; r < usable; ++r) {
      mp_json_printf(out, "%s", r > 1 ? ", " : "");
      mp_json_string(out, arches[order[r]]);
    }
    mp_json_printf(out, "]");
  } else {
    char why[1024];
    snprintf(why, sizeof why, "no variant runs on compute capability %d.%d (%s); rebuild with a "
             "target for sm_%d%d or PTX for compute_%d%d or lower",
             (int)major, (int)minor, mp_cuda_selection_rule, (int)major, (int)minor, (int)major,
             (int)minor);
    mp_json_printf(out, "\"fits\": false, \"variant\": null, \"reason\": ");
    mp_json_string(out, why);
  }
  mp_json_printf(out, ", \"variants\": [");
  for (uint32_t i = 0; i < count; ++i) {
    mp_json_printf(out, "%s", i ? ", " : "");
    mp_json_string(out, arches[i]);
  }
  mp_json_printf(out, "]");
  return usable > 0;
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  h->kind = kind;
  mp_status_t status = mp_preflight_parse_head(payload, 0, parse, reset, h);
  mp_cuda_arch_t a;
  if (status == MP_OK && !mp_cuda_parse_arch(arch, &a))
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "'%s' is not a CUDA architecture", arch);
  if (status == MP_OK) {
    const mp_cuda_module_t* m = &h->m;
    bool per_kernel = false;
    for (uint32_t v = 0; v < m->variant_count; ++v) per_kernel |= m->variants[v].kernel_count > 0;
    if (!per_kernel) {
      *out_fits = answer_kernel(m, 0, a.major, a.minor, out);
    } else { /* images of some kernels each: a variant per kernel */
      *out_fits = true;
      mp_json_printf(out, "\"kernels\": [");
      for (uint32_t k = 0; k < m->base.table.count; ++k) {
        mp_json_printf(out, "%s{\"kernel\": ", k ? ", " : "");
        mp_json_string(out, m->base.table.kernels[k].name);
        mp_json_printf(out, ", ");
        *out_fits &= answer_kernel(m, k, a.major, a.minor, out);
        mp_json_printf(out, "}");
      }
      mp_json_printf(out, "], \"fits\": %s", *out_fits ? "true" : "false");
    }
  }
  reset(h);
  free(h);
  return status;
}

const mp_preflight_api_t mp_cuda_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
};
