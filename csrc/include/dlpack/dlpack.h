/*
 * dlpack/dlpack.h — the DLPack tensor ABI (version 1.1), for code that is compiled against
 * DLPack: host code that includes <dlpack/dlpack.h>, and modpack's own headers.
 *
 * Written for modpack from the published DLPack ABI, which is a fixed struct layout shared by
 * every DLPack producer and consumer; modpack installs it beside its own headers so that code
 * generated against DLPack compiles with no other package. It uses the standard include guard:
 * whichever copy of the header is included first serves both.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 1

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
/* The ABI version a managed tensor was made with (DLManagedTensorVersioned). */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Where a tensor's memory is. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* which device of that type */
} DLDevice;

/* What one element is: the code of DLDataType. */
typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3, /* an opaque handle (pointer-sized) */
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e3m4 = 7,
  kDLFloat8_e4m3 = 8,
  kDLFloat8_e4m3b11fnuz = 9,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e4m3fnuz = 11,
  kDLFloat8_e5m2 = 12,
  kDLFloat8_e5m2fnuz = 13,
  kDLFloat8_e8m0fnu = 14,
  kDLFloat6_e2m3fn = 15,
  kDLFloat6_e3m2fn = 16,
  kDLFloat4_e2m1fn = 17,
} DLDataTypeCode;

/* An element type: |code| (a DLDataTypeCode), |bits| per lane, |lanes| per element (1 for
 * scalars, more for vector types). */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A view of a tensor: |ndim| extents in |shape|; |strides| in elements, NULL for compact
 * row-major; the first element at |data| + |byte_offset| bytes. */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/* A tensor handed from a producer to a consumer, who calls |deleter| (when not NULL) once done
 * with it. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* The same with its ABI version and flags (DLPACK_FLAG_BITMASK_*). */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
/* MP_API_END */

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

#ifdef __cplusplus
}
#endif
#endif /* DLPACK_DLPACK_H_ */
