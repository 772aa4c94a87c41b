/* A loaded deployable library: the dlopen'd file, the set of libraries alive in the process
 * (so loading a file whose tree lives returns that tree), its "library" node (the host code's
 * place in the tree), the blob's place in its mapping, and what its host code looked up
 * through its context. Made of library.c (its life), library_node.c (its node),
 * blob_location.c and library_extras.c; the state they share is in library_state.h.
 *
 * Locking: loads are serialised by the library lock (library/library_lock.h). */
#ifndef MODPACK_LIBRARY_LIBRARY_H_
#define MODPACK_LIBRARY_LIBRARY_H_

#include <stdatomic.h>
#include <stdbool.h>

#include "files/file.h"
#include "library/host_lookups.h"
#include "library/library_lock.h"
#include "library/load_settings.h"
#include "library/overlays.h"
#include "modpack/kind.h"

/* The library of the file |path| (a resolved path), open as |fd| (taken over in every case),
 * whose version is |id|: the live one if that version of that file is loaded (*out_existing
 * true, a new reference), else a new one, dlopen'd through |fd| and registered as live. A file
 * replaced since (renamed over: a new inode) is a new library, and the old one lives on for
 * whoever holds it; a file rewritten in place while loaded (same inode, another version) is
 * refused, since its old mapping no longer matches it. Caller holds the library lock. */
mp_status_t mp_library_open(const char* path, int fd, const mp_file_id_t* id,
                            mp_library_t** out_library, bool* out_existing);
/* Whether a library of this version of the file is loaded (its tree may be gone). Caller holds
 * the library lock. */
bool mp_library_is_live(const mp_file_id_t* id);
/* The same for a system library linked into the program (its description validated by the
 * caller); there is no file, and nothing is mapped or unmapped. Under the library lock. */
mp_status_t mp_library_open_system(const mp_system_lib_t* system, mp_library_t** out_library,
                                   bool* out_existing);

/* The root of the library's live tree (a new reference), or NULL when there is none. Caller
 * holds the library lock. */
mp_module_t* mp_library_live_root(mp_library_t* library);
/* Remember |root| as the root of the library's live tree (not retained). Caller holds the
 * library lock. */
void mp_library_set_root(mp_library_t* library, mp_module_t* root);

/* The address of |symbol| in the library, or NULL. */
void* mp_library_symbol(const mp_library_t* library, const char* symbol);

/* Call |visit| with the name of each symbol of the library that |prefix| starts, the prefix
 * dropped: a system library's symbol entries, else the dynamic symbols of its file (read
 * anew at each call: for messages, e.g. the host function a misspelt name meant). */
void mp_library_each_symbol(const mp_library_t* library, const char* prefix,
                            void (*visit)(void* context, const char* name), void* context);

/* The file the library was loaded from, open while it is loaded; -1 when none is (a system
 * library, or a loader that needed no descriptor). */
int mp_library_file(const mp_library_t* library);
/* The blob's bytes: from `__dev_mblob` to its size, which must lie inside a file-backed part
 * of a loaded segment (so no read can run past the file). With the file's |seal| (NULL for a
 * library loaded unsealed), the blob must be where and as large as the seal says, and present
 * exactly when the seal has one. *out_found is false for a library without a blob (host code
 * only). */
mp_status_t mp_library_locate_blob(mp_library_t* library, const mp_seal_v1_t* seal,
                                   mp_const_byte_span_t* out_bytes, bool* out_found);

/* Where the file's bytes [offset, offset + size) are in the library's image: they must lie
 * inside the file-backed part of one read-only (neither writable nor executable) segment. */
mp_status_t mp_library_readonly_address(mp_library_t* library, uint64_t offset, uint64_t size,
                                        void** out_address);

/* Make |library| the owner of |module|, a module loaded from it (the module keeps it alive
 * and it forgets the module when the module dies). */
void mp_library_adopt_module(mp_library_t* library, mp_module_t* module);
/* The library's "library" node: the one that survives from an earlier tree (*out_reused
 * true, its imports already wired), else a new one. Caller holds the library lock. */
mp_status_t mp_library_node(mp_library_t* library, mp_module_t** out_node, bool* out_reused);

/* How the library is being loaded: set by each load before its tree is built (|settings| is
 * taken over). Under the library lock. */
void mp_library_set_settings(mp_library_t* library, mp_load_settings_t* settings);
const mp_load_settings_t* mp_library_settings(const mp_library_t* library);
/* The head of the list of the library's weight bindings (library/weights_binding.c keeps it).
 * Under the library lock. */
struct mp_weights_binding** mp_library_weight_bindings(mp_library_t* library);
/* The slot of the library's overlays (library/overlays.h: read and replaced there only). */
mp_overlays_slot_t* mp_library_overlays(mp_library_t* library);

/* Remember what |blob| (parsed from the library's own blob) carries besides its modules: its
 * metadata and self-tests, for mp_module_metadata and mp_module_selftests. Only the first call
 * counts. Caller holds the library lock. */
void mp_library_keep_extras(mp_library_t* library, const mp_blob_t* blob);

/* The functions the library's host code looked up (library/host_lookups.h). */
mp_host_lookups_t* mp_library_lookups(mp_library_t* library);

/* |array| (a CPU array of the library's tree, e.g. a const module's weights) on |device|: copied
 * there the first time it is asked for and kept for the life of the library (so for every tree
 * loaded over it); the view itself when |device| is the CPU. Thread-safe. */
mp_status_t mp_library_array_on(mp_library_t* library, const DLTensor* array, DLDevice device,
                                const DLTensor** out_array);

#endif /* MODPACK_LIBRARY_LIBRARY_H_ */
