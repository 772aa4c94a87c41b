/*
 * modpack/backend.h — for code compiled *into* a deployable library (host C code).
 *
 * Such code never links against the modpack runtime. Instead the library carries a few
 * writable pointers (its "module context", named in modpack/abi.h) that the runtime fills in
 * right after dlopen:
 *
 *   __mp_library_ctx        the library's own module node in the loaded tree
 *   __mp_ctx_get_function   find a function in the library's imports (device modules)
 *   __mp_ctx_call           call a function found that way
 *   __mp_ctx_set_error      report an error through the runtime's error channel
 *   __mp_ctx_get_array      find a named constant array in the imports
 *   __mp_ctx_mark_call      mark the current call failed (see "the failure mark" below)
 *   __mp_ctx_describe_span  say why an array cannot be addressed, with its numbers
 *
 * They are weak, default-visibility definitions so that any number of translation units may
 * include this header and the linker keeps one copy.
 *
 * Exporting functions: modpack finds host functions by the symbol `__mp_func_<name>`, which
 * must have the packed type `mp_packed_cfunc_t`. Write one by hand with MP_EXPORT_PACKED, or
 * let MP_EXPORT_FUNC / MP_EXPORT_VOID_FUNC generate it for a plain C function:
 *
 *   static double scale(DLTensor* x, double k) { ... }
 *   MP_EXPORT_FUNC(scale, double, DLTensor*, double)
 *
 * (MP_EXPORT_FUNC0 / MP_EXPORT_VOID_FUNC0 for functions without parameters.) The generated
 * wrapper checks the argument count and each argument's type (and integer range), refuses
 * arrays whose bytes cannot be addressed (modpack/tensor_span.h: sizes, strides or byte_offset
 * overflowing, data that wraps) and reports a clear error through the runtime instead of
 * crashing.
 *
 * Arrays: a `DLTensor*` says nothing about what the code reads through it. Declare it, and the
 * wrapper checks every call before the code runs (MP_EXPORT_TYPED_FUNC / _VOID_FUNC):
 *
 *   static void affine(const DLTensor* x, DLTensor* out) { ... x->shape[0] floats ... }
 *   MP_EXPORT_TYPED_VOID_FUNC(affine, "x: float32[n] cpu, out: float32[n] cpu",
 *                             const DLTensor*, DLTensor*)
 *
 * One entry per parameter: its name, and for an array `: dtype[dims] flags`. dtype is a name
 * (float32, int64, bfloat16, bool, float8_e4m3fn, float4_e2m1fn_x2, ...) or `any`; DLPack 1.1
 * packs float4_e2m1fn and the float6 types (modpack/tensor_span.h), their dims counting values,
 * while float4_e2m1fn_x2's count bytes of two values; dims are numbers, names (one name is one
 * extent wherever it appears: "same length as x") or `*`, `[]` a scalar array and `[...]` any
 * shape; flags are device types the array may be on (cpu, cuda, opencl, vulkan; any when none is
 * given) and `strided` (otherwise the array must be compact row-major). Arrays must also be
 * aligned to their element type and reach only addressable bytes (modpack/tensor_span.h). Scalar parameters are named only (`k`); their C type is
 * checked as above. Errors name the function, the argument's index and name, what it must be
 * and what it is. `modpack inspect` shows the signature. The check parses the signature on each
 * call: about 0.2 us for two arrays, against 11 ns for an unchecked call.
 */
#ifndef MODPACK_BACKEND_H_
#define MODPACK_BACKEND_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "modpack/abi.h"
#include "modpack/dltensor.h"
#include "modpack/tensor_span.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_CTX_SYMBOL __attribute__((weak, visibility("default")))
#define MP_EXPORT_ATTR __attribute__((visibility("default")))
/* C and C++ alike: the exported functions have C linkage (found by their plain names). */
#ifdef __cplusplus
#define MP__C_LINKAGE extern "C"
#else
#define MP__C_LINKAGE
#endif

/* ---- the module context (filled in by the runtime at load time) -------------------------- */

