/* What the per-architecture kinds (cuda, rocm) share when they choose among a module's variants:
 * the ranking of those that run on a device, best first, and the list of them all for the
 * message when none does. Each kind keeps its own rule (which variant runs where, and how
 * well); only the ordering and the listing are here. */
#ifndef MODPACK_KINDS_COMMON_VARIANT_RANK_H_
#define MODPACK_KINDS_COMMON_VARIANT_RANK_H_

#include <stddef.h>
#include <stdint.h>

/* Rank variant |index| with |score| among the |*usable| ranked so far in |order| and |scores|
 * (each with room for one more), best first: a stable insertion, so of equal scores the
 * earlier variant stays first. */
void mp_variant_rank_insert(uint32_t index, int64_t score, uint32_t* order, int64_t* scores,
                            uint32_t* usable);

/* The |count| |names| joined with ", " into |list| of |capacity| bytes (cut short when they do
 * not fit). */
void mp_variant_list(const char* const* names, uint32_t count, char* list, size_t capacity);

#endif /* MODPACK_KINDS_COMMON_VARIANT_RANK_H_ */
