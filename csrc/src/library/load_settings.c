/* Load settings (library/load_settings.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include "library/load_settings.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"

enum { MAX_WEIGHT_LOCATIONS = 4096, MAX_OVERLAYS = 64 };

void mp_load_settings_free(mp_load_settings_t* s) {
  for (uint64_t i = 0; i < s->num_weights; ++i) {
    free((char*)s->weights[i].file_name);
    free((char*)s->weights[i].path);
  }
  free(s->weights);
  free(s->weights_folder);
  for (uint64_t i = 0; i < s->num_overlays; ++i) free(s->overlays[i]);
  free(s->overlays);

  memset(s, 0, sizeof *s);
}

/* The flags that mean something only for a signed load are refused without trusted keys,
 * rather than ignored: the one place the rule lives (Python's load_module and load_weights
 * pass their keyword arguments through to it). */
static mp_status_t check_signed_only(uint32_t flags, uint64_t num_keys) {
  if (num_keys > 0) return MP_OK;
  if (flags & MP_LOAD_PRIVATE_COPY)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "private_copy=True is for signed loads (C: MP_LOAD_PRIVATE_COPY): give "
                     "trusted_keys too (C: mp_load_options_t.trusted_keys); an unsigned load "
                     "maps the file, checked by its seal and checksums");
  if (flags & MP_LOAD_VERIFY_ON_FIRST_USE)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "verify_on_first_use=True is for signed loads (C: "
                     "MP_LOAD_VERIFY_ON_FIRST_USE): give trusted_keys too (C: "
                     "mp_load_options_t.trusted_keys); an unsigned load checks checksums, not "
                     "digests");
  return MP_OK;
}

/* The overlays' paths, each owned (|count| from a struct that holds the field). */
static mp_status_t copy_overlays(const char* const* paths, uint64_t count,
                                 mp_load_settings_t* out) {
  if (count == 0) return MP_OK;
  if (count > MAX_OVERLAYS || !paths)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_load_options_t: %" PRIu64 " overlays without an array (at most %d)",
                     count, MAX_OVERLAYS);
  out->overlays = calloc(count, sizeof *out->overlays);
  if (!out->overlays) return mp_out_of_memory("load settings");
  for (; out->num_overlays < count; ++out->num_overlays) {
    const char* path = paths[out->num_overlays];
    if (!path)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "overlay %" PRIu64 " has no path",
                       out->num_overlays);
    if (!(out->overlays[out->num_overlays] = strdup(path)))
      return mp_out_of_memory("load settings");
  }
  return MP_OK;
}

mp_status_t mp_load_settings_copy(const mp_load_options_t* options, uint32_t flags,
                                  mp_load_settings_t* out) {
  memset(out, 0, sizeof *out);
  out->flags = flags;
  if (!options) return MP_OK;
  if (options->struct_size < offsetof(mp_load_options_t, weights))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_load_options_t.struct_size is %u: set it to sizeof(mp_load_options_t)",
                     options->struct_size);
  out->flags |= options->flags;
  /* A field is read when the caller's struct holds it: a caller built before it was added
   * passes a smaller struct_size, and the field is taken as zero. */
#define HAS_FIELD(field) \
  (options->struct_size >= offsetof(mp_load_options_t, field) + sizeof options->field)
  bool has_folder = HAS_FIELD(weights_folder);
  uint64_t num_weights = HAS_FIELD(num_weights) ? options->num_weights : 0;
  uint64_t num_overlays = HAS_FIELD(num_overlays) ? options->num_overlays : 0;