MP_CTX_SYMBOL void* MP_CTX_LIBRARY = 0;
MP_CTX_SYMBOL mp_ctx_get_function_t MP_CTX_GET_FUNCTION = 0;
MP_CTX_SYMBOL mp_ctx_call_t MP_CTX_CALL = 0;
MP_CTX_SYMBOL mp_ctx_set_error_t MP_CTX_SET_ERROR = 0;
MP_CTX_SYMBOL mp_ctx_get_array_t MP_CTX_GET_ARRAY = 0;
MP_CTX_SYMBOL mp_ctx_get_array_on_t MP_CTX_GET_ARRAY_ON = 0;
MP_CTX_SYMBOL mp_ctx_alloc_workspace_t MP_CTX_ALLOC_WORKSPACE = 0;
MP_CTX_SYMBOL mp_ctx_free_workspace_t MP_CTX_FREE_WORKSPACE = 0;
MP_CTX_SYMBOL mp_ctx_copy_t MP_CTX_COPY = 0;
MP_CTX_SYMBOL mp_ctx_check_args_t MP_CTX_CHECK_ARGS = 0;
MP_CTX_SYMBOL mp_ctx_mark_call_t MP_CTX_MARK_CALL = 0;
MP_CTX_SYMBOL mp_ctx_describe_span_t MP_CTX_DESCRIBE_SPAN = 0;

/* The failure mark of the current call: set by mp_backend_errorf and by every mp_backend_*
 * call that fails, and the call fails when it is set at the end, even if the code went on and
 * returned MP_OK or returned nothing: a failed kernel launch can never turn into a silent
 * wrong result. A call's mark is its own: a nested call (host code re-entered through the
 * runtime) neither sees nor clears the enclosing one's.
 *
 * The runtime keeps the mark, per thread and per call (MP_CTX_MARK_CALL). A library keeps no
 * thread-local variable: its mere presence gives the library a TLS block, and after dlopen of
 * such a library the process's next thread-local access in every thread takes glibc's slow
 * path (several hundred nanoseconds on a function's first call). Only code running without a
 * runtime that keeps the mark (called by hand, or by a runtime older than the slot) keeps it
 * itself, per thread in a pthread key made on first use, and its wrappers check it. */
__attribute__((weak, visibility("hidden"))) pthread_once_t __mp_backend_mark_once = PTHREAD_ONCE_INIT;
__attribute__((weak, visibility("hidden"))) pthread_key_t __mp_backend_mark_key;
__attribute__((weak, visibility("hidden"))) bool __mp_backend_mark_key_made;

static inline void mp_backend__make_mark_key(void) {
  /* Fails only past PTHREAD_KEYS_MAX keys; the mark is then not kept without a runtime. */
  __mp_backend_mark_key_made = pthread_key_create(&__mp_backend_mark_key, NULL) == 0;
}

/* This thread's mark when no runtime keeps it. */
static inline mp_status_t mp_backend__own_mark(void) {
  pthread_once(&__mp_backend_mark_once, mp_backend__make_mark_key);
  if (!__mp_backend_mark_key_made) return MP_OK;
  return (mp_status_t)(intptr_t)pthread_getspecific(__mp_backend_mark_key);
}

static inline void mp_backend__set_own_mark(mp_status_t status) {
  pthread_once(&__mp_backend_mark_once, mp_backend__make_mark_key);
  if (__mp_backend_mark_key_made)
    pthread_setspecific(__mp_backend_mark_key, (void*)(intptr_t)status);
}

/* Marks the current call failed when |status| is a failure; returns |status|. */
static inline mp_status_t mp_backend__mark(mp_status_t status) {
  if (status != MP_OK) {
    if (MP_CTX_MARK_CALL)
      MP_CTX_MARK_CALL(status);
    else
      mp_backend__set_own_mark(status);
  }
  return status;
}

/* Host code that handled a failing mp_backend_* call on purpose (an optional kernel it falls
 * back from, say) clears the failure mark with this, so the call can still succeed. */
static inline void mp_backend_clear_error(void) {
  if (MP_CTX_MARK_CALL)
    MP_CTX_MARK_CALL(MP_OK);
  else
    mp_backend__set_own_mark(MP_OK);
}

/* The mark a wrapper running without a runtime that keeps it fails its call with (MP_OK when
 * none, and always under such a runtime, which fails the call itself when it returns). */
static inline mp_status_t mp_backend__marked_here(void) {
  return MP_CTX_MARK_CALL ? MP_OK : mp_backend__own_mark();
}

