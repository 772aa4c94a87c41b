/* The format reader's internal face (the public one is mp_blob_* in modpack.h). */
#ifndef MODPACK_CORE_BLOB_H_
#define MODPACK_CORE_BLOB_H_

#include "modpack/modpack.h"

/* Check every payload's XXH3-64 (each distinct payload once). Separate from mp_blob_parse so
 * that a loader can time the two phases. */
mp_status_t mp_blob_verify_payloads(const mp_blob_t* blob);

#endif /* MODPACK_CORE_BLOB_H_ */
