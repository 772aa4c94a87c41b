/* The code-object selection rule of the rocm kind (modpack/kinds/rocm.h): target IDs, how well
 * a code object fits a device, and the ranking the loader, modpack preflight and
 * mp_rocm_select_variant use. */
#include "kinds/rocm/rocm_select.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kinds/common/variant_rank.h"

/* The generic targets and the processors each covers (LLVM's AMDGPU generic processors). */
static const struct {
  const char* name;
  const char* covers[9];
} generics[] = {
    {"gfx9-generic", {"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}},
    {"gfx9-4-generic", {"gfx940", "gfx941", "gfx942", "gfx950"}},
    {"gfx10-1-generic", {"gfx1010", "gfx1011", "gfx1012", "gfx1013"}},
    {"gfx10-3-generic",
     {"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"}},
    {"gfx11-generic",
     {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}},
    {"gfx12-generic", {"gfx1200", "gfx1201"}},
};
enum { GENERIC_COUNT = sizeof generics / sizeof generics[0] };

const char* const mp_rocm_selection_rule =
    "a code object runs on its own processor or, for a generic target such as gfx11-generic, "
    "on the processors it covers; built with xnack+ or sramecc+ it needs that feature on, with "
    "'-' off, with neither stated either setting";

static int find_generic(const char* name) {
  for (int g = 0; g < GENERIC_COUNT; ++g)
    if (strcmp(generics[g].name, name) == 0) return g;
  return -1;
}

static bool covers(int g, const char* processor) {
  for (size_t i = 0; i < sizeof generics[g].covers / sizeof generics[g].covers[0]; ++i)
    if (generics[g].covers[i] && strcmp(generics[g].covers[i], processor) == 0) return true;
  return false;
}

/* "gfx" then a digit then lowercase hex digits ("gfx90a", "gfx1100", "gfx942"). */
static bool specific_processor(const char* p, size_t n) {
  if (n < 4 || n > 10 || strncmp(p, "gfx", 3) != 0 || p[3] < '0' || p[3] > '9') return false;
  for (size_t i = 4; i < n; ++i)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return false;
  return true;
}

bool mp_rocm_parse_target(const char* text, mp_rocm_target_t* out, char* why, size_t why_size) {
  memset(out, 0, sizeof *out);
  static const char prefix[] = "amdgcn-amd-amdhsa--";
  if (!text) {
    snprintf(why, why_size, "no target ID");
    return false;
  }
  if (strncmp(text, prefix, sizeof prefix - 1) == 0) text += sizeof prefix - 1;
  size_t n = strcspn(text, ":");
  if (n >= sizeof out->processor) {
    snprintf(why, why_size, "'%s' is not an AMD GPU target ID (a processor such as gfx90a)",
             text);
    return false;
  }
  memcpy(out->processor, text, n);
  out->processor[n] = '\0';
  if (find_generic(out->processor) >= 0) {
    out->generic = true;
  } else if (!specific_processor(text, n)) {
    snprintf(why, why_size,
             "'%s' is not an AMD GPU target ID: expected a processor such as gfx90a, gfx942 or "
             "gfx1100, or a generic target (gfx9-generic, gfx9-4-generic, gfx10-1-generic, "
             "gfx10-3-generic, gfx11-generic, gfx12-generic), then optionally :sramecc+|- and "
             ":xnack+|-",
             text);
    return false;
  }
  const char* p = text + n;
  while (*p == ':') {
    ++p;
    size_t len = strcspn(p, ":");
    uint8_t* slot = NULL;
    if (len == 8 && strncmp(p, "sramecc", 7) == 0) slot = &out->sramecc;
    if (len == 6 && strncmp(p, "xnack", 5) == 0) slot = &out->xnack;
    char sign = len ? p[len - 1] : '\0';
    if (!slot || (sign != '+' && sign != '-')) {
      snprintf(why, why_size,
               "'%s': unknown feature '%.*s' (a target ID's features are sramecc+, sramecc-, "
               "xnack+ and xnack-)",
               text, (int)len, p);
      return false;
    }
    if (*slot != MP_ROCM_ANY) {
      snprintf(why, why_size, "'%s' states %.*s twice", text, (int)len - 1, p);
      return false;
    }
    *slot = sign == '+' ? MP_ROCM_ON : MP_ROCM_OFF;
    p += len;
  }
  return true;
}

static const char* setting(uint8_t s) {
  return s == MP_ROCM_ON ? "+" : "-";
}

void mp_rocm_target_string(const mp_rocm_target_t* t, char* buffer, size_t capacity) {
  snprintf(buffer, capacity, "%s%s%s%s%s", t->processor, t->sramecc ? ":sramecc" : "",
           t->sramecc ? setting(t->sramecc) : "", t->xnack ? ":xnack" : "",
           t->xnack ? setting(t->xnack) : "");
}

mp_status_t mp_rocm_parse_device(const char* text, mp_rocm_target_t* out) {
  char why[512];
  if (!mp_rocm_parse_target(text, out, why, sizeof why))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s", why);
  if (out->generic)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "'%s' is a generic target, not a device: name the device's processor "
                     "(e.g. gfx1100 for a device gfx11-generic code runs on)",
                     out->processor);
  return MP_OK;
}

/* One feature: +1 when the code object states the device's setting, 0 when it is built for
 * either, -1 when it cannot run. */
static int feature_fit(uint8_t code, uint8_t device, const char* name, char* why,
                       size_t why_size) {
  if (code == MP_ROCM_ANY) return 0;
  if (device == MP_ROCM_ANY) {
    snprintf(why, why_size,
             "built for %s%s, and the device's %s setting is not known (a device target ID "
             "states it, e.g. :%s%s)",
             name, setting(code), name, name, setting(code));
    return -1;
  }
  if (code != device) {
    snprintf(why, why_size, "built for %s%s, and the device runs with %s%s", name,
             setting(code), name, setting(device));
    return -1;
  }
  return 1;
}

int64_t mp_rocm_fitness(const mp_rocm_target_t* code, const mp_rocm_target_t* device, char* why,
                        size_t why_size) {
  char scratch[8];
  if (!why) {
    why = scratch;
    why_size = sizeof scratch;
  }
  why[0] = '\0';
  int64_t tier;
  if (code->generic) {
    int g = find_generic(code->processor);
    if (g < 0 || !covers(g, device->processor)) {
      snprintf(why, why_size, "the generic target %s does not cover %s", code->processor,
               device->processor);
      return -1;
    }
    tier = 1;
  } else {
    if (strcmp(code->processor, device->processor) != 0) {
      snprintf(why, why_size, "built for %s, not %s", code->processor, device->processor);
      return -1;
    }
    tier = 2;
  }
  int s = feature_fit(code->sramecc, device->sramecc, "sramecc", why, why_size);
  if (s < 0) return -1;
  int x = feature_fit(code->xnack, device->xnack, "xnack", why, why_size);
  if (x < 0) return -1;
  snprintf(why, why_size, "%s%s%s%s", tier == 2 ? "built for this processor" : "a generic target covering it",
           code->sramecc ? ", sramecc as on the device" : "",
           code->xnack ? ", xnack as on the device" : "",
           code->sramecc || code->xnack ? "" : " (built for any xnack and sramecc setting)");
  return tier * 10 + s + x;
}

mp_status_t mp_rocm_rank_targets(const char* const* targets, uint32_t count,
                                 const mp_rocm_target_t* device, uint32_t* order,
                                 uint32_t* out_usable) {
  int64_t scores[MP_ROCM_MAX_VARIANTS];
  uint32_t usable = 0;
  if (count > MP_ROCM_MAX_VARIANTS)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%u code objects are too many (at most %d)", count,
                     MP_ROCM_MAX_VARIANTS);
  for (uint32_t i = 0; i < count; ++i) {
    mp_rocm_target_t t;
    char why[512];
    if (!mp_rocm_parse_target(targets[i], &t, why, sizeof why))
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s", why);
    int64_t score = mp_rocm_fitness(&t, device, NULL, 0);
    if (score < 0) continue;
    mp_variant_rank_insert(i, score, order, scores, &usable);
  }
  *out_usable = usable;
  return MP_OK;
}

mp_status_t mp_rocm_select_variant(const char* const* targets, uint32_t count,
                                   const char* device, int32_t* out_index) {
  *out_index = -1;
  mp_rocm_target_t d;
  MP_RETURN_IF_ERROR(mp_rocm_parse_device(device, &d));
  uint32_t order[MP_ROCM_MAX_VARIANTS];
  uint32_t usable = 0;
  MP_RETURN_IF_ERROR(mp_rocm_rank_targets(targets, count, &d, order, &usable));
  if (usable > 0) {
    *out_index = (int32_t)order[0];
    return MP_OK;
  }
  char list[1024];
  mp_variant_list(targets, count, list, sizeof list);
  char shown[64];
  mp_rocm_target_string(&d, shown, sizeof shown);
  return mp_errorf(MP_ERR_UNAVAILABLE,
                   "no code object for this GPU: none runs on %s (code objects: %s; %s); "
                   "rebuild with a target for %s",
                   shown, count ? list : "none", mp_rocm_selection_rule, shown);
}
