/* Minimal JSON text writing for module descriptions (modpack inspect). */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void mp_json_printf(mp_json_t* j, const char* fmt, ...) {
  if (j->capacity == 0) return;
  uint64_t room = j->length < j->capacity ? j->capacity - j->length : 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->buffer + (j->capacity - room), room, fmt, ap);
  va_end(ap);
  if (n > 0) j->length += (uint64_t)n;
  if (j->length >= j->capacity) j->buffer[j->capacity - 1] = '\0';
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

void mp_json_kernel_info(mp_json_t* j, const mp_kernel_info_t* info, bool comma) {
  mp_json_printf(j, "%s{\"name\": ", comma ? ", " : "");
  mp_json_string(j, info->name);
  mp_json_printf(j, ", \"args\": [");
  for (uint32_t a = 0; a < info->arg_count; ++a) {
    const mp_kernel_arg_t* arg = &info->args[a];
    char dtype[32];
    if (arg->kind == MP_ARG_BUFFER && arg->dtype.code == kDLOpaqueHandle)
      snprintf(dtype, sizeof dtype, "void"); /* an untyped pointer: any dtype */
    else
      mp_dtype_string(arg->dtype, dtype, sizeof dtype);
    mp_json_printf(j, "%s\"%s%s\"", a ? ", " : "", dtype, arg->kind == MP_ARG_BUFFER ? "*" : "");
  }
  mp_json_printf(j, "], \"launch\": [");
  for (uint32_t t = 0; t < info->launch_count; ++t) {
    mp_json_printf(j, "%s", t ? ", " : "");
    mp_json_string(j, info->launch_tags[t]);
  }
  mp_json_printf(j, "]}");
}
