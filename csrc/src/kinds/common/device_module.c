/* The loader every device kind shares (kinds/common/device_module.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include "kinds/common/device_module.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "modpack/format.h"

mp_status_t mp_device_module_load(const mp_device_loader_t* loader, const mp_loader_args_t* args,
                                  mp_module_t** out_module) {
  *out_module = NULL;
  mp_device_module_t* base = calloc(1, loader->state_size);
  if (!base) return mp_out_of_memory("a device module");
  pthread_mutex_init(&base->lock, NULL);
  base->table.call = loader->call;
  base->payload = args->payload.data;
  base->code_frames = (args->entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) != 0;
  base->load_flags = args->load_flags;
  if (args->library_path && !(base->library_path = strdup(args->library_path))) {
    loader->vtable->destroy(base);
    return mp_out_of_memory("a device module");
  }
  mp_status_t status = loader->parse(base, loader->kind, args->payload);
  if (status != MP_OK) {
    loader->vtable->destroy(base);
    return status;
  }
  /* No driver call here: loading succeeds without the device; the first launch reports it. */
  char* name = base->name; /* the state owns it; mp_module_create frees the state on failure */
  MP_RETURN_IF_ERROR(mp_module_create(loader->kind->type_key, loader->vtable, base, out_module));
  if (name && (status = mp_module_set_name(*out_module, name)) != MP_OK) {
    mp_module_release(*out_module);
    *out_module = NULL;
  }
  return status;
}

void mp_device_module_free(mp_device_module_t* base) {
  mp_kernel_table_free(&base->table);
  free(base->name);
  free(base->library_path);
  base->name = base->library_path = NULL;
  pthread_mutex_destroy(&base->lock);
}
