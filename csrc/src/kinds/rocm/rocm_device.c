/* ROCm as a device: loading the HIP runtime, device discovery (each device's target ID), memory
 * and copies.
 *
 * The HIP runtime (libamdhip64.so, or $MODPACK_ROCM_LIBRARY) is loaded with dlopen on first use,
 * under pthread_once; the outcome — including the message of a failure — is remembered, so
 * every later use reports the same clear error at the cost of a branch. Nothing here runs while
 * a library is loaded: a machine without ROCm loads every deploy.so and fails only when ROCm
 * memory or a ROCm kernel is actually used. Device memory is addressed by the pointers hipMalloc
 * returns, carried in DLTensor.data. The runtime library is never unloaded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/driver.h"
#include "kinds/rocm/rocm_abi.h"
#include "kinds/rocm/rocm_select.h"

static mp_rocm_t state;
static mp_outcome_t outcome;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* ---- errors --------------------------------------------------------------------------------- */

static const char* fallback_name(hipError_t result) {
  switch (result) {
    case hipSuccess:
      return "hipSuccess";
    case hipErrorInvalidValue:
      return "hipErrorInvalidValue";
    case hipErrorOutOfMemory:
      return "hipErrorOutOfMemory";
    case hipErrorNotInitialized:
      return "hipErrorNotInitialized";
    case hipErrorInsufficientDriver:
      return "hipErrorInsufficientDriver";
    case hipErrorNoDevice:
      return "hipErrorNoDevice";
    case hipErrorInvalidDevice:
      return "hipErrorInvalidDevice";
    case hipErrorInvalidImage:
      return "hipErrorInvalidImage";
    case hipErrorNoBinaryForGpu:
      return "hipErrorNoBinaryForGpu";
    case hipErrorInvalidKernelFile:
      return "hipErrorInvalidKernelFile";
    case hipErrorNotFound:
      return "hipErrorNotFound";
    default:
      return "HIP error";
  }
}

const char* mp_rocm_error_name(hipError_t result) {
  const char* name = state.hip.GetErrorName ? state.hip.GetErrorName(result) : NULL;
  return name && *name ? name : fallback_name(result);
}

static const char* error_string(hipError_t result) {
  const char* text = state.hip.GetErrorString ? state.hip.GetErrorString(result) : NULL;
  return text ? text : "";
}

static mp_status_t status_of(hipError_t result) {
  switch (result) {
    case hipErrorOutOfMemory:
      return MP_ERR_RESOURCE_EXHAUSTED;
    case hipErrorInvalidValue:
      return MP_ERR_INVALID_ARGUMENT;
    case hipErrorNotInitialized:
    case hipErrorDeinitialized:
    case hipErrorInsufficientDriver:
    case hipErrorNoDevice:
    case hipErrorNoBinaryForGpu:
    case hipErrorNotSupported:
      return MP_ERR_UNAVAILABLE;
    default:
      return MP_ERR_RUNTIME;
  }
}

mp_status_t mp_rocm_fail(hipError_t result, const char* what) {
  const char* text = error_string(result);
  return mp_errorf(status_of(result), "%s failed: %s%s%s%s [code %d]", what,
                   mp_rocm_error_name(result), text[0] ? " (" : "", text, text[0] ? ")" : "",
                   (int)result);
}

/* ---- initialisation ------------------------------------------------------------------------- */

static void describe_result(hipError_t result, char* buffer, size_t capacity) {
  const char* text = error_string(result);
  snprintf(buffer, capacity, "%s%s%s", mp_rocm_error_name(result), text[0] ? ": " : "", text);
}

/* The HIP runtime: $MODPACK_ROCM_LIBRARY, else the names ROCm installs it under. */
static void* open_runtime(const char** out_path, char* errors, size_t capacity) {
  const char* path = getenv("MODPACK_ROCM_LIBRARY");
  if (path && *path) {
    *out_path = path;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) snprintf(errors, capacity, "%s", dlerror());
    return lib;
  }
  static const char* const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                      "libamdhip64.so.5"};
  *out_path = names[0];
  size_t used = 0;
  errors[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    void* lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      *out_path = names[i];
      return lib;
    }
    if (i == 0 && used < capacity) { /* the first failure says it best */
      int n = snprintf(errors, capacity, "%s", dlerror());
      if (n > 0) used += (size_t)n;
    }
  }
  return NULL;
}

/* Each device's target ID, from hipDeviceProp_t.gcnArchName in the layout the entry point
 * found has (rocm_abi.h). */
