/* The "opencl" module kind: OpenCL C source (plus optional prebuilt binaries per device) and a
 * function-info record per kernel; the payload layout is in modpack/kinds/opencl.h. Loading
 * parses the payload only (opencl_payload.c, through kinds/common's device loader): no OpenCL
 * call, so a library with OpenCL modules loads on machines
 * without OpenCL. Programs are built lazily, per device, on the first call (opencl_program.c);
 * kernels are cached per device.
 *
 * A kernel function takes its declared arguments (arrays on an OpenCL device for buffers,
 * numbers for scalars) followed by one integer per launch tag ("global.x|y|z", "local.x|y|z";
 * a local size of 0 lets the driver choose). */
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "kinds/common/kernel_call.h"
#include "kinds/opencl/opencl_module.h"

/* The launch slots, in the order of the kind's launch tags. */
enum { SLOT_GLOBAL_X = 0, SLOT_LOCAL_X = 3, SLOT_COUNT = 6 };
static const char* const launch_tags[SLOT_COUNT] = {"global.x", "global.y", "global.z",
                                                    "local.x",  "local.y",  "local.z"};

typedef mp_opencl_module_t opencl_module_t;

extern const mp_kind_t mp_opencl_kind; /* this kind's descriptor, at the end */
extern const mp_preflight_api_t mp_opencl_preflight; /* opencl_preflight.c */

_Static_assert(offsetof(opencl_module_t, base) == 0, "the device module base must come first");

static void opencl_destroy(void* impl) {
  opencl_module_t* m = impl;
  const mp_opencl_t* cl = NULL;
  for (int d = 0; d < MP_OPENCL_MAX_DEVICES; ++d) {
    if (!m->programs[d]) continue;
    if (!cl) cl = mp_opencl(); /* a program exists, so OpenCL was initialised */
    for (uint32_t k = 0; m->kernels[d] && k < m->base.table.count; ++k)
      if (m->kernels[d][k]) cl->cl.ReleaseKernel(m->kernels[d][k]);
    free(m->kernels[d]);
    cl->cl.ReleaseProgram(m->programs[d]);
  }
  mp_opencl_payload_free(m);
  mp_device_module_free(&m->base);
  free(m);
}

/* ---- building on a device ------------------------------------------------------------------ */

/* Builds the program for |device| and creates every kernel. Caller holds the lock. After a
 * build from source *|out_keep| is true, and |slot| (the kernel cache's) waits for the first
 * launch: the caller then keeps the binary (mp_opencl_program_keep). */
static mp_status_t build_locked(opencl_module_t* m, const mp_opencl_t* cl, int32_t device,
                                mp_kernel_cache_slot_t* slot, bool* out_keep) {
  cl_program program;
  *out_keep = false;
  const uint8_t* source = (const uint8_t*)m->source;
  if (!source)
    MP_RETURN_IF_ERROR_PREFIX(mp_code_get(&m->source_code, NULL, NULL, &source),
                              "opencl module: its source");
  MP_RETURN_IF_ERROR(mp_opencl_program_build(cl, device, (const char*)source, m->source_size,
                                             m->build_options, m->binaries, m->binary_count,
                                             m->base.load_flags, m->base.library_path, slot,
                                             out_keep, &program));
  cl_kernel* kernels = calloc(m->base.table.count ? m->base.table.count : 1, sizeof *kernels);
  if (!kernels) {
    if (*out_keep) mp_kernel_cache_close(slot);
    *out_keep = false;
    cl->cl.ReleaseProgram(program);
    return mp_out_of_memory("OpenCL kernels");
  }
  for (uint32_t k = 0; k < m->base.table.count; ++k) {
    cl_int err;
    kernels[k] = cl->cl.CreateKernel(program, mp_kernel_symbol(&m->base.table.kernels[k]), &err);
    if (!kernels[k]) {
      for (uint32_t j = 0; j < k; ++j) cl->cl.ReleaseKernel(kernels[j]);
      free(kernels);
      if (*out_keep) mp_kernel_cache_close(slot);
      *out_keep = false;
      cl->cl.ReleaseProgram(program);
      return mp_errorf(MP_ERR_NOT_FOUND,
                       "OpenCL kernel '%s' is declared in the module's function info but the "
                       "program does not define it: %s (%d)",
                       m->base.table.kernels[k].name, mp_cl_error_name(err), (int)err);
    }
  }
  m->kernels[device] = kernels;
  m->programs[device] = program;
  return MP_OK;
}

