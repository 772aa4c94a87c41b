/* The passive registry: type key -> loader (and, for built-in kinds, the kind descriptor with
 * its device), under a lock. It knows no kind itself (core/registry.h). */
#include "core/registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct {
  const char* type_key; /* a kind's own, or a copy owned here (a loader on its own) */
  mp_loader_fn_t fn;
  void* user_data;
  const mp_kind_t* kind; /* NULL for a loader registered on its own */
} loader_entry_t;

/* Room for the built-in kinds without an allocation: registering them is part of a process's
 * first load. User kinds beyond it move the table to the heap. */
enum { STATIC_ENTRIES = 16 };
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static loader_entry_t static_entries[STATIC_ENTRIES];
static loader_entry_t* entries = static_entries;
static size_t entry_count, entry_capacity = STATIC_ENTRIES;

/* Room for one more entry; false when out of memory. */
static bool reserve_locked(void) {
  if (entry_count < entry_capacity) return true;
  loader_entry_t* grown = malloc(2 * entry_capacity * sizeof *grown);
  if (!grown) return false;
  memcpy(grown, entries, entry_count * sizeof *grown);
  if (entries != static_entries) free(entries);
  entries = grown;
  entry_capacity *= 2;
  return true;
}

static loader_entry_t* find_locked(const char* type_key) {
  for (size_t i = 0; i < entry_count; ++i)
    if (strcmp(entries[i].type_key, type_key) == 0) return &entries[i];
  return NULL;
}

static const mp_device_api_t* find_device_locked(int32_t device_type) {
  for (size_t i = 0; i < entry_count; ++i)
    if (entries[i].kind && entries[i].kind->device &&
        entries[i].kind->device->device_type == device_type)
      return entries[i].kind->device;
  return NULL;
}

static mp_status_t add(const char* type_key, mp_loader_fn_t fn, void* user_data,
                       const mp_kind_t* kind) {
  pthread_mutex_lock(&registry_lock);
  mp_status_t status = MP_OK;
  if (find_locked(type_key)) {
    status = mp_errorf(MP_ERR_ALREADY_EXISTS, "a loader for type key '%s' is already registered",
                       type_key);
  } else if (kind && kind->device && find_device_locked(kind->device->device_type)) {
    status = mp_errorf(MP_ERR_ALREADY_EXISTS, "device type %d is already registered",
                       (int)kind->device->device_type);
  } else if (kind) {
    if (reserve_locked())
      entries[entry_count++] = (loader_entry_t){type_key, fn, user_data, kind};
    else
      status = mp_out_of_memory("a loader entry");
  } else {
    size_t size = strlen(type_key) + 1;
    char* key = reserve_locked() ? malloc(size) : NULL;
    if (!key) {
      status = mp_out_of_memory("a loader entry");
    } else {
      memcpy(key, type_key, size);
      entries[entry_count++] = (loader_entry_t){key, fn, user_data, NULL};
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return status;
}

mp_status_t mp_registry_add_kind(const mp_kind_t* kind) {
  return add(kind->type_key, kind->load, NULL, kind);
}

mp_status_t mp_registry_add_loader(const char* type_key, mp_loader_fn_t fn, void* user_data) {
  if (!type_key || !fn)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_loader_register: NULL argument");
  if (!mp_type_key_is_valid(type_key, strlen(type_key), false))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "invalid type key '%s': use 1-%d characters of [A-Za-z0-9_.-], not starting "
                     "with '_'",
                     type_key, MP_FORMAT_MAX_TYPE_KEY);
  return add(type_key, fn, user_data, NULL);
}

mp_status_t mp_registry_remove_loader(const char* type_key) {
  pthread_mutex_lock(&registry_lock);
  loader_entry_t* e = type_key ? find_locked(type_key) : NULL;
  bool builtin = e && e->kind;
  if (e && !builtin) {
    free((char*)e->type_key);
    *e = entries[--entry_count];
  }
  pthread_mutex_unlock(&registry_lock);
  if (builtin)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "the loader for '%s' is built in and stays",
                     type_key);
  if (!e)
    return mp_errorf(MP_ERR_NOT_FOUND, "no loader registered for type key '%s'",
                     type_key ? type_key : "(null)");
  return MP_OK;
}

