/* What every device kind's module is built from, and the loader every device kind shares.
 *
 * A device kind's module state starts with an mp_device_module_t (checked with a static
 * assertion in each kind): its kernel table first (so the table's vtable entries read it from
 * the module's impl), the module's optional name, where its payload starts (tools are told
 * where code lies by offset from it) and the lock that guards the kind's per-device state,
 * made lazily at a first launch.
 *
 * Its loader is mp_device_module_load: allocate the state, let the kind parse its payload into
 * it (no driver call: a library loads where the device is missing), then create the module of
 * the kind's type key and name it. The base keeps how the load was asked for (its flags, the
 * library's path), which a kind's first-launch build reads for the kernel cache
 * (files/kernel_cache.h). A kind supplies only its parser, its vtable and its
 * launcher (mp_device_loader_t). */
#ifndef MODPACK_KINDS_COMMON_DEVICE_MODULE_H_
#define MODPACK_KINDS_COMMON_DEVICE_MODULE_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "kinds/common/kernel_table.h"

typedef struct {
  mp_kernel_table_t table; /* first: the kernel table's vtable entries read it from impl */
  char* name;              /* the module's name (payload), NULL when unnamed */
  const uint8_t* payload;  /* where the payload starts: code is described by offset from it */
  pthread_mutex_t lock;    /* guards the kind's per-device state */
  bool code_frames;        /* the payload's pieces of code are code frames (kinds/common/code.h) */
  uint32_t load_flags;     /* the load's MP_LOAD_* flags: MP_LOAD_NO_KERNEL_CACHE for builds */
  char* library_path;      /* the library's path for log lines (owned; NULL: a payload alone) */
} mp_device_module_t;

/* A device kind's loader, described. */
typedef struct {
  const mp_kind_t* kind; /* its type key names the module; its launch tags check the records */
  const mp_module_vtable_t* vtable; /* destroy must accept a state the parser left half-made */
  mp_packed_cfunc_t call;           /* the kernels' launcher (state: an mp_kernel_ref_t) */
  size_t state_size;                /* the kind's state, which starts with mp_device_module_t */
  /* Parse |payload| into |state| (zeroed, its base's lock, call and payload set): records with
   * mp_kernel_table_read(..., kind, ...), the name with mp_kernel_read_module_name. */
  mp_status_t (*parse)(void* state, const mp_kind_t* kind, mp_const_byte_span_t payload);
} mp_device_loader_t;

/* The loader body of a device kind (its mp_kind_t's load calls this with its description). On
 * failure nothing is left: the state is destroyed through the vtable, *out_module is NULL. */
mp_status_t mp_device_module_load(const mp_device_loader_t* loader, const mp_loader_args_t* args,
                                  mp_module_t** out_module);
/* Frees what the base holds (table, name, lock); a kind's destroy calls it last but one, before
 * freeing its state. */
void mp_device_module_free(mp_device_module_t* base);

#endif /* MODPACK_KINDS_COMMON_DEVICE_MODULE_H_ */
