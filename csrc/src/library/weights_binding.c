/* Weight bindings (library/weights_binding.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include "library/weights_binding.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call_scope.h"
#include "core/error.h"
#include "files/signatures.h"
#include "library/library.h"

struct mp_weights_binding {
  atomic_long refcount;
  char* file_name;
  mp_library_t* library; /* not owned (its modules keep it); NULL for a file on its own */
  mp_load_settings_t settings; /* how the tree was loaded: what a new file must pass */
  pthread_mutex_t lock;        /* guards current */
  mp_weight_file_t* current;
  struct mp_weights_binding* next; /* in the library's list, under the library lock */
};

/* The arrays of |reference| (the weights being replaced), as specs. */
static mp_status_t specs_of(const mp_weight_file_t* reference, mp_array_spec_t** out) {
  uint64_t count = mp_weight_file_count(reference);
  *out = calloc(count ? count : 1, sizeof **out);
  if (!*out) return mp_out_of_memory("comparing weight files");
  for (uint64_t i = 0; i < count; ++i) {
    const mp_weight_array_t* a = mp_weight_file_array(reference, i);
    (*out)[i] = (mp_array_spec_t){a->name, a->tensor.dtype, a->tensor.ndim, a->tensor.shape};
  }
  return MP_OK;
}

/* ---- the bindings of a library -------------------------------------------------------- */

static void destroy(mp_weights_binding_t* b) {
  if (b->library) {
    mp_library_lock();
    for (mp_weights_binding_t** p = mp_library_weight_bindings(b->library); *p; p = &(*p)->next)
      if (*p == b) {
        *p = b->next;
        break;
      }
    mp_library_unlock();
  }
  mp_weight_file_release(b->current);
  mp_load_settings_free(&b->settings);
  pthread_mutex_destroy(&b->lock);
  free(b->file_name);
  free(b);
}

void mp_weights_binding_release(mp_weights_binding_t* binding) {
  if (binding && atomic_fetch_sub_explicit(&binding->refcount, 1, memory_order_acq_rel) == 1)
    destroy(binding);
}

static mp_status_t copy_settings(const mp_load_settings_t* from, mp_load_settings_t* to) {
  mp_load_options_t options = {
      .struct_size = sizeof options,
      .flags = from->flags,
      .trusted_keys = from->keys,
      .num_trusted_keys = from->num_keys,
  };
  return mp_load_settings_copy(&options, 0, to); /* the locations are not needed later */
}

mp_status_t mp_weights_binding_get(mp_library_t* library, const mp_weights_reference_t* ref,
                                   const char* path, const mp_load_settings_t* settings,
                                   mp_weights_binding_t** out_binding) {
  *out_binding = NULL;
  const char* file_name = ref->file_name;
  if (library) {
    for (mp_weights_binding_t* b = *mp_library_weight_bindings(library); b; b = b->next) {
      if (strcmp(b->file_name, file_name) != 0) continue;
      long count = atomic_load(&b->refcount);
      while (count > 0 && !atomic_compare_exchange_weak(&b->refcount, &count, count + 1)) {
      }
      if (count == 0) continue; /* going */
      /* Another module of the tree refers to the same file: it must be the same file. */
      mp_status_t status =
          mp_weights_check_recorded(b->current, ref, mp_library_path(library),
                                    settings->num_keys > 0);
      if (status != MP_OK) {
        mp_weights_binding_release(b);
        return status;
      }
      *out_binding = b;
      return MP_OK;
    }
  }
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weights_open_checked(path, ref, library ? mp_library_path(library) : path,
                                             settings, &file));
  mp_status_t status = MP_OK;
  mp_weights_binding_t* b = calloc(1, sizeof *b);
  if (!b || !(b->file_name = strdup(file_name))) status = mp_out_of_memory("a weight binding");
  if (status == MP_OK) status = copy_settings(settings, &b->settings);
  if (status != MP_OK) {
    if (b) free(b->file_name);
    free(b);
    mp_weight_file_release(file);
    return status;
  }
  atomic_init(&b->refcount, 1);
  pthread_mutex_init(&b->lock, NULL);
  b->current = file;
  b->library = library;
  if (library) {
    b->next = *mp_library_weight_bindings(library);
    *mp_library_weight_bindings(library) = b;
  }
  *out_binding = b;
  return MP_OK;
}

