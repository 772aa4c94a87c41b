/* Ranking and listing a module's variants (kinds/common/variant_rank.h). */
#include "kinds/common/variant_rank.h"

#include <stdio.h>

void mp_variant_rank_insert(uint32_t index, int64_t score, uint32_t* order, int64_t* scores,
                            uint32_t* usable) {
  uint32_t at = (*usable)++;
  while (at > 0 && scores[at - 1] < score) { /* stable insertion: ties keep order */
    scores[at] = scores[at - 1];
    order[at] = order[at - 1];
    --at;
  }
  scores[at] = score;
  order[at] = index;
}

void mp_variant_list(const char* const* names, uint32_t count, char* list, size_t capacity) {
  if (capacity == 0) return;
  list[0] = '\0';
  size_t used = 0;
  for (uint32_t i = 0; i < count && used < capacity; ++i) {
    int n = snprintf(list + used, capacity - used, "%s%s", i ? ", " : "", names[i]);
    if (n > 0) used += (size_t)n;
  }
}
