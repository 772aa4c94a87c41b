/* modpack preflight for the rocm kind: which code object a GPU of a given target ID would get,
 * from the payload's head (target IDs, records, layouts: never a code object's bytes), parsed by
 * the loader's own parser and ranked by the loader's own rule (mp_rocm_module_rank). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kinds/common/preflight.h"
#include "kinds/rocm/rocm_module.h"
#include "kinds/rocm/rocm_select.h"

static mp_status_t parse_device(const char* arch, char* canonical, size_t capacity) {
  mp_rocm_target_t t;
  if (!arch)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a ROCm device is named by its target ID, as rocm:gfx90a:sramecc+:xnack- or "
                     "rocm:gfx1100 (rocminfo and HIP's gcnArchName show it), not 'rocm' alone");
  mp_status_t status = mp_rocm_parse_device(arch, &t);
  if (status != MP_OK)
    return mp_error_prefix(status, "DEVICE rocm:%s", arch);
  mp_rocm_target_string(&t, canonical, capacity);
  return MP_OK;
}

static mp_status_t host_device(int32_t id, char* canonical, size_t capacity) {
  const mp_rocm_t* rocm = mp_rocm();
  if (!rocm) return mp_error_code();
  snprintf(canonical, capacity, "%s", rocm->targets[id]);
  return MP_OK;
}

typedef struct {
  const mp_kind_t* kind;
  mp_rocm_module_t m;
} head_t;

static mp_status_t parse(void* state, mp_const_byte_span_t bytes) {
  head_t* h = state;
  uint64_t end;
  return mp_rocm_payload_parse_head(&h->m, h->kind, bytes, &end);
}

static void reset(void* state) {
  head_t* h = state;
  mp_rocm_payload_free(&h->m);
  mp_kernel_table_free(&h->m.base.table);
  free(h->m.base.name);
  memset(&h->m, 0, sizeof h->m);
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  h->kind = kind;
  mp_rocm_target_t device;
  mp_status_t status = mp_rocm_parse_device(arch, &device);
  if (status == MP_OK) status = mp_preflight_parse_head(payload, 0, parse, reset, h);
  uint32_t order[MP_ROCM_MAX_VARIANTS], usable = 0;
  if (status == MP_OK) status = mp_rocm_module_rank(&h->m, &device, order, &usable);
  if (status == MP_OK) {
    const mp_rocm_module_t* m = &h->m;
    char why[512];
    *out_fits = usable > 0;
    if (usable) {
      mp_rocm_target_t t;
      mp_rocm_parse_target(m->variants[order[0]].target, &t, why, sizeof why);
      mp_rocm_fitness(&t, &device, why, sizeof why);
      mp_json_printf(out, "\"fits\": true, \"variant\": ");
      mp_json_string(out, m->variants[order[0]].target);
      mp_json_printf(out, ", \"kind\": \"hsaco\", \"reason\": ");
      mp_json_string(out, why);
      mp_json_printf(out, ", \"fallbacks\": [");
      for (uint32_t r = 1; r < usable; ++r) {
        mp_json_printf(out, "%s", r > 1 ? ", " : "");
        mp_json_string(out, m->variants[order[r]].target);
      }
      mp_json_printf(out, "]");
    } else {
      snprintf(why, sizeof why, "no code object runs on %s (%s); rebuild with a target for %s",
               arch, mp_rocm_selection_rule, arch);
      mp_json_printf(out, "\"fits\": false, \"variant\": null, \"reason\": ");
      mp_json_string(out, why);
    }
    /* Every code object, with why it does or does not run there. */
    mp_json_printf(out, ", \"variants\": [");
    for (uint32_t v = 0; v < m->variant_count; ++v) {
      mp_rocm_target_t t;
      mp_rocm_parse_target(m->variants[v].target, &t, why, sizeof why);
      int64_t score = mp_rocm_fitness(&t, &device, why, sizeof why);
      mp_json_printf(out, "%s{\"variant\": ", v ? ", " : "");
      mp_json_string(out, m->variants[v].target);
      mp_json_printf(out, ", \"runs\": %s, \"why\": ", score >= 0 ? "true" : "false");
      mp_json_string(out, why);
      mp_json_printf(out, "}");
    }
    mp_json_printf(out, "]");
  }
  reset(h);
  free(h);
  return status;
}

const mp_preflight_api_t mp_rocm_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
};
