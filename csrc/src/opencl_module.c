/* The "opencl" module kind: OpenCL C source (plus optional prebuilt binaries per device) and a
 * function-info record per kernel. Programs are built lazily, per device, on the first call;
 * kernels are cached; a failed build reports the compiler's log.
 *
 * Payload (little-endian):
 *   u32 version (=1)  u32 reserved (=0)
 *   u64 source_size, source bytes (OpenCL C)
 *   u32 kernel_count, kernel_count function-info records (see kernel_info.c)
 *   u32 binary_count, each: u32 key_size, key ("platform/device/driver"), u64 size, bytes
 *
 * Calling convention of a kernel function: its declared arguments (arrays on an OpenCL device
 * for buffers, numbers for scalars) followed by one integer per launch tag ("global.x|y|z",
 * "local.x|y|z"; a local size of 0 lets the driver choose). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modpack/opencl.h"
#include "opencl_abi.h"

enum { OPENCL_PAYLOAD_VERSION = 1 };

typedef struct {
  char* key;           /* owned copy */
  const uint8_t* data; /* in the library mapping */
  uint64_t size;
} opencl_binary_t;

typedef struct {
  char* source;
  uint64_t source_size;
  uint32_t kernel_count;
  mp_kernel_info_t* kernels;
  int8_t (*launch_slots)[MP_MAX_LAUNCH_TAGS]; /* per kernel, per tag: 0-2 global, 3-5 local */
  uint32_t binary_count;
  opencl_binary_t* binaries;
  pthread_mutex_t lock; /* guards lazy builds and clSetKernelArg + enqueue on shared kernels */
  cl_program programs[MP_OPENCL_MAX_DEVICES];
  cl_kernel* kernel_objects[MP_OPENCL_MAX_DEVICES]; /* [device][kernel] */
} opencl_module_t;

typedef struct {
  opencl_module_t* module;
  uint32_t kernel;
} opencl_function_t;

static void opencl_destroy(void* impl) {
  opencl_module_t* m = impl;
  const mp_opencl_t* cl = NULL;
  for (int d = 0; d < MP_OPENCL_MAX_DEVICES; ++d) {
    if (!m->programs[d]) continue;
    if (!cl) cl = mp_opencl(); /* a program exists, so OpenCL was initialised */
    for (uint32_t k = 0; m->kernel_objects[d] && k < m->kernel_count; ++k)
      if (m->kernel_objects[d][k]) cl->cl.ReleaseKernel(m->kernel_objects[d][k]);
    free(m->kernel_objects[d]);
    cl->cl.ReleaseProgram(m->programs[d]);
  }
  for (uint32_t k = 0; m->kernels && k < m->kernel_count; ++k) mp_kernel_info_free(&m->kernels[k]);
  free(m->kernels);
  free(m->launch_slots);
  for (uint32_t b = 0; b < m->binary_count; ++b) free(m->binaries[b].key);
  free(m->binaries);
  free(m->source);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* ---- building ------------------------------------------------------------------------------ */

/* The build error, with the compiler's log. The log's size is queried first: OpenCL rejects a
 * buffer smaller than the log (CL_INVALID_VALUE), so a fixed buffer would lose long logs, which
 * are the ones that matter. The message carries the log's first bytes (the first errors) and
 * says how much was left out. */
static mp_status_t build_failed(const mp_opencl_t* cl, cl_program program, int32_t device,
                                cl_int err) {
  enum { MAX_SHOWN_LOG = 3000 };
  cl_device_id dev = cl->devices[device];
  size_t size = 0;
  char* log = NULL;
  if (cl->cl.GetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) ==
          CL_SUCCESS &&
      size > 0 && (log = malloc(size + 1)) != NULL) {
    if (cl->cl.GetProgramBuildInfo(program, dev, CL_PROGRAM_BUILD_LOG, size, log, NULL) ==
        CL_SUCCESS) {
      log[size] = '\0';
    } else {
      log[0] = '\0';
    }
  }
  size_t length = log ? strlen(log) : 0;
  while (length > 0 && (log[length - 1] == '\n' || log[length - 1] == ' ')) --length;
  size_t shown = length;
  if (shown > MAX_SHOWN_LOG) {
    shown = MAX_SHOWN_LOG;
    while (shown > 0 && ((unsigned char)log[shown] & 0xC0u) == 0x80u) --shown; /* whole UTF-8 */
  }
  const char* text = shown ? log : "(empty)";
  char more[64] = "";
  if (shown < length) snprintf(more, sizeof more, "\n... (%zu more bytes)", length - shown);
  mp_status_t status = mp_errorf(MP_ERR_RUNTIME,
                                 "OpenCL program failed to build for device %d (%s): %s (%d)\n"
                                 "build log:\n%.*s%s",
                                 (int)device, cl->device_keys[device], mp_cl_error_name(err),
                                 (int)err, (int)(shown ? shown : strlen(text)), text, more);
  free(log);
  return status;
}

