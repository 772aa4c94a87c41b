/* The object model's internal face: what the loading layer needs from modules beyond the
 * public API. The struct itself is private to module.c. */
#ifndef MODPACK_CORE_MODULE_H_
#define MODPACK_CORE_MODULE_H_

#include <stdbool.h>
#include <stddef.h>

#include "modpack/kind.h"

/* The library a module was loaded from, seen by module.c only through these hooks (module.c
 * knows no library): the loading layer attaches them to each module it creates. */
typedef struct {
  /* The module's last reference went: drop it from the library's bookkeeping (under the
   * library's lock, so no concurrent load revives it) before its memory goes. */
  void (*forget)(mp_library_t* library, mp_module_t* module);
  /* After the module's state is destroyed: drop the module's reference to the library. Last,
   * because that state may point into the library's mapping. */
  void (*release)(mp_library_t* library);
} mp_module_owner_ops_t;

/* Make |library| the owner of |module| (which takes over one reference to it, released
 * through |ops|). Before the module is shared; at most once. */
void mp_module_set_library(mp_module_t* module, mp_library_t* library,
                           const mp_module_owner_ops_t* ops);
/* Take a reference only if the module is still alive (its count above zero). */
bool mp_module_try_retain(mp_module_t* module);

/* A kind of the runtime's own that can find an array by name faster than by walking its
 * arrays (a weight file's thousands of arrays, looked up by host code on every call) sets
 * this: *out_array is left NULL when the module has no such array. Before the module is
 * shared. */
typedef mp_status_t (*mp_module_find_array_fn)(mp_module_t* self, const char* name,
                                               const DLTensor** out_array);
void mp_module_set_array_finder(mp_module_t* module, mp_module_find_array_fn find);

/* A kind of the runtime's own whose functions are not listed (function_count) but found by
 * name (a library's host functions, by their symbols) sets this, before the module is shared:
 * it calls |visit| with each function's name, for the suggestion of a not-found message. */
typedef void (*mp_module_name_visit_fn)(void* context, const char* name);
typedef void (*mp_module_each_function_fn)(mp_module_t* self, mp_module_name_visit_fn visit,
                                           void* context);
void mp_module_set_function_lister(mp_module_t* module, mp_module_each_function_fn each);

/* " (did you mean 'NAME'?)" into |buffer| for the function name closest to |name| among those
 * of |root| (and its imports if |query_imports|), or "": the suggestion of a not-found
 * message. For the error path only: it lists every name. */
const char* mp_module_suggest_function(mp_module_t* root, const char* name,
                                       int32_t query_imports, char* buffer, size_t capacity);

/* mp_module_get_array, and the module the array was found in (borrowed). */
mp_status_t mp_module_find_array(mp_module_t* module, const char* name, int32_t query_imports,
                                 const DLTensor** out_array, mp_module_t** out_owner);

/* |name| in |root| and then, if |query_imports|, its imports (each module once, depth-first);
 * sets *out_function (a new reference) or leaves it NULL without an error. */
mp_status_t mp_module_find_function(mp_module_t* root, const char* name, int32_t query_imports,
                                    mp_function_t** out_function);
/* Append |child| to |parent|'s imports without a cycle check (the blob reader proved the tree
 * acyclic). */
mp_status_t mp_module_append_import(mp_module_t* parent, mp_module_t* child);

#endif /* MODPACK_CORE_MODULE_H_ */