/* Report an error (printf-style) and return |code|, for `return mp_backend_errorf(...);`. */
static inline mp_status_t mp_backend_errorf(mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline mp_status_t mp_backend_errorf(mp_status_t code, const char* fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (MP_CTX_SET_ERROR) MP_CTX_SET_ERROR(code, message);
  return mp_backend__mark(code);
}

static inline mp_status_t mp_backend__no_context(const char* what) {
  /* Without the runtime there is nobody to report to; the code alone must do. */
  (void)what;
  return mp_backend__mark(MP_ERR_UNAVAILABLE);
}

/* Find |name| among the library's imports. The handle stays valid while the library is
 * loaded, so host code may cache it in a static. */
static inline mp_status_t mp_backend_get_function(const char* name, void** out_function) {
  if (!MP_CTX_GET_FUNCTION || !MP_CTX_LIBRARY) return mp_backend__no_context(name);
  return mp_backend__mark(MP_CTX_GET_FUNCTION(MP_CTX_LIBRARY, name, out_function));
}

/* Call a function found with mp_backend_get_function (a device kernel, say). */
static inline mp_status_t mp_backend_call(void* function, const mp_value_t* args, int32_t num_args,
                                          mp_value_t* out_ret) {
  if (!MP_CTX_CALL) return mp_backend__no_context("call");
  return mp_backend__mark(MP_CTX_CALL(function, args, num_args, out_ret));
}

/* Find a named constant array (e.g. weights in a const module) among the imports. */
static inline mp_status_t mp_backend_get_array(const char* name, const DLTensor** out_array) {
  if (!MP_CTX_GET_ARRAY || !MP_CTX_LIBRARY) return mp_backend__no_context(name);
  return mp_backend__mark(MP_CTX_GET_ARRAY(MP_CTX_LIBRARY, name, out_array));
}

/* ---- devices: scratch memory, copies, weights on a device -------------------------------- */

/* |nbytes| of scratch memory on |device|, what a DLTensor of that device holds in `data`
 * (a host pointer for the CPU, a cl_mem for OpenCL, a CUdeviceptr for CUDA), so host code
 * builds tensors over it and passes them to kernels. From a per-device pool: no driver
 * allocation per call in steady state. Give it back with mp_backend_free_workspace. */
static inline mp_status_t mp_backend_alloc_workspace(DLDevice device, uint64_t nbytes,
                                                     void** out_data) {
  if (!MP_CTX_ALLOC_WORKSPACE) return mp_backend__no_context("alloc_workspace");
  return mp_backend__mark(MP_CTX_ALLOC_WORKSPACE(device, nbytes, out_data));
}

static inline mp_status_t mp_backend_free_workspace(DLDevice device, void* data) {
  if (!MP_CTX_FREE_WORKSPACE) return mp_backend__no_context("free_workspace");
  return mp_backend__mark(MP_CTX_FREE_WORKSPACE(device, data));
}

/* Copy between two compact arrays of the same shape and dtype: host <-> device, or within a
 * device. Synchronous with respect to the host. */
static inline mp_status_t mp_backend_copy(const DLTensor* from, DLTensor* to) {
  if (!MP_CTX_COPY) return mp_backend__no_context("copy");
  return mp_backend__mark(MP_CTX_COPY(from, to));
}

/* A named constant array (a const module's weights) on |device|: uploaded the first time it
 * is asked for on that device and kept for the life of the library; on the CPU, the
 * zero-copy view into the library. Thread-safe. */
static inline mp_status_t mp_backend_get_array_on(const char* name, DLDevice device,
                                                  const DLTensor** out_array) {
  if (!MP_CTX_GET_ARRAY_ON || !MP_CTX_LIBRARY) return mp_backend__no_context(name);
  return mp_backend__mark(MP_CTX_GET_ARRAY_ON(MP_CTX_LIBRARY, name, device, out_array));
}

/* Check |args| against a signature written as for MP_EXPORT_TYPED_FUNC (see the top), for
 * functions written with MP_EXPORT_PACKED:
 *   mp_status_t s = mp_backend_check_args("scale", "x: float32[n], k", args, num_args);
 *   if (s != MP_OK) return s;                                                             */
static inline mp_status_t mp_backend_check_args(const char* function, const char* signature,
                                                const mp_value_t* args, int32_t num_args) {
  if (!MP_CTX_CHECK_ARGS) return mp_backend__no_context("check_args");
  return mp_backend__mark(MP_CTX_CHECK_ARGS(function, signature, args, num_args));
}

/* ---- exporting functions ----------------------------------------------------------------- */

/* Define a function in the packed ABI by hand:
 *   MP_EXPORT_PACKED(add_one) { ... use args, num_args, out_ret ...; return MP_OK; }
 * The exported symbol wraps the body: the call fails if the body failed or any mp_backend_*
 * call in it did (the failure mark above). Under a runtime that keeps the mark the wrapper is
 * a plain tail call; otherwise it clears the library's own mark, runs the body, checks the
 * mark and restores an enclosing call's. */
#define MP_EXPORT_PACKED(name)                                                             \
  static mp_status_t mp__body_##name(void* self, const mp_value_t* args, int32_t num_args, \
                                     mp_value_t* out_ret);                                 \
  MP__C_LINKAGE MP_EXPORT_ATTR mp_status_t __mp_func_##name(                               \
      void* self, const mp_value_t* args, int32_t num_args, mp_value_t* out_ret) {         \
    if (MP_CTX_MARK_CALL) return mp__body_##name(self, args, num_args, out_ret);           \
    mp_status_t mp__enclosing = mp_backend__own_mark();                                    \
    mp_backend__set_own_mark(MP_OK);                                                       \
    mp_status_t mp__status = mp__body_##name(self, args, num_args, out_ret);               \
    if (mp__status == MP_OK) mp__status = mp_backend__own_mark();                          \
    mp_backend__set_own_mark(mp__enclosing);                                               \
    return mp__status;                                                                     \
  }                                                                                        \
  static mp_status_t mp__body_##name(void* self, const mp_value_t* args, int32_t num_args, \
                                     mp_value_t* out_ret)

