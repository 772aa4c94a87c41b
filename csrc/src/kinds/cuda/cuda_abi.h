/* The slice of the CUDA driver API modpack uses, declared from NVIDIA's documentation so that
 * the runtime builds without the CUDA toolkit and loads the driver (libcuda.so.1) with dlopen
 * on first use: no link-time dependency, so a machine without a GPU still loads every library
 * and only a CUDA launch, allocation or copy reports that the driver is missing.
 *
 * Entry points whose ABI changed carry their versioned names (cuMemAlloc_v2, ...), the names
 * cuda.h maps the plain ones to; they are resolved by those names with dlsym. */
#ifndef MODPACK_CUDA_ABI_H_
#define MODPACK_CUDA_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/registry.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* the 64-bit (v2) device pointer */
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUlinkState_st* CUlinkState;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
};

enum {
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_JIT_INPUT_PTX = 1,
};

/* The entry points modpack uses, listed once: X(member, symbol, return type, parameter list).
 * The struct of function pointers below and the dlsym table in cuda_device.c are both
 * generated from this list. Entry points whose ABI changed are resolved by their versioned
 * symbols (cuMemAlloc_v2, ...), the names cuda.h maps the plain ones to. */
#define MP_CUDA_ENTRY_POINTS(X)                                                                   \
  X(Init, cuInit, CUresult, (unsigned int flags))                                                 \
  X(DriverGetVersion, cuDriverGetVersion, CUresult, (int* version))                               \
  X(GetErrorName, cuGetErrorName, CUresult, (CUresult error, const char** name))                  \
  X(GetErrorString, cuGetErrorString, CUresult, (CUresult error, const char** text))              \
  X(DeviceGetCount, cuDeviceGetCount, CUresult, (int* count))                                     \
  X(DeviceGet, cuDeviceGet, CUresult, (CUdevice * device, int ordinal))                           \
  X(DeviceGetAttribute, cuDeviceGetAttribute, CUresult,                                           \
    (int* value, int attribute, CUdevice device))                                                 \
  X(DeviceGetName, cuDeviceGetName, CUresult, (char* name, int length, CUdevice device))          \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, CUresult,                                   \
    (CUcontext * context, CUdevice device))                                                       \
  X(CtxSetCurrent, cuCtxSetCurrent, CUresult, (CUcontext context))                                \
  X(CtxGetCurrent, cuCtxGetCurrent, CUresult, (CUcontext * context))                              \
  X(CtxGetDevice, cuCtxGetDevice, CUresult, (CUdevice * device))                                  \
  X(CtxSynchronize, cuCtxSynchronize, CUresult, (void))                                           \
  X(MemAlloc, cuMemAlloc_v2, CUresult, (CUdeviceptr * pointer, size_t nbytes))                    \
  X(MemFree, cuMemFree_v2, CUresult, (CUdeviceptr pointer))                                       \
  X(MemcpyHtoD, cuMemcpyHtoD_v2, CUresult, (CUdeviceptr to, const void* from, size_t nbytes))     \
  X(MemcpyDtoH, cuMemcpyDtoH_v2, CUresult, (void* to, CUdeviceptr from, size_t nbytes))           \
  X(MemcpyDtoD, cuMemcpyDtoD_v2, CUresult, (CUdeviceptr to, CUdeviceptr from, size_t nbytes))     \
  X(ModuleLoadData, cuModuleLoadData, CUresult, (CUmodule * module, const void* image))           \
  X(ModuleUnload, cuModuleUnload, CUresult, (CUmodule module))                                    \
  X(ModuleGetFunction, cuModuleGetFunction, CUresult,                                             \
    (CUfunction * function, CUmodule module, const char* name))                                   \
  X(FuncSetAttribute, cuFuncSetAttribute, CUresult,                                               \
    (CUfunction function, int attribute, int value))                                              \
  X(LaunchKernel, cuLaunchKernel, CUresult,                                                       \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,          \
     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, \
     CUstream stream, void** params, void** extra))

typedef struct {
#define MP__CU_MEMBER(member, symbol, ret, params) ret(*member) params;
  MP_CUDA_ENTRY_POINTS(MP__CU_MEMBER)
#undef MP__CU_MEMBER
} mp_cu_api_t;

/* The linker, which the kernel cache uses to get the cubin the driver's JIT makes from PTX
 * (cuLinkCreate, cuLinkAddData with CU_JIT_INPUT_PTX, cuLinkComplete): resolved when the driver
 * has it (every driver since CUDA 5.5), NULL members otherwise, and then PTX is loaded with
 * cuModuleLoadData as without the cache. */
typedef struct {
  CUresult (*Create)(unsigned int num_options, int* options, void** values, CUlinkState* state);
  CUresult (*AddData)(CUlinkState state, int type, void* data, size_t size, const char* name,
                      unsigned int num_options, int* options, void** values);
  CUresult (*Complete)(CUlinkState state, void** cubin, size_t* size);
  CUresult (*Destroy)(CUlinkState state);
} mp_cu_link_api_t;

enum { MP_CUDA_MAX_DEVICES = 64 };

/* The process-wide CUDA state, created on first use: the driver entry points, the driver
 * version and each device's handle and compute capability. Each device's primary context is
 * retained on first use (and kept for the life of the process). */
typedef struct {
  mp_cu_api_t cu;
  mp_cu_link_api_t link; /* optional: all NULL when the driver lacks one of them */
  int driver_version; /* e.g. 12040 for CUDA 12.4 */
  int32_t device_count;
  CUdevice devices[MP_CUDA_MAX_DEVICES];
  int32_t cc_major[MP_CUDA_MAX_DEVICES];
  int32_t cc_minor[MP_CUDA_MAX_DEVICES];
} mp_cuda_t;

/* The CUDA state, or NULL with the error recorded (no driver, stub driver, no device, ...). */
const mp_cuda_t* mp_cuda(void);

/* Make |device|'s primary context current on this thread (retaining it on first use).
 * |*out_saved| receives the context that was current, for mp_cuda_leave. */
mp_status_t mp_cuda_enter(int32_t device, CUcontext* out_saved);
/* Restore the context mp_cuda_enter replaced. */
void mp_cuda_leave(CUcontext saved);

/* Record "|what| failed: CUDA_ERROR_X (driver text) [code N]" and return the status for it. */
mp_status_t mp_cuda_fail(CUresult result, const char* what);
/* The driver's name for |result| ("CUDA_ERROR_NO_DEVICE"), or a fallback. */
const char* mp_cuda_error_name(CUresult result);
/* The driver's description of |result|, or "". */
const char* mp_cuda_error_string(CUresult result);
/* What the kernel cache keys the cubin linked from PTX for |device| by: the device's name and
 * compute capability into |name|, the driver's CUDA version into |driver| (cuda_device.c; the
 * cuda kind's load and modpack preflight make the same). */
void mp_cuda_cache_identity(const mp_cuda_t* cuda, int32_t device, char* name, size_t name_capacity,
                            char* driver, size_t driver_capacity);
/* The CUDA device (cuda_device.c), for the kind's descriptor. */
extern const mp_device_api_t mp_cuda_device;

#endif /* MODPACK_CUDA_ABI_H_ */
