/* The format reader's internal face (the public one is mp_blob_* in modpack.h). */
#ifndef MODPACK_CORE_BLOB_H_
#define MODPACK_CORE_BLOB_H_

#include "modpack/modpack.h"

/* Check every payload's XXH3-64 (each distinct payload once). Separate from mp_blob_parse so
 * that a loader can time the two phases. */
mp_status_t mp_blob_verify_payloads(const mp_blob_t* blob);

/* mp_blob_parse of a blob of which only the index is at hand (|index| holds at least its
 * index_size bytes; the whole blob may claim up to |available| bytes): everything the index
 * says is validated, payload ranges included, but no payload is read, so the result must not
 * be given to mp_blob_verify_payloads. For planning reads of a file before mapping it. */
mp_status_t mp_blob_parse_index(mp_const_byte_span_t index, uint64_t available,
                                mp_blob_t** out_blob);

#endif /* MODPACK_CORE_BLOB_H_ */
