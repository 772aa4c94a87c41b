/* Load phases and their times (core/trace.h): MODPACK_LOG_LOADING on stderr, and a callback. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime */
#endif
#include "core/trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic(mp_trace_callback_t) callback; /* NULL: none, the usual case */

static bool env_enabled(void) {
  static int enabled = -1; /* benign race: every thread computes the same value */
  if (enabled < 0) {
    const char* v = getenv("MODPACK_LOG_LOADING");
    enabled = v && *v && strcmp(v, "0") != 0;
  }
  return enabled;
}

bool mp_trace_enabled(void) {
  return env_enabled() || atomic_load_explicit(&callback, memory_order_acquire) != NULL;
}

void mp_trace_set_callback(mp_trace_callback_t new_callback) {
  atomic_store_explicit(&callback, new_callback, memory_order_release);
}

double mp_trace_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void mp_trace_phase(const char* path, const char* phase, double* since, const char* detail) {
  mp_trace_callback_t report = atomic_load_explicit(&callback, memory_order_acquire);
  bool to_stderr = env_enabled();
  if (!report && !to_stderr) return;
  double t = mp_trace_now_ms();
  if (to_stderr)
    fprintf(stderr, "modpack: load %s: %-16s %9.3f ms%s%s\n", path, phase, t - *since,
            detail[0] ? "  " : "", detail);
  if (report) {
    report(path, phase, t - *since, detail);
    t = mp_trace_now_ms();
  }
  *since = t;
}
