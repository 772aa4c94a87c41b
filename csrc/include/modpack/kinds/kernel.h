/*
 * modpack/kinds/kernel.h — function-info records of device kernels, shared by the device kinds
 * (opencl, cuda): one record per kernel inside their payloads.
 *
 * A record names the kernel, gives each argument's kind and DLPack dtype, and tags the
 * trailing integer arguments that carry launch dimensions (the tag names belong to the kind:
 * mp_kind_launch_tag). Little-endian, variable length:
 *
 *   u32 name_size, name bytes (1..MP_KERNEL_MAX_NAME, no NUL)
 *   u32 arg_count (<= MP_KERNEL_MAX_ARGS), arg_count x {u8 kind, u8 dtype code, u8 bits, u8 lanes}
 *       (kind: MP_KERNEL_ARG_*; for local memory the dtype is informative, the size the call's)
 *   u32 launch_count (<= MP_KERNEL_MAX_LAUNCH_TAGS), each: u32 size, tag bytes
 *                                                    (1..MP_KERNEL_MAX_LAUNCH_TAG, no NUL)
 *   record version 2 only (the payloads say which version their records have):
 *   u32 symbol_size, symbol bytes (0: the symbol is the name; else what the device code defines,
 *       e.g. the lowered name of the C++ name expression the record is named by)
 *   u32 fixed_count (<= MP_KERNEL_MAX_LAUNCH_TAGS), each: u32 size, tag, u64 value: launch
 *       values fixed by the record (a block size, dynamic shared memory); a call passes only
 *       the launch tags, and a kind's default fills what neither gives
 *
 * A buffer argument whose dtype code is kDLOpaqueHandle is an untyped pointer (`void*`) and
 * accepts an array of any dtype. docs/format.md describes the records in prose.
 */
#ifndef MODPACK_KINDS_KERNEL_H_
#define MODPACK_KINDS_KERNEL_H_

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_KERNEL_ARG_BUFFER = 0, /* an array in device memory */
  MP_KERNEL_ARG_SCALAR = 1, /* a number passed by value */
  MP_KERNEL_ARG_LOCAL = 2,  /* OpenCL __local memory, sized by the caller (MP_TYPE_LOCAL_MEMORY) */
  MP_KERNEL_ARG_NULL = 3,   /* (v2) a pointer the caller does not pass: the launch passes NULL */
  MP_KERNEL_MAX_NAME = 1024,
  MP_KERNEL_MAX_ARGS = 256,
  MP_KERNEL_MAX_LAUNCH_TAGS = 16,
  MP_KERNEL_MAX_LAUNCH_TAG = 64,
};
/* MP_API_END */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_KERNEL_H_ */
