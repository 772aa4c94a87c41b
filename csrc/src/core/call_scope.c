/* The extent of a call (core/call_scope.h): its depth, failure mark and kept values live in
 * the thread's state (core/thread_state.h); entering and leaving are inline in the header. */
#include "core/call_scope.h"

#include <stdlib.h>

#include "core/error.h"

static mp_kept_t* at(mp_thread_state_t* thread, int i) {
  return i < MP_CALL_SCOPE_INLINE_KEPT ? &thread->kept_inline[i]
                                       : &thread->kept_heap[i - MP_CALL_SCOPE_INLINE_KEPT];
}

void mp_call_scope_release_kept(mp_thread_state_t* thread) {
  /* Released last kept first; a release may call back into the runtime (not into a call). */
  while (thread->kept_count > 0) {
    mp_kept_t kept = *at(thread, --thread->kept_count);
    kept.release(kept.value);
  }
  free(thread->kept_heap); /* rare (more than a few values): not kept, so threads leave nothing */
  thread->kept_heap = NULL;
  thread->kept_capacity = 0;
}

void mp_call_scope_set_mark(mp_status_t status) {
  mp_thread_state_t* thread = mp_thread_state();
  if (thread->call_depth > 0) thread->call_mark = status;
}

bool mp_call_scope_active(void) {
  return mp_thread_state()->call_depth > 0;
}

void* mp_call_scope_find(const void* key) {
  mp_thread_state_t* thread = mp_thread_state();
  for (int i = 0; i < thread->kept_count; ++i)
    if (at(thread, i)->key == key) return at(thread, i)->value;
  return NULL;
}

mp_status_t mp_call_scope_keep(const void* key, void* value, void (*release)(void* value)) {
  mp_thread_state_t* thread = mp_thread_state();
  if (thread->call_depth == 0)
    return mp_errorf(MP_ERR_INTERNAL, "mp_call_scope_keep outside a call");
  if (thread->kept_count >= MP_CALL_SCOPE_INLINE_KEPT + thread->kept_capacity) {
    int capacity = thread->kept_capacity ? 2 * thread->kept_capacity : 16;
    mp_kept_t* grown = realloc(thread->kept_heap, (size_t)capacity * sizeof *grown);
    if (!grown) return mp_out_of_memory("a call's kept values");
    thread->kept_heap = grown;
    thread->kept_capacity = capacity;
  }
  *at(thread, thread->kept_count++) = (mp_kept_t){key, value, release};
  return MP_OK;
}
