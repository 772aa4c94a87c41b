/* CUDA as a device: loading the driver, device discovery, primary contexts, memory and copies.
 *
 * The driver (libcuda.so.1, or $MODPACK_CUDA_LIBRARY) is loaded with dlopen on first use,
 * under pthread_once; the outcome — including the message of a failure — is remembered, so
 * every later use reports the same clear error at the cost of a branch. Nothing here runs
 * while a library is loaded: a machine without a GPU loads every deploy.so and fails only
 * when CUDA memory or a CUDA kernel is actually used.
 *
 * Device memory is addressed by CUdeviceptr values carried in DLTensor.data (cast to void*).
 * Every operation runs in the device's primary context (the one the CUDA runtime, CuPy and
 * PyTorch use, so their pointers and ours mix freely), made current for the call and the
 * caller's context restored afterwards. The driver library is never unloaded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/driver.h"
#include "kinds/cuda/cuda_abi.h"

static mp_cuda_t state;
static mp_outcome_t outcome;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t context_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(CUcontext) contexts[MP_CUDA_MAX_DEVICES];

/* ---- errors --------------------------------------------------------------------------------- */

static const char* fallback_name(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
      return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY:
      return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE:
      return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case CUDA_ERROR_INVALID_PTX:
      return "CUDA_ERROR_INVALID_PTX";
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
      return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    default:
      return "CUDA error";
  }
}

const char* mp_cuda_error_name(CUresult result) {
  const char* name = NULL;
  if (state.cu.GetErrorName && state.cu.GetErrorName(result, &name) == CUDA_SUCCESS && name)
    return name;
  return fallback_name(result);
}

const char* mp_cuda_error_string(CUresult result) {
  const char* text = NULL;
  if (state.cu.GetErrorString && state.cu.GetErrorString(result, &text) == CUDA_SUCCESS && text)
    return text;
  return "";
}

static mp_status_t status_of(CUresult result) {
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return MP_ERR_RESOURCE_EXHAUSTED;
    case CUDA_ERROR_INVALID_VALUE:
      return MP_ERR_INVALID_ARGUMENT;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return MP_ERR_UNAVAILABLE;
    default:
      return MP_ERR_RUNTIME;
  }
}

mp_status_t mp_cuda_fail(CUresult result, const char* what) {
  const char* text = mp_cuda_error_string(result);
  return mp_errorf(status_of(result), "%s failed: %s%s%s%s [code %d]", what,
                   mp_cuda_error_name(result), text[0] ? " (" : "", text, text[0] ? ")" : "",
                   (int)result);
}

/* ---- initialisation ------------------------------------------------------------------------- */

static void describe_result(CUresult result, char* buffer, size_t capacity) {
  const char* text = mp_cuda_error_string(result);
  snprintf(buffer, capacity, "%s%s%s", mp_cuda_error_name(result), text[0] ? ": " : "", text);
}

