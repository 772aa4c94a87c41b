/* Workspaces: scratch device memory that host code takes and gives back within its calls
 * (modpack/backend.h: mp_backend_alloc_workspace). Served from a per-device pool, so a
 * pipeline called again and again makes no driver allocation in steady state. */
#ifndef MODPACK_DEVICE_WORKSPACE_H_
#define MODPACK_DEVICE_WORKSPACE_H_

#include "modpack/modpack.h"

/* |nbytes| of memory on |device| (what a DLTensor of that device holds in `data`). */
mp_status_t mp_workspace_alloc(DLDevice device, uint64_t nbytes, void** out_data);
/* Give back a workspace; MP_ERR_INVALID_ARGUMENT if |data| is not one of |device|'s. */
mp_status_t mp_workspace_free(DLDevice device, void* data);

#endif /* MODPACK_DEVICE_WORKSPACE_H_ */
