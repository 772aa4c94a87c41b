/* Modules: reference-counted nodes of the import tree, each a type key, a vtable and the
 * kind's own state. Lookups walk the imports depth-first. A module loaded from a library
 * keeps that library alive; how is the loading layer's business (core/module.h). */
#include "core/module.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "core/names.h"

struct mp_module {
  atomic_long refcount;
  char* type_key;
  char* name; /* NULL unless named */
  const mp_module_vtable_t* vtable;
  void* impl;
  mp_library_t* library; /* its reference; NULL for modules not loaded from a library */
  const mp_module_owner_ops_t* owner_ops;
  mp_module_find_array_fn find_array; /* NULL: arrays are found by walking them */
  mp_module_each_function_fn each_function; /* unlisted functions' names, for messages */
  mp_module_t** imports; /* retained */
  uint64_t import_count;
  uint64_t import_capacity;
};

/* Guards import lists, which change rarely (a load builds them; mp_module_import adds). */
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
    return mp_out_of_memory("a module");
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

/* Frees |module|, whose count reached zero, and queues its imports for release. */
static void destroy_one(mp_module_t* module, mp_module_t*** worklist, uint64_t* count,
                        uint64_t* capacity) {
  /* A concurrent load may be about to reuse this module as a library's root or "library"
   * node; the library unlinks it under its lock before the memory goes. */
  if (module->library) module->owner_ops->forget(module->library, module);
  for (uint64_t i = 0; i < module->import_count; ++i) {
    mp_module_t* child = module->imports[i];
    if (atomic_fetch_sub_explicit(&child->refcount, 1, memory_order_acq_rel) != 1) continue;
    if (*count == *capacity) {
      uint64_t grown_capacity = *capacity ? *capacity * 2 : 16;
      mp_module_t** grown = realloc(*worklist, grown_capacity * sizeof *grown);
      if (!grown) { /* cannot queue: recurse instead (rare, and bounded by memory anyway) */
        uint64_t inner_count = 0, inner_capacity = 0;
        mp_module_t** inner = NULL;
        destroy_one(child, &inner, &inner_count, &inner_capacity);
        while (inner_count)
          destroy_one(inner[--inner_count], &inner, &inner_count, &inner_capacity);
        free(inner);
        continue;
      }
      *worklist = grown;
      *capacity = grown_capacity;
    }
    (*worklist)[(*count)++] = child;
  }
  free(module->imports);
  if (module->vtable->destroy && module->impl) module->vtable->destroy(module->impl);
  mp_library_t* library = module->library;
  const mp_module_owner_ops_t* owner_ops = module->owner_ops;
  free(module->type_key);
  free(module->name);
  free(module);
  /* Last: the library's code may be what the destroyed state pointed into. */
  if (library) owner_ops->release(library);
}

void mp_module_release(mp_module_t* module) {
  if (!module) return;
  if (atomic_fetch_sub_explicit(&module->refcount, 1, memory_order_acq_rel) != 1) return;
  /* Iterative, so releasing the root of a long chain cannot overflow the C stack. */
  uint64_t count = 0, capacity = 0;
  mp_module_t** worklist = NULL;
  destroy_one(module, &worklist, &count, &capacity);
  while (count) destroy_one(worklist[--count], &worklist, &count, &capacity);
  free(worklist);
}

bool mp_module_try_retain(mp_module_t* module) {
  long count = atomic_load(&module->refcount);
  while (count > 0)
    if (atomic_compare_exchange_weak(&module->refcount, &count, count + 1)) return true;
  return false;
}

void mp_module_set_library(mp_module_t* module, mp_library_t* library,
                           const mp_module_owner_ops_t* ops) {
  module->library = library;
  module->owner_ops = ops;
}

mp_status_t mp_module_set_name(mp_module_t* module, const char* name) {
  size_t n = name ? strlen(name) : 0;
  if (!module || n == 0 || n > MP_MODULE_MAX_NAME || strchr(name, '/'))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a module name is 1 to %d bytes without '/' (got '%s')", MP_MODULE_MAX_NAME,
                     name ? name : "(null)");
  if (module->name)
    return mp_errorf(MP_ERR_ALREADY_EXISTS, "the module is named '%s' already", module->name);
  module->name = copy_string(name);
  return module->name ? MP_OK : mp_out_of_memory("a module name");
}