static inline mp_status_t mp_backend__arg_type_error(const char* fn, int32_t i, const char* want,
                                                     const mp_value_t* v) {
  return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %d must be %s, got %s", fn,
                           (int)i, want, mp_type_code_name(v->type_code));
}

/* Integer arguments: accept MP_TYPE_INT within the C type's range. */
#define MP__DEFINE_INT_ARG(suffix, T, lo, hi)                                                     \
  static inline mp_status_t mp_backend__arg_##suffix(const mp_value_t* v, void* out,              \
                                                     const char* fn, int32_t i) {                 \
    if (v->type_code != MP_TYPE_INT) return mp_backend__arg_type_error(fn, i, #T, v);             \
    if (v->v_int64 < (int64_t)(lo) || v->v_int64 > (int64_t)(hi))                                 \
      return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %d = %lld does not fit %s", \
                               fn, (int)i, (long long)v->v_int64, #T);                            \
    *(T*)out = (T)v->v_int64;                                                                     \
    return MP_OK;                                                                                 \
  }
MP__DEFINE_INT_ARG(schar, signed char, -128, 127)
MP__DEFINE_INT_ARG(char, char, -128, 127)
MP__DEFINE_INT_ARG(short, short, -32768, 32767)
MP__DEFINE_INT_ARG(int, int, INT32_MIN, INT32_MAX)
MP__DEFINE_INT_ARG(long, long, INT64_MIN, INT64_MAX)
MP__DEFINE_INT_ARG(llong, long long, INT64_MIN, INT64_MAX)
MP__DEFINE_INT_ARG(uchar, unsigned char, 0, 255)
MP__DEFINE_INT_ARG(ushort, unsigned short, 0, 65535)
MP__DEFINE_INT_ARG(uint, unsigned int, 0, UINT32_MAX)
MP__DEFINE_INT_ARG(ulong, unsigned long, 0, INT64_MAX)
MP__DEFINE_INT_ARG(ullong, unsigned long long, 0, INT64_MAX)
MP__DEFINE_INT_ARG(bool, bool, 0, 1)
#undef MP__DEFINE_INT_ARG

static inline mp_status_t mp_backend__arg_double(const mp_value_t* v, void* out, const char* fn,
                                                 int32_t i) {
  if (v->type_code == MP_TYPE_FLOAT)
    *(double*)out = v->v_float64;
  else if (v->type_code == MP_TYPE_INT)
    *(double*)out = (double)v->v_int64;
  else
    return mp_backend__arg_type_error(fn, i, "double", v);
  return MP_OK;
}
static inline mp_status_t mp_backend__arg_float(const mp_value_t* v, void* out, const char* fn,
                                                int32_t i) {
  double d;
  mp_status_t s = mp_backend__arg_double(v, &d, fn, i);
  if (s == MP_OK) *(float*)out = (float)d;
  return s;
}
/* The rule |problem| names, in words without the array's numbers: what a wrapper says under
 * a runtime older than the MP_CTX_DESCRIBE_SPAN slot (without any runtime, nobody hears it).
 * The numbers come from the runtime's slot: formatting them here (mp_tensor_span_describe)
 * would be compiled into every library, a sixth of a small library's compile time. */
static inline const char* mp_backend__span_rule(mp_span_status_t problem) {
  switch (problem) {
    case MP_SPAN_NO_SHAPE:
      return "its dimension count is negative, or it has dimensions and no shape";
    case MP_SPAN_NO_ELEMENT_SIZE:
      return "its elements have no size";
    case MP_SPAN_NEGATIVE_EXTENT:
      return "a dimension is negative";
    case MP_SPAN_TOO_LARGE:
      return "its shape is more than PTRDIFF_MAX elements or bytes";
    case MP_SPAN_STRIDES_TOO_LARGE:
      return "its strides reach more than PTRDIFF_MAX bytes";
    case MP_SPAN_OFFSET_TOO_LARGE:
      return "its byte_offset, or it plus the bytes its elements reach, is more than PTRDIFF_MAX";
    case MP_SPAN_WRAPS:
      return "its elements leave the address space";
    case MP_SPAN_BAD_PACKING:
      return "its elements (bits x lanes) are over a byte and not whole bytes, so do not pack";
    default:
      return "it breaks a rule of modpack/tensor_span.h";
  }
}

/* Every array, typed or not, must reach only addressable bytes (modpack/tensor_span.h: no
 * extent, stride or byte_offset whose bytes overflow, no data its elements wrap around from),
 * so code computing `data + byte_offset + i * itemsize` never overflows. A few nanoseconds. */
static inline mp_status_t mp_backend__arg_const_tensor(const mp_value_t* v, void* out,
                                                       const char* fn, int32_t i) {
  if (v->type_code != MP_TYPE_DLTENSOR || !v->v_tensor)
    return mp_backend__arg_type_error(fn, i, "DLTensor*", v);
  mp_tensor_span_t span;
  mp_span_status_t problem = mp_tensor_span(v->v_tensor, &span);
  if (problem != MP_SPAN_OK) {
    char why[400];
    return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT,
                             "%s: argument %d is an array whose bytes cannot be addressed: %s", fn,
                             (int)i,
                             MP_CTX_DESCRIBE_SPAN
                                 ? MP_CTX_DESCRIBE_SPAN(v->v_tensor, why, sizeof why)
                                 : mp_backend__span_rule(problem));
  }
  *(DLTensor**)out = v->v_tensor;
  return MP_OK;
}
/* A `DLTensor*` parameter may be written, so read-only arrays are refused. */
static inline mp_status_t mp_backend__arg_tensor(const mp_value_t* v, void* out, const char* fn,
                                                 int32_t i) {
  if (v->type_code == MP_TYPE_DLTENSOR && (v->flags & MP_VALUE_READ_ONLY))
    return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT,
                             "%s: argument %d is a read-only array; declare the parameter "
                             "`const DLTensor*` if the function only reads it",
                             fn, (int)i);
  return mp_backend__arg_const_tensor(v, out, fn, i);
}
static inline mp_status_t mp_backend__arg_str(const mp_value_t* v, void* out, const char* fn,
                                              int32_t i) {
  if (v->type_code != MP_TYPE_STR) return mp_backend__arg_type_error(fn, i, "str", v);
  *(const char**)out = v->v_str;
  return MP_OK;
}
static inline mp_status_t mp_backend__arg_handle(const mp_value_t* v, void* out, const char* fn,
                                                 int32_t i) {
  if (v->type_code != MP_TYPE_HANDLE && v->type_code != MP_TYPE_NONE &&
      v->type_code != MP_TYPE_FUNCTION)
    return mp_backend__arg_type_error(fn, i, "handle", v);
  *(void**)out = v->type_code == MP_TYPE_NONE ? 0 : v->v_handle;
  return MP_OK;
}

