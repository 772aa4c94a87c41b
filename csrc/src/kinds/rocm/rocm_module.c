/* The "rocm" module kind (loadbinary_rocm): AMD GPU code objects for one or several target IDs
 * and a function-info record per kernel with its argument layout; the payload layout and the
 * selection rule are in modpack/kinds/rocm.h.
 *
 * Loading parses and validates the payload only (rocm_payload.c); it never touches the HIP
 * runtime, so a library with ROCm modules loads (and `modpack inspect` describes it) on a
 * machine without a GPU. On the first launch on a device, the code object for that device's
 * target ID is chosen (rocm_select.c), loaded with hipModuleLoadData straight from the library
 * mapping, and each kernel's function resolved once. A launch lays the arguments out at their
 * offsets in the argument segment and passes it to hipModuleLaunchKernel on the calling
 * thread's current stream (mp_device_set_stream; the null stream until set). */
#include "kinds/rocm/rocm_module.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "kinds/common/kernel_call.h"
#include "kinds/rocm/rocm_select.h"

extern const mp_kind_t mp_rocm_kind; /* this kind's descriptor, at the end */
extern const mp_preflight_api_t mp_rocm_preflight; /* rocm_preflight.c */

_Static_assert(offsetof(mp_rocm_module_t, base) == 0, "the device module base must come first");

static const char* const launch_tags[MP_ROCM_SLOT_COUNT] = {
    "blockIdx.x",  "blockIdx.y",  "blockIdx.z",       "threadIdx.x",
    "threadIdx.y", "threadIdx.z", "dyn_shared_memory"};

enum { MAX_KERNARG = 4096 }; /* the argument segment is at most 4 KiB */

/* ---- destruction ----------------------------------------------------------------------------- */

static void rocm_destroy(void* impl) {
  mp_rocm_module_t* m = impl;
  const mp_rocm_t* rocm = NULL;
  for (int d = 0; d < MP_ROCM_MAX_DEVICES; ++d) {
    if (m->images[d]) {
      if (!rocm) rocm = mp_rocm(); /* a module was loaded, so the runtime is initialised */
      if (rocm) rocm->hip.ModuleUnload(m->images[d]); /* ignored at exit */
    }
    free(m->functions[d]);
  }
  mp_rocm_payload_free(m);
  mp_device_module_free(&m->base);
  free(m);
}

/* ---- loading on a device ----------------------------------------------------------------------
 */

static void list_targets(const mp_rocm_module_t* m, char* buffer, size_t capacity) {
  size_t used = 0;
  buffer[0] = '\0';
  for (uint32_t v = 0; v < m->variant_count && used < capacity; ++v) {
    int n = snprintf(buffer + used, capacity - used, "%s%s", v ? ", " : "", m->variants[v].target);
    if (n > 0) used += (size_t)n;
  }
}

static bool image_rejected(hipError_t result) {
  return result == hipErrorNoBinaryForGpu || result == hipErrorInvalidImage ||
         result == hipErrorInvalidKernelFile;
}

/* Choose and load the code object for |device| (current), and make its function table. The
 * caller holds the lock. */