#undef HAS_FIELD
  if (options->num_trusted_keys > MP_MAX_TRUSTED_KEYS ||
      (options->num_trusted_keys > 0 && !options->trusted_keys))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "at most %d trusted keys, not %" PRIu64,
                     MP_MAX_TRUSTED_KEYS, options->num_trusted_keys);
  if (num_weights > MAX_WEIGHT_LOCATIONS || (num_weights > 0 && !options->weights))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_load_options_t: %" PRIu64
                     " weight locations without an array (at most %d)",
                     num_weights, MAX_WEIGHT_LOCATIONS);
  MP_RETURN_IF_ERROR(check_signed_only(out->flags, options->num_trusted_keys));
  out->num_keys = options->num_trusted_keys;
  if (out->num_keys) memcpy(out->keys, options->trusted_keys, out->num_keys * sizeof *out->keys);
  if (has_folder && options->weights_folder && !(out->weights_folder = strdup(options->weights_folder)))
    return mp_out_of_memory("load settings");
  mp_status_t copied = copy_overlays(options->overlays, num_overlays, out);
  if (copied != MP_OK) {
    mp_load_settings_free(out);
    return copied;
  }
  if (num_weights == 0) return MP_OK;
  out->weights = calloc(num_weights, sizeof *out->weights);
  if (!out->weights) return mp_out_of_memory("load settings");
  for (uint64_t i = 0; i < num_weights; ++i, ++out->num_weights) {
    const mp_weights_location_t* w = &options->weights[i];
    if (!w->path) {
      mp_load_settings_free(out);
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "weight location %" PRIu64 " has no path", i);
    }
    out->weights[i].path = strdup(w->path);
    out->weights[i].file_name = w->file_name ? strdup(w->file_name) : NULL;
    if (!out->weights[i].path || (w->file_name && !out->weights[i].file_name)) {
      ++out->num_weights;
      mp_load_settings_free(out);
      return mp_out_of_memory("load settings");
    }
  }
  return MP_OK;
}

const char* mp_load_settings_weights_path(const mp_load_settings_t* s, const char* file_name) {
  const char* any = NULL;
  for (uint64_t i = 0; i < s->num_weights; ++i) {
    if (!s->weights[i].file_name) any = s->weights[i].path;
    else if (strcmp(s->weights[i].file_name, file_name) == 0) return s->weights[i].path;
  }
  return any;
}

bool mp_load_settings_names_files(const mp_load_settings_t* s) {
  for (uint64_t i = 0; i < s->num_weights; ++i)
    if (s->weights[i].file_name) return true;
  return false;
}

mp_status_t mp_load_settings_check_names(const mp_load_settings_t* s, const char* library_path,
                                         const char* const* names, uint64_t count) {
  for (uint64_t i = 0; i < s->num_weights; ++i) {
    const char* given = s->weights[i].file_name;
    bool known = !given;
    for (uint64_t j = 0; j < count && !known; ++j) known = strcmp(names[j], given) == 0;
    if (known) continue;
    if (count == 0)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "the load names the weight file '%s' (weights=; C: mp_load_options_t."
                       "weights), but '%s' refers to no weight file: drop it",
                       given, library_path);
    char listed[512] = "";
    for (uint64_t j = 0; j < count; ++j) {
      size_t used = strlen(listed);
      int n = snprintf(listed + used, sizeof listed - used, "%s'%s'", j ? ", " : "", names[j]);
      if (n < 0 || (size_t)n >= sizeof listed - used) {
        memcpy(listed + (used < sizeof listed - 6 ? used : sizeof listed - 6), ", ...", 6);
        break;
      }
    }
    mp_closest_t meant;
    mp_closest_begin(&meant, given);
    for (uint64_t j = 0; j < count; ++j) mp_closest_offer(&meant, names[j]);
    char suggestion[MP_CLOSEST_MAX_NAME + 32];
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "the load names the weight file '%s' (weights=; C: mp_load_options_t."
                     "weights), which '%s' does not refer to%s: it refers to %s; name each "
                     "as the library records it (`modpack inspect` shows them)",
                     given, library_path,
                     mp_closest_suffix(&meant, suggestion, sizeof suggestion), listed);
  }
  return MP_OK;
}
