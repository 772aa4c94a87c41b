/* A sealed library's blob index, read from the file before anything of it is mapped: where its
 * modules' payloads are and of what kind, for what must be decided before dlopen (which bytes
 * of a signed library stay in the file; which weight files it refers to). */
#ifndef MODPACK_FILES_BLOB_INDEX_H_
#define MODPACK_FILES_BLOB_INDEX_H_

#include "modpack/modpack.h"

enum { MP_BLOB_INDEX_MAX = 64 << 20 }; /* a larger index is not read ahead (it is one day) */

/* The blob index of the library open as |fd|, whose checked (or to be checked) |seal| says
 * where its blob is: *out_blob parses *out_index (a buffer the caller frees after the blob).
 * MP_ERR_NOT_FOUND when the library has no blob; MP_ERR_FORMAT when the index is damaged or
 * larger than MP_BLOB_INDEX_MAX. */
mp_status_t mp_blob_index_read(int fd, const mp_seal_v1_t* seal, const char* path,
                               uint8_t** out_index, mp_blob_t** out_blob);

/* The payload of |module| of |blob| read from the file into a new buffer (freed by the caller)
 * and checked against the index's checksum of it (when the blob has checksums): for small
 * payloads needed before dlopen. */
mp_status_t mp_blob_payload_read(int fd, const mp_seal_v1_t* seal, const mp_blob_t* blob,
                                 const mp_blob_module_t* module, const char* path,
                                 uint8_t** out_payload);

#endif /* MODPACK_FILES_BLOB_INDEX_H_ */
