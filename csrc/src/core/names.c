/* The closest known name (core/names.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strnlen */
#endif
#include "core/names.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The Levenshtein distance between |a| and |b|, both at most MP_CLOSEST_MAX_NAME bytes. */
static size_t edit_distance(const char* a, size_t la, const char* b, size_t lb) {
  size_t row[MP_CLOSEST_MAX_NAME + 1];
  for (size_t j = 0; j <= lb; ++j) row[j] = j;
  for (size_t i = 1; i <= la; ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; ++j) {
      size_t above = row[j];
      size_t best = diagonal + (a[i - 1] != b[j - 1]);
      if (above + 1 < best) best = above + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  return row[lb];
}

void mp_closest_begin(mp_closest_t* c, const char* given) {
  c->given = given;
  c->given_length = given ? strlen(given) : SIZE_MAX;
  c->found = false;
  c->best[0] = '\0';
  c->best_distance = SIZE_MAX;
}

void mp_closest_offer(mp_closest_t* c, const char* name) {
  if (!name || c->given_length > MP_CLOSEST_MAX_NAME) return;
  size_t length = strnlen(name, MP_CLOSEST_MAX_NAME + 1);
  if (length > MP_CLOSEST_MAX_NAME) return;
  size_t longer = c->given_length > length ? c->given_length : length;
  size_t within = longer / 3 > 1 ? longer / 3 : 1;
  size_t gap = c->given_length > length ? c->given_length - length : length - c->given_length;
  if (gap > within) return; /* at least |gap| edits apart: not worth the distance */
  size_t distance = edit_distance(c->given, c->given_length, name, length);
  if (distance == 0 || distance > within || distance >= c->best_distance) return;
  memcpy(c->best, name, length + 1);
  c->found = true;
  c->best_distance = distance;
}

const char* mp_closest_suffix(const mp_closest_t* c, char* buffer, size_t capacity) {
  if (capacity == 0) return buffer;
  buffer[0] = '\0';
  if (c->found) snprintf(buffer, capacity, " (did you mean '%s'?)", c->best);
  return buffer;
}
