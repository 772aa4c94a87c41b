/* What the runtime keeps per thread, in one thread-local variable: the error channel
 * (core/error.h) and the extent of the current call (core/call_scope.h).
 *
 * One variable because a call touches both, and every thread-local access from a shared
 * library is a call into the dynamic linker (__tls_get_addr): mp_function_call looks the
 * state up once and works on the pointer. */
#ifndef MODPACK_CORE_THREAD_STATE_H_
#define MODPACK_CORE_THREAD_STATE_H_

#include "modpack/modpack.h"

enum { MP_ERROR_MESSAGE_CAPACITY = 4096, MP_CALL_SCOPE_INLINE_KEPT = 4 };

/* A value a call keeps until it returns (mp_call_scope_keep). */
typedef struct {
  const void* key;
  void* value;
  void (*release)(void* value);
} mp_kept_t;

typedef struct {
  /* the error channel */
  mp_status_t error_code;
  char error_message[MP_ERROR_MESSAGE_CAPACITY];
  /* the call scope: the depth of nested calls, the innermost one's failure mark (enclosing
   * ones are on their callers' stacks) and the values kept, a few inline, more on the heap */
  int call_depth;
  mp_status_t call_mark;
  int kept_count, kept_capacity;
  mp_kept_t kept_inline[MP_CALL_SCOPE_INLINE_KEPT];
  mp_kept_t* kept_heap; /* past the inline ones: kept_heap[i - MP_CALL_SCOPE_INLINE_KEPT] */
} mp_thread_state_t;

/* The calling thread's state. */
mp_thread_state_t* mp_thread_state(void);

#endif /* MODPACK_CORE_THREAD_STATE_H_ */