/* Builds the program for |device| (binary when one matches, else source). Caller holds lock. */
static mp_status_t build_locked(opencl_module_t* m, const mp_opencl_t* cl, int32_t device) {
  cl_int err = CL_SUCCESS;
  cl_program program = NULL;
  cl_device_id dev = cl->devices[device];
  for (uint32_t b = 0; b < m->binary_count && !program; ++b) {
    if (strcmp(m->binaries[b].key, cl->device_keys[device]) != 0) continue;
    size_t size = m->binaries[b].size;
    const unsigned char* data = m->binaries[b].data;
    cl_int binary_status = CL_SUCCESS;
    program =
        cl->cl.CreateProgramWithBinary(cl->context, 1, &dev, &size, &data, &binary_status, &err);
    if (program && cl->cl.BuildProgram(program, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
      cl->cl.ReleaseProgram(program); /* a stale binary: fall back to the source */
      program = NULL;
    }
  }
  if (!program) {
    const char* source = m->source;
    size_t length = m->source_size;
    program = cl->cl.CreateProgramWithSource(cl->context, 1, &source, &length, &err);
    if (!program)
      return mp_errorf(MP_ERR_RUNTIME, "cannot create an OpenCL program: %s (%d)",
                       mp_cl_error_name(err), (int)err);
    err = cl->cl.BuildProgram(program, 1, &dev, "", NULL, NULL);
    if (err != CL_SUCCESS) {
      mp_status_t status = build_failed(cl, program, device, err);
      cl->cl.ReleaseProgram(program);
      return status;
    }
  }
  cl_kernel* kernels = calloc(m->kernel_count ? m->kernel_count : 1, sizeof *kernels);
  if (!kernels) {
    cl->cl.ReleaseProgram(program);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t k = 0; k < m->kernel_count; ++k) {
    kernels[k] = cl->cl.CreateKernel(program, m->kernels[k].name, &err);
    if (!kernels[k]) {
      for (uint32_t j = 0; j < k; ++j) cl->cl.ReleaseKernel(kernels[j]);
      free(kernels);
      cl->cl.ReleaseProgram(program);
      return mp_errorf(MP_ERR_NOT_FOUND,
                       "OpenCL kernel '%s' is declared in the module's function info but the "
                       "program does not define it: %s (%d)",
                       m->kernels[k].name, mp_cl_error_name(err), (int)err);
    }
  }
  m->kernel_objects[device] = kernels;
  m->programs[device] = program;
  return MP_OK;
}

/* ---- calling ------------------------------------------------------------------------------- */

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  opencl_function_t* f = self;
  opencl_module_t* m = f->module;
  const mp_kernel_info_t* info = &m->kernels[f->kernel];
  mp_status_t status = mp_kernel_check_count(info, num_args);
  if (status != MP_OK) return status;
  mp_kernel_scalar_t scalars[MP_MAX_KERNEL_ARGS];
  size_t scalar_sizes[MP_MAX_KERNEL_ARGS];
  for (uint32_t i = 0; i < info->arg_count && status == MP_OK; ++i) {
    if (info->args[i].kind == MP_ARG_SCALAR) {
      status = mp_kernel_pack_scalar(info, i, &args[i], &scalars[i], &scalar_sizes[i]);
    } else if ((status = mp_kernel_check_buffer(info, i, &args[i])) == MP_OK &&
               args[i].v_tensor->byte_offset != 0) {
      status =
          mp_errorf(MP_ERR_INVALID_ARGUMENT,
                    "%s: argument %u has a byte offset; OpenCL takes whole buffers", info->name, i);
    }
  }
  int32_t device = -1;
  if (status == MP_OK)
    status = mp_kernel_check_devices(info, args, kDLOpenCL, "modpack.array(x, device=\"opencl:0\")",
                                     &device);
  if (status != MP_OK) return status;
  size_t global[3] = {1, 1, 1}, local[3] = {0, 0, 0};
  for (uint32_t t = 0; t < info->launch_count; ++t) {
    const mp_value_t* v = &args[info->arg_count + t];
    if (v->type_code != MP_TYPE_INT || v->v_int64 < 0)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: launch argument %u (%s) must be a non-negative int", info->name,
                       info->arg_count + t, info->launch_tags[t]);
    int8_t slot = m->launch_slots[f->kernel][t];
    if (slot < 3)
      global[slot] = (size_t)v->v_int64;
    else
      local[slot - 3] = (size_t)v->v_int64;
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

  pthread_mutex_lock(&m->lock);
  status = m->programs[device] ? MP_OK : build_locked(m, cl, device);
  cl_kernel kernel = status == MP_OK ? m->kernel_objects[device][f->kernel] : NULL;
  for (uint32_t i = 0; status == MP_OK && i < info->arg_count; ++i) {
    if (info->args[i].kind == MP_ARG_BUFFER) {
      cl_mem mem = args[i].v_tensor->data;
      cl_int err = cl->cl.SetKernelArg(kernel, i, sizeof mem, &mem);
      if (err != CL_SUCCESS)
        status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u rejected by OpenCL: %s (%d)",
                           info->name, i, mp_cl_error_name(err), (int)err);
    } else {
      cl_int err = cl->cl.SetKernelArg(kernel, i, scalar_sizes[i], &scalars[i]);
      if (err != CL_SUCCESS)
        status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u rejected by OpenCL: %s (%d)",
                           info->name, i, mp_cl_error_name(err), (int)err);
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
  pthread_mutex_unlock(&m->lock);
  return status;
}

