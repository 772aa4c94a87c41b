/* Load phases and their times: on stderr with MODPACK_LOG_LOADING=1, and to a callback a
 * binding installs (the Python binding's feeds the `modpack.load` logger). */
#ifndef MODPACK_CORE_TRACE_H_
#define MODPACK_CORE_TRACE_H_

#include <stdbool.h>

/* Told each phase of a load: the library's path, the phase, its time and a detail (may be ""). */
typedef void (*mp_trace_callback_t)(const char* path, const char* phase, double ms,
                                    const char* detail);

/* True while phases are reported (the environment variable is set, or a callback installed). */
bool mp_trace_enabled(void);
/* Installs |callback| (NULL: none), told from the next phase of any load on; thread-safe. */
void mp_trace_set_callback(mp_trace_callback_t callback);
/* Milliseconds on a monotonic clock. */
double mp_trace_now_ms(void);
/* Reports the phase of loading |path| that started at *|since| (with |detail|, may be "") and
 * restarts the clock (after the report, so reporting is not timed as the next phase). Nothing
 * when tracing is off. */
void mp_trace_phase(const char* path, const char* phase, double* since, const char* detail);

#endif /* MODPACK_CORE_TRACE_H_ */
