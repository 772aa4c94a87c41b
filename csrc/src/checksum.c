/* The format's checksum: XXH3-64 (seed 0), from the xxHash library, compiled inline so the
 * runtime has no link-time dependency on it. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
uint64_t mp_checksum_avx2(const uint8_t* data, uint64_t size); /* checksum_avx2.c */

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

/* XXH3-64 of the index bytes [0, index_size) with the header's index_checksum field read as
 * zero (offset 56, 8 bytes), so a writer can fill that field in last. */
uint64_t mp_index_checksum(const uint8_t* blob, uint64_t index_size) {
  static const uint8_t zeros[8] = {0};
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, blob, 56);
  XXH3_64bits_update(&state, zeros, sizeof zeros);
  XXH3_64bits_update(&state, blob + 64, (size_t)(index_size - 64));
  return (uint64_t)XXH3_64bits_digest(&state);
}
