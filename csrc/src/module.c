/* Modules: reference-counted nodes of the import tree, each a type key, a vtable and the
 * kind's own state. Lookups walk the imports depth-first. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Guards import lists and the context-function caches (both change rarely). */
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;

static char* copy_string(const char* s) {
  size_t n = strlen(s) + 1;
  char* out = malloc(n);
  if (out) memcpy(out, s, n);
  return out;
}

mp_status_t mp_module_create(const char* type_key, const mp_module_vtable_t* vtable, void* impl,
                             mp_module_t** out_module) {
  *out_module = NULL;
  if (!type_key || !vtable) {
    if (vtable && vtable->destroy && impl) vtable->destroy(impl);
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_create: type_key and vtable are required");
  }
  mp_module_t* m = calloc(1, sizeof *m);
  char* key = copy_string(type_key);
  if (!m || !key) {
    free(m), free(key);
    if (vtable->destroy && impl) vtable->destroy(impl);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory creating a %s module", type_key);
  }
  atomic_init(&m->refcount, 1);
  m->type_key = key;
  m->vtable = vtable;
  m->impl = impl;
  *out_module = m;
  return MP_OK;
}

void mp_module_retain(mp_module_t* module) {
  if (module) atomic_fetch_add_explicit(&module->refcount, 1, memory_order_relaxed);
}

void mp_module_release(mp_module_t* module) {
  if (!module) return;
  if (atomic_fetch_sub_explicit(&module->refcount, 1, memory_order_acq_rel) != 1) return;
  /* A concurrent load may be about to reuse this module as a library's root or "library"
   * node; unlink it under the load lock before the memory goes. */
  if (module->library) mp_library_forget_module(module->library, module);
  for (uint64_t i = 0; i < module->context_function_count; ++i) {
    free(module->context_functions[i].name);
    mp_function_release(module->context_functions[i].function);
  }
  free(module->context_functions);
  for (uint64_t i = 0; i < module->import_count; ++i) mp_module_release(module->imports[i]);
  free(module->imports);
  if (module->vtable->destroy && module->impl) module->vtable->destroy(module->impl);
  mp_library_t* library = module->library;
  free(module->type_key);
  free(module);
  /* Last: the library's code may be what the destroyed state pointed into. */
  mp_library_release(library);
}

const char* mp_module_type_key(const mp_module_t* module) {
  return module->type_key;
}
void* mp_module_impl(const mp_module_t* module) {
  return module->impl;
}
mp_library_t* mp_module_library(const mp_module_t* module) {
  return module->library;
}
uint64_t mp_module_import_count(const mp_module_t* module) {
  return module->import_count;
}

mp_module_t* mp_module_import_at(const mp_module_t* module, uint64_t index) {
  return index < module->import_count ? module->imports[index] : NULL;
}

/* True if |target| is reachable from |from| through imports. Caller holds module_lock. */
static bool reaches(mp_module_t* from, mp_module_t* target, uint64_t depth) {
  if (from == target) return true;
  if (depth > 100000) return true; /* refuse absurd depth as if it were a cycle */
  for (uint64_t i = 0; i < from->import_count; ++i)
    if (reaches(from->imports[i], target, depth + 1)) return true;
  return false;
}

/* Appends without the cycle check; the blob reader has already proven the tree acyclic. */
mp_status_t mp_module_append_import(mp_module_t* parent, mp_module_t* child) {
  if (parent->import_count == parent->import_capacity) {
    uint64_t capacity = parent->import_capacity ? parent->import_capacity * 2 : 4;
    mp_module_t** grown = realloc(parent->imports, capacity * sizeof *grown);
    if (!grown) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory adding an import");
    parent->imports = grown;
    parent->import_capacity = capacity;
  }
  mp_module_retain(child);
  parent->imports[parent->import_count++] = child;
  return MP_OK;
}

