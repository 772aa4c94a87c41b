/* MODPACK_LOG_LOADING: the time of each load phase on stderr (load/trace.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime */
#endif
#include "load/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool mp_trace_enabled(void) {
  static int enabled = -1; /* benign race: every thread computes the same value */
  if (enabled < 0) {
    const char* v = getenv("MODPACK_LOG_LOADING");
    enabled = v && *v && strcmp(v, "0") != 0;
  }
  return enabled;
}

double mp_trace_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void mp_trace_phase(const char* path, const char* phase, double* since, const char* detail) {
  if (!mp_trace_enabled()) return;
  double t = mp_trace_now_ms();
  fprintf(stderr, "modpack: load %s: %-16s %9.3f ms%s%s\n", path, phase, t - *since,
          detail[0] ? "  " : "", detail);
  *since = t;
}
