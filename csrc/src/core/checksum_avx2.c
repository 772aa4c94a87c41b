/* XXH3-64 built for AVX2, chosen at run time by mp_checksum when the CPU has it: payload
 * checksums then run at memory speed (about twice the SSE2 build's rate here). The digest is
 * the same whichever build computes it. */
#include "core/checksum.h"
#include "modpack/modpack.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Every function below is compiled for AVX2 (GCC: a target pragma; clang: an attribute on each
 * function). Neither defines __AVX2__, on which xxhash.h includes the intrinsics, so include
 * them here and name the vector width. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif
#include <immintrin.h>
#define XXH_INLINE_ALL
#define XXH_VECTOR 2 /* XXH_AVX2 */
#include <xxhash.h>

uint64_t mp_checksum_avx2(const uint8_t* data, uint64_t size) {
  return (uint64_t)XXH3_64bits(data, (size_t)size);
}

void mp_hash64_update_avx2(void* state, const void* data, size_t size) {
  XXH3_64bits_update((XXH3_state_t*)state, data, size);
}
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