static mp_status_t load_locked(mp_rocm_module_t* m, const mp_rocm_t* rocm, int32_t device) {
  mp_rocm_target_t target;
  MP_RETURN_IF_ERROR(mp_rocm_parse_device(rocm->targets[device], &target));
  uint32_t order[MP_ROCM_MAX_VARIANTS], usable = 0;
  MP_RETURN_IF_ERROR(mp_rocm_module_rank(m, &target, order, &usable));
  char list[1024];
  list_targets(m, list, sizeof list);
  if (usable == 0)
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "no code object for this GPU: ROCm device %d is %s and no code object of "
                     "this ROCm module runs on it (code objects: %s; %s); rebuild with a target "
                     "for %s",
                     (int)device, rocm->targets[device], list, mp_rocm_selection_rule,
                     rocm->targets[device]);
  uint32_t kernels = m->base.table.count ? m->base.table.count : 1;
  hipFunction_t* functions = calloc(kernels, sizeof *functions);
  if (!functions) return mp_out_of_memory("ROCm functions");
  hipError_t first = hipSuccess;
  uint32_t first_variant = 0;
  for (uint32_t r = 0; r < usable; ++r) {
    uint32_t v = order[r];
    hipModule_t image = NULL;
    const uint8_t* code;
    mp_status_t decoded = mp_rocm_code_object(m, v, &code);
    if (decoded != MP_OK) {
      free(functions);
      return decoded;
    }
    hipError_t result = rocm->hip.ModuleLoadData(&image, code);
    if (result == hipSuccess) {
      m->images[device] = image;
      m->functions[device] = functions;
      m->chosen[device] = (int32_t)v + 1;
      return MP_OK;
    }
    if (!image_rejected(result)) {
      free(functions);
      return mp_rocm_fail(result, "loading a ROCm code object (hipModuleLoadData)");
    }
    if (first == hipSuccess) {
      first = result;
      first_variant = v;
    }
  }
  free(functions);
  return mp_errorf(MP_ERR_UNAVAILABLE,
                   "no code object for this GPU: ROCm device %d (%s) refused the %s code object "
                   "and every other that fits: %s [code %d]; rebuild with a target for %s (code "
                   "objects: %s)",
                   (int)device, rocm->targets[device], m->variants[first_variant].target,
                   mp_rocm_error_name(first), (int)first, rocm->targets[device], list);
}

static mp_status_t function_locked(mp_rocm_module_t* m, const mp_rocm_t* rocm, int32_t device,
                                   uint32_t k) {
  if (!m->functions[device]) MP_RETURN_IF_ERROR(load_locked(m, rocm, device));
  if (m->functions[device][k]) return MP_OK;
  const mp_kernel_info_t* info = &m->base.table.kernels[k];
  hipError_t result =
      rocm->hip.ModuleGetFunction(&m->functions[device][k], m->images[device],
                                  mp_kernel_symbol(info));
  if (result == hipSuccess) return MP_OK;
  m->functions[device][k] = NULL;
  return mp_errorf(result == hipErrorNotFound ? MP_ERR_NOT_FOUND : MP_ERR_RUNTIME,
                   "ROCm kernel '%s' is declared in the module's function info but its %s code "
                   "object does not define '%s' (%s)",
                   info->name, m->variants[m->chosen[device] - 1].target, mp_kernel_symbol(info),
                   mp_rocm_error_name(result));
}

/* ---- calling ----------------------------------------------------------------------------------
 */

/* The kernel's explicit arguments must fit the argument segment a launch passes. */
static mp_status_t check_kernel(const mp_kernel_call_t* call) {
  const mp_rocm_module_t* m = call->ref->module;
  const mp_rocm_layout_t* layout = &m->layouts[call->ref->kernel];
  if (layout->explicit_size > MAX_KERNARG)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: %u bytes of arguments (at most %d)",
                     call->info->name, layout->explicit_size, MAX_KERNARG);
  return MP_OK;
}

static const uint64_t launch_defaults[MP_ROCM_SLOT_COUNT] = {1, 1, 1, 1, 1, 1, 0};
static const uint64_t launch_limits[MP_ROCM_SLOT_COUNT] = {
    UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 1024, 1024, INT32_MAX};
