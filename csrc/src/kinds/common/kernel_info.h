/* Function-info records of device kernels (modpack/kinds/kernel.h has their layout and limits)
 * and the checks and conversions every device kind applies when one of its kernels is called:
 * argument count, buffers (an array, of the record's dtype, compact, on the kind's device),
 * scalars (converted to the record's dtype). */
#ifndef MODPACK_KINDS_COMMON_KERNEL_INFO_H_
#define MODPACK_KINDS_COMMON_KERNEL_INFO_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/bytes.h"
#include "core/json.h"
#include "core/registry.h"
#include "modpack/kinds/kernel.h"

typedef struct {
  uint8_t kind; /* MP_KERNEL_ARG_* */
  DLDataType dtype;
} mp_kernel_arg_t;

typedef struct {
  char* name;   /* what lookups use: a C name, or a C++ name expression ("mm<32>") */
  char* symbol; /* what the device code defines (a lowered name), NULL when it is |name| */
  uint32_t arg_count;
  mp_kernel_arg_t* args;
  uint32_t passed_count; /* the arguments a caller passes: all but MP_KERNEL_ARG_NULL ones */
  uint32_t launch_count;
  char** launch_tags;   /* e.g. "global.x", "local.x", "blockIdx.x", "dyn_shared_memory" */
  uint32_t fixed_count; /* launch values the record fixes (a caller does not pass them) */
  char** fixed_tags;
  uint64_t* fixed_values;
} mp_kernel_info_t;

/* Reads one record at |r|'s position into |out| (freed with mp_kernel_info_free, also after
 * a failure). |version| is the record layout: 1, or 2 (symbol, fixed launch values, NULL
 * arguments), as the payload's version says. */
mp_status_t mp_kernel_info_read(mp_reader_t* r, uint32_t version, mp_kernel_info_t* out);
/* The name the device code defines the kernel under. */
const char* mp_kernel_symbol(const mp_kernel_info_t* info);
void mp_kernel_info_free(mp_kernel_info_t* info);
/* {"name": ..., "args": ["float32*", "int32", "void*"], "launch": [...]} */
void mp_kernel_info_describe(mp_json_t* j, const mp_kernel_info_t* info);

/* A scalar argument converted to the kernel's parameter type. */
typedef union {
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  float f32;
  double f64;
} mp_kernel_scalar_t;

/* A kernel is called with its passed arguments, then one integer per launch tag. Checks the
 * count and sets |out_params|[i] to the value of parameter i (NULL for an MP_KERNEL_ARG_NULL
 * one, which the launch passes as a NULL pointer) and *|out_launch| to the launch values. */
mp_status_t mp_kernel_bind(const mp_kernel_info_t* info, const mp_value_t* args, int32_t num_args,
                           const mp_value_t** out_params, const mp_value_t** out_launch);
/* Argument |index| must be a compact array of the record's dtype (any dtype if untyped), or
 * None for a NULL pointer. */
mp_status_t mp_kernel_check_buffer(const mp_kernel_info_t* info, uint32_t index,
                                   const mp_value_t* value);
/* Argument |index| is local memory: the value must say how many bytes (> 0). */
mp_status_t mp_kernel_check_local(const mp_kernel_info_t* info, uint32_t index,
                                  const mp_value_t* value, uint64_t* out_nbytes);
/* Every array argument must be on |device|'s type, all on one device (its id, or -1 if there
 * is no array argument, goes to |out_device|); |how_to_create| completes the error message.
 * |params| are mp_kernel_bind's. */
mp_status_t mp_kernel_check_devices(const mp_kernel_info_t* info, const mp_value_t* const* params,
                                    const mp_device_api_t* device, const char* how_to_create,
                                    int32_t* out_device);
/* |value| converted to scalar argument |index|'s dtype (float16 and bfloat16 included);
 * |out_size| (may be NULL) receives its size in bytes. */
mp_status_t mp_kernel_pack_scalar(const mp_kernel_info_t* info, uint32_t index,
                                  const mp_value_t* value, mp_kernel_scalar_t* out,
                                  size_t* out_size);

#endif /* MODPACK_KINDS_COMMON_KERNEL_INFO_H_ */
