/* The per-thread error channel: a status code and a message, set where a failure happens and
 * read by whoever reports it (the Python binding, a C application). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { MP_ERROR_MESSAGE_CAPACITY = 4096 };

static _Thread_local mp_status_t tls_code = MP_OK;
static _Thread_local char tls_message[MP_ERROR_MESSAGE_CAPACITY];

const char* mp_error_message(void) {
  return tls_message;
}

mp_status_t mp_error_code(void) {
  return tls_code;
}

mp_status_t mp_error_set(mp_status_t code, const char* message) {
  tls_code = code;
  if (message != tls_message)
    snprintf(tls_message, sizeof tls_message, "%s", message ? message : "");
  return code;
}

void mp_error_clear(void) {
  tls_code = MP_OK;
  tls_message[0] = '\0';
}

mp_status_t mp_errorf(mp_status_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_message, sizeof tls_message, fmt, ap);
  va_end(ap);
  tls_code = code;
  return code;
}

mp_status_t mp_error_prefix(mp_status_t code, const char* fmt, ...) {
  char prefix[512];
  char previous[MP_ERROR_MESSAGE_CAPACITY];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(previous, tls_message, sizeof previous);
  /* Truncating an over-long message is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
  snprintf(tls_message, sizeof tls_message, "%s: %s", prefix, previous);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  tls_code = code;
  return code;
}

mp_status_t mp_out_of_memory(const char* what) {
  return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory allocating %s", what);
}
