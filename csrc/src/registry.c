/* The loader registry: type key -> `loadbinary_<type_key>` function, under a lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
  char* type_key;
  mp_loader_fn_t fn;
  void* user_data;
} loader_entry_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static loader_entry_t* entries;
static size_t entry_count;

static loader_entry_t* find_locked(const char* type_key) {
  for (size_t i = 0; i < entry_count; ++i)
    if (strcmp(entries[i].type_key, type_key) == 0) return &entries[i];
  return NULL;
}

static bool valid_type_key(const char* key) {
  size_t n = strlen(key);
  if (n == 0 || n > MP_FORMAT_MAX_TYPE_KEY) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = key[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  }
  return key[0] != '_'; /* keys starting with '_' are reserved ("_lib") */
}

mp_status_t mp_loader_register(const char* type_key, mp_loader_fn_t fn, void* user_data) {
  mp_builtin_loaders_init();
  return mp_loader_register_builtin(type_key, fn, user_data);
}

mp_status_t mp_loader_register_builtin(const char* type_key, mp_loader_fn_t fn, void* user_data) {
  if (!type_key || !fn)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_loader_register: NULL argument");
  if (!valid_type_key(type_key))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "invalid type key '%s': use 1-%d characters of [A-Za-z0-9_.-], not starting "
                     "with '_'",
                     type_key, MP_FORMAT_MAX_TYPE_KEY);
  pthread_mutex_lock(&registry_lock);
  mp_status_t status = MP_OK;
  if (find_locked(type_key)) {
    status = mp_errorf(MP_ERR_ALREADY_EXISTS, "a loader for type key '%s' is already registered",
                       type_key);
  } else {
    loader_entry_t* grown = realloc(entries, (entry_count + 1) * sizeof *grown);
    char* key = grown ? malloc(strlen(type_key) + 1) : NULL;
    if (!grown || !key) {
      if (grown) entries = grown;
      free(key);
      status = mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      strcpy(key, type_key);
      entries = grown;
      entries[entry_count++] = (loader_entry_t){key, fn, user_data};
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return status;
}

mp_status_t mp_loader_unregister(const char* type_key) {
  pthread_mutex_lock(&registry_lock);
  loader_entry_t* e = type_key ? find_locked(type_key) : NULL;
  if (e) {
    free(e->type_key);
    *e = entries[--entry_count];
  }
  pthread_mutex_unlock(&registry_lock);
  if (!e)
    return mp_errorf(MP_ERR_NOT_FOUND, "no loader registered for type key '%s'",
                     type_key ? type_key : "(null)");
  return MP_OK;
}

static int compare_keys(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

uint64_t mp_loader_list(char* buffer, uint64_t capacity) {
  mp_builtin_loaders_init();
  pthread_mutex_lock(&registry_lock);
  const char** keys = malloc((entry_count ? entry_count : 1) * sizeof *keys);
  uint64_t needed = 0, written = 0;
  if (keys) {
    for (size_t i = 0; i < entry_count; ++i) keys[i] = entries[i].type_key;
    qsort(keys, entry_count, sizeof *keys, compare_keys);
    for (size_t i = 0; i < entry_count; ++i) {
      const char* sep = i ? ", " : "";
      size_t sep_len = strlen(sep), key_len = strlen(keys[i]);
      if (buffer && written == needed && needed + sep_len + key_len < capacity) {
        memcpy(buffer + needed, sep, sep_len);
        memcpy(buffer + needed + sep_len, keys[i], key_len);
        written = needed + sep_len + key_len;
      }
      needed += sep_len + key_len;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  free(keys);
  if (buffer && capacity > 0) buffer[written] = '\0';
  return needed;
}

mp_status_t mp_loader_find(const char* type_key, mp_loader_fn_t* out_fn, void** out_user_data) {
  mp_builtin_loaders_init();
  pthread_mutex_lock(&registry_lock);
  loader_entry_t* e = find_locked(type_key);
  if (e) {
    *out_fn = e->fn;
    *out_user_data = e->user_data;
  }
  pthread_mutex_unlock(&registry_lock);
  if (e) return MP_OK;
  char known[1024];
  mp_loader_list(known, sizeof known);
  return mp_errorf(MP_ERR_NOT_FOUND,
                   "no loader registered for type key '%s' (loadbinary_%s); registered loaders: "
                   "%s. Install or import the package that provides it, or register one with "
                   "modpack.register_loader('%s') / mp_loader_register()",
                   type_key, type_key, known[0] ? known : "(none)", type_key);
}
