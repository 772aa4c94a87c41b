/* The format's checksums: XXH3-64 (seed 0) for the blob, XXH3-128 for the seal, from the
 * xxHash library, compiled inline so the runtime has no link-time dependency on it. */
#include <stddef.h>
#include <stdlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/checksum.h"
#include "modpack/modpack.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static bool cpu_has_avx2(void) {
  static int cached = -1; /* benign race: every thread computes the same answer */
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("avx2") ? 1 : 0;
  }
  return cached;
}
#endif

uint64_t mp_checksum(mp_const_byte_span_t bytes) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (bytes.size >= 4096 && cpu_has_avx2()) return mp_checksum_avx2(bytes.data, bytes.size);
#endif
  return (uint64_t)XXH3_64bits(bytes.data, (size_t)bytes.size);
}

uint64_t mp_index_checksum(const uint8_t* blob, uint64_t index_size) {
  enum { FIELD = offsetof(mp_format_header_v1_t, index_checksum), FIELD_SIZE = 8 };
  static const uint8_t zeros[FIELD_SIZE] = {0};
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, blob, FIELD);
  XXH3_64bits_update(&state, zeros, sizeof zeros);
  XXH3_64bits_update(&state, blob + FIELD + FIELD_SIZE, (size_t)(index_size - FIELD - FIELD_SIZE));
  return (uint64_t)XXH3_64bits_digest(&state);
}

struct mp_hash64 {
  XXH3_state_t state;
};

mp_hash64_t* mp_hash64_new(void) {
  mp_hash64_t* hash = aligned_alloc(64, sizeof *hash); /* XXH3_state_t wants 64 bytes */
  if (hash) XXH3_64bits_reset(&hash->state);
  return hash;
}

void mp_hash64_update(mp_hash64_t* hash, const void* data, size_t size) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpu_has_avx2()) {
    mp_hash64_update_avx2(&hash->state, data, size);
    return;
  }
#endif
  XXH3_64bits_update(&hash->state, data, size);
}

uint64_t mp_hash64_digest(const mp_hash64_t* hash) {
  return (uint64_t)XXH3_64bits_digest(&hash->state);
}

void mp_hash64_free(mp_hash64_t* hash) {
  free(hash);
}

struct mp_hash128 {
  XXH3_state_t state;
};

mp_hash128_t* mp_hash128_new(void) {
  mp_hash128_t* hash = aligned_alloc(64, sizeof *hash); /* XXH3_state_t wants 64 bytes */
  if (hash) XXH3_128bits_reset(&hash->state);
  return hash;
}

void mp_hash128_update(mp_hash128_t* hash, const void* data, size_t size) {
  XXH3_128bits_update(&hash->state, data, size);
}

mp_digest128_t mp_hash128_digest(const mp_hash128_t* hash) {
  XXH128_hash_t digest = XXH3_128bits_digest(&hash->state);
  return (mp_digest128_t){digest.low64, digest.high64};
}

void mp_hash128_free(mp_hash128_t* hash) {
  free(hash);
}
