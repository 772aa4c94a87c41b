/* The functions host code looked up (library/host_lookups.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include "library/host_lookups.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/module.h"
#include "library/library_lock.h"

struct mp_host_lookup {
  char* name;
  mp_function_t* function; /* NULL until resolved, and after the node dies */
  mp_host_lookups_t* owner;
  struct mp_host_lookup* next;
};

void mp_host_lookups_init(mp_host_lookups_t* lookups) {
  pthread_mutex_init(&lookups->lock, NULL);
  lookups->entries = NULL;
  lookups->node = NULL;
}

void mp_host_lookups_clear(mp_host_lookups_t* lookups) {
  for (mp_host_lookup_t* e = lookups->entries; e;) {
    mp_host_lookup_t* next = e->next;
    mp_function_release(e->function);
    free(e->name);
    free(e);
    e = next;
  }
  lookups->entries = NULL;
  pthread_mutex_destroy(&lookups->lock);
}

mp_status_t mp_host_lookup_entry(mp_host_lookups_t* lookups, const char* name,
                                 mp_host_lookup_t** out_entry) {
  *out_entry = NULL;
  pthread_mutex_lock(&lookups->lock);
  mp_host_lookup_t* entry = lookups->entries;
  while (entry && strcmp(entry->name, name) != 0) entry = entry->next;
  if (!entry) {
    entry = calloc(1, sizeof *entry);
    char* copy = entry ? strdup(name) : NULL;
    if (!copy) {
      free(entry);
      pthread_mutex_unlock(&lookups->lock);
      return mp_out_of_memory("a context entry");
    }
    entry->name = copy;
    entry->owner = lookups;
    entry->next = lookups->entries;
    lookups->entries = entry;
  }
  pthread_mutex_unlock(&lookups->lock);
  *out_entry = entry;
  return MP_OK;
}

mp_status_t mp_host_lookup_resolve(mp_host_lookup_t* entry, mp_function_t** out_function) {
  *out_function = NULL;
  mp_host_lookups_t* lookups = entry->owner;
  pthread_mutex_lock(&lookups->lock);
  mp_function_t* cached = entry->function;
  if (cached) mp_function_retain(cached);
  pthread_mutex_unlock(&lookups->lock);
  if (cached) {
    *out_function = cached;
    return MP_OK;
  }
  mp_library_lock();
  mp_module_t* node = lookups->node;
  if (node && !mp_module_try_retain(node)) node = NULL;
  mp_library_unlock();
  if (!node)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code called '%s' after its library was unloaded",
                     entry->name);
  mp_function_t* found = NULL;
  mp_status_t status = MP_OK;
  /* Imports only: the library's own functions are plain C calls for its code. */
  for (uint64_t i = 0; i < mp_module_import_count(node) && !found && status == MP_OK; ++i)
    status = mp_module_find_function(mp_module_import_at(node, i), entry->name, 1, &found);
  char suggestion[MP_MODULE_MAX_NAME + 32] = "";
  for (uint64_t i = 0; status == MP_OK && !found && !suggestion[0] &&
                       i < mp_module_import_count(node);
       ++i)
    mp_module_suggest_function(mp_module_import_at(node, i), entry->name, 1, suggestion,
                               sizeof suggestion);
  mp_module_release(node);
  MP_RETURN_IF_ERROR(status);
  if (!found)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "host code asked for function '%s', which no module imported by the library "
                     "provides%s",
                     entry->name, suggestion);
  pthread_mutex_lock(&lookups->lock);
  if (!entry->function) { /* keep the first of racing resolutions */
    entry->function = found;
    mp_function_retain(found);
  }
  pthread_mutex_unlock(&lookups->lock);
  *out_function = found;
  return MP_OK;
}

void mp_host_lookups_forget_node(mp_host_lookups_t* lookups) {
  pthread_mutex_lock(&lookups->lock);
  for (mp_host_lookup_t* e = lookups->entries; e; e = e->next) {
    if (!e->function) continue;
    mp_function_t* f = e->function;
    e->function = NULL;
    pthread_mutex_unlock(&lookups->lock);
    mp_library_unlock();
    mp_function_release(f);
    mp_library_lock();
    pthread_mutex_lock(&lookups->lock);
  }
  pthread_mutex_unlock(&lookups->lock);
}
