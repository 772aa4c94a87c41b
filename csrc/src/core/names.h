/* The name a user most likely meant, for "did you mean" in not-found messages: a misspelt
 * function, array or weight file name is offered the closest known one by edit distance.
 *
 *   mp_closest_t c;
 *   mp_closest_begin(&c, given);
 *   for (each known name) mp_closest_offer(&c, name);
 *   if (c.found) ... "did you mean '%s'?", c.best ...
 *
 * A name is offered only within a third of the longer name's length in edits (one edit for
 * short names), so that an unrelated name is never suggested; ties keep the first offered.
 * Names longer than MP_CLOSEST_MAX_NAME bytes are never compared (nor suggested). */
#ifndef MODPACK_CORE_NAMES_H_
#define MODPACK_CORE_NAMES_H_

#include <stdbool.h>
#include <stddef.h>

enum { MP_CLOSEST_MAX_NAME = 255 };

typedef struct {
  const char* given;
  size_t given_length;
  bool found;                          /* whether an offer was close enough */
  char best[MP_CLOSEST_MAX_NAME + 1]; /* the closest offer, copied ("" when none) */
  size_t best_distance;
} mp_closest_t;

void mp_closest_begin(mp_closest_t* c, const char* given);
/* Consider |name| (copied into c->best when it is the closest so far). */
void mp_closest_offer(mp_closest_t* c, const char* name);
/* A suffix for a message: " (did you mean 'NAME'?)" into |buffer|, or "" when there is no
 * close name; returns |buffer|. */
const char* mp_closest_suffix(const mp_closest_t* c, char* buffer, size_t capacity);

#endif /* MODPACK_CORE_NAMES_H_ */
