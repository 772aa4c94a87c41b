/* The format reader's internal face (the public one is mp_blob_* in modpack.h). */
#ifndef MODPACK_CORE_BLOB_H_
#define MODPACK_CORE_BLOB_H_

#include "modpack/modpack.h"

/* Check every payload's XXH3-64 (each distinct payload once). Separate from mp_blob_parse so
 * that a loader can time the two phases. */
mp_status_t mp_blob_verify_payloads(const mp_blob_t* blob);

/* The same for a blob whose bytes are a mapping of the file open as |fd| from its byte
 * |file_offset| (|fd| -1: not known): what lies in holes of the file is checked as the zeros
 * it reads as, without reading it (core/mapped_read.h), so a sparse file claiming gigabytes
 * costs what its data does. Only for a mapping of that very file: a verified copy's holes are
 * where the file's own mappings go (load/verified_library.h). */
mp_status_t mp_blob_verify_payloads_in_file(const mp_blob_t* blob, int fd, uint64_t file_offset);

/* mp_blob_parse of a blob of which only the index is at hand (|index| holds at least its
 * index_size bytes; the whole blob may claim up to |available| bytes): everything the index
 * says is validated, payload ranges included, but no payload is read, so the result must not
 * be given to mp_blob_verify_payloads. For planning reads of a file before mapping it. */
mp_status_t mp_blob_parse_index(mp_const_byte_span_t index, uint64_t available,
                                mp_blob_t** out_blob);

#endif /* MODPACK_CORE_BLOB_H_ */
