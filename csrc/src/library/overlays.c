/* Adapters over a loaded tree's weights (library/overlays.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include "library/overlays.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call_scope.h"
#include "core/error.h"
#include "core/module.h"
#include "library/weights_open.h"

struct mp_overlays {
  atomic_long refcount;
  uint64_t count;
  mp_weight_file_t** files; /* in the order given: a later one takes precedence */
  char** paths;             /* as given */
};

/* Guards every library's overlays slot: taken to read or replace a version (swaps are rare,
 * and a call reads the slot once). */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;

void mp_overlays_release(mp_overlays_t* o) {
  if (!o || atomic_fetch_sub_explicit(&o->refcount, 1, memory_order_acq_rel) != 1) return;
  for (uint64_t i = 0; i < o->count; ++i) {
    mp_weight_file_release(o->files[i]);
    free(o->paths[i]);
  }
  free(o->files);
  free(o->paths);
  free(o);
}

static void release_kept(void* overlays) {
  mp_overlays_release(overlays);
}

/* Each array of |file| that has a namesake in the tree of |root| replaces it: same dtype and
 * shape, or host code written for the base would misread it. */
static mp_status_t check_against_tree(mp_module_t* root, const mp_weight_file_t* file) {
  for (uint64_t i = 0; i < mp_weight_file_count(file); ++i) {
    const mp_weight_array_t* a = mp_weight_file_array(file, i);
    const DLTensor* base;
    mp_status_t status = mp_module_get_array(root, a->name, 1, &base);
    if (status == MP_ERR_NOT_FOUND) { /* a new array: added */
      mp_error_clear();
      continue;
    }
    MP_RETURN_IF_ERROR(status);
    mp_array_spec_t spec = {a->name, base->dtype, base->ndim, base->shape};
    MP_RETURN_IF_ERROR(mp_weight_file_match(
        file, &spec, 1, false,
        "the tree it overlays (an overlay adds arrays of new names, and replaces arrays with "
        "ones of their dtype and shape)"));
  }
  return MP_OK;
}

mp_status_t mp_overlays_open(mp_module_t* root, const char* const* paths, uint64_t count,
                             const mp_load_settings_t* settings, mp_overlays_t** out) {
  *out = NULL;
  if (count == 0) return MP_OK;
  mp_overlays_t* o = calloc(1, sizeof *o);
  if (!o || !(o->files = calloc(count, sizeof *o->files)) ||
      !(o->paths = calloc(count, sizeof *o->paths))) {
    if (o) free(o->files);
    free(o);
    return mp_out_of_memory("overlays");
  }
  atomic_init(&o->refcount, 1);
  /* Adapters are checked whole when they are opened, even for a tree that verifies its weights
   * on first use: they are small, and swapped while calls run. */
  mp_load_settings_t checks = *settings;
  checks.flags &= ~(uint32_t)MP_LOAD_VERIFY_ON_FIRST_USE;
  mp_status_t status = MP_OK;
  for (; o->count < count && status == MP_OK; ++o->count) {
    const char* path = paths[o->count];
    const char* slash = strrchr(path, '/');
    mp_weights_reference_t own = {slash ? slash + 1 : path, NULL, NULL, 0, NULL, 0, NULL};
    if (!(o->paths[o->count] = strdup(path))) {
      status = mp_out_of_memory("overlays");
      break;
    }
    status = mp_weights_open_checked(path, &own, path, &checks, &o->files[o->count]);
    if (status == MP_OK) status = check_against_tree(root, o->files[o->count]);
    if (status != MP_OK) status = mp_error_prefix(status, "overlay '%s'", path);
  }
  if (status != MP_OK) {
    mp_overlays_release(o);
    return status;
  }
  *out = o;
  return MP_OK;
}

void mp_overlays_install(mp_overlays_slot_t* slot, mp_overlays_t* overlays) {
  pthread_mutex_lock(&slot_lock);
  mp_overlays_t* old = atomic_load(slot);
  atomic_store(slot, overlays);
  pthread_mutex_unlock(&slot_lock);
  mp_overlays_release(old); /* calls keeping it hold it */
}

/* The version the caller reads: inside a call, the one the call keeps (kept now on its first
 * read); outside, the current one (borrowed until the next swap). NULL: none. */
static mp_status_t current(mp_overlays_slot_t* slot, mp_overlays_t** out) {
  bool in_call = mp_call_scope_active();
  if (in_call && (*out = mp_call_scope_find((const void*)slot))) return MP_OK;
  pthread_mutex_lock(&slot_lock);
  mp_overlays_t* o = atomic_load(slot);
  if (o && in_call) atomic_fetch_add(&o->refcount, 1);
  pthread_mutex_unlock(&slot_lock);
  *out = o;
  if (!o || !in_call) return MP_OK;
  mp_status_t status = mp_call_scope_keep((const void*)slot, o, release_kept);
  if (status != MP_OK) mp_overlays_release(o);
  return status;
}

mp_status_t mp_overlays_find(mp_overlays_slot_t* slot, const char* name,
                             const DLTensor** out_array, mp_weight_file_t** out_file) {
  *out_array = NULL;
  *out_file = NULL;
  if (!atomic_load_explicit(slot, memory_order_acquire)) return MP_OK; /* none: one load */
  mp_overlays_t* o;
  MP_RETURN_IF_ERROR(current(slot, &o));
  for (uint64_t i = o ? o->count : 0; i-- > 0;) {
    uint64_t at = mp_weight_file_find(o->files[i], name);
    if (at == UINT64_MAX) continue;
    *out_array = &mp_weight_file_array(o->files[i], at)->tensor;
    *out_file = o->files[i];
    return MP_OK;
  }
  return MP_OK;
}

bool mp_overlays_same(mp_overlays_slot_t* slot, const char* const* paths, uint64_t count) {
  pthread_mutex_lock(&slot_lock);
  const mp_overlays_t* o = atomic_load(slot);
  bool same = (o ? o->count : 0) == count;
  for (uint64_t i = 0; same && i < count; ++i) same = strcmp(o->paths[i], paths[i]) == 0;
  pthread_mutex_unlock(&slot_lock);
  return same;
}
