/* The format's checksums: XXH3-64 (seed 0). mp_checksum (public, modpack.h) hashes a span. */
#ifndef MODPACK_CORE_CHECKSUM_H_
#define MODPACK_CORE_CHECKSUM_H_

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of the index bytes [0, index_size) with the header's index_checksum field read as
 * zero, so a writer can fill that field in last; |index_size| >= the header's size. */
uint64_t mp_index_checksum(const uint8_t* blob, uint64_t index_size);

/* XXH3-128 (seed 0) of a stream of bytes, for the seal (format.h): new, update as the bytes
 * come, digest, free. */
typedef struct mp_hash128 mp_hash128_t;
typedef struct {
  uint64_t low, high;
} mp_digest128_t;
mp_hash128_t* mp_hash128_new(void); /* NULL when out of memory */
void mp_hash128_update(mp_hash128_t* hash, const void* data, size_t size);
mp_digest128_t mp_hash128_digest(const mp_hash128_t* hash);
void mp_hash128_free(mp_hash128_t* hash);

/* XXH3-64 (mp_checksum's) of a stream of bytes, for ranges hashed in pieces: new, update as
 * the bytes come, digest, free. */
typedef struct mp_hash64 mp_hash64_t;
mp_hash64_t* mp_hash64_new(void); /* NULL when out of memory */
void mp_hash64_update(mp_hash64_t* hash, const void* data, size_t size);
uint64_t mp_hash64_digest(const mp_hash64_t* hash);
void mp_hash64_free(mp_hash64_t* hash);

/* XXH3-64 built for AVX2 (checksum_avx2.c); mp_checksum and mp_hash64_update use it when the
 * CPU has AVX2. |state| is an XXH3_state_t. */
uint64_t mp_checksum_avx2(const uint8_t* data, uint64_t size);
void mp_hash64_update_avx2(void* state, const void* data, size_t size);

#endif /* MODPACK_CORE_CHECKSUM_H_ */
