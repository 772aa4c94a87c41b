/* The module context (library/context.h): the functions host code calls through its context
 * slots, and the one table that installs them. Adding a slot: its names in modpack/abi.h, its
 * definition and wrapper in modpack/backend.h, its function and one table row here. */
#include "library/context.h"

#include <string.h>

#include "core/call_scope.h"
#include "core/error.h"
#include "core/module.h"
#include "device/signature.h"
#include "device/workspace.h"
#include "library/library.h"
#include "library/overlays.h"
#include "library/weights_kind.h"
#include "modpack/tensor_span.h"

/* Hands host code a pointer it may keep while the library is loaded (an entry owned by the
 * library); a second lookup of the same name returns the same pointer. */
static mp_status_t context_get_function(void* ctx, const char* name, void** out_function) {
  *out_function = NULL;
  mp_module_t* node = ctx;
  mp_library_t* library = node ? mp_module_library(node) : NULL;
  if (!library) return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up '%s' before load", name);
  mp_host_lookup_t* entry;
  MP_RETURN_IF_ERROR(mp_host_lookup_entry(mp_library_lookups(library), name, &entry));
  /* Fail now, not at the first call, when the function does not exist. */
  mp_function_t* function;
  MP_RETURN_IF_ERROR(mp_host_lookup_resolve(entry, &function));
  mp_function_release(function);
  *out_function = entry;
  return MP_OK;
}

static mp_status_t context_call(void* function, const mp_value_t* args, int32_t num_args,
                                mp_value_t* out_ret) {
  mp_host_lookup_t* entry = function;
  if (!entry) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "host code called a NULL function");
  mp_function_t* f;
  MP_RETURN_IF_ERROR(mp_host_lookup_resolve(entry, &f));
  mp_status_t status = mp_function_call(f, args, num_args, out_ret);
  mp_function_release(f);
  return status;
}

static void context_set_error(mp_status_t code, const char* message) {
  mp_error_set(code == MP_OK ? MP_ERR_RUNTIME : code, message);
}

static mp_status_t context_get_array(void* ctx, const char* name, const DLTensor** out_array) {
  *out_array = NULL;
  mp_module_t* module = ctx;
  if (!module)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up array '%s' before load", name);
  mp_library_t* library = mp_module_library(module);
  mp_weight_file_t* file;
  if (library) { /* an adapter's array first (library/overlays.h) */
    MP_RETURN_IF_ERROR(mp_overlays_find(mp_library_overlays(library), name, out_array, &file));
    if (*out_array) return MP_OK;
  }
  return mp_module_get_array(module, name, 1, out_array);
}

static mp_status_t context_get_array_on(void* ctx, const char* name, DLDevice device,
                                        const DLTensor** out_array) {
  *out_array = NULL;
  mp_module_t* module = ctx;
  mp_library_t* library = module ? mp_module_library(module) : NULL;
  if (!library)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up array '%s' before load", name);
  const DLTensor* view;
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(mp_overlays_find(mp_library_overlays(library), name, &view, &file));
  if (view) /* an adapter's array: copied per adapter file */
    return mp_device_array_cache_get(mp_weight_file_device_arrays(file), view, device,
                                     out_array);
  mp_module_t* owner;
  MP_RETURN_IF_ERROR(mp_module_find_array(module, name, 1, &view, &owner));
  /* A weight file's arrays are copied per file (so a swap copies the new ones), a const
   * module's per library. */
  MP_RETURN_IF_ERROR_PREFIX(mp_weights_module_owns(owner)
                                ? mp_weights_module_array_on(owner, view, device, out_array)
                                : mp_library_array_on(library, view, device, out_array),
                            "array '%s' on device %d:%d", name, (int)device.device_type,
                            (int)device.device_id);
  return MP_OK;
}

static mp_status_t context_copy(const DLTensor* from, DLTensor* to) {
  if (!from || !to) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_backend_copy: NULL array");
  return mp_array_copy(from, to);
}

static const char* context_describe_span(const DLTensor* t, char* buffer, size_t capacity) {
  mp_tensor_span_t span;
  mp_span_status_t problem = mp_tensor_span(t, &span);
  return mp_tensor_span_describe(t, problem, &span, buffer, capacity);
}

/* Each context function and the slot it goes into. */
static const mp_ctx_get_function_t get_function = context_get_function;
static const mp_ctx_call_t call = context_call;
static const mp_ctx_set_error_t set_error = context_set_error;
static const mp_ctx_get_array_t get_array = context_get_array;
static const mp_ctx_get_array_on_t get_array_on = context_get_array_on;
static const mp_ctx_alloc_workspace_t alloc_workspace = mp_workspace_alloc;
static const mp_ctx_free_workspace_t free_workspace = mp_workspace_free;
static const mp_ctx_copy_t copy = context_copy;
static const mp_ctx_check_args_t check_args = mp_signature_check;
static const mp_ctx_mark_call_t mark_call = mp_call_scope_set_mark;
static const mp_ctx_describe_span_t describe_span = context_describe_span;

static const struct {
  const char* symbol;
  const void* value; /* the function pointer variable above */
  size_t size;
} slots[] = {
    {MP_CTX_GET_FUNCTION_SYMBOL, &get_function, sizeof get_function},
    {MP_CTX_CALL_SYMBOL, &call, sizeof call},
    {MP_CTX_SET_ERROR_SYMBOL, &set_error, sizeof set_error},
    {MP_CTX_GET_ARRAY_SYMBOL, &get_array, sizeof get_array},
    {MP_CTX_GET_ARRAY_ON_SYMBOL, &get_array_on, sizeof get_array_on},
    {MP_CTX_ALLOC_WORKSPACE_SYMBOL, &alloc_workspace, sizeof alloc_workspace},
    {MP_CTX_FREE_WORKSPACE_SYMBOL, &free_workspace, sizeof free_workspace},
    {MP_CTX_COPY_SYMBOL, &copy, sizeof copy},
    {MP_CTX_CHECK_ARGS_SYMBOL, &check_args, sizeof check_args},
    {MP_CTX_MARK_CALL_SYMBOL, &mark_call, sizeof mark_call},
    {MP_CTX_DESCRIBE_SPAN_SYMBOL, &describe_span, sizeof describe_span},
};

void mp_context_install(mp_library_t* library, mp_module_t* node) {
  void** ctx = mp_library_symbol(library, MP_CTX_LIBRARY_SYMBOL);
  if (ctx) *ctx = node;
  /* A library has a slot only if its host code includes backend.h. */
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; ++i) {
    void* slot = mp_library_symbol(library, slots[i].symbol);
    if (slot) memcpy(slot, slots[i].value, slots[i].size);
  }
}
