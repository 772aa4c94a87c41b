/* The "library" module kind: a loaded library's host code as a node of its tree (the "_lib"
 * entry of the blob, or the whole tree of a library without one). Its functions are the host
 * functions the library exports, found by their symbols (`__mp_func_<name>`). */
#include <string.h>

#include "core/error.h"
#include "core/module.h"
#include "library/library.h"
#include "library/library_state.h"

static mp_status_t library_get_function(mp_module_t* self, const char* name,
                                        mp_function_t** out_function) {
  mp_library_t* library = mp_module_impl(self);
  /* Joined by hand: libc's first formatted print would cost a process's first load (which
   * looks a name up here) more than the rest of this function. */
  static const char prefix[] = MP_FUNC_SYMBOL_PREFIX;
  char symbol[512];
  size_t length = strlen(name);
  if (length >= sizeof symbol - (sizeof prefix - 1)) return MP_OK; /* no such long name */
  memcpy(symbol, prefix, sizeof prefix - 1);
  memcpy(symbol + sizeof prefix - 1, name, length + 1);
  void* address = mp_library_symbol(library, symbol);
  if (!address) return MP_OK;
  mp_packed_cfunc_t fn;
  memcpy(&fn, &address, sizeof fn);
  return mp_function_create(fn, NULL, NULL, self, out_function);
}

/* Its functions' names, for the suggestion of a not-found message. */
static void library_each_function(mp_module_t* self, mp_module_name_visit_fn visit,
                                  void* context) {
  mp_library_each_symbol(mp_module_impl(self), MP_FUNC_SYMBOL_PREFIX, visit, context);
}

static const mp_module_vtable_t library_vtable = {
    .get_function = library_get_function,
};

mp_status_t mp_library_node(mp_library_t* library, mp_module_t** out_node, bool* out_reused) {
  *out_reused = false;
  mp_module_t* node = library->lookups.node;
  if (node && mp_module_try_retain(node)) {
    *out_node = node; /* it survived its tree: reuse it, imports and all */
    *out_reused = true;
    return MP_OK;
  }
  MP_RETURN_IF_ERROR(mp_module_create(MP_LIBRARY_TYPE_KEY, &library_vtable, library, out_node));
  mp_module_set_function_lister(*out_node, library_each_function);
  mp_library_adopt_module(library, *out_node);
  library->lookups.node = *out_node;
  /* A lookup of a name no library defines pages in the symbol tables now, while loading,
   * rather than during the user's first call (measured: first lookup 7 us -> 2 us). */
  mp_function_t* none = NULL;
  library_get_function(*out_node, "", &none);
  mp_function_release(none); /* NULL unless a library defines "__mp_func_" itself */
  return MP_OK;
}