/* The arrays' device is checked once the runtime is loaded (below). */
static const mp_kernel_call_rule_t call_rule = {
    .slot_count = MP_ROCM_SLOT_COUNT,
    .defaults = launch_defaults,
    .limits = launch_limits,
    .check_kernel = check_kernel,
};

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  const mp_kernel_ref_t* f = self;
  mp_rocm_module_t* m = f->module;
  const mp_rocm_layout_t* layout = &m->layouts[f->kernel];
  /* Checks that need no runtime first: kinds, dtypes, launch dimensions. */
  mp_kernel_call_t call;
  MP_RETURN_IF_ERROR(mp_kernel_call_check(f, args, num_args, &call_rule, &call));
  const mp_kernel_info_t* info = call.info;
  const mp_value_t* const* bound = call.params;
  const uint64_t* launch = call.launch;
  _Alignas(16) uint8_t kernarg[MAX_KERNARG];
  memset(kernarg, 0, sizeof kernarg);
  for (uint32_t i = 0; i < info->arg_count; ++i)
    if (info->args[i].kind == MP_KERNEL_ARG_SCALAR)
      memcpy(kernarg + layout->offsets[i], &call.scalars[i],
             layout->sizes[i] < call.sizes[i] ? layout->sizes[i] : call.sizes[i]);
  if (!launch[3] || !launch[4] || !launch[5])
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: block dimensions (threadIdx.x|y|z) must be positive, got %" PRIu64
                     " %" PRIu64 " %" PRIu64,
                     info->name, launch[3], launch[4], launch[5]);

  /* Now the runtime, and the device: that of the first array argument. */
  const mp_rocm_t* rocm = mp_rocm();
  if (!rocm) return mp_error_code();
  int32_t device = -1;
  MP_RETURN_IF_ERROR(mp_kernel_check_devices(info, bound, &mp_rocm_device,
                                             "modpack.array(x, device=\"rocm:0\") or pass a "
                                             "ROCm array through DLPack",
                                             &device));
  for (uint32_t i = 0; i < info->arg_count; ++i)
    if (info->args[i].kind == MP_KERNEL_ARG_BUFFER && bound[i]->type_code == MP_TYPE_DLTENSOR) {
      uint64_t pointer =
          (uint64_t)(uintptr_t)bound[i]->v_tensor->data + bound[i]->v_tensor->byte_offset;
      memcpy(kernarg + layout->offsets[i], &pointer, 8);
    }
  if (device < 0) { /* no array: the thread's current device */
    int current = 0;
    device = rocm->hip.GetDevice(&current) == hipSuccess && current >= 0 &&
                     current < rocm->device_count
                 ? current
                 : 0;
  }
  if (!launch[0] || !launch[1] || !launch[2]) return MP_OK; /* an empty grid: nothing to run */

  int saved;
  MP_RETURN_IF_ERROR(mp_rocm_enter(device, &saved));
  pthread_mutex_lock(&m->base.lock);
  mp_status_t status = function_locked(m, rocm, device, f->kernel);
  hipFunction_t function = status == MP_OK ? m->functions[device][f->kernel] : NULL;
  uint32_t segment =
      status == MP_OK ? m->variants[m->chosen[device] - 1].facts[f->kernel].kernarg_segment_size : 0;
  pthread_mutex_unlock(&m->base.lock);
  if (status == MP_OK && segment > sizeof kernarg)
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: an argument segment of %u bytes (at most %d)",
                       info->name, segment, MAX_KERNARG);
  if (status == MP_OK) {
    size_t size = layout->explicit_size;
    void* extra[] = {MP_HIP_LAUNCH_PARAM_BUFFER_POINTER, kernarg, MP_HIP_LAUNCH_PARAM_BUFFER_SIZE,
                     &size, MP_HIP_LAUNCH_PARAM_END};
    hipError_t result = rocm->hip.ModuleLaunchKernel(
        function, (unsigned)launch[0], (unsigned)launch[1], (unsigned)launch[2],
        (unsigned)launch[3], (unsigned)launch[4], (unsigned)launch[5],
        (unsigned)launch[MP_ROCM_SLOT_SHARED],
        (hipStream_t)mp_device_get_stream((DLDevice){kDLROCM, device}), NULL, extra);
    if (result != hipSuccess) {
      char what[256];
      snprintf(what, sizeof what,
               "%s: ROCm launch (grid %" PRIu64 ",%" PRIu64 ",%" PRIu64 " block %" PRIu64
               ",%" PRIu64 ",%" PRIu64 " dynamic LDS %" PRIu64 " bytes)",
               info->name, launch[0], launch[1], launch[2], launch[3], launch[4], launch[5],
               launch[MP_ROCM_SLOT_SHARED]);
      status = mp_rocm_fail(result, what);
    }
  }
  mp_rocm_leave(saved);
  return status;
}