/* The converter for a parameter of type T, chosen at compile time (C: _Generic; C++: the
 * mp__converter template below). A type not listed does not compile. */
#ifndef __cplusplus
#define MP__ARG_CONVERTER(T)                          \
  _Generic((T*)0,                                     \
      signed char*: mp_backend__arg_schar,            \
      char*: mp_backend__arg_char,                    \
      short*: mp_backend__arg_short,                  \
      int*: mp_backend__arg_int,                      \
      long*: mp_backend__arg_long,                    \
      long long*: mp_backend__arg_llong,              \
      unsigned char*: mp_backend__arg_uchar,          \
      unsigned short*: mp_backend__arg_ushort,        \
      unsigned int*: mp_backend__arg_uint,            \
      unsigned long*: mp_backend__arg_ulong,          \
      unsigned long long*: mp_backend__arg_ullong,    \
      bool*: mp_backend__arg_bool,                    \
      float*: mp_backend__arg_float,                  \
      double*: mp_backend__arg_double,                \
      DLTensor**: mp_backend__arg_tensor,             \
      const DLTensor**: mp_backend__arg_const_tensor, \
      const char**: mp_backend__arg_str,              \
      char**: mp_backend__arg_str,                    \
      void**: mp_backend__arg_handle)
#endif

static inline void mp_backend__ret_int(mp_value_t* r, int64_t v) {
  *r = mp_int(v);
}
static inline void mp_backend__ret_uint(mp_value_t* r, uint64_t v) {
  *r = mp_int((int64_t)v);
}
static inline void mp_backend__ret_float(mp_value_t* r, double v) {
  *r = mp_float(v);
}
static inline void mp_backend__ret_handle(mp_value_t* r, const void* v) {
  r->type_code = MP_TYPE_HANDLE;
  r->flags = 0;
  r->v_handle = (void*)v;
}

