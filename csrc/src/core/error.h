/* Recording errors inside the runtime: every failure sets this thread's status and message
 * (modpack.h: mp_error_message) where it happens, and callers add context as it climbs.
 *
 *   MP_RETURN_IF_ERROR(parse_header(bytes, &info));
 *   MP_RETURN_IF_ERROR_PREFIX(loader(user_data, &args, &module), "loading module[%d]", i);
 *   if (!buffer) return mp_out_of_memory("the kernel table");
 */
#ifndef MODPACK_CORE_ERROR_H_
#define MODPACK_CORE_ERROR_H_

#include "modpack/modpack.h"

/* printf-style error: records the message and returns |code|. */
mp_status_t mp_errorf(mp_status_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with context ("'deploy.so': loading module[3] (cuda): ..."), keep
 * it as this thread's error with |code|; returns |code|. */
mp_status_t mp_error_prefix(mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* MP_ERR_RESOURCE_EXHAUSTED: "out of memory allocating |what|". */
mp_status_t mp_out_of_memory(const char* what);

/* Return the status of |expr| if it failed; the message it set stays as it is. */
#define MP_RETURN_IF_ERROR(expr)                \
  do {                                          \
    mp_status_t mp__status = (expr);            \
    if (mp__status != MP_OK) return mp__status; \
  } while (0)

/* Return the status of |expr| if it failed, its message prefixed with printf-style context. */
#define MP_RETURN_IF_ERROR_PREFIX(expr, ...)                                  \
  do {                                                                        \
    mp_status_t mp__status = (expr);                                          \
    if (mp__status != MP_OK) return mp_error_prefix(mp__status, __VA_ARGS__); \
  } while (0)

#endif /* MODPACK_CORE_ERROR_H_ */
