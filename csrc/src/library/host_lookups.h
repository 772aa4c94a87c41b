/* The functions a library's host code looked up through its context (mp_backend_get_function):
 * one entry per name, whose pointer host code keeps (in a static) for as long as the library is
 * loaded. So entries belong to the library, not to its "library" node: each is resolved among
 * the imports of the library's current node on first use, and again after that node died and a
 * new tree was loaded over the same library. */
#ifndef MODPACK_LIBRARY_HOST_LOOKUPS_H_
#define MODPACK_LIBRARY_HOST_LOOKUPS_H_

#include <pthread.h>

#include "modpack/kind.h"

typedef struct mp_host_lookup mp_host_lookup_t;

typedef struct {
  pthread_mutex_t lock; /* guards the entries (taken after the library lock, if both) */
  mp_host_lookup_t* entries;
  /* The library's "library" node while it lives (not owned; under the library lock): the
   * node whose imports names are resolved among. */
  mp_module_t* node;
} mp_host_lookups_t;

void mp_host_lookups_init(mp_host_lookups_t* lookups);
/* Free every entry (the library is going: no host code can run). */
void mp_host_lookups_clear(mp_host_lookups_t* lookups);

/* The entry for |name|, created on first use; the same pointer for every lookup of |name|. */
mp_status_t mp_host_lookup_entry(mp_host_lookups_t* lookups, const char* name,
                                 mp_host_lookup_t** out_entry);
/* The function |entry| names (a new reference), resolved on first use. */
mp_status_t mp_host_lookup_resolve(mp_host_lookup_t* entry, mp_function_t** out_function);

/* The node died: drop the functions the entries hold (they keep the device modules, and so
 * the library, alive), to be resolved again against the next node. Caller holds the library
 * lock, which is let go while each function is released. */
void mp_host_lookups_forget_node(mp_host_lookups_t* lookups);

#endif /* MODPACK_LIBRARY_HOST_LOOKUPS_H_ */
