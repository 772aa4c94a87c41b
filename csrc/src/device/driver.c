/* Shared by the device kinds that load a vendor driver with dlopen on first use (OpenCL,
 * CUDA): resolving entry points, and remembering how initialisation went so that every later
 * use reports the same clear error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "device/driver.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool mp_resolve_symbol(void* library, const char* name, void* slot) {
  void* symbol = dlsym(library, name);
  if (!symbol) return false;
  memcpy(slot, &symbol, sizeof symbol); /* a data pointer to a function pointer slot */
  return true;
}

const char* mp_resolve_symbols(void* library, const mp_symbol_slot_t* slots, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!mp_resolve_symbol(library, slots[i].name, slots[i].slot)) return slots[i].name;
  return NULL;
}

void mp_outcome_fail(mp_outcome_t* outcome, mp_status_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(outcome->message, sizeof outcome->message, fmt, ap);
  va_end(ap);
  outcome->status = code;
}

mp_status_t mp_outcome_raise(const mp_outcome_t* outcome) {
  return outcome->status == MP_OK ? MP_OK : mp_error_set(outcome->status, outcome->message);
}
