/* What reading a weight file's index into its object needs beside the reader of each format
 * (weights/weight_file_state.h): the arrays sorted by name and found by it, and the words of a
 * damaged file. weight_file.c and the readers share it, so the readers need nothing of the
 * object's life (weight_file.c), which calls them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "weights/weight_file_state.h"

mp_status_t mp_weight_file_damaged(const char* path, const char* what) {
  return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: %s; copy or save it again", path, what);
}

static int by_name(const void* a, const void* b, void* file) {
  const mp_weight_file_t* f = file;
  return strcmp(f->arrays[*(const uint64_t*)a].name, f->arrays[*(const uint64_t*)b].name);
}

mp_status_t mp_weight_file_index_names(mp_weight_file_t* f, const char* path) {
  for (uint64_t i = 0; i < f->count; ++i) f->by_name[i] = i;
  qsort_r(f->by_name, f->count, sizeof *f->by_name, by_name, f);
  for (uint64_t i = 1; i < f->count; ++i)
    if (strcmp(f->arrays[f->by_name[i - 1]].name, f->arrays[f->by_name[i]].name) == 0)
      return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: two arrays are named '%s'", path,
                       f->arrays[f->by_name[i]].name);
  return MP_OK;
}

uint64_t mp_weight_file_find(const mp_weight_file_t* file, const char* name) {
  uint64_t low = 0, high = file->count;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    int order = strcmp(file->arrays[file->by_name[mid]].name, name);
    if (order == 0) return file->by_name[mid];
    if (order < 0) low = mid + 1;
    else high = mid;
  }
  return UINT64_MAX;
}