static void initialise(void) {
  const char* path = getenv("MODPACK_CUDA_LIBRARY");
  if (!path || !*path) path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "no NVIDIA driver: %s not found (%s); CUDA kernels and CUDA arrays need a machine with "
        "an NVIDIA GPU: install the NVIDIA driver (it provides libcuda.so.1), or set "
        "MODPACK_CUDA_LIBRARY to the driver library's path",
        path, dlerror());
    return;
  }
  mp_cu_api_t* cu = &state.cu;
  /* The error-name functions first, so later failures can be described. */
  mp_resolve_symbol(lib, "cuGetErrorName", &cu->GetErrorName);
  mp_resolve_symbol(lib, "cuGetErrorString", &cu->GetErrorString);
  const mp_symbol_slot_t entries[] = {
#define MP__CU_SLOT(member, symbol, ret, params) {#symbol, &cu->member},
      MP_CUDA_ENTRY_POINTS(MP__CU_SLOT)
#undef MP__CU_SLOT
  };
  /* cuInit first: a stub or a driver without devices answers it even when it lacks the rest. */
  if (!mp_resolve_symbol(lib, "cuInit", &cu->Init)) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "%s is not an NVIDIA driver library (it has no cuInit); install the "
                    "NVIDIA driver, or point MODPACK_CUDA_LIBRARY at its libcuda.so.1",
                    path);
    return;
  }
  mp_resolve_symbol(lib, "cuDriverGetVersion", &cu->DriverGetVersion);
  if (cu->DriverGetVersion) cu->DriverGetVersion(&state.driver_version);
  CUresult result = cu->Init(0);
  char why[256];
  if (result == CUDA_ERROR_STUB_LIBRARY) {
    describe_result(result, why, sizeof why);
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "no NVIDIA driver: %s is the CUDA toolkit's stub library, not the driver (%s); install "
        "the NVIDIA driver and remove the toolkit's lib64/stubs directory from "
        "LD_LIBRARY_PATH",
        path, why);
    return;
  }
  if (result == CUDA_ERROR_NO_DEVICE) {
    describe_result(result, why, sizeof why);
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "driver present but no CUDA device: %s (driver for CUDA %d.%d) reports %s; check that "
        "the GPU is visible to this process (nvidia-smi, CUDA_VISIBLE_DEVICES, a container's "
        "--gpus option)",
        path, state.driver_version / 1000, state.driver_version % 1000 / 10, why);
    return;
  }
  if (result != CUDA_SUCCESS) {
    describe_result(result, why, sizeof why);
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "the NVIDIA driver (%s) failed to initialise: cuInit returned %s "
                    "[code %d]; check the driver installation with nvidia-smi",
                    path, why, (int)result);
    return;
  }
  const char* missing = mp_resolve_symbols(lib, entries, sizeof entries / sizeof entries[0]);
  mp_cu_link_api_t* link = &state.link;
  if (!mp_resolve_symbol(lib, "cuLinkCreate_v2", &link->Create) ||
      !mp_resolve_symbol(lib, "cuLinkAddData_v2", &link->AddData) ||
      !mp_resolve_symbol(lib, "cuLinkComplete", &link->Complete) ||
      !mp_resolve_symbol(lib, "cuLinkDestroy", &link->Destroy))
    memset(link, 0, sizeof *link); /* PTX is then loaded as it is, with cuModuleLoadData */
  if (missing) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "the NVIDIA driver library %s lacks %s: update the NVIDIA driver", path,
                    missing);
    return;
  }
  int count = 0;
  result = cu->DeviceGetCount(&count);
  if (result != CUDA_SUCCESS || count <= 0) {
    if (result != CUDA_SUCCESS)
      describe_result(result, why, sizeof why);
    else
      snprintf(why, sizeof why, "0 devices");
    mp_outcome_fail(
        &outcome, MP_ERR_UNAVAILABLE,
        "driver present but no CUDA device: %s (driver for CUDA %d.%d) reports %s; check that "
        "the GPU is visible to this process (nvidia-smi, CUDA_VISIBLE_DEVICES)",
        path, state.driver_version / 1000, state.driver_version % 1000 / 10, why);
    return;
  }
  if (count > MP_CUDA_MAX_DEVICES) count = MP_CUDA_MAX_DEVICES;
  for (int d = 0; d < count; ++d) {
    result = cu->DeviceGet(&state.devices[d], d);
    if (result == CUDA_SUCCESS)
      result = cu->DeviceGetAttribute(
          &state.cc_major[d], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, state.devices[d]);
    if (result == CUDA_SUCCESS)
      result = cu->DeviceGetAttribute(
          &state.cc_minor[d], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, state.devices[d]);
    if (result != CUDA_SUCCESS) {
      describe_result(result, why, sizeof why);
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "cannot query CUDA device %d: %s", d, why);
      return;
    }
  }
  state.device_count = count;
}

const mp_cuda_t* mp_cuda(void) {
  pthread_once(&init_once, initialise);
  if (mp_outcome_raise(&outcome) != MP_OK) return NULL;
  return &state;
}

/* ---- contexts ------------------------------------------------------------------------------- */

mp_status_t mp_cuda_enter(int32_t device, CUcontext* out_saved) {
  *out_saved = NULL;
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  if (device < 0 || device >= cuda->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "CUDA device %d does not exist (%d available)",
                     (int)device, (int)cuda->device_count);
  CUcontext context = atomic_load_explicit(&contexts[device], memory_order_acquire);
  if (!context) {
    pthread_mutex_lock(&context_lock);
    context = atomic_load_explicit(&contexts[device], memory_order_relaxed);
    CUresult result = CUDA_SUCCESS;
    if (!context) {
      result = cuda->cu.DevicePrimaryCtxRetain(&context, cuda->devices[device]);
      if (result == CUDA_SUCCESS)
        atomic_store_explicit(&contexts[device], context, memory_order_release);
    }
    pthread_mutex_unlock(&context_lock);
    if (result != CUDA_SUCCESS) {
      char what[64];
      snprintf(what, sizeof what, "activating CUDA device %d (cuDevicePrimaryCtxRetain)",
               (int)device);
      return mp_cuda_fail(result, what);
    }
  }
  CUcontext current = NULL;
  if (cuda->cu.CtxGetCurrent(&current) != CUDA_SUCCESS) current = NULL;
  *out_saved = current;
  if (current != context) {
    CUresult result = cuda->cu.CtxSetCurrent(context);
    if (result != CUDA_SUCCESS) return mp_cuda_fail(result, "making the CUDA context current");
  }
  return MP_OK;
}

void mp_cuda_leave(CUcontext saved) {
  CUcontext current = NULL;
  if (state.cu.CtxGetCurrent(&current) == CUDA_SUCCESS && current != saved)
    state.cu.CtxSetCurrent(saved);
}