#ifndef __cplusplus
#define MP__SET_RET(R, out, value)               \
  _Generic((R*)0,                                \
      float*: mp_backend__ret_float,             \
      double*: mp_backend__ret_float,            \
      unsigned char*: mp_backend__ret_uint,      \
      unsigned short*: mp_backend__ret_uint,     \
      unsigned int*: mp_backend__ret_uint,       \
      unsigned long*: mp_backend__ret_uint,      \
      unsigned long long*: mp_backend__ret_uint, \
      void**: mp_backend__ret_handle,            \
      DLTensor**: mp_backend__ret_handle,        \
      default: mp_backend__ret_int)(out, value)
#endif

#define MP__NARGS(...) MP__NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define MP__NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) N
#define MP__CAT(a, b) MP__CAT_(a, b)
#define MP__CAT_(a, b) a##b

#define MP__ARG(T, i)                                                     \
  T a##i;                                                                 \
  if (MP__ARG_CONVERTER(T)(&args[i], (void*)&a##i, mp__name, i) != MP_OK) \
    return MP_ERR_INVALID_ARGUMENT;
#define MP__ARGS_1(T1) MP__ARG(T1, 0)
#define MP__ARGS_2(T1, T2) MP__ARGS_1(T1) MP__ARG(T2, 1)
#define MP__ARGS_3(T1, T2, T3) MP__ARGS_2(T1, T2) MP__ARG(T3, 2)
#define MP__ARGS_4(T1, T2, T3, T4) MP__ARGS_3(T1, T2, T3) MP__ARG(T4, 3)
#define MP__ARGS_5(T1, T2, T3, T4, T5) MP__ARGS_4(T1, T2, T3, T4) MP__ARG(T5, 4)
#define MP__ARGS_6(T1, T2, T3, T4, T5, T6) MP__ARGS_5(T1, T2, T3, T4, T5) MP__ARG(T6, 5)
#define MP__ARGS_7(T1, T2, T3, T4, T5, T6, T7) MP__ARGS_6(T1, T2, T3, T4, T5, T6) MP__ARG(T7, 6)
#define MP__ARGS_8(T1, T2, T3, T4, T5, T6, T7, T8) \
  MP__ARGS_7(T1, T2, T3, T4, T5, T6, T7) MP__ARG(T8, 7)
#define MP__NAMES_1 a0
#define MP__NAMES_2 MP__NAMES_1, a1
#define MP__NAMES_3 MP__NAMES_2, a2
#define MP__NAMES_4 MP__NAMES_3, a3
#define MP__NAMES_5 MP__NAMES_4, a4
#define MP__NAMES_6 MP__NAMES_5, a5
#define MP__NAMES_7 MP__NAMES_6, a6
#define MP__NAMES_8 MP__NAMES_7, a7

#define MP__WRAPPER_PROLOGUE(name, n)                                                        \
  MP_EXPORT_PACKED(name) {                                                                   \
    static const char mp__name[] = #name;                                                    \
    (void)self;                                                                              \
    if (num_args != (n))                                                                     \
      return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "%s: expected %d arguments, got %d", \
                               mp__name, (int)(n), (int)num_args);

/* clang-format off */
/* Export `R name(T1, ..., Tn)` (1 to 8 parameters) under the packed ABI. */
#define MP_EXPORT_FUNC(name, R, ...)                                                         \
  MP__WRAPPER_PROLOGUE(name, MP__NARGS(__VA_ARGS__))                                         \
  MP__CAT(MP__ARGS_, MP__NARGS(__VA_ARGS__))(__VA_ARGS__)                                    \
  R mp__result = name(MP__CAT(MP__NAMES_, MP__NARGS(__VA_ARGS__)));                          \
  {                                                                                          \
    mp_status_t mp__marked = mp_backend__marked_here();                                      \
    if (mp__marked != MP_OK) return mp__marked;                                              \
  }                                                                                          \
  MP__SET_RET(R, out_ret, mp__result);                                                       \
  return MP_OK;                                                                              \
  }

/* Export `void name(T1, ..., Tn)` (1 to 8 parameters) under the packed ABI. */
#define MP_EXPORT_VOID_FUNC(name, ...)                                                       \
  MP__WRAPPER_PROLOGUE(name, MP__NARGS(__VA_ARGS__))                                         \
  MP__CAT(MP__ARGS_, MP__NARGS(__VA_ARGS__))(__VA_ARGS__)                                    \
  (void)out_ret;                                                                             \
  name(MP__CAT(MP__NAMES_, MP__NARGS(__VA_ARGS__)));                                         \
  return MP_OK;                                                                              \
  }

