/* MODPACK_LOG_LOADING=1: one line per load phase on stderr, with its time. */
#ifndef MODPACK_LOAD_TRACE_H_
#define MODPACK_LOAD_TRACE_H_

#include <stdbool.h>

bool mp_trace_enabled(void);
/* Milliseconds on a monotonic clock. */
double mp_trace_now_ms(void);
/* Logs the phase of loading |path| that started at *|since| (with |detail|, may be "") and
 * restarts the clock. Nothing when tracing is off. */
void mp_trace_phase(const char* path, const char* phase, double* since, const char* detail);

#endif /* MODPACK_LOAD_TRACE_H_ */