static mp_status_t opencl_get_function(mp_module_t* self, const char* name,
                                       mp_function_t** out_function) {
  opencl_module_t* m = mp_module_impl(self);
  for (uint32_t k = 0; k < m->kernel_count; ++k) {
    if (strcmp(m->kernels[k].name, name) != 0) continue;
    opencl_function_t* f = malloc(sizeof *f);
    if (!f) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    f->module = m;
    f->kernel = k;
    return mp_function_create(call_kernel, f, free, self, out_function);
  }
  return MP_OK;
}

/* ---- loading ------------------------------------------------------------------------------- */

static mp_status_t launch_slot(const char* tag, int8_t* out) {
  static const char* const tags[] = {"global.x", "global.y", "global.z",
                                     "local.x",  "local.y",  "local.z"};
  for (int8_t i = 0; i < 6; ++i) {
    if (strcmp(tag, tags[i]) == 0) {
      *out = i;
      return MP_OK;
    }
  }
  return mp_errorf(MP_ERR_FORMAT,
                   "opencl payload: unknown launch tag '%s' (expected global.x|y|z "
                   "or local.x|y|z)",
                   tag);
}

static mp_status_t parse(opencl_module_t* m, mp_const_byte_span_t payload) {
  mp_reader_t r = {payload.data, payload.size, 0, "opencl payload"};
  uint32_t version, reserved, count;
  uint64_t source_size;
  const uint8_t* source;
  if (!mp_read_u32(&r, &version) || !mp_read_u32(&r, &reserved))
    return mp_reader_error(&r, "header");
  if (version != OPENCL_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "opencl payload version %u is not supported (this runtime "
                     "reads %d); upgrade modpack",
                     version, OPENCL_PAYLOAD_VERSION);
  if (!mp_read_u64(&r, &source_size) || !mp_read_bytes(&r, source_size, &source))
    return mp_reader_error(&r, "source");
  m->source = malloc(source_size + 1);
  if (!m->source) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(m->source, source, source_size);
  m->source[source_size] = '\0';
  m->source_size = source_size;
  if (!mp_read_u32(&r, &count) || count > r.size / 8) return mp_reader_error(&r, "kernel count");
  m->kernels = calloc(count ? count : 1, sizeof *m->kernels);
  m->launch_slots = calloc(count ? count : 1, sizeof *m->launch_slots);
  if (!m->kernels || !m->launch_slots) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t k = 0; k < count; ++k) {
    mp_status_t status = mp_kernel_info_read(&r, &m->kernels[k]);
    if (status != MP_OK) return status;
    m->kernel_count = k + 1;
    for (uint32_t t = 0; t < m->kernels[k].launch_count; ++t) {
      status = launch_slot(m->kernels[k].launch_tags[t], &m->launch_slots[k][t]);
      if (status != MP_OK) return status;
    }
  }
  if (!mp_read_u32(&r, &count) || count > r.size / 12) return mp_reader_error(&r, "binary count");
  m->binaries = calloc(count ? count : 1, sizeof *m->binaries);
  if (!m->binaries) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t b = 0; b < count; ++b) {
    uint32_t key_size;
    const uint8_t* key;
    opencl_binary_t* bin = &m->binaries[b];
    if (!mp_read_u32(&r, &key_size) || key_size == 0 || key_size > 255 ||
        !mp_read_bytes(&r, key_size, &key) || !mp_read_u64(&r, &bin->size) ||
        !mp_read_bytes(&r, bin->size, &bin->data))
      return mp_reader_error(&r, "program binary");
    char* copy = malloc(key_size + 1);
    if (!copy) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(copy, key, key_size);
    copy[key_size] = '\0';
    bin->key = copy;
    m->binary_count = b + 1;
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "opencl payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

static uint64_t opencl_function_count(mp_module_t* self) {
  return ((opencl_module_t*)mp_module_impl(self))->kernel_count;
}

static const char* opencl_function_name(mp_module_t* self, uint64_t index) {
  return ((opencl_module_t*)mp_module_impl(self))->kernels[index].name;
}

/* Kernel signatures, launch tags and the devices that have prebuilt binaries. */
static mp_status_t opencl_describe(mp_module_t* self, char* buffer, uint64_t capacity) {
  opencl_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"source_bytes\": %" PRIu64 ", \"kernels\": [", m->source_size);
  for (uint32_t k = 0; k < m->kernel_count; ++k) mp_json_kernel_info(&j, &m->kernels[k], k > 0);
  mp_json_printf(&j, "], \"binaries\": [");
  for (uint32_t b = 0; b < m->binary_count; ++b) {
    mp_json_printf(&j, "%s{\"device\": ", b ? ", " : "");
    mp_json_string(&j, m->binaries[b].key);
    mp_json_printf(&j, ", \"size\": %" PRIu64 "}", m->binaries[b].size);
  }
  mp_json_printf(&j, "]");
  return MP_OK;
}