/* The signature a typed export declares, kept in the library for tools (MP_SIGNATURE_SYMBOL_
 * PREFIX), then the wrapper with the check in front of the conversions. */
#define MP__SIGNATURE(name, signature) \
  MP__C_LINKAGE MP_EXPORT_ATTR const char __mp_sig_##name[] = signature;
#define MP__CHECK_SIGNATURE(signature)                                                       \
  {                                                                                          \
    mp_status_t mp__checked = mp_backend_check_args(mp__name, signature, args, num_args);    \
    if (mp__checked != MP_OK) return mp__checked;                                            \
  }

/* Export `R name(T1, ..., Tn)` with its arrays declared by |signature| (see the top). */
#define MP_EXPORT_TYPED_FUNC(name, R, signature, ...)                                        \
  MP__SIGNATURE(name, signature)                                                             \
  MP__WRAPPER_PROLOGUE(name, MP__NARGS(__VA_ARGS__))                                         \
  MP__CHECK_SIGNATURE(signature)                                                             \
  MP__CAT(MP__ARGS_, MP__NARGS(__VA_ARGS__))(__VA_ARGS__)                                    \
  R mp__result = name(MP__CAT(MP__NAMES_, MP__NARGS(__VA_ARGS__)));                          \
  {                                                                                          \
    mp_status_t mp__marked = mp_backend__marked_here();                                      \
    if (mp__marked != MP_OK) return mp__marked;                                              \
  }                                                                                          \
  MP__SET_RET(R, out_ret, mp__result);                                                       \
  return MP_OK;                                                                              \
  }

/* Export `void name(T1, ..., Tn)` with its arrays declared by |signature| (see the top). */
#define MP_EXPORT_TYPED_VOID_FUNC(name, signature, ...)                                      \
  MP__SIGNATURE(name, signature)                                                             \
  MP__WRAPPER_PROLOGUE(name, MP__NARGS(__VA_ARGS__))                                         \
  MP__CHECK_SIGNATURE(signature)                                                             \
  MP__CAT(MP__ARGS_, MP__NARGS(__VA_ARGS__))(__VA_ARGS__)                                    \
  (void)out_ret;                                                                             \
  name(MP__CAT(MP__NAMES_, MP__NARGS(__VA_ARGS__)));                                         \
  return MP_OK;                                                                              \
  }