static int compare_keys(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* |names| joined with ", " into |buffer| (NUL-terminated when capacity > 0, cut at a whole
 * name); returns the length the whole list needs. */
static uint64_t join(const char** names, size_t count, char* buffer, uint64_t capacity) {
  uint64_t needed = 0, written = 0;
  for (size_t i = 0; i < count; ++i) {
    const char* sep = i ? ", " : "";
    size_t sep_len = strlen(sep), name_len = strlen(names[i]);
    if (buffer && written == needed && needed + sep_len + name_len < capacity) {
      memcpy(buffer + needed, sep, sep_len);
      memcpy(buffer + needed + sep_len, names[i], name_len);
      written = needed + sep_len + name_len;
    }
    needed += sep_len + name_len;
  }
  if (buffer && capacity > 0) buffer[written] = '\0';
  return needed;
}

uint64_t mp_registry_list_loaders(char* buffer, uint64_t capacity) {
  pthread_mutex_lock(&registry_lock);
  const char** keys = malloc((entry_count ? entry_count : 1) * sizeof *keys);
  uint64_t needed = 0;
  if (keys) {
    for (size_t i = 0; i < entry_count; ++i) keys[i] = entries[i].type_key;
    qsort(keys, entry_count, sizeof *keys, compare_keys);
    needed = join(keys, entry_count, buffer, capacity);
  } else if (buffer && capacity > 0) {
    buffer[0] = '\0';
  }
  pthread_mutex_unlock(&registry_lock);
  free(keys);
  return needed;
}

mp_status_t mp_registry_find_loader(const char* type_key, mp_loader_fn_t* out_fn,
                                    void** out_user_data) {
  pthread_mutex_lock(&registry_lock);
  loader_entry_t* e = find_locked(type_key);
  if (e) {
    *out_fn = e->fn;
    *out_user_data = e->user_data;
  }
  pthread_mutex_unlock(&registry_lock);
  if (e) return MP_OK;
  char known[1024];
  mp_registry_list_loaders(known, sizeof known);
  return mp_errorf(MP_ERR_NOT_FOUND,
                   "no loader registered for type key '%s' (loadbinary_%s); registered loaders: "
                   "%s. Install or import the package that provides it, or register one with "
                   "modpack.register_loader('%s') / mp_loader_register()",
                   type_key, type_key, known[0] ? known : "(none)", type_key);
}

const mp_kind_t* mp_registry_find_kind(const char* type_key) {
  pthread_mutex_lock(&registry_lock);
  loader_entry_t* e = find_locked(type_key);
  const mp_kind_t* kind = e ? e->kind : NULL;
  pthread_mutex_unlock(&registry_lock);
  return kind;
}

const mp_device_api_t* mp_registry_find_device(int32_t device_type) {
  pthread_mutex_lock(&registry_lock);
  const mp_device_api_t* device = find_device_locked(device_type);
  pthread_mutex_unlock(&registry_lock);
  return device;
}

const mp_device_api_t* mp_registry_find_device_named(const char* name) {
  const mp_device_api_t* device = NULL;
  pthread_mutex_lock(&registry_lock);
  for (size_t i = 0; i < entry_count && !device; ++i)
    if (entries[i].kind && entries[i].kind->device &&
        strcmp(entries[i].kind->device->name, name) == 0)
      device = entries[i].kind->device;
  pthread_mutex_unlock(&registry_lock);
  return device;
}

void mp_registry_list_devices(char* buffer, uint64_t capacity) {
  enum { MAX_LISTED = 64 };
  const char* names[MAX_LISTED];
  size_t count = 0;
  pthread_mutex_lock(&registry_lock);
  for (size_t i = 0; i < entry_count && count < MAX_LISTED; ++i)
    if (entries[i].kind && entries[i].kind->device) names[count++] = entries[i].kind->device->name;
  pthread_mutex_unlock(&registry_lock);
  qsort(names, count, sizeof *names, compare_keys);
  join(names, count, buffer, capacity);
}