/* ---- calling ------------------------------------------------------------------------------- */

static mp_status_t set_arg(const mp_opencl_t* cl, cl_kernel kernel, const mp_kernel_info_t* info,
                           uint32_t index, size_t size, const void* value) {
  cl_int err = cl->cl.SetKernelArg(kernel, index, size, value);
  if (err != CL_SUCCESS)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u rejected by OpenCL: %s (%d)",
                     info->name, index, mp_cl_error_name(err), (int)err);
  return MP_OK;
}

/* An array argument beyond the shared checks: OpenCL takes whole buffers. */
static mp_status_t check_array(const mp_kernel_call_t* call, uint32_t i) {
  const mp_value_t* value = call->params[i];
  if (value->type_code == MP_TYPE_DLTENSOR && value->v_tensor->byte_offset != 0)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u has a byte offset; OpenCL takes whole buffers",
                     call->info->name, i);
  return MP_OK;
}

static const uint64_t launch_defaults[SLOT_COUNT] = {1, 1, 1, 0, 0, 0};
static const uint64_t launch_limits[SLOT_COUNT] = {SIZE_MAX, SIZE_MAX, SIZE_MAX,
                                                   SIZE_MAX, SIZE_MAX, SIZE_MAX};
static const mp_kernel_call_rule_t call_rule = {
    .slot_count = SLOT_COUNT,
    .defaults = launch_defaults,
    .limits = launch_limits,
    .device = &mp_opencl_device,
    .how_to_create = "modpack.array(x, device=\"opencl:0\")",
    .check_array = check_array,
};

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  const mp_kernel_ref_t* ref = self;
  opencl_module_t* m = ref->module;
  /* Checks that need no driver first: kinds, dtypes, devices, launch dimensions. */
  mp_kernel_call_t call;
  MP_RETURN_IF_ERROR(mp_kernel_call_check(ref, args, num_args, &call_rule, &call));
  const mp_kernel_info_t* info = call.info;
  const mp_value_t* const* params = call.params;
  int32_t device = call.device;
  size_t global[3], local[3];
  for (int d = 0; d < 3; ++d) {
    global[d] = (size_t)call.launch[SLOT_GLOBAL_X + d];
    local[d] = (size_t)call.launch[SLOT_LOCAL_X + d];
  }
  bool any_local = local[0] || local[1] || local[2];
  if (any_local && !(local[0] && local[1] && local[2]))
    return mp_errorf(
        MP_ERR_INVALID_ARGUMENT,
        "%s: local sizes must be all 0 (driver chooses) or all positive, got %zu %zu %zu",
        info->name, local[0], local[1], local[2]);
  if (!global[0] || !global[1] || !global[2]) return MP_OK; /* nothing to run */

  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  if (device < 0) device = 0;
  if ((cl_uint)device >= cl->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "OpenCL device %d does not exist", (int)device);

  pthread_mutex_lock(&m->base.lock);
  mp_kernel_cache_slot_t slot;
  bool keep = false; /* built from source: the binary is kept once this launch has run */
  mp_status_t status = m->programs[device] ? MP_OK : build_locked(m, cl, device, &slot, &keep);
  cl_kernel kernel = status == MP_OK ? m->kernels[device][ref->kernel] : NULL;
  for (uint32_t i = 0; status == MP_OK && i < info->arg_count; ++i) {
    switch (info->args[i].kind) {
      case MP_KERNEL_ARG_SCALAR:
        status = set_arg(cl, kernel, info, i, call.sizes[i], &call.scalars[i]);
        break;
      case MP_KERNEL_ARG_LOCAL:
        status = set_arg(cl, kernel, info, i, call.sizes[i], NULL); /* __local: a size */
        break;
      default: { /* a buffer, NULL for None and for MP_KERNEL_ARG_NULL */
        cl_mem mem = params[i] && params[i]->type_code == MP_TYPE_DLTENSOR
                         ? (cl_mem)params[i]->v_tensor->data
                         : NULL;
        status = set_arg(cl, kernel, info, i, sizeof mem, &mem);
      }
    }
  }
  if (status == MP_OK) {
    cl_int err = cl->cl.EnqueueNDRangeKernel(cl->queues[device], kernel, 3, NULL, global,
                                             any_local ? local : NULL, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      status = mp_errorf(MP_ERR_RUNTIME,
                         "%s: OpenCL launch (global %zu,%zu,%zu local %zu,%zu,%zu) "
                         "failed: %s (%d)",
                         info->name, global[0], global[1], global[2], local[0], local[1], local[2],
                         mp_cl_error_name(err), (int)err);
  }
  if (keep) {
    /* This first launch waited for, so that what the driver compiled for it (PoCL compiles a
     * kernel for its launch's sizes when it runs) is in the binary the cache keeps. */
    if (status == MP_OK) cl->cl.Finish(cl->queues[device]);
    mp_opencl_program_keep(cl, device, m->programs[device], &slot);
  }
  pthread_mutex_unlock(&m->base.lock);
  return status;
}

