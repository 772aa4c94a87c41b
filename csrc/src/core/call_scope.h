/* The extent of a call: from the moment a function of a loaded tree is called on a thread
 * (mp_function_call) until that outermost call returns, nested calls included.
 *
 * What a call looks up may be kept for the rest of it. Weight files use this so that a call
 * sees one version of the weights throughout, even when they are swapped while it runs: the
 * first lookup in a call keeps the version it found, later lookups in the same call find
 * that one, and it is released when the call returns.
 *
 * Each call also has a failure mark (modpack/backend.h): host code sets it when an mp_backend_*
 * call fails or it reports an error, and the call fails when it returns with the mark set,
 * whatever it returned. The mark lives here, with the runtime, so that libraries keep no
 * thread-local state of their own.
 *
 * Entering and leaving take the thread's state (mp_thread_state()) that the caller looked up
 * once for the whole call; they are inline, a few loads and stores when nothing is kept. */
#ifndef MODPACK_CORE_CALL_SCOPE_H_
#define MODPACK_CORE_CALL_SCOPE_H_

#include <stdbool.h>

#include "core/thread_state.h"
#include "modpack/modpack.h"

/* Enters a call with a clear mark; returns the enclosing call's mark, for the exit. */
static inline mp_status_t mp_call_scope_enter(mp_thread_state_t* thread) {
  mp_status_t enclosing = thread->call_mark;
  thread->call_mark = MP_OK;
  ++thread->call_depth;
  return enclosing;
}

/* The current call's failure mark (MP_OK when none). */
static inline mp_status_t mp_call_scope_mark(const mp_thread_state_t* thread) {
  return thread->call_mark;
}

/* Releases what the outermost call kept (out of line: rare). */
void mp_call_scope_release_kept(mp_thread_state_t* thread);

/* Leaves a call, putting back the enclosing call's |mark| (what mp_call_scope_enter returned).
 * Leaving the outermost call releases everything kept during it. */
static inline void mp_call_scope_exit(mp_thread_state_t* thread, mp_status_t enclosing_mark) {
  thread->call_mark = enclosing_mark;
  if (--thread->call_depth == 0 && thread->kept_count > 0) mp_call_scope_release_kept(thread);
}

/* Sets the calling thread's current call's failure mark (MP_OK clears it); nothing outside a
 * call. The module context's MP_CTX_MARK_CALL slot. */
void mp_call_scope_set_mark(mp_status_t status);

/* Whether this thread is inside a call. */
bool mp_call_scope_active(void);
/* What the current call keeps under |key|, or NULL. */
void* mp_call_scope_find(const void* key);
/* Keep |value| under |key| until the outermost call returns, then call release(value). Only
 * inside a call; MP_ERR_RESOURCE_EXHAUSTED when out of memory (|value| is then not kept). */
mp_status_t mp_call_scope_keep(const void* key, void* value, void (*release)(void* value));

#endif /* MODPACK_CORE_CALL_SCOPE_H_ */
