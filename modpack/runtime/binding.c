/* The binding's own C, compiled into modpack._rt with the runtime: the table of runtime
 * functions that modpack.runtime._calls uses (calls_api.h), and a probe module for the warm-up
 * at import (modpack/runtime/warmup.py). Read by build_ffi.py, which puts the public headers'
 * includes in front. */
#include "calls_api.h"

uintptr_t modpack_calls_api(void) {
  static const modpack_calls_api_t table = {
      .size = sizeof table,
      .function_call = mp_function_call,
      .function_retain = mp_function_retain,
      .function_release = mp_function_release,
      .module_get_function = mp_module_get_function,
      .array_flags = mp_array_flags,
      .checksum = mp_checksum,
  };
  return (uintptr_t)&table;
}

/* A packed function returning its argument count, offered by the probe module under any
 * name: the warm-up calls it so that a user's first call runs through warm code. */
mp_status_t modpack_count_args(void* self, const mp_value_t* args, int32_t n, mp_value_t* ret) {
  (void)self;
  (void)args;
  *ret = mp_int(n);
  return MP_OK;
}

static mp_status_t probe_get_function(mp_module_t* self, const char* name, mp_function_t** out) {
  (void)name;
  return mp_function_create(modpack_count_args, NULL, NULL, self, out);
}

static const mp_module_vtable_t probe_vtable = {.get_function = probe_get_function};

mp_status_t modpack_probe_module(mp_module_t** out) {
  return mp_module_create("modpack.probe", &probe_vtable, NULL, out);
}