static bool query_targets(const char* path, bool r0600) {
  static _Alignas(16) unsigned char properties[MP_HIP_PROPERTIES_BUFFER];
  size_t offset = r0600 ? MP_HIP_ARCH_NAME_OFFSET_R0600 : MP_HIP_ARCH_NAME_OFFSET_R0000;
  for (int d = 0; d < state.device_count; ++d) {
    memset(properties, 0, sizeof properties);
    hipError_t result = state.hip.GetDeviceProperties(properties, d);
    char why[256];
    if (result != hipSuccess) {
      describe_result(result, why, sizeof why);
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "cannot query ROCm device %d: %s", d, why);
      return false;
    }
    char name[MP_HIP_ARCH_NAME_SIZE];
    memcpy(name, properties + offset, sizeof name);
    name[sizeof name - 1] = '\0';
    mp_rocm_target_t target;
    if (!mp_rocm_parse_target(name, &target, why, sizeof why) || target.generic) {
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                      "ROCm device %d reports the target '%s', which modpack does not know (%s); "
                      "is %s the HIP runtime of ROCm 5 or later?",
                      d, name, why, path);
      return false;
    }
    mp_rocm_target_string(&target, state.targets[d], sizeof state.targets[d]);
  }
  return true;
}

static void initialise(void) {
  const char* path = NULL;
  char errors[768];
  void* lib = open_runtime(&path, errors, sizeof errors);
  if (!lib) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "no ROCm runtime: %s not found (%s); ROCm kernels and ROCm arrays need a "
                    "machine with an AMD GPU and ROCm: install ROCm's HIP runtime (it provides "
                    "libamdhip64.so and the libhsa-runtime64.so it uses), or set "
                    "MODPACK_ROCM_LIBRARY to its path",
                    path, errors);
    return;
  }
  mp_hip_api_t* hip = &state.hip;
  mp_resolve_symbol(lib, "hipGetErrorName", &hip->GetErrorName);
  mp_resolve_symbol(lib, "hipGetErrorString", &hip->GetErrorString);
  const mp_symbol_slot_t entries[] = {
#define MP__HIP_SLOT(member, symbol, ret, params) {#symbol, &hip->member},
      MP_HIP_ENTRY_POINTS(MP__HIP_SLOT)
#undef MP__HIP_SLOT
  };
  if (!mp_resolve_symbol(lib, "hipInit", &hip->Init)) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "%s is not the HIP runtime (it has no hipInit); install ROCm's HIP runtime, "
                    "or point MODPACK_ROCM_LIBRARY at its libamdhip64.so",
                    path);
    return;
  }
  mp_resolve_symbol(lib, "hipDriverGetVersion", &hip->DriverGetVersion);
  if (hip->DriverGetVersion) hip->DriverGetVersion(&state.driver_version);
  hipError_t result = hip->Init(0);
  char why[256];
  if (result == hipErrorNoDevice || result == hipErrorInsufficientDriver) {
    describe_result(result, why, sizeof why);
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "ROCm runtime present but no ROCm device: %s reports %s; check that the GPU "
                    "is visible to this process (rocminfo, /dev/kfd and /dev/dri access, "
                    "HIP_VISIBLE_DEVICES, a container's --device options)",
                    path, why);
    return;
  }
  if (result != hipSuccess) {
    describe_result(result, why, sizeof why);
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "the ROCm runtime (%s) failed to initialise: hipInit returned %s [code %d]; "
                    "check the installation with rocminfo",
                    path, why, (int)result);
    return;
  }
  const char* missing = mp_resolve_symbols(lib, entries, sizeof entries / sizeof entries[0]);
  if (missing) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "the HIP runtime %s lacks %s: update ROCm", path,
                    missing);
    return;
  }
  bool r0600 = mp_resolve_symbol(lib, "hipGetDevicePropertiesR0600", &hip->GetDeviceProperties);
  if (!r0600 && !mp_resolve_symbol(lib, "hipGetDeviceProperties", &hip->GetDeviceProperties)) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "the HIP runtime %s lacks hipGetDeviceProperties: update ROCm", path);
    return;
  }
  int count = 0;
  result = hip->GetDeviceCount(&count);
  if (result != hipSuccess || count <= 0) {
    if (result != hipSuccess)
      describe_result(result, why, sizeof why);
    else
      snprintf(why, sizeof why, "0 devices");
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "ROCm runtime present but no ROCm device: %s reports %s; check that the GPU "
                    "is visible to this process (rocminfo, HIP_VISIBLE_DEVICES)",
                    path, why);
    return;
  }
  if (count > MP_ROCM_MAX_DEVICES) count = MP_ROCM_MAX_DEVICES;
  state.device_count = count;
  if (!query_targets(path, r0600)) state.device_count = 0;
}

const mp_rocm_t* mp_rocm(void) {
  pthread_once(&init_once, initialise);
  if (mp_outcome_raise(&outcome) != MP_OK) return NULL;
  return &state;
}