mp_status_t mp_module_import(mp_module_t* parent, mp_module_t* child) {
  if (!parent || !child) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_import: NULL module");
  pthread_mutex_lock(&module_lock);
  mp_status_t status;
  if (reaches(child, parent, 0))
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "cannot import a %s module into a %s module: it would create a cycle",
                       child->type_key, parent->type_key);
  else
    status = mp_module_append_import(parent, child);
  pthread_mutex_unlock(&module_lock);
  return status;
}

/* Depth-first search: the module itself, then each import in order. Iterative so a deep
 * chain cannot overflow the C stack. */
static mp_status_t find_function(mp_module_t* root, const char* name, int32_t query_imports,
                                 mp_function_t** out_function) {
  uint64_t capacity = 16, depth = 0;
  mp_module_t** stack = malloc(capacity * sizeof *stack);
  if (!stack) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  stack[depth++] = root;
  mp_status_t status = MP_OK;
  while (depth > 0 && !*out_function && status == MP_OK) {
    mp_module_t* m = stack[--depth];
    if (m->vtable->get_function) status = m->vtable->get_function(m, name, out_function);
    if (!query_imports || *out_function || status != MP_OK) continue;
    if (m->import_count > capacity - depth) {
      uint64_t grown_capacity = (capacity + m->import_count) * 2;
      mp_module_t** grown = realloc(stack, grown_capacity * sizeof *grown);
      if (!grown) {
        status = mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      stack = grown;
      capacity = grown_capacity;
    }
    for (uint64_t i = m->import_count; i > 0; --i) stack[depth++] = m->imports[i - 1];
  }
  free(stack);
  return status;
}

mp_status_t mp_module_get_function(mp_module_t* module, const char* name, int32_t query_imports,
                                   mp_function_t** out_function) {
  *out_function = NULL;
  if (!module || !name)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_get_function: NULL module or name");
  mp_status_t status = find_function(module, name, query_imports, out_function);
  if (status != MP_OK) return status;
  if (!*out_function)
    return mp_errorf(MP_ERR_NOT_FOUND, "no function named '%s' in the %s module%s", name,
                     module->type_key, query_imports ? " or its imports" : "");
  return MP_OK;
}

uint64_t mp_module_function_count(mp_module_t* module) {
  return module->vtable->function_count ? module->vtable->function_count(module) : 0;
}

const char* mp_module_function_name(mp_module_t* module, uint64_t index) {
  if (index >= mp_module_function_count(module)) return NULL;
  return module->vtable->function_name(module, index);
}

mp_status_t mp_module_describe(mp_module_t* module, char* buffer, uint64_t capacity) {
  if (capacity > 0) buffer[0] = '\0';
  return module->vtable->describe ? module->vtable->describe(module, buffer, capacity) : MP_OK;
}

mp_status_t mp_module_load_from_payload(const char* type_key, mp_const_byte_span_t payload,
                                        mp_module_t** out_module) {
  *out_module = NULL;
  mp_loader_fn_t loader;
  void* user_data;
  mp_status_t status = mp_loader_find(type_key, &loader, &user_data);
  if (status != MP_OK) return status;
  mp_loader_args_t args = {.type_key = type_key, .payload = payload, .library = NULL};
  mp_error_clear();
  status = loader(user_data, &args, out_module);
  if (status == MP_OK && !*out_module)
    return mp_errorf(MP_ERR_INTERNAL, "the %s loader returned no module", type_key);
  if (status != MP_OK && mp_error_message()[0] == '\0')
    mp_errorf(status, "the %s loader failed with status %d", type_key, (int)status);
  return status;
}

uint64_t mp_module_array_count(mp_module_t* module) {
  return module->vtable->array_count ? module->vtable->array_count(module) : 0;
}

mp_status_t mp_module_array_at(mp_module_t* module, uint64_t index, const char** out_name,
                               const DLTensor** out_array) {
  *out_name = NULL;
  *out_array = NULL;
  if (index >= mp_module_array_count(module))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array index %llu out of range for the %s module",
                     (unsigned long long)index, module->type_key);
  return module->vtable->array_at(module, index, out_name, out_array);
}

