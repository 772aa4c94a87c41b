/* OpenCL as a device: loading libOpenCL, choosing the platform, memory and copies.
 *
 * The library is found with dlopen on first use ($MODPACK_OPENCL_LIBRARY, else
 * libOpenCL.so.1), so a machine without OpenCL loads every deploy.so and fails only when an
 * OpenCL function or array is used — with a message naming the fix. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/driver.h"
#include "kinds/opencl/opencl_abi.h"

static mp_opencl_t state;
static mp_outcome_t outcome;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

const char* mp_cl_error_name(cl_int code) {
  switch (code) {
    case -1:
      return "CL_DEVICE_NOT_FOUND";
    case -2:
      return "CL_DEVICE_NOT_AVAILABLE";
    case -3:
      return "CL_COMPILER_NOT_AVAILABLE";
    case -4:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5:
      return "CL_OUT_OF_RESOURCES";
    case -6:
      return "CL_OUT_OF_HOST_MEMORY";
    case -11:
      return "CL_BUILD_PROGRAM_FAILURE";
    case -30:
      return "CL_INVALID_VALUE";
    case -33:
      return "CL_INVALID_DEVICE";
    case -34:
      return "CL_INVALID_CONTEXT";
    case -36:
      return "CL_INVALID_COMMAND_QUEUE";
    case -38:
      return "CL_INVALID_MEM_OBJECT";
    case -42:
      return "CL_INVALID_BINARY";
    case -44:
      return "CL_INVALID_PROGRAM";
    case -45:
      return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46:
      return "CL_INVALID_KERNEL_NAME";
    case -48:
      return "CL_INVALID_KERNEL";
    case -49:
      return "CL_INVALID_ARG_INDEX";
    case -50:
      return "CL_INVALID_ARG_VALUE";
    case -51:
      return "CL_INVALID_ARG_SIZE";
    case -52:
      return "CL_INVALID_KERNEL_ARGS";
    case -53:
      return "CL_INVALID_WORK_DIMENSION";
    case -54:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case -55:
      return "CL_INVALID_WORK_ITEM_SIZE";
    case -56:
      return "CL_INVALID_GLOBAL_OFFSET";
    case -61:
      return "CL_INVALID_BUFFER_SIZE";
    case -63:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "CL error";
  }
}

static void initialise(void) {
  const char* path = getenv("MODPACK_OPENCL_LIBRARY");
  if (!path || !*path) path = "libOpenCL.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "OpenCL is not available: cannot load %s (%s); install an OpenCL ICD loader and a "
        "driver, e.g. `apt-get install ocl-icd-libopencl1 pocl-opencl-icd`",
        path, dlerror());
    return;
  }
  mp_cl_api_t* cl = &state.cl;
  const mp_symbol_slot_t entries[] = {
#define MP__CL_SLOT(name, ret, params) {"cl" #name, &cl->name},
      MP_OPENCL_ENTRY_POINTS(MP__CL_SLOT)
#undef MP__CL_SLOT
  };
  const char* missing = mp_resolve_symbols(lib, entries, sizeof entries / sizeof entries[0]);
  if (missing) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "OpenCL library %s lacks %s (OpenCL 1.2 is required)", path, missing);
    return;
  }
  cl_platform_id platforms[16];
  cl_uint platform_count = 0;
  cl_int err = cl->GetPlatformIDs(16, platforms, &platform_count);
  if (err != CL_SUCCESS || platform_count == 0) {
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "no OpenCL platform found (%s, %d): install an OpenCL driver, e.g. `apt-get install "
        "pocl-opencl-icd` for CPUs, or check OCL_ICD_VENDORS",
        err == CL_SUCCESS ? "0 platforms" : mp_cl_error_name(err), (int)err);
    return;
  }
  if (platform_count > 16) platform_count = 16;
  for (cl_uint p = 0; p < platform_count && state.device_count == 0; ++p) {
    cl_uint n = 0;
    if (cl->GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MP_OPENCL_MAX_DEVICES, state.devices,
                         &n) != CL_SUCCESS)
      continue;
    state.platform = platforms[p];
    state.device_count = n > MP_OPENCL_MAX_DEVICES ? MP_OPENCL_MAX_DEVICES : n;
  }
  if (state.device_count == 0) {
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "OpenCL found %u platform(s) but no device on any of them; check the driver installation",
        platform_count);
    return;
  }
  state.context = cl->CreateContext(NULL, state.device_count, state.devices, NULL, NULL, &err);
  if (!state.context) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "cannot create an OpenCL context: %s (%d)",
                    mp_cl_error_name(err), (int)err);
    return;
  }
  char platform_name[96] = "";
  cl->GetPlatformInfo(state.platform, CL_PLATFORM_NAME, sizeof platform_name - 1, platform_name,
                      NULL);
  for (cl_uint d = 0; d < state.device_count; ++d) {
    state.queues[d] = cl->CreateCommandQueue(state.context, state.devices[d], 0, &err);
    if (!state.queues[d]) {
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                      "cannot create an OpenCL queue for device %u: %s (%d)", d,
                      mp_cl_error_name(err), (int)err);
      return;
    }
    char device_name[96] = "", driver[48] = "";
    cl->GetDeviceInfo(state.devices[d], CL_DEVICE_NAME, sizeof device_name - 1, device_name, NULL);
    cl->GetDeviceInfo(state.devices[d], CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
    snprintf(state.device_keys[d], sizeof state.device_keys[d], "%s/%s/%s", platform_name,
             device_name, driver);
  }
}

const mp_opencl_t* mp_opencl(void) {
  pthread_once(&init_once, initialise);
  if (mp_outcome_raise(&outcome) != MP_OK) return NULL;
  return &state;
}

/* ---- the device API ----------------------------------------------------------------------- */