const char* mp_module_name(const mp_module_t* module) {
  return module->name;
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

/* ---- walking the import graph: iterative, each module once ----------------------------- */

/* An open-addressing set of module pointers, so walks over DAGs stay linear. */
typedef struct {
  mp_module_t** slots;
  uint64_t capacity; /* a power of two */
  uint64_t count;
} module_set_t;

static uint64_t hash_pointer(const void* p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  return x ^ (x >> 33);
}

/* Adds |m|; returns 1 if new, 0 if present, -1 when out of memory. */
static int set_add(module_set_t* set, mp_module_t* m) {
  if (2 * (set->count + 1) > set->capacity) {
    uint64_t capacity = set->capacity ? set->capacity * 2 : 64;
    mp_module_t** slots = calloc(capacity, sizeof *slots);
    if (!slots) return -1;
    for (uint64_t i = 0; i < set->capacity; ++i) {
      if (!set->slots[i]) continue;
      uint64_t j = hash_pointer(set->slots[i]) & (capacity - 1);
      while (slots[j]) j = (j + 1) & (capacity - 1);
      slots[j] = set->slots[i];
    }
    free(set->slots);
    set->slots = slots;
    set->capacity = capacity;
  }
  uint64_t j = hash_pointer(m) & (set->capacity - 1);
  while (set->slots[j]) {
    if (set->slots[j] == m) return 0;
    j = (j + 1) & (set->capacity - 1);
  }
  set->slots[j] = m;
  set->count++;
  return 1;
}

/* A depth-first walk from |root| visiting each reachable module once, imports in order. */
typedef struct {
  mp_module_t** stack;
  uint64_t depth, capacity;
  module_set_t seen;
  bool out_of_memory;
} walk_t;

static void walk_push_imports(walk_t* w, mp_module_t* m) {
  /* Snapshot the import list under the lock: another thread may be importing into it. */
  pthread_mutex_lock(&module_lock);
  uint64_t n = m->import_count;
  if (n > w->capacity - w->depth) {
    uint64_t capacity = (w->capacity + n) * 2;
    mp_module_t** grown = realloc(w->stack, capacity * sizeof *grown);
    if (!grown) {
      w->out_of_memory = true;
      pthread_mutex_unlock(&module_lock);
      return;
    }
    w->stack = grown;
    w->capacity = capacity;
  }
  for (uint64_t i = n; i > 0; --i) w->stack[w->depth++] = m->imports[i - 1];
  pthread_mutex_unlock(&module_lock);
}

static void walk_begin(walk_t* w, mp_module_t* root) {
  memset(w, 0, sizeof *w);
  w->capacity = 16;
  w->stack = malloc(w->capacity * sizeof *w->stack);
  if (!w->stack) {
    w->out_of_memory = true;
    return;
  }
  w->stack[w->depth++] = root;
}

/* The next unvisited module, or NULL when done (or out of memory). */
static mp_module_t* walk_next(walk_t* w) {
  while (w->depth > 0 && !w->out_of_memory) {
    mp_module_t* m = w->stack[--w->depth];
    int added = set_add(&w->seen, m);
    if (added < 0) w->out_of_memory = true;
    if (added > 0) return m;
  }
  return NULL;
}

static void walk_end(walk_t* w) {
  free(w->stack);
  free(w->seen.slots);
}

/* True if |target| is reachable from |from| through imports. */
static bool reaches(mp_module_t* from, mp_module_t* target, bool* out_of_memory) {
  walk_t w;
  walk_begin(&w, from);
  bool found = false;
  for (mp_module_t* m; !found && (m = walk_next(&w));) {
    found = m == target;
    if (!found) walk_push_imports(&w, m);
  }
  *out_of_memory = w.out_of_memory;
  walk_end(&w);
  return found;
}

/* Appends without the cycle check; the blob reader has already proven the tree acyclic. */
mp_status_t mp_module_append_import(mp_module_t* parent, mp_module_t* child) {
  if (parent->import_count == parent->import_capacity) {
    uint64_t capacity = parent->import_capacity ? parent->import_capacity * 2 : 4;
    mp_module_t** grown = realloc(parent->imports, capacity * sizeof *grown);
    if (!grown) return mp_out_of_memory("an import list");
    parent->imports = grown;
    parent->import_capacity = capacity;
  }
  mp_module_retain(child);
  parent->imports[parent->import_count++] = child;
  return MP_OK;
}

mp_status_t mp_module_import(mp_module_t* parent, mp_module_t* child) {
  if (!parent || !child) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_import: NULL module");
  bool out_of_memory = false;
  if (reaches(child, parent, &out_of_memory))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "cannot import a %s module into a %s module: it would create a cycle",
                     child->type_key, parent->type_key);
  if (out_of_memory) return mp_out_of_memory("an import-graph walk");
  pthread_mutex_lock(&module_lock);
  mp_status_t status = mp_module_append_import(parent, child);
  pthread_mutex_unlock(&module_lock);
  return status;
}