/* The source's and each prebuilt binary's place in the payload (tools write them out), the
 * build options, kernel signatures and launch tags. */
static mp_status_t opencl_describe(mp_module_t* self, char* buffer, uint64_t capacity,
                                   uint64_t* out_length) {
  opencl_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"source_bytes\": %" PRIu64 ", \"source_offset\": %" PRIu64
                     ", \"build_options\": ",
                 m->source_size, m->source_offset);
  mp_json_string(&j, m->build_options ? m->build_options : "");
  char code[160];
  mp_code_describe(&m->source_code, code, sizeof code);
  mp_json_printf(&j, ", \"source_code\": {%s}, ", code);
  mp_kernel_table_describe(&j, &m->base.table);
  mp_json_printf(&j, ", \"binaries\": [");
  for (uint32_t b = 0; b < m->binary_count; ++b) {
    mp_json_printf(&j, "%s{\"device\": ", b ? ", " : "");
    mp_json_string(&j, m->binaries[b].key);
    mp_code_describe(&m->binaries[b].code, code, sizeof code);
    mp_json_printf(&j, ", \"offset\": %" PRIu64 ", \"size\": %" PRIu64 ", %s}",
                   (uint64_t)(m->binaries[b].data - m->base.payload), m->binaries[b].size, code);
  }
  mp_json_printf(&j, "]");
  *out_length = j.length;
  return MP_OK;
}

static const mp_module_vtable_t opencl_vtable = {
    .get_function = mp_kernel_table_get_function,
    .destroy = opencl_destroy,
    .function_count = mp_kernel_table_function_count,
    .function_name = mp_kernel_table_function_name,
    .describe = opencl_describe,
};

static const mp_device_loader_t opencl_loader = {
    .kind = &mp_opencl_kind,
    .vtable = &opencl_vtable,
    .call = call_kernel,
    .state_size = sizeof(opencl_module_t),
    .parse = mp_opencl_payload_parse,
};

static mp_status_t load_opencl(void* user_data, const mp_loader_args_t* args,
                               mp_module_t** out_module) {
  (void)user_data;
  return mp_device_module_load(&opencl_loader, args, out_module);
}

const mp_kind_t mp_opencl_kind = {
    .type_key = "opencl",
    .load = load_opencl,
    .device = &mp_opencl_device,
    .launch_tags = launch_tags,
    .launch_tag_count = SLOT_COUNT,
    .preflight = &mp_opencl_preflight,
    .code_frames = true,
};