/* ---- describing and loading -------------------------------------------------------------------
 */

/* The code objects (target ID, offset in the payload and size, so tools can write them out, and
 * each kernel's facts), the kernels' argument layouts, signatures and launch tags. */
static mp_status_t rocm_describe(mp_module_t* self, char* buffer, uint64_t capacity,
                                 uint64_t* out_length) {
  mp_rocm_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"head_bytes\": %" PRIu64 ", \"variants\": [", m->head_size);
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    const mp_rocm_variant_t* variant = &m->variants[v];
    mp_json_printf(&j, "%s{\"arch\": ", v ? ", " : "");
    mp_json_string(&j, variant->target);
    char code[160];
    mp_code_describe(&variant->code, code, sizeof code);
    mp_json_printf(&j, ", \"kind\": \"hsaco\", \"offset\": %" PRIu64 ", \"size\": %" PRIu64
                       ", %s, \"kernel_facts\": [",
                   (uint64_t)(variant->data - m->base.payload), variant->size, code);
    for (uint32_t k = 0; k < m->base.table.count; ++k) {
      const mp_rocm_facts_t* f = &variant->facts[k];
      mp_json_printf(&j,
                     "%s{\"kernarg_segment_size\": %u, \"group_segment_fixed_size\": %u, "
                     "\"private_segment_fixed_size\": %u, \"max_flat_workgroup_size\": %u, "
                     "\"wavefront_size\": %u, \"sgpr_count\": %u, \"vgpr_count\": %u}",
                     k ? ", " : "", f->kernarg_segment_size, f->group_segment_fixed_size,
                     f->private_segment_fixed_size, f->max_flat_workgroup_size, f->wavefront_size,
                     f->sgpr_count, f->vgpr_count);
    }
    mp_json_printf(&j, "]}");
  }
  mp_json_printf(&j, "], \"layouts\": [");
  for (uint32_t k = 0; k < m->base.table.count; ++k) {
    const mp_rocm_layout_t* layout = &m->layouts[k];
    mp_json_printf(&j, "%s{\"kernel\": ", k ? ", " : "");
    mp_json_string(&j, m->base.table.kernels[k].name);
    mp_json_printf(&j, ", \"explicit_size\": %u, \"offsets\": [", layout->explicit_size);
    for (uint32_t a = 0; a < m->base.table.kernels[k].arg_count; ++a)
      mp_json_printf(&j, "%s%u", a ? ", " : "", layout->offsets[a]);
    mp_json_printf(&j, "]}");
  }
  mp_json_printf(&j, "], ");
  mp_kernel_table_describe(&j, &m->base.table);
  *out_length = j.length;
  return MP_OK;
}

static const mp_module_vtable_t rocm_vtable = {
    .get_function = mp_kernel_table_get_function,
    .destroy = rocm_destroy,
    .function_count = mp_kernel_table_function_count,
    .function_name = mp_kernel_table_function_name,
    .describe = rocm_describe,
};

static const mp_device_loader_t rocm_loader = {
    .kind = &mp_rocm_kind,
    .vtable = &rocm_vtable,
    .call = call_kernel,
    .state_size = sizeof(mp_rocm_module_t),
    .parse = mp_rocm_payload_parse,
};

static mp_status_t load_rocm(void* user_data, const mp_loader_args_t* args,
                             mp_module_t** out_module) {
  (void)user_data;
  return mp_device_module_load(&rocm_loader, args, out_module);
}

const mp_kind_t mp_rocm_kind = {
    .type_key = "rocm",
    .load = load_rocm,
    .device = &mp_rocm_device,
    .launch_tags = launch_tags,
    .launch_tag_count = MP_ROCM_SLOT_COUNT,
    .preflight = &mp_rocm_preflight,
    .code_frames = true,
};
