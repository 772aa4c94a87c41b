/* Minimal JSON text writing for module descriptions (modpack inspect). Always NUL-terminated;
 * output past |capacity| is cut, but |length| keeps counting what the whole text needs. */
#ifndef MODPACK_CORE_JSON_H_
#define MODPACK_CORE_JSON_H_

#include <stdint.h>

typedef struct {
  char* buffer; /* may be NULL with capacity 0: only measure */
  uint64_t capacity;
  uint64_t length;
} mp_json_t;

void mp_json_printf(mp_json_t* j, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* |s| as a JSON string literal, quoted and escaped. */
void mp_json_string(mp_json_t* j, const char* s);
/* The same for the |size| bytes at |s|, which may hold NUL (written as \u0000). */
void mp_json_string_n(mp_json_t* j, const char* s, uint64_t size);

#endif /* MODPACK_CORE_JSON_H_ */