mp_status_t mp_weights_binding_find(mp_library_t* library, const char* file_name,
                                    mp_weights_binding_t** out_binding) {
  *out_binding = NULL;
  mp_weights_binding_t* found = NULL;
  uint64_t count = 0;
  char names[512] = "";
  for (mp_weights_binding_t* b = *mp_library_weight_bindings(library); b; b = b->next) {
    if (atomic_load(&b->refcount) == 0) continue;
    ++count;
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s'%s'", used ? ", " : "", b->file_name);
    if (!file_name || strcmp(b->file_name, file_name) == 0) found = b;
  }
  if (!found || (!file_name && count > 1)) {
    if (count == 0)
      return mp_errorf(MP_ERR_NOT_FOUND, "'%s' refers to no weight file (its tree holds no "
                       "weights module)", mp_library_path(library));
    if (!file_name)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "'%s' refers to %" PRIu64 " weight files (%s): "
                       "name the one to replace", mp_library_path(library), count, names);
    return mp_errorf(MP_ERR_NOT_FOUND, "'%s' refers to no weight file named '%s'; it refers to %s",
                     mp_library_path(library), file_name, names);
  }
  atomic_fetch_add(&found->refcount, 1);
  *out_binding = found;
  return MP_OK;
}

const char* mp_weights_binding_file_name(const mp_weights_binding_t* binding) {
  return binding->file_name;
}

mp_status_t mp_weights_binding_check_given(mp_library_t* library,
                                           const mp_load_settings_t* settings) {
  if (!mp_load_settings_names_files(settings)) return MP_OK;
  uint64_t count = 0;
  for (mp_weights_binding_t* b = *mp_library_weight_bindings(library); b; b = b->next)
    count += atomic_load(&b->refcount) > 0;
  const char** names = calloc(count ? count : 1, sizeof *names);
  if (!names) return mp_out_of_memory("checking weight files");
  uint64_t n = 0;
  for (mp_weights_binding_t* b = *mp_library_weight_bindings(library); b && n < count; b = b->next)
    if (atomic_load(&b->refcount) > 0) names[n++] = b->file_name;
  mp_status_t status = mp_load_settings_check_names(settings, mp_library_path(library), names, n);
  free(names);
  return status;
}

const char* mp_weights_binding_other_file(mp_library_t* library, const char* file_name) {
  for (mp_weights_binding_t* b = *mp_library_weight_bindings(library); b; b = b->next)
    if (atomic_load(&b->refcount) > 0 && strcmp(b->file_name, file_name) != 0)
      return b->file_name;
  return NULL;
}

/* ---- reading ------------------------------------------------------------------------------ */

mp_weight_file_t* mp_weights_binding_current(mp_weights_binding_t* binding) {
  pthread_mutex_lock(&binding->lock);
  mp_weight_file_t* file = binding->current;
  mp_weight_file_retain(file);
  pthread_mutex_unlock(&binding->lock);
  return file;
}

static void release_kept(void* file) {
  mp_weight_file_release(file);
}

mp_status_t mp_weights_binding_file(mp_weights_binding_t* binding, mp_weight_file_t** out_file) {
  if (!mp_call_scope_active()) { /* no call to keep it for: the current one, borrowed */
    pthread_mutex_lock(&binding->lock);
    *out_file = binding->current;
    pthread_mutex_unlock(&binding->lock);
    return MP_OK;
  }
  mp_weight_file_t* kept = mp_call_scope_find(binding);
  if (kept) {
    *out_file = kept;
    return MP_OK;
  }
  mp_weight_file_t* file = mp_weights_binding_current(binding);
  mp_status_t status = mp_call_scope_keep(binding, file, release_kept);
  if (status != MP_OK) {
    mp_weight_file_release(file);
    return status;
  }
  *out_file = file;
  return MP_OK;
}

mp_status_t mp_weights_binding_array(const mp_weights_binding_t* binding, mp_weight_file_t* file,
                                     uint64_t index, const DLTensor** out_array) {
  *out_array = NULL;
  if ((binding->settings.flags & MP_LOAD_VERIFY_ON_FIRST_USE) &&
      (binding->settings.num_keys > 0 || (binding->settings.flags & MP_LOAD_CHECK_DIGESTS)))
    MP_RETURN_IF_ERROR(mp_weight_file_check_array(file, index));
  *out_array = &mp_weight_file_array(file, index)->tensor;
  return MP_OK;
}

/* ---- swapping --------------------------------------------------------------------------- */

mp_status_t mp_weights_binding_swap(mp_weights_binding_t* binding, const char* path) {
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_weight_file_open(path, &file));
  mp_weight_file_t* old = mp_weights_binding_current(binding);
  char what[600];
  snprintf(what, sizeof what, "'%s', the weight file it would replace", mp_weight_file_path(old));
  mp_array_spec_t* specs = NULL;
  mp_status_t status = specs_of(old, &specs);
  if (status == MP_OK)
    status = mp_weight_file_match(file, specs, mp_weight_file_count(old), true, what);
  free(specs);
  mp_weight_file_release(old);
  if (status == MP_OK) status = mp_weights_check_file(file, &binding->settings, false);
  if (status != MP_OK) {
    mp_weight_file_release(file);
    return status;
  }
  pthread_mutex_lock(&binding->lock);
  old = binding->current;
  binding->current = file;
  pthread_mutex_unlock(&binding->lock);
  mp_weight_file_release(old); /* calls keeping it, versions held and device copies hold it */
  return MP_OK;
}