/* What a lookup asks of each module it visits: set *out_found when |m| has the item. */
typedef mp_status_t (*visit_fn)(mp_module_t* m, const char* name, void* out, bool* out_found);

/* Depth-first search for |name|: the module itself, then (if |query_imports|) each import in
 * order, each module once, until |visit| finds it. */
static mp_status_t find_first(mp_module_t* root, const char* name, int32_t query_imports,
                              visit_fn visit, void* out) {
  walk_t w;
  walk_begin(&w, root);
  mp_status_t status = MP_OK;
  bool found = false;
  for (mp_module_t* m; !found && status == MP_OK && (m = walk_next(&w));) {
    status = visit(m, name, out, &found);
    if (query_imports && !found && status == MP_OK) walk_push_imports(&w, m);
  }
  if (status == MP_OK && w.out_of_memory) status = mp_out_of_memory("an import-graph walk");
  walk_end(&w);
  return status;
}

/* Offer |c| every name of |m| of one sort (functions, arrays); a qualified name
 * ("module/function") is offered as such. */
typedef void (*offer_fn)(mp_module_t* m, mp_closest_t* c, bool qualified);

static void offer_name(mp_module_t* m, mp_closest_t* c, bool qualified, const char* name) {
  if (!name) return;
  if (!qualified) {
    mp_closest_offer(c, name);
    return;
  }
  if (!m->name) return;
  char joined[2 * MP_CLOSEST_MAX_NAME + 2];
  int n = snprintf(joined, sizeof joined, "%s/%s", m->name, name);
  if (n > 0 && (size_t)n < sizeof joined) mp_closest_offer(c, joined);
}

typedef struct {
  mp_module_t* module;
  mp_closest_t* closest;
  bool qualified;
} offer_context_t;

static void offer_listed(void* context, const char* name) {
  offer_context_t* o = context;
  offer_name(o->module, o->closest, o->qualified, name);
}

static void offer_functions(mp_module_t* m, mp_closest_t* c, bool qualified) {
  uint64_t count = mp_module_function_count(m);
  for (uint64_t i = 0; i < count; ++i) offer_name(m, c, qualified, mp_module_function_name(m, i));
  offer_context_t o = {m, c, qualified};
  if (m->each_function) m->each_function(m, offer_listed, &o);
}

static void offer_arrays(mp_module_t* m, mp_closest_t* c, bool qualified) {
  uint64_t count = mp_module_array_count(m);
  for (uint64_t i = 0; i < count; ++i) {
    const char* name = NULL;
    const DLTensor* array = NULL;
    if (m->vtable->array_at(m, i, &name, &array) == MP_OK) offer_name(m, c, qualified, name);
    else mp_error_clear();
  }
}

/* " (did you mean 'NAME'?)" for the name closest to |name| among those the lookup that did
 * not find it searched (|root|, and its imports if |query_imports|), or "": the not-found
 * messages' suggestion. Only on the error path, so it may be slow. */
static const char* suggest(mp_module_t* root, const char* name, int32_t query_imports,
                           offer_fn offer, char* buffer, size_t capacity) {
  bool qualified = strchr(name, '/') != NULL;
  mp_closest_t c;
  mp_closest_begin(&c, name);
  walk_t w;
  walk_begin(&w, root);
  for (mp_module_t* m; (m = walk_next(&w));) {
    offer(m, &c, qualified);
    if (query_imports) walk_push_imports(&w, m);
  }
  walk_end(&w);
  return mp_closest_suffix(&c, buffer, capacity);
}

const char* mp_module_suggest_function(mp_module_t* root, const char* name,
                                       int32_t query_imports, char* buffer, size_t capacity) {
  return suggest(root, name, query_imports, offer_functions, buffer, capacity);
}

static mp_status_t visit_function(mp_module_t* m, const char* name, void* out, bool* out_found) {
  mp_function_t** out_function = out;
  mp_status_t status = MP_OK;
  /* "module/function": only the module of that name answers, for the rest of the name. */
  const char* slash = strchr(name, '/');
  if (slash) {
    size_t n = (size_t)(slash - name);
    if (!m->name || strlen(m->name) != n || strncmp(m->name, name, n) != 0) return MP_OK;
    name = slash + 1;
  }
  if (m->vtable->get_function) status = m->vtable->get_function(m, name, out_function);
  *out_found = *out_function != NULL;
  return status;
}

mp_status_t mp_module_find_function(mp_module_t* root, const char* name, int32_t query_imports,
                                    mp_function_t** out_function) {
  *out_function = NULL;
  return find_first(root, name, query_imports, visit_function, out_function);
}

