/*
 * modpack/dltensor.h — the DLPack tensor ABI that modpack's calling convention uses.
 *
 * Arrays cross every modpack boundary as DLPack `DLTensor`s. These declarations follow the
 * published DLPack ABI (v1.x layout) so that a `DLTensor*` from any DLPack producer can be
 * passed straight through. If the application already includes <dlpack/dlpack.h>, include it
 * *before* any modpack header and these declarations step aside.
 */
#ifndef MODPACK_DLTENSOR_H_
#define MODPACK_DLTENSOR_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DLPACK_DLPACK_H_
/* MP_API_BEGIN */
/* Device types (the values are fixed by DLPack). */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLROCM = 10,
} DLDeviceType;

typedef struct {
  int32_t device_type; /* a DLDeviceType value */
  int32_t device_id;
} DLDevice;

/* Element type codes (the values are fixed by DLPack). */
typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
} DLDataTypeCode;

typedef struct {
  uint8_t code; /* a DLDataTypeCode value */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; /* NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* An owned tensor handed between frameworks: the consumer calls |deleter| when done. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;
/* MP_API_END */
#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_DLTENSOR_H_ */
