/* The one thread-local variable of the runtime (core/thread_state.h). */
#include "core/thread_state.h"

static _Thread_local mp_thread_state_t state;

mp_thread_state_t* mp_thread_state(void) {
  return &state;
}
