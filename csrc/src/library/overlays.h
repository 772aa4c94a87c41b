/* Adapters over a loaded tree's weights (load_module(..., overlays=[...]),
 * mp_load_options_t.overlays): weight files — modpack's, safetensors or GGUF — whose arrays
 * host code finds before the tree's own, by name. An array of a name the tree lacks is added;
 * one of a name the tree has replaces it, with the same dtype and shape (else refused at the
 * load, naming it); a later overlay in the list takes precedence over an earlier one. The
 * base weights are not touched, so they stay shared between every tree and process that maps
 * them (one page-cache copy), and an adapter costs its own size.
 *
 * A tree's overlays are one version, swapped whole (mp_module_swap_overlays) and atomically
 * for callers: a call keeps the version it first reads until it returns (core/call_scope.h),
 * as with swapped weights. In a signed load each overlay needs a trusted signature of its own
 * (a modpack weight file signed with `modpack sign`): the library's signature vouched for its
 * base weights, not for adapters chosen at load. */
#ifndef MODPACK_LIBRARY_OVERLAYS_H_
#define MODPACK_LIBRARY_OVERLAYS_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "library/load_settings.h"
#include "modpack/modpack.h"
#include "weights/weight_file.h"

typedef struct mp_overlays mp_overlays_t;
/* Where a library keeps its current version (mp_library_overlays): read and replaced here
 * only. */
typedef _Atomic(mp_overlays_t*) mp_overlays_slot_t;

/* The |count| weight files at |paths| opened and checked as |settings| say, and checked against
 * the tree of |root| (an array replacing one of the tree's has its dtype and shape): a new
 * version (NULL when |count| is 0). */
mp_status_t mp_overlays_open(mp_module_t* root, const char* const* paths, uint64_t count,
                             const mp_load_settings_t* settings, mp_overlays_t** out);
void mp_overlays_release(mp_overlays_t* overlays);

/* Install |overlays| (taken over; NULL: none) in |slot|, releasing the version it replaces
 * once no call keeps it. */
void mp_overlays_install(mp_overlays_slot_t* slot, mp_overlays_t* overlays);

/* The array called |name| in the overlays of |slot| the caller reads (inside a call, the
 * version the call keeps): *out_array and the file it is in (*out_file, for device copies), or
 * NULL when no overlay has it. Cheap when there are none. */
mp_status_t mp_overlays_find(mp_overlays_slot_t* slot, const char* name,
                             const DLTensor** out_array, mp_weight_file_t** out_file);

/* Whether the overlays in |slot| are the files at |paths| (|count|), in that order. */
bool mp_overlays_same(mp_overlays_slot_t* slot, const char* const* paths, uint64_t count);

#endif /* MODPACK_LIBRARY_OVERLAYS_H_ */