static mp_status_t find_array(mp_module_t* m, const char* name, int32_t query_imports,
                              uint64_t depth, const DLTensor** out_array) {
  uint64_t count = mp_module_array_count(m);
  for (uint64_t i = 0; i < count; ++i) {
    const char* array_name;
    const DLTensor* array;
    mp_status_t status = m->vtable->array_at(m, i, &array_name, &array);
    if (status != MP_OK) return status;
    if (strcmp(array_name, name) == 0) {
      *out_array = array;
      return MP_OK;
    }
  }
  if (!query_imports || depth > 100000) return MP_OK;
  for (uint64_t i = 0; i < m->import_count && !*out_array; ++i) {
    mp_status_t status = find_array(m->imports[i], name, query_imports, depth + 1, out_array);
    if (status != MP_OK) return status;
  }
  return MP_OK;
}

mp_status_t mp_module_get_array(mp_module_t* module, const char* name, int32_t query_imports,
                                const DLTensor** out_array) {
  *out_array = NULL;
  mp_status_t status = find_array(module, name, query_imports, 0, out_array);
  if (status != MP_OK) return status;
  if (!*out_array)
    return mp_errorf(MP_ERR_NOT_FOUND, "no array named '%s' in the %s module%s", name,
                     module->type_key, query_imports ? " or its imports" : "");
  return MP_OK;
}

/* ---- the context functions patched into libraries ---------------------------------------- */

/* Host code caches what this returns in a static, so the module keeps each function it hands
 * out until the module itself goes (and a second lookup returns the same handle). */
mp_status_t mp_context_get_function(void* ctx, const char* name, void** out_function) {
  *out_function = NULL;
  mp_module_t* module = ctx;
  if (!module) return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up '%s' before load", name);
  pthread_mutex_lock(&module_lock);
  for (uint64_t i = 0; i < module->context_function_count; ++i) {
    if (strcmp(module->context_functions[i].name, name) == 0) {
      *out_function = module->context_functions[i].function;
      pthread_mutex_unlock(&module_lock);
      return MP_OK;
    }
  }
  pthread_mutex_unlock(&module_lock);

  /* Imports only: the library's own functions are plain C calls for its code. */
  mp_function_t* function = NULL;
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; i < module->import_count && !function && status == MP_OK; ++i)
    status = find_function(module->imports[i], name, 1, &function);
  if (status != MP_OK) return status;
  if (!function)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "host code asked for function '%s', which no module imported by the library "
                     "provides",
                     name);

  pthread_mutex_lock(&module_lock);
  /* Another thread may have raced us here; keep the first. */
  for (uint64_t i = 0; i < module->context_function_count; ++i) {
    if (strcmp(module->context_functions[i].name, name) == 0) {
      *out_function = module->context_functions[i].function;
      pthread_mutex_unlock(&module_lock);
      mp_function_release(function);
      return MP_OK;
    }
  }
  mp_function_cache_entry_t* grown =
      realloc(module->context_functions, (module->context_function_count + 1) * sizeof *grown);
  char* key = copy_string(name);
  if (!grown || !key) {
    if (grown) module->context_functions = grown;
    free(key);
    pthread_mutex_unlock(&module_lock);
    mp_function_release(function);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  module->context_functions = grown;
  grown[module->context_function_count].name = key;
  grown[module->context_function_count].function = function;
  module->context_function_count++;
  pthread_mutex_unlock(&module_lock);
  *out_function = function;
  return MP_OK;
}

mp_status_t mp_context_call(void* function, const mp_value_t* args, int32_t num_args,
                            mp_value_t* out_ret) {
  return mp_function_call(function, args, num_args, out_ret);
}

void mp_context_set_error(mp_status_t code, const char* message) {
  mp_error_set(code == MP_OK ? MP_ERR_RUNTIME : code, message);
}

mp_status_t mp_context_get_array(void* ctx, const char* name, const DLTensor** out_array) {
  *out_array = NULL;
  mp_module_t* module = ctx;
  if (!module)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up array '%s' before load", name);
  return mp_module_get_array(module, name, 1, out_array);
}
