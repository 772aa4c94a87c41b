/* modpack preflight for the cuda kind: which variant a GPU of a given compute capability would
 * get, from the payload's head (header, variant headers, records: never a variant's bytes),
 * parsed by the loader's own parser and ranked by the loader's own rule (mp_cuda_candidates,
 * mp_cuda_rank_arches); and for a GPU of this machine, whether the kernel cache holds the cubin
 * of the PTX it would compile (which reads that PTX, to hash it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "files/kernel_cache.h"
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
  uint64_t end; /* of the head */
  mp_cuda_module_t m;
} head_t;

static mp_status_t parse(void* state, mp_const_byte_span_t bytes) {
  head_t* h = state;
  return mp_cuda_payload_parse_head(&h->m, h->kind, bytes, &h->end);
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

/* The best variant of kernel |k| on compute capability |major|.|minor|, or -1. */
static int32_t best_variant(const mp_cuda_module_t* m, uint32_t k, int32_t major, int32_t minor) {
  const char* arches[MP_CUDA_MAX_VARIANTS];
  uint32_t owner[MP_CUDA_MAX_VARIANTS], order[MP_CUDA_MAX_VARIANTS], usable = 0;
  int64_t scores[MP_CUDA_MAX_VARIANTS];
  uint32_t count = mp_cuda_candidates(m, k, arches, owner);
  if (mp_cuda_rank_arches(arches, count, major, minor, order, scores, &usable) != MP_OK ||
      !usable)
    return -1;
  return (int32_t)owner[order[0]];
}

/* Whether the cubin linked from PTX variant |v| (its bytes found after the head, each variant
 * 64-byte aligned) for this machine's device |id| is in the cache. */
static mp_status_t probe_variant(const mp_cuda_t* cuda, const head_t* h,
                                 const mp_payload_reader_t* payload, uint32_t v, int32_t id,
                                 const char** out_state, char* detail, size_t capacity) {
  uint64_t at = h->end;
  for (uint32_t i = 0;; ++i) {
    at += (MP_CUDA_VARIANT_ALIGNMENT - at % MP_CUDA_VARIANT_ALIGNMENT) % MP_CUDA_VARIANT_ALIGNMENT;
    if (i == v) break;
    if (h->m.variants[i].size > payload->size - at)
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: variant %u runs past its end", i);
    at += h->m.variants[i].size;
  }
  const uint8_t* stored;
  MP_RETURN_IF_ERROR(payload->read(payload->context, at, h->m.variants[v].size, &stored));
  mp_code_t code;
  memset(&code, 0, sizeof code);
  const uint8_t* raw = NULL;
  mp_status_t status = mp_code_open(&code, stored, h->m.variants[v].size,
                                    (payload->entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) != 0);
  if (status == MP_OK) status = mp_code_get(&code, NULL, NULL, &raw);
  if (status == MP_OK) {
    char name[320], driver[32];
    mp_cuda_cache_identity(cuda, id, name, sizeof name, driver, sizeof driver);
    mp_kernel_cache_input_t input = {.kind = "cuda", .code = raw, .code_size = code.raw_size,
                                     .options = "", .device = name, .driver = driver,
                                     .what = "cubin"};
    mp_kernel_cache_probe(&input, out_state, detail, capacity);
  }
  mp_code_free(&code);
  return status;
}

/* The kernel cache for this machine's device |id|: "unused" when every kernel gets SASS (there
 * is nothing to compile), else whether the cubin linked from each PTX variant chosen is kept
 * ("hit" only when all are). */
static mp_status_t kernel_cache(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                                int32_t id, mp_json_t* out) {
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  h->kind = kind;
  mp_status_t status = mp_preflight_parse_head(payload, 0, parse, reset, h);
  bool chosen[MP_CUDA_MAX_VARIANTS] = {false};
  uint32_t kernels = h->m.base.table.count ? h->m.base.table.count : 1;
  for (uint32_t k = 0; status == MP_OK && k < kernels; ++k) {
    int32_t v = best_variant(&h->m, k, cuda->cc_major[id], cuda->cc_minor[id]);
    if (v >= 0 && h->m.variants[v].kind == MP_CUDA_VARIANT_PTX) chosen[v] = true;
  }
  mp_preflight_cache_tally_t tally;
  mp_preflight_cache_tally_init(&tally, "every kernel gets SASS for this device: nothing to "
                                        "compile");
  for (uint32_t v = 0; status == MP_OK && v < h->m.variant_count; ++v) {
    if (!chosen[v]) continue;
    const char* one;
    char found[900];
    status = probe_variant(cuda, h, payload, v, id, &one, found, sizeof found);
    if (status == MP_OK)
      mp_preflight_cache_tally_add(&tally, h->m.variants[v].arches[0], one, found);
  }
  if (status == MP_OK && tally.asked > 1 && tally.hits == tally.asked)
    snprintf(tally.detail, sizeof tally.detail, "the cubins of %u PTX variants", tally.asked);
  if (status == MP_OK) mp_preflight_cache_answer(out, tally.state, tally.detail);
  reset(h);
  free(h);
  return status;
}

const mp_preflight_api_t mp_cuda_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
    .kernel_cache = kernel_cache,
};
