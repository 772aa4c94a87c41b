/* Minimal JSON text writing for module descriptions (modpack inspect). */
#include "core/json.h"

#include <stdarg.h>
#include <stdio.h>

void mp_json_printf(mp_json_t* j, const char* fmt, ...) {
  uint64_t room = j->length < j->capacity ? j->capacity - j->length : 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(room ? j->buffer + j->length : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) j->length += (uint64_t)n;
  if (j->capacity > 0 && j->length >= j->capacity) j->buffer[j->capacity - 1] = '\0';
}

void mp_json_string(mp_json_t* j, const char* s) {
  mp_json_printf(j, "\"");
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      mp_json_printf(j, "\\%c", c);
    else if (c < 0x20)
      mp_json_printf(j, "\\u%04x", c);
    else
      mp_json_printf(j, "%c", c);
  }
  mp_json_printf(j, "\"");
}

void mp_json_string_n(mp_json_t* j, const char* s, uint64_t size) {
  mp_json_printf(j, "\"");
  uint64_t run = 0; /* bytes that need no escape, written together */
  for (uint64_t i = 0; i <= size; ++i) {
    unsigned char c = i < size ? (unsigned char)s[i] : 0;
    if (i < size && c != '"' && c != '\\' && c >= 0x20 && run < INT32_MAX) {
      ++run;
      continue;
    }
    if (run) mp_json_printf(j, "%.*s", (int)run, s + i - run);
    run = 0;
    if (i == size) break;
    if (c == '"' || c == '\\')
      mp_json_printf(j, "\\%c", c);
    else if (c < 0x20)
      mp_json_printf(j, "\\u%04x", c);
    else
      run = 1; /* a run cut at INT32_MAX bytes goes on from here */
  }
  mp_json_printf(j, "\"");
}
