/* A library's signature block (modpack/format.h): where it starts, and whether its signatures
 * verify against trusted keys. */
#ifndef MODPACK_LOAD_SIGNATURES_H_
#define MODPACK_LOAD_SIGNATURES_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* The size of the sealed file before the signature block (|file_size| when there is none) and
 * the number of records, after checking the block's trailer against the file. */
mp_status_t mp_signatures_locate(int fd, uint64_t file_size, const char* path,
                                 uint64_t* out_signed_size, uint64_t* out_count);

/* Check the signatures of the whole file at |file| (|size| bytes, read into memory) against
 * |keys|: each record's signer goes to |out_infos| (up to |capacity|), *out_count gets the
 * number of records and *out_trusted that at least one record by a trusted key verified.
 * MP_ERR_FORMAT for a malformed block. */
mp_status_t mp_signatures_verify(const uint8_t* file, uint64_t size, const char* path,
                                 const mp_trusted_key_t* keys, uint64_t num_keys,
                                 mp_signature_info_t* out_infos, uint64_t capacity,
                                 uint64_t* out_count, bool* out_trusted);

#endif /* MODPACK_LOAD_SIGNATURES_H_ */
