/* The cryptography signature checks need, from OpenSSL's libcrypto: SHA-256, Ed25519
 * verification and public keys from PEM. libcrypto is loaded with dlopen the first time it is
 * needed (like a device driver), so the runtime links nothing more and builds where OpenSSL's
 * headers are absent; without it these return MP_ERR_UNAVAILABLE saying what to install. */
#ifndef MODPACK_CORE_CRYPTO_H_
#define MODPACK_CORE_CRYPTO_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* SHA-256 of |size| bytes at |data|. */
mp_status_t mp_crypto_sha256(const void* data, uint64_t size, uint8_t out_digest[32]);

/* SHA-256 over bytes given piece by piece (a file read in parts, a mapping): begin, update in
 * order, then finish (which frees the context) or abandon. */
typedef struct mp_sha256 mp_sha256_t;
mp_status_t mp_sha256_begin(mp_sha256_t** out_hash);
mp_status_t mp_sha256_update(mp_sha256_t* hash, const void* data, uint64_t size);
mp_status_t mp_sha256_finish(mp_sha256_t* hash, uint8_t out_digest[32]);
void mp_sha256_abandon(mp_sha256_t* hash);

/* Whether |signature| is |public_key|'s Ed25519 signature of |message|; the status reports only
 * a missing libcrypto or a key it cannot use. */
mp_status_t mp_crypto_ed25519_verify(const uint8_t public_key[32], const uint8_t signature[64],
                                     const uint8_t* message, uint64_t length, bool* out_valid);

/* The raw public key of a PEM "PUBLIC KEY" that holds an Ed25519 key. */
mp_status_t mp_crypto_ed25519_key_from_pem(const char* pem, uint64_t length,
                                           uint8_t out_public_key[32]);

#endif /* MODPACK_CORE_CRYPTO_H_ */
