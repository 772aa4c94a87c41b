/* What the foreign formats' indexes share (weights/foreign_index.h). */
#include "weights/foreign_index.h"

#include <stdlib.h>
#include <string.h>

void mp_foreign_index_free(mp_foreign_index_t* index) {
  for (uint64_t i = 0; index->arrays && i < index->count; ++i) free(index->arrays[i].name);
  free(index->arrays);
  free(index->metadata_json);
  free(index->header);
  memset(index, 0, sizeof *index);
}