/* ---- the current device --------------------------------------------------------------------- */

mp_status_t mp_rocm_enter(int32_t device, int* out_saved) {
  *out_saved = -1;
  const mp_rocm_t* rocm = mp_rocm();
  if (!rocm) return mp_error_code();
  if (device < 0 || device >= rocm->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "ROCm device %d does not exist (%d available)",
                     (int)device, (int)rocm->device_count);
  int current = -1;
  if (rocm->hip.GetDevice(&current) != hipSuccess) current = -1;
  *out_saved = current;
  if (current != device) {
    hipError_t result = rocm->hip.SetDevice(device);
    if (result != hipSuccess) return mp_rocm_fail(result, "making the ROCm device current");
  }
  return MP_OK;
}

void mp_rocm_leave(int saved) {
  int current = -1;
  if (saved >= 0 && state.hip.GetDevice(&current) == hipSuccess && current != saved)
    state.hip.SetDevice(saved);
}

/* ---- the device API ------------------------------------------------------------------------- */

static mp_status_t rocm_count(int32_t* out_count) {
  const mp_rocm_t* rocm = mp_rocm();
  if (!rocm) return mp_error_code();
  *out_count = rocm->device_count;
  return MP_OK;
}

static mp_status_t rocm_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  const mp_rocm_t* rocm = mp_rocm();
  if (!rocm) return mp_error_code();
  snprintf(buffer, capacity, "ROCm %d: %s (HIP runtime %d)", (int)device_id,
           rocm->targets[device_id], rocm->driver_version);
  return MP_OK;
}

static mp_status_t rocm_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  int saved;
  MP_RETURN_IF_ERROR(mp_rocm_enter(device_id, &saved));
  void* pointer = NULL;
  hipError_t result = state.hip.Malloc(&pointer, nbytes ? nbytes : 1);
  mp_rocm_leave(saved);
  if (result != hipSuccess) {
    char what[96];
    snprintf(what, sizeof what, "allocating %" PRIu64 " bytes on ROCm device %d", nbytes,
             (int)device_id);
    return mp_rocm_fail(result, what);
  }
  *out_data = pointer;
  return MP_OK;
}

static mp_status_t rocm_free(int32_t device_id, void* data) {
  (void)device_id;
  if (!state.hip.Free) return MP_OK; /* nothing was ever allocated */
  hipError_t result = state.hip.Free(data);
  if (result == hipSuccess || result == hipErrorDeinitialized) return MP_OK;
  return mp_rocm_fail(result, "freeing ROCm memory (hipFree)");
}

static mp_status_t copy(int32_t device_id, void* to, const void* from, uint64_t nbytes, int kind,
                        const char* what) {
  int saved;
  MP_RETURN_IF_ERROR(mp_rocm_enter(device_id, &saved));
  hipError_t result = state.hip.Memcpy(to, from, nbytes, kind);
  mp_rocm_leave(saved);
  return result == hipSuccess ? MP_OK : mp_rocm_fail(result, what);
}

static mp_status_t rocm_copy_from_host(int32_t device_id, const void* host, void* data,
                                       uint64_t offset, uint64_t nbytes) {
  return copy(device_id, (uint8_t*)data + offset, host, nbytes, hipMemcpyHostToDevice,
              "copying to a ROCm device");
}

static mp_status_t rocm_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                     void* host, uint64_t nbytes) {
  return copy(device_id, host, (const uint8_t*)data + offset, nbytes, hipMemcpyDeviceToHost,
              "copying from a ROCm device");
}

static mp_status_t rocm_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                    void* to, uint64_t to_offset, uint64_t nbytes) {
  return copy(device_id, (uint8_t*)to + to_offset, (const uint8_t*)from + from_offset, nbytes,
              hipMemcpyDeviceToDevice, "copying within a ROCm device");
}

static mp_status_t rocm_synchronize(int32_t device_id) {
  int saved;
  MP_RETURN_IF_ERROR(mp_rocm_enter(device_id, &saved));
  hipError_t result = state.hip.DeviceSynchronize();
  mp_rocm_leave(saved);
  return result == hipSuccess ? MP_OK : mp_rocm_fail(result, "synchronizing a ROCm device");
}

const mp_device_api_t mp_rocm_device = {
    .device_type = kDLROCM,
    .name = "rocm",
    .display_name = "ROCm",
    .count = rocm_count,
    .describe = rocm_describe,
    .alloc = rocm_alloc,
    .free = rocm_free,
    .copy_from_host = rocm_copy_from_host,
    .copy_to_host = rocm_copy_to_host,
    .copy_within = rocm_copy_within,
    .synchronize = rocm_synchronize,
};
