/* The slice of the OpenCL 1.2 C API modpack uses, declared from the specification so that the
 * runtime builds without OpenCL headers and loads libOpenCL with dlopen on first use (no
 * link-time dependency: a machine without OpenCL still loads every library). */
#ifndef MODPACK_OPENCL_ABI_H_
#define MODPACK_OPENCL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/registry.h"

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_uint cl_bool;
typedef cl_ulong cl_bitfield;
typedef intptr_t cl_context_properties;
typedef struct _cl_platform_id* cl_platform_id;
typedef struct _cl_device_id* cl_device_id;
typedef struct _cl_context* cl_context;
typedef struct _cl_command_queue* cl_command_queue;
typedef struct _cl_mem* cl_mem;
typedef struct _cl_program* cl_program;
typedef struct _cl_kernel* cl_kernel;
typedef struct _cl_event* cl_event;

enum {
  CL_SUCCESS = 0,
  CL_DEVICE_NOT_FOUND = -1,
  CL_BUILD_PROGRAM_FAILURE = -11,
  CL_PLATFORM_NOT_FOUND_KHR = -1001,
  CL_TRUE = 1,
  CL_MEM_READ_WRITE = 1,
  CL_PLATFORM_NAME = 0x0902,
  CL_DEVICE_NAME = 0x102B,
  CL_DRIVER_VERSION = 0x102D,
  CL_PROGRAM_NUM_DEVICES = 0x1162,
  CL_PROGRAM_DEVICES = 0x1163,
  CL_PROGRAM_BINARY_SIZES = 0x1165,
  CL_PROGRAM_BINARIES = 0x1166,
  CL_PROGRAM_BUILD_LOG = 0x1183,
};
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu

/* The entry points modpack uses, listed once: X(name, return type, parameter list). The
 * struct of function pointers below and the dlsym table in opencl_device.c ("cl" name) are
 * both generated from this list. */
#define MP_OPENCL_ENTRY_POINTS(X)                                                                \
  X(GetPlatformIDs, cl_int, (cl_uint, cl_platform_id*, cl_uint*))                                \
  X(GetPlatformInfo, cl_int, (cl_platform_id, cl_uint, size_t, void*, size_t*))                  \
  X(GetDeviceIDs, cl_int, (cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*))       \
  X(GetDeviceInfo, cl_int, (cl_device_id, cl_uint, size_t, void*, size_t*))                      \
  X(CreateContext, cl_context,                                                                   \
    (const cl_context_properties*, cl_uint, const cl_device_id*,                                 \
     void (*)(const char*, const void*, size_t, void*), void*, cl_int*))                         \
  X(CreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_bitfield, cl_int*))      \
  X(CreateBuffer, cl_mem, (cl_context, cl_bitfield, size_t, void*, cl_int*))                     \
  X(ReleaseMemObject, cl_int, (cl_mem))                                                          \
  X(EnqueueWriteBuffer, cl_int,                                                                  \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint, const cl_event*,   \
     cl_event*))                                                                                 \
  X(EnqueueReadBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint, const cl_event*,         \
     cl_event*))                                                                                 \
  X(EnqueueCopyBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event*,         \
     cl_event*))                                                                                 \
  X(Finish, cl_int, (cl_command_queue))                                                          \
  X(CreateProgramWithSource, cl_program,                                                         \
    (cl_context, cl_uint, const char**, const size_t*, cl_int*))                                 \
  X(CreateProgramWithBinary, cl_program,                                                         \
    (cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**, cl_int*,    \
     cl_int*))                                                                                   \
  X(BuildProgram, cl_int,                                                                        \
    (cl_program, cl_uint, const cl_device_id*, const char*, void (*)(cl_program, void*), void*)) \
  X(GetProgramBuildInfo, cl_int, (cl_program, cl_device_id, cl_uint, size_t, void*, size_t*))    \
  X(GetProgramInfo, cl_int, (cl_program, cl_uint, size_t, void*, size_t*))                       \
  X(ReleaseProgram, cl_int, (cl_program))                                                        \
  X(CreateKernel, cl_kernel, (cl_program, const char*, cl_int*))                                 \
  X(ReleaseKernel, cl_int, (cl_kernel))                                                          \
  X(SetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void*))                             \
  X(EnqueueNDRangeKernel, cl_int,                                                                \
    (cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*, cl_uint, \
     const cl_event*, cl_event*))

typedef struct {
#define MP__CL_MEMBER(name, ret, params) ret(*name) params;
  MP_OPENCL_ENTRY_POINTS(MP__CL_MEMBER)
#undef MP__CL_MEMBER
} mp_cl_api_t;

enum { MP_OPENCL_MAX_DEVICES = 32 };

/* The process-wide OpenCL state: one context over the devices of the first platform that has
 * any, and one in-order queue per device. Created on first use. */
typedef struct {
  mp_cl_api_t cl;
  cl_platform_id platform;
  cl_context context;
  cl_uint device_count;
  cl_device_id devices[MP_OPENCL_MAX_DEVICES];
  cl_command_queue queues[MP_OPENCL_MAX_DEVICES];
  char device_keys[MP_OPENCL_MAX_DEVICES][256]; /* "platform/device/driver", for binaries */
} mp_opencl_t;

/* The state, initialising it on first call; NULL with a clear error when OpenCL is absent. */
const mp_opencl_t* mp_opencl(void);
/* "CL_INVALID_KERNEL_ARGS" */
const char* mp_cl_error_name(cl_int code);
/* The OpenCL device (opencl_device.c), for the kind's descriptor. */
extern const mp_device_api_t mp_opencl_device;

#endif /* MODPACK_OPENCL_ABI_H_ */
