/* The extent of a call (core/call_scope.h): a per-thread depth and the values kept under it,
 * a few inline and more on the heap. Entering and leaving cost a thread-local increment and
 * decrement when nothing is kept. */
#include "core/call_scope.h"

#include <stdlib.h>

#include "core/error.h"

typedef struct {
  const void* key;
  void* value;
  void (*release)(void*);
} kept_t;

enum { INLINE = 4 };

typedef struct {
  int depth;
  int count, capacity;
  kept_t inline_kept[INLINE];
  kept_t* heap; /* past INLINE entries: heap[i - INLINE] */
} scope_t;

static _Thread_local scope_t scope;

static kept_t* at(int i) {
  return i < INLINE ? &scope.inline_kept[i] : &scope.heap[i - INLINE];
}

void mp_call_scope_enter(void) {
  ++scope.depth;
}

void mp_call_scope_exit(void) {
  if (--scope.depth > 0 || scope.count == 0) return;
  /* Released last kept first; a release may call back into the runtime (not into a call). */
  while (scope.count > 0) {
    kept_t kept = *at(--scope.count);
    kept.release(kept.value);
  }
  free(scope.heap); /* rare (more than INLINE values): not kept, so threads leave nothing */
  scope.heap = NULL;
  scope.capacity = 0;
}

bool mp_call_scope_active(void) {
  return scope.depth > 0;
}

void* mp_call_scope_find(const void* key) {
  for (int i = 0; i < scope.count; ++i)
    if (at(i)->key == key) return at(i)->value;
  return NULL;
}

mp_status_t mp_call_scope_keep(const void* key, void* value, void (*release)(void* value)) {
  if (scope.depth == 0)
    return mp_errorf(MP_ERR_INTERNAL, "mp_call_scope_keep outside a call");
  if (scope.count >= INLINE + scope.capacity) {
    int capacity = scope.capacity ? 2 * scope.capacity : 16;
    kept_t* grown = realloc(scope.heap, (size_t)capacity * sizeof *grown);
    if (!grown) return mp_out_of_memory("a call's kept values");
    scope.heap = grown;
    scope.capacity = capacity;
  }
  *at(scope.count++) = (kept_t){key, value, release};
  return MP_OK;
}
