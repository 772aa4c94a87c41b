/* The state of a loaded library (mp_library_t), shared by the files that make up the library
 * object: library.c (its life and the set of live libraries), library_node.c (its "library"
 * module), blob_location.c (the blob's place in its mapping) and library_extras.c (what its blob
 * carries besides modules). Nothing else includes this:
 * the rest of the runtime goes through library/library.h. */
#ifndef MODPACK_LIBRARY_LIBRARY_STATE_H_
#define MODPACK_LIBRARY_LIBRARY_STATE_H_

#include <stdatomic.h>

#include "device/array_cache.h"
#include "files/file.h"
#include "library/dl_names.h"
#include "library/host_lookups.h"
#include "library/load_settings.h"
#include "library/overlays.h"
#include "modpack/modpack.h"

struct mp_library {
  atomic_long refcount;
  const mp_system_lib_t* system; /* a system library (no handle, no file), or NULL */
  void* handle;                  /* from dlopen */
  int fd; /* the file, open while loaded: dlopen knows the library by its /proc name */
  char dlopen_name[MP_DL_NAME_SIZE]; /* that name ("" when dlopen had the path: no /proc) */
  mp_file_id_t id;
  char* path;
  mp_module_t* root;           /* the root of its live tree (not owned), under the library lock */
  mp_host_lookups_t lookups;   /* its host code's lookups; lookups.node is its "library" node */
  mp_device_array_cache_t device_arrays; /* its const arrays copied to devices */
  mp_load_settings_t settings; /* how it is being loaded (under the library lock) */
  struct mp_weights_binding* weight_bindings; /* its weight files (not owned; library lock) */
  mp_overlays_slot_t overlays;                /* its adapters (library/overlays.h), owned */
  /* What its blob's index carries besides modules (library/library_extras.c): views into the
   * blob, set by the first tree built over it, before any module of it is handed out, and
   * never changed after (every later tree reads the same bytes). */
  bool extras_known;
  mp_const_byte_span_t metadata;
  mp_const_byte_span_t selftests;
};

#endif /* MODPACK_LIBRARY_LIBRARY_STATE_H_ */