void mp_cuda_cache_identity(const mp_cuda_t* cuda, int32_t device, char* name, size_t name_capacity,
                            char* driver, size_t driver_capacity) {
  char device_name[256] = "";
  if (cuda->cu.DeviceGetName(device_name, (int)sizeof device_name - 1, cuda->devices[device]) !=
      CUDA_SUCCESS)
    device_name[0] = '\0';
  snprintf(name, name_capacity, "%s/sm_%d%d", device_name, (int)cuda->cc_major[device],
           (int)cuda->cc_minor[device]);
  snprintf(driver, driver_capacity, "%d", cuda->driver_version);
}

/* ---- the device API ------------------------------------------------------------------------- */

static CUdeviceptr ptr(const void* data, uint64_t offset) {
  return (CUdeviceptr)(uintptr_t)data + offset;
}

static mp_status_t cuda_count(int32_t* out_count) {
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  *out_count = cuda->device_count;
  return MP_OK;
}

static mp_status_t cuda_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  const mp_cuda_t* cuda = mp_cuda();
  if (!cuda) return mp_error_code();
  char name[256] = "";
  cuda->cu.DeviceGetName(name, (int)sizeof name - 1, cuda->devices[device_id]);
  snprintf(buffer, capacity, "CUDA %d: %s (compute capability %d.%d, driver for CUDA %d.%d)",
           (int)device_id, name, (int)cuda->cc_major[device_id], (int)cuda->cc_minor[device_id],
           cuda->driver_version / 1000, cuda->driver_version % 1000 / 10);
  return MP_OK;
}

static mp_status_t cuda_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device_id, &saved));
  CUdeviceptr pointer = 0;
  CUresult result = state.cu.MemAlloc(&pointer, nbytes ? nbytes : 1);
  mp_cuda_leave(saved);
  if (result != CUDA_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "allocating %" PRIu64 " bytes on CUDA device %d", nbytes,
             (int)device_id);
    return mp_cuda_fail(result, what);
  }
  *out_data = (void*)(uintptr_t)pointer;
  return MP_OK;
}

static mp_status_t cuda_free(int32_t device_id, void* data) {
  /* Raw driver calls, leaving this thread's error message alone unless the free itself fails:
   * arrays are freed from destructors (and at process exit, after the driver may have shut
   * down, which is not an error: the memory went with it). */
  if (device_id < 0 || device_id >= MP_CUDA_MAX_DEVICES) return MP_OK;
  CUcontext context = atomic_load_explicit(&contexts[device_id], memory_order_acquire);
  if (!context) return MP_OK; /* nothing was ever allocated on this device */
  CUcontext saved = NULL;
  if (state.cu.CtxGetCurrent(&saved) != CUDA_SUCCESS) saved = NULL;
  if (saved != context) state.cu.CtxSetCurrent(context);
  CUresult result = state.cu.MemFree(ptr(data, 0));
  if (saved != context) state.cu.CtxSetCurrent(saved);
  if (result == CUDA_SUCCESS || result == CUDA_ERROR_DEINITIALIZED) return MP_OK;
  return mp_cuda_fail(result, "freeing CUDA memory (cuMemFree)");
}

static mp_status_t cuda_copy_from_host(int32_t device_id, const void* host, void* data,
                                       uint64_t offset, uint64_t nbytes) {
  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device_id, &saved));
  CUresult result = state.cu.MemcpyHtoD(ptr(data, offset), host, nbytes);
  mp_cuda_leave(saved);
  return result == CUDA_SUCCESS ? MP_OK : mp_cuda_fail(result, "copying to a CUDA device");
}

static mp_status_t cuda_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                     void* host, uint64_t nbytes) {
  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device_id, &saved));
  CUresult result = state.cu.MemcpyDtoH(host, ptr(data, offset), nbytes);
  mp_cuda_leave(saved);
  return result == CUDA_SUCCESS ? MP_OK : mp_cuda_fail(result, "copying from a CUDA device");
}

static mp_status_t cuda_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                    void* to, uint64_t to_offset, uint64_t nbytes) {
  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device_id, &saved));
  CUresult result = state.cu.MemcpyDtoD(ptr(to, to_offset), ptr(from, from_offset), nbytes);
  /* Copies are synchronous with respect to the host (the device API's contract). */
  if (result == CUDA_SUCCESS) result = state.cu.CtxSynchronize();
  mp_cuda_leave(saved);
  return result == CUDA_SUCCESS ? MP_OK : mp_cuda_fail(result, "copying within a CUDA device");
}

static mp_status_t cuda_synchronize(int32_t device_id) {
  CUcontext saved;
  MP_RETURN_IF_ERROR(mp_cuda_enter(device_id, &saved));
  CUresult result = state.cu.CtxSynchronize();
  mp_cuda_leave(saved);
  return result == CUDA_SUCCESS ? MP_OK : mp_cuda_fail(result, "synchronizing a CUDA device");
}

const mp_device_api_t mp_cuda_device = {
    .device_type = kDLCUDA,
    .name = "cuda",
    .display_name = "CUDA",
    .count = cuda_count,
    .describe = cuda_describe,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_from_host = cuda_copy_from_host,
    .copy_to_host = cuda_copy_to_host,
    .copy_within = cuda_copy_within,
    .synchronize = cuda_synchronize,
};
