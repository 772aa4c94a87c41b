/* Rebuilding a module tree from a library's blob: validate it, run each entry's loader, wire
 * the imports and the host code's context. */
#ifndef MODPACK_LOAD_TREE_H_
#define MODPACK_LOAD_TREE_H_

#include "modpack/kind.h"

/* The tree described by the blob |bytes| inside |library|; |flags| are mp_module_load_from_file's
 * (MP_LOAD_SKIP_PAYLOAD_CHECKSUMS). |bytes| are the bytes at |file_offset| of the file open as
 * |holes_fd|, whose holes the checksums skip (mp_blob_verify_payloads_in_file); -1: none.
 * Caller holds the library lock. */
mp_status_t mp_tree_build(mp_library_t* library, mp_const_byte_span_t bytes, uint32_t flags,
                          int holes_fd, uint64_t file_offset, mp_module_t** out_root);
/* The tree of a library without a blob: its "library" node alone, context installed. */
mp_status_t mp_tree_host_only(mp_library_t* library, mp_module_t** out_root);

#endif /* MODPACK_LOAD_TREE_H_ */
