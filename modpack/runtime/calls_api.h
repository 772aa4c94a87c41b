/* The runtime functions modpack.runtime._calls (calls.c) needs, handed over as one table.
 *
 * The runtime lives in the cffi extension modpack._rt, whose symbols are private to it; a
 * second extension reaches them the way CPython extensions share a C API: a table of function
 * pointers, here passed by address (modpack_calls_api() in binding.c) to _calls.init(). */
#ifndef MODPACK_RUNTIME_CALLS_API_H_
#define MODPACK_RUNTIME_CALLS_API_H_

#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  uint32_t size; /* sizeof(modpack_calls_api_t): checked by _calls.init */
  mp_status_t (*function_call)(mp_function_t* function, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret);
  void (*function_retain)(mp_function_t* function);
  void (*function_release)(mp_function_t* function);
  mp_status_t (*module_get_function)(mp_module_t* module, const char* name, int32_t query_imports,
                                     mp_function_t** out_function);
  uint32_t (*array_flags)(const DLTensor* array); /* a modpack.Array's MP_ARRAY_* flags */
  uint64_t (*checksum)(mp_const_byte_span_t bytes); /* XXH3-64, the format's checksum */
} modpack_calls_api_t;

#endif /* MODPACK_RUNTIME_CALLS_API_H_ */
