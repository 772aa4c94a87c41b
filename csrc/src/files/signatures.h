/* A library's signature block (modpack/format.h): where it starts, and whether its signatures
 * verify against trusted keys. */
#ifndef MODPACK_FILES_SIGNATURES_H_
#define MODPACK_FILES_SIGNATURES_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* The size of the sealed file before the signature block (|file_size| when there is none) and
 * the number of records, after checking the block's trailer against the file. */
mp_status_t mp_signatures_locate(int fd, uint64_t file_size, const char* path,
                                 uint64_t* out_signed_size, uint64_t* out_count);

/* The |count| records at |records| (the block after the sealed file, read by the caller): each
 * record's signer in |out_infos| (up to |capacity|; `trusted` when its key is one of |keys|,
 * at most 16). With a |message|, each trusted signer's signature is checked over it (`valid`)
 * and *out_trusted says whether one holds; without, nothing is checked (tools listing signers,
 * callers finding out whether a digest is worth computing). MP_ERR_FORMAT for a malformed
 * record. What is signed: MP_SIGNATURE_CONTEXT then the SHA-256 of the sealed file, for a
 * library; MP_WEIGHTS_SIGNATURE_CONTEXT then the content digest, for a weight file. */
mp_status_t mp_signatures_check(const uint8_t* records, uint64_t count, const char* path,
                                const mp_trusted_key_t* keys, uint64_t num_keys,
                                const uint8_t* message, uint64_t message_size,
                                mp_signature_info_t* out_infos, uint64_t capacity,
                                bool* out_trusted);

/* MP_OK when |trusted|; else MP_ERR_UNTRUSTED saying why: unsigned (|count| 0), changed since
 * a trusted key signed it, or signed by others only (from the first |known| of |infos|). */
mp_status_t mp_signatures_require_trusted(const mp_signature_info_t* infos, uint64_t count,
                                          uint64_t known, bool trusted, const char* path);

#endif /* MODPACK_FILES_SIGNATURES_H_ */