static const mp_opencl_t* device(int32_t device_id) {
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return NULL;
  if (device_id < 0 || (cl_uint)device_id >= cl->device_count) {
    mp_errorf(MP_ERR_INVALID_ARGUMENT, "OpenCL device %d does not exist (%u available)",
              (int)device_id, cl->device_count);
    return NULL;
  }
  return cl;
}

static mp_status_t cl_failed(const char* what, cl_int err) {
  return mp_errorf(MP_ERR_RUNTIME, "OpenCL %s failed: %s (%d)", what, mp_cl_error_name(err),
                   (int)err);
}

static mp_status_t opencl_count(int32_t* out_count) {
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  *out_count = (int32_t)cl->device_count;
  return MP_OK;
}

static mp_status_t opencl_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  snprintf(buffer, capacity, "%s", cl->device_keys[device_id]);
  return MP_OK;
}

static mp_status_t opencl_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl_int err;
  cl_mem mem = cl->cl.CreateBuffer(cl->context, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, NULL, &err);
  if (!mem) return cl_failed("buffer allocation", err);
  *out_data = mem;
  return MP_OK;
}

static mp_status_t opencl_free(int32_t device_id, void* data) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl->cl.ReleaseMemObject(data);
  return MP_OK;
}

static mp_status_t opencl_copy_from_host(int32_t device_id, const void* host, void* data,
                                         uint64_t offset, uint64_t nbytes) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl_int err = cl->cl.EnqueueWriteBuffer(cl->queues[device_id], data, CL_TRUE, offset, nbytes, host,
                                         0, NULL, NULL);
  return err == CL_SUCCESS ? MP_OK : cl_failed("write to device", err);
}

static mp_status_t opencl_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                       void* host, uint64_t nbytes) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl_int err = cl->cl.EnqueueReadBuffer(cl->queues[device_id], (cl_mem)data, CL_TRUE, offset,
                                        nbytes, host, 0, NULL, NULL);
  return err == CL_SUCCESS ? MP_OK : cl_failed("read from device", err);
}

static mp_status_t opencl_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                      void* to, uint64_t to_offset, uint64_t nbytes) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl_int err = cl->cl.EnqueueCopyBuffer(cl->queues[device_id], (cl_mem)from, to, from_offset,
                                        to_offset, nbytes, 0, NULL, NULL);
  return err == CL_SUCCESS ? MP_OK : cl_failed("device copy", err);
}

static mp_status_t opencl_synchronize(int32_t device_id) {
  const mp_opencl_t* cl = device(device_id);
  if (!cl) return mp_error_code();
  cl_int err = cl->cl.Finish(cl->queues[device_id]);
  return err == CL_SUCCESS ? MP_OK : cl_failed("finish", err);
}

const mp_device_api_t mp_opencl_device = {
    .device_type = kDLOpenCL,
    .name = "opencl",
    .display_name = "OpenCL",
    .count = opencl_count,
    .describe = opencl_describe,
    .alloc = opencl_alloc,
    .free = opencl_free,
    .copy_from_host = opencl_copy_from_host,
    .copy_to_host = opencl_copy_to_host,
    .copy_within = opencl_copy_within,
    .synchronize = opencl_synchronize,
};
