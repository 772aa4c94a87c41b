/* Loading a vendor driver with dlopen on first use (OpenCL, CUDA): resolving its entry points
 * from one table, and remembering how initialisation went so that every later use reports the
 * same clear error at the cost of a branch. */
#ifndef MODPACK_DEVICE_DRIVER_H_
#define MODPACK_DEVICE_DRIVER_H_

#include <stdbool.h>
#include <stddef.h>

#include "modpack/modpack.h"

typedef struct {
  const char* name;
  void* slot; /* address of the function pointer to fill */
} mp_symbol_slot_t;

/* How a one-time initialisation went; a failure's message is replayed on every later use. */
typedef struct {
  mp_status_t status;
  char message[1024];
} mp_outcome_t;

bool mp_resolve_symbol(void* library, const char* name, void* slot);
/* Resolves every slot; returns NULL, or the name of the first symbol the library lacks. */
const char* mp_resolve_symbols(void* library, const mp_symbol_slot_t* slots, size_t count);
void mp_outcome_fail(mp_outcome_t* outcome, mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* MP_OK, or the remembered failure set as this thread's error. */
mp_status_t mp_outcome_raise(const mp_outcome_t* outcome);

#endif /* MODPACK_DEVICE_DRIVER_H_ */
