/* The slice of the HIP runtime API modpack uses (the module API: hipModuleLoadData,
 * hipModuleGetFunction, hipModuleLaunchKernel; memory and copies), declared from AMD's
 * documentation so that the runtime builds without ROCm and loads the HIP runtime
 * (libamdhip64.so) with dlopen on first use: a machine without ROCm loads every library and only
 * a ROCm launch, allocation or copy reports what is missing. */
#ifndef MODPACK_ROCM_ABI_H_
#define MODPACK_ROCM_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/registry.h"
#include "modpack/kinds/rocm.h"

typedef int hipError_t;
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipStream_t* hipStream_t;

enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNotInitialized = 3,
  hipErrorDeinitialized = 4,
  hipErrorInsufficientDriver = 35,
  hipErrorNoDevice = 100,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200,
  hipErrorNoBinaryForGpu = 209,
  hipErrorInvalidKernelFile = 218,
  hipErrorNotFound = 500,
  hipErrorNotSupported = 801,
};

enum { hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2, hipMemcpyDeviceToDevice = 3 };

/* hipModuleLaunchKernel's |extra|: the argument buffer, its size, the end of the list. */
#define MP_HIP_LAUNCH_PARAM_BUFFER_POINTER ((void*)0x01)
#define MP_HIP_LAUNCH_PARAM_BUFFER_SIZE ((void*)0x02)
#define MP_HIP_LAUNCH_PARAM_END ((void*)0x03)

/* Where hipDeviceProp_t keeps gcnArchName ("gfx90a:sramecc+:xnack-"): in the layout of HIP 6
 * (hipGetDevicePropertiesR0600) and in the one before it (hipGetDeviceProperties of HIP 5). The
 * properties are read into a buffer larger than either struct. */
enum {
  MP_HIP_ARCH_NAME_OFFSET_R0600 = 1160,
  MP_HIP_ARCH_NAME_OFFSET_R0000 = 396,
  MP_HIP_ARCH_NAME_SIZE = 256,
  MP_HIP_PROPERTIES_BUFFER = 8192,
};

/* The entry points modpack uses, listed once: X(member, symbol, return type, parameter list).
 * The struct of function pointers below and the dlsym table in rocm_device.c are both
 * generated from it. */
#define MP_HIP_ENTRY_POINTS(X)                                                                     \
  X(Init, hipInit, hipError_t, (unsigned int flags))                                               \
  X(DriverGetVersion, hipDriverGetVersion, hipError_t, (int* version))                             \
  X(GetDeviceCount, hipGetDeviceCount, hipError_t, (int* count))                                   \
  X(SetDevice, hipSetDevice, hipError_t, (int device))                                             \
  X(GetDevice, hipGetDevice, hipError_t, (int* device))                                            \
  X(Malloc, hipMalloc, hipError_t, (void** pointer, size_t nbytes))                                \
  X(Free, hipFree, hipError_t, (void* pointer))                                                    \
  X(Memcpy, hipMemcpy, hipError_t, (void* to, const void* from, size_t nbytes, int kind))          \
  X(DeviceSynchronize, hipDeviceSynchronize, hipError_t, (void))                                   \
  X(ModuleLoadData, hipModuleLoadData, hipError_t, (hipModule_t * module, const void* image))      \
  X(ModuleUnload, hipModuleUnload, hipError_t, (hipModule_t module))                               \
  X(ModuleGetFunction, hipModuleGetFunction, hipError_t,                                           \
    (hipFunction_t * function, hipModule_t module, const char* name))                              \
  X(ModuleLaunchKernel, hipModuleLaunchKernel, hipError_t,                                         \
    (hipFunction_t function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,        \
     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, \
     hipStream_t stream, void** params, void** extra))

typedef struct {
#define MP__HIP_MEMBER(member, symbol, ret, params) ret(*member) params;
  MP_HIP_ENTRY_POINTS(MP__HIP_MEMBER)
#undef MP__HIP_MEMBER
  const char* (*GetErrorName)(hipError_t error);
  const char* (*GetErrorString)(hipError_t error);
  hipError_t (*GetDeviceProperties)(void* properties, int device);
} mp_hip_api_t;

enum { MP_ROCM_MAX_DEVICES = 64 };

/* The process-wide HIP state, created on first use: the entry points, the runtime's version and
 * each device's target ID. */
typedef struct {
  mp_hip_api_t hip;
  int driver_version;
  int32_t device_count;
  char targets[MP_ROCM_MAX_DEVICES][MP_ROCM_MAX_TARGET]; /* "gfx90a:sramecc+:xnack-" */
} mp_rocm_t;

/* The HIP state, or NULL with the error recorded (no runtime, no device, ...). */
const mp_rocm_t* mp_rocm(void);
/* Make |device| current on this thread; |*out_saved| receives the one that was, for
 * mp_rocm_leave. */
mp_status_t mp_rocm_enter(int32_t device, int* out_saved);
void mp_rocm_leave(int saved);
/* Record "|what| failed: hipErrorX (text) [code N]" and return the status for it. */
mp_status_t mp_rocm_fail(hipError_t result, const char* what);
const char* mp_rocm_error_name(hipError_t result);
/* The ROCm device (rocm_device.c), for the kind's descriptor. */
extern const mp_device_api_t mp_rocm_device;

#endif /* MODPACK_ROCM_ABI_H_ */
