/* The per-thread error channel (its state is in core/thread_state.h): a status code and a
 * message, set where a failure happens and read by whoever reports it (the Python binding, a
 * C application). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/thread_state.h"

const char* mp_error_message(void) {
  return mp_thread_state()->error_message;
}

mp_status_t mp_error_code(void) {
  return mp_thread_state()->error_code;
}

mp_status_t mp_error_set(mp_status_t code, const char* message) {
  mp_thread_state_t* thread = mp_thread_state();
  thread->error_code = code;
  if (message != thread->error_message)
    snprintf(thread->error_message, sizeof thread->error_message, "%s", message ? message : "");
  return code;
}

void mp_error_clear(void) {
  mp_thread_state_t* thread = mp_thread_state();
  thread->error_code = MP_OK;
  thread->error_message[0] = '\0';
}

mp_status_t mp_errorf(mp_status_t code, const char* fmt, ...) {
  mp_thread_state_t* thread = mp_thread_state();
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread->error_message, sizeof thread->error_message, fmt, ap);
  va_end(ap);
  thread->error_code = code;
  return code;
}

mp_status_t mp_error_prefix(mp_status_t code, const char* fmt, ...) {
  char prefix[512];
  char previous[MP_ERROR_MESSAGE_CAPACITY];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  mp_thread_state_t* thread = mp_thread_state();
  memcpy(previous, thread->error_message, sizeof previous);
  /* Truncating an over-long message is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
  snprintf(thread->error_message, sizeof thread->error_message, "%s: %s", prefix, previous);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  thread->error_code = code;
  return code;
}

mp_status_t mp_out_of_memory(const char* what) {
  return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory allocating %s", what);
}