/* Export `R name(void)` under the packed ABI (the variadic forms need a parameter). */
#define MP_EXPORT_FUNC0(name, R)                                                             \
  MP__WRAPPER_PROLOGUE(name, 0)                                                              \
  (void)args;                                                                                \
  R mp__result = name();                                                                     \
  {                                                                                          \
    mp_status_t mp__marked = mp_backend__marked_here();                                      \
    if (mp__marked != MP_OK) return mp__marked;                                              \
  }                                                                                          \
  MP__SET_RET(R, out_ret, mp__result);                                                       \
  return MP_OK;                                                                              \
  }

/* Export `void name(void)` under the packed ABI. */
#define MP_EXPORT_VOID_FUNC0(name)                                                           \
  MP__WRAPPER_PROLOGUE(name, 0)                                                              \
  (void)args;                                                                                \
  (void)out_ret;                                                                             \
  name();                                                                                    \
  return MP_OK;                                                                              \
  }
/* clang-format on */

#ifdef __cplusplus
} /* extern "C" */

/* C++: the same choices as _Generic makes in C, by template specialisation and overloading
 * (outside extern "C", which allows neither). */
template <typename T>
struct mp__converter; /* no definition: a parameter type modpack cannot pass */
#define MP__CONVERTER(T, fn)                                                                  \
  template <>                                                                                 \
  struct mp__converter<T> {                                                                   \
    static mp_status_t convert(const mp_value_t* v, void* out, const char* name, int32_t i) { \
      return fn(v, out, name, i);                                                             \
    }                                                                                         \
  };
MP__CONVERTER(signed char, mp_backend__arg_schar)
MP__CONVERTER(char, mp_backend__arg_char)
MP__CONVERTER(short, mp_backend__arg_short)
MP__CONVERTER(int, mp_backend__arg_int)
MP__CONVERTER(long, mp_backend__arg_long)
MP__CONVERTER(long long, mp_backend__arg_llong)
MP__CONVERTER(unsigned char, mp_backend__arg_uchar)
MP__CONVERTER(unsigned short, mp_backend__arg_ushort)
MP__CONVERTER(unsigned int, mp_backend__arg_uint)
MP__CONVERTER(unsigned long, mp_backend__arg_ulong)
MP__CONVERTER(unsigned long long, mp_backend__arg_ullong)
MP__CONVERTER(bool, mp_backend__arg_bool)
MP__CONVERTER(float, mp_backend__arg_float)
MP__CONVERTER(double, mp_backend__arg_double)
MP__CONVERTER(DLTensor*, mp_backend__arg_tensor)
MP__CONVERTER(const DLTensor*, mp_backend__arg_const_tensor)
MP__CONVERTER(const char*, mp_backend__arg_str)
MP__CONVERTER(char*, mp_backend__arg_str)
MP__CONVERTER(void*, mp_backend__arg_handle)
#undef MP__CONVERTER
#define MP__ARG_CONVERTER(T) mp__converter<T>::convert

/* Integers (and bool, enums) by default; the rest by exact overloads, which C++ prefers. */
template <typename R>
inline void mp__set_ret(mp_value_t* r, R v) {
  mp_backend__ret_int(r, (int64_t)v);
}
inline void mp__set_ret(mp_value_t* r, float v) {
  mp_backend__ret_float(r, v);
}
inline void mp__set_ret(mp_value_t* r, double v) {
  mp_backend__ret_float(r, v);
}
inline void mp__set_ret(mp_value_t* r, unsigned char v) {
  mp_backend__ret_uint(r, v);
}
inline void mp__set_ret(mp_value_t* r, unsigned short v) {
  mp_backend__ret_uint(r, v);
}
inline void mp__set_ret(mp_value_t* r, unsigned int v) {
  mp_backend__ret_uint(r, v);
}
inline void mp__set_ret(mp_value_t* r, unsigned long v) {
  mp_backend__ret_uint(r, v);
}
inline void mp__set_ret(mp_value_t* r, unsigned long long v) {
  mp_backend__ret_uint(r, v);
}
inline void mp__set_ret(mp_value_t* r, void* v) {
  mp_backend__ret_handle(r, v);
}
inline void mp__set_ret(mp_value_t* r, DLTensor* v) {
  mp_backend__ret_handle(r, v);
}
#define MP__SET_RET(R, out, value) mp__set_ret(out, (R)(value))
#endif
#endif /* MODPACK_BACKEND_H_ */