static const mp_module_vtable_t opencl_vtable = {
    .get_function = opencl_get_function,
    .destroy = opencl_destroy,
    .function_count = opencl_function_count,
    .function_name = opencl_function_name,
    .describe = opencl_describe,
};

mp_status_t mp_load_opencl(void* user_data, const mp_loader_args_t* args,
                           mp_module_t** out_module) {
  (void)user_data;
  opencl_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  mp_status_t status = parse(m, args->payload);
  if (status != MP_OK) {
    opencl_destroy(m);
    return status;
  }
  /* No OpenCL call here: loading succeeds on machines without OpenCL; calls report it. */
  return mp_module_create("opencl", &opencl_vtable, m, out_module);
}

/* ---- prebuilt binaries --------------------------------------------------------------------- */

/* The binary of |program| (built) for |dev|. CL_PROGRAM_BINARY_SIZES and CL_PROGRAM_BINARIES
 * hold one entry per device of the program, in the order of CL_PROGRAM_DEVICES: a program
 * created from source over the whole context has every device of the context, so with several
 * devices the first entry need not be |dev|'s (and a one-entry buffer is too small). A NULL
 * entry in the CL_PROGRAM_BINARIES array tells OpenCL to skip that device. */
static mp_status_t program_binary(const mp_opencl_t* cl, cl_program program, cl_device_id dev,
                                  uint8_t* buffer, uint64_t capacity, uint64_t* out_size) {
  cl_uint count = 0;
  cl_int err = cl->cl.GetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof count, &count, NULL);
  if (err != CL_SUCCESS || count == 0)
    return mp_errorf(MP_ERR_RUNTIME, "cannot list the devices of an OpenCL program: %s (%d)",
                     mp_cl_error_name(err), (int)err);
  cl_device_id* devices = calloc(count, sizeof *devices);
  size_t* sizes = calloc(count, sizeof *sizes);
  unsigned char** binaries = calloc(count, sizeof *binaries);
  mp_status_t status = MP_OK;
  cl_uint index = count;
  if (!devices || !sizes || !binaries) {
    status = mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } else if ((err = cl->cl.GetProgramInfo(program, CL_PROGRAM_DEVICES, count * sizeof *devices,
                                          devices, NULL)) != CL_SUCCESS) {
    status = mp_errorf(MP_ERR_RUNTIME, "cannot list the devices of an OpenCL program: %s (%d)",
                       mp_cl_error_name(err), (int)err);
  } else {
    index = 0;
    while (index < count && devices[index] != dev) ++index;
    if (index == count)
      status = mp_errorf(MP_ERR_INTERNAL, "the OpenCL program does not list its device");
  }
  if (status == MP_OK &&
      ((err = cl->cl.GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, count * sizeof *sizes, sizes,
                                    NULL)) != CL_SUCCESS ||
       sizes[index] == 0))
    status = mp_errorf(MP_ERR_UNAVAILABLE, "the OpenCL driver offers no program binary (%s)",
                       mp_cl_error_name(err));
  if (status == MP_OK) {
    *out_size = sizes[index];
    if (buffer && capacity >= sizes[index]) {
      binaries[index] = buffer; /* the other entries stay NULL: not copied */
      err = cl->cl.GetProgramInfo(program, CL_PROGRAM_BINARIES, count * sizeof *binaries, binaries,
                                  NULL);
      if (err != CL_SUCCESS)
        status = mp_errorf(MP_ERR_RUNTIME, "cannot read the OpenCL program binary: %s (%d)",
                           mp_cl_error_name(err), (int)err);
    }
  }
  free(devices);
  free(sizes);
  free(binaries);
  return status;
}

mp_status_t mp_opencl_build_binary(const char* source, uint64_t source_size, int32_t device_id,
                                   uint8_t* buffer, uint64_t capacity, uint64_t* out_size) {
  *out_size = 0;
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  if (device_id < 0 || (cl_uint)device_id >= cl->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "OpenCL device %d does not exist (%u available)",
                     (int)device_id, cl->device_count);
  cl_int err;
  size_t length = source_size;
  cl_device_id dev = cl->devices[device_id];
  cl_program program = cl->cl.CreateProgramWithSource(cl->context, 1, &source, &length, &err);
  if (!program)
    return mp_errorf(MP_ERR_RUNTIME, "cannot create an OpenCL program: %s (%d)",
                     mp_cl_error_name(err), (int)err);
  err = cl->cl.BuildProgram(program, 1, &dev, "", NULL, NULL);
  mp_status_t status = err != CL_SUCCESS
                           ? build_failed(cl, program, device_id, err)
                           : program_binary(cl, program, dev, buffer, capacity, out_size);
  cl->cl.ReleaseProgram(program);
  return status;
}