mp_status_t mp_module_get_function(mp_module_t* module, const char* name, int32_t query_imports,
                                   mp_function_t** out_function) {
  *out_function = NULL;
  if (!module || !name)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_get_function: NULL module or name");
  MP_RETURN_IF_ERROR(mp_module_find_function(module, name, query_imports, out_function));
  if (!*out_function) {
    char suggestion[MP_CLOSEST_MAX_NAME + 32];
    return mp_errorf(MP_ERR_NOT_FOUND, "no function named '%s' in the %s module%s%s", name,
                     module->type_key, query_imports ? " or its imports" : "",
                     suggest(module, name, query_imports, offer_functions, suggestion,
                             sizeof suggestion));
  }
  return MP_OK;
}

uint64_t mp_module_function_count(mp_module_t* module) {
  return module->vtable->function_count ? module->vtable->function_count(module) : 0;
}

const char* mp_module_function_name(mp_module_t* module, uint64_t index) {
  if (index >= mp_module_function_count(module)) return NULL;
  return module->vtable->function_name(module, index);
}

mp_status_t mp_module_describe(mp_module_t* module, char* buffer, uint64_t capacity,
                               uint64_t* out_length) {
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "{");
  if (module->name) {
    mp_json_printf(&j, "\"name\": ");
    mp_json_string(&j, module->name);
    if (module->vtable->describe) mp_json_printf(&j, ", ");
  }
  if (module->vtable->describe) {
    /* The kind writes its members after the brace; their length counts even when cut. */
    uint64_t used = j.length < capacity ? j.length : capacity;
    uint64_t members = 0;
    MP_RETURN_IF_ERROR(module->vtable->describe(module, buffer ? buffer + used : NULL,
                                                capacity > used ? capacity - used : 0, &members));
    j.length += members;
  }
  mp_json_printf(&j, "}");
  if (out_length) *out_length = j.length;
  return MP_OK;
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

void mp_module_set_function_lister(mp_module_t* module, mp_module_each_function_fn each) {
  module->each_function = each;
}

void mp_module_set_array_finder(mp_module_t* module, mp_module_find_array_fn find) {
  module->find_array = find;
}

/* The array |name| in |m| alone. */
static mp_status_t visit_array(mp_module_t* m, const char* name, void* out, bool* out_found) {
  const DLTensor** out_array = out;
  if (m->find_array) {
    MP_RETURN_IF_ERROR(m->find_array(m, name, out_array));
    *out_found = *out_array != NULL;
    return MP_OK;
  }
  uint64_t count = mp_module_array_count(m);
  for (uint64_t i = 0; i < count; ++i) {
    const char* array_name;
    const DLTensor* array;
    MP_RETURN_IF_ERROR(m->vtable->array_at(m, i, &array_name, &array));
    if (strcmp(array_name, name) == 0) {
      *out_array = array;
      *out_found = true;
      return MP_OK;
    }
  }
  return MP_OK;
}

typedef struct {
  const DLTensor* array;
  mp_module_t* owner;
} found_array_t;

static mp_status_t visit_array_owner(mp_module_t* m, const char* name, void* out,
                                     bool* out_found) {
  found_array_t* found = out;
  MP_RETURN_IF_ERROR(visit_array(m, name, &found->array, out_found));
  if (*out_found) found->owner = m;
  return MP_OK;
}

mp_status_t mp_module_find_array(mp_module_t* module, const char* name, int32_t query_imports,
                                 const DLTensor** out_array, mp_module_t** out_owner) {
  *out_array = NULL;
  if (out_owner) *out_owner = NULL;
  if (!module || !name)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_get_array: NULL module or name");
  found_array_t found = {NULL, NULL};
  MP_RETURN_IF_ERROR(find_first(module, name, query_imports, visit_array_owner, &found));
  if (!found.array) {
    char suggestion[MP_CLOSEST_MAX_NAME + 32];
    return mp_errorf(MP_ERR_NOT_FOUND, "no array named '%s' in the %s module%s%s", name,
                     module->type_key, query_imports ? " or its imports" : "",
                     suggest(module, name, query_imports, offer_arrays, suggestion,
                             sizeof suggestion));
  }
  *out_array = found.array;
  if (out_owner) *out_owner = found.owner;
  return MP_OK;
}

mp_status_t mp_module_get_array(mp_module_t* module, const char* name, int32_t query_imports,
                                const DLTensor** out_array) {
  return mp_module_find_array(module, name, query_imports, out_array, NULL);
}
