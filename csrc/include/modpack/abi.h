/*
 * modpack/abi.h — the one calling convention shared by the runtime and the code inside a
 * deployable library: status codes, tagged values and the packed function type.
 *
 * Every function modpack can call — host code in deploy.so, device kernels, functions a
 * Python program registers — has the type `mp_packed_cfunc_t`: it receives an array of tagged
 * values and writes one tagged return value. It returns MP_OK (0) on success; on failure it
 * returns another status code and leaves a message in the runtime's per-thread error slot.
 */
#ifndef MODPACK_ABI_H_
#define MODPACK_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "modpack/dltensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
/* Status codes. MP_OK is 0; every other value names a class of failure. */
typedef int32_t mp_status_t;
enum {
  MP_OK = 0,
  MP_ERR_INVALID_ARGUMENT = 1,   /* a caller passed a wrong value, count or type */
  MP_ERR_FORMAT = 2,             /* a file or blob is malformed, truncated or corrupt */
  MP_ERR_NOT_FOUND = 3,          /* no such function, loader, symbol or file */
  MP_ERR_INCOMPATIBLE = 4,       /* valid, but not for this runtime (e.g. newer major) */
  MP_ERR_RESOURCE_EXHAUSTED = 5, /* out of memory */
  MP_ERR_IO = 6,                 /* the operating system refused (open, read, dlopen) */
  MP_ERR_RUNTIME = 7,            /* a called function reported a failure */
  MP_ERR_ALREADY_EXISTS = 8,     /* e.g. a loader registered twice for one type key */
  MP_ERR_UNAVAILABLE = 9,        /* a driver or device this needs is missing */
  MP_ERR_INTERNAL = 10,          /* a bug in modpack itself */
  MP_ERR_UNTRUSTED = 11,         /* not signed by a trusted key, or altered since it was */
  MP_ERR_MISMATCH = 12,          /* a valid file, but not the one expected (other weights) */
};

/* Type codes of mp_value_t. */
typedef enum {
  MP_TYPE_NONE = 0,
  MP_TYPE_INT = 1,          /* v_int64 */
  MP_TYPE_FLOAT = 2,        /* v_float64 */
  MP_TYPE_HANDLE = 3,       /* v_handle: an opaque pointer */
  MP_TYPE_STR = 4,          /* v_str: NUL-terminated UTF-8, borrowed for the call */
  MP_TYPE_DLTENSOR = 5,     /* v_tensor: borrowed for the call */
  MP_TYPE_FUNCTION = 6,     /* v_handle: an mp_function_t*, borrowed for the call */
  MP_TYPE_LOCAL_MEMORY = 7, /* v_int64: bytes of OpenCL __local memory for a kernel argument */
} mp_type_code_t;

/* mp_value_t.flags */
enum {
  /* The array must not be written (a read-only numpy array, a const module's weights, which
   * live in read-only memory). Host functions whose parameter is `DLTensor*` refuse it;
   * `const DLTensor*` parameters accept it. */
  MP_VALUE_READ_ONLY = 1,
};

/* A tagged value: 16 bytes. */
typedef struct {
  int32_t type_code; /* an mp_type_code_t value */
  int32_t flags;     /* MP_VALUE_* bits, 0 by default */
  union {
    int64_t v_int64;
    double v_float64;
    void* v_handle;
    const char* v_str;
    DLTensor* v_tensor;
  };
} mp_value_t;

/* The packed calling convention. |self| is the function's own state (NULL for host code),
 * |args| holds |num_args| values, and the callee writes its result to |out_ret| (which the
 * caller initialises to MP_TYPE_NONE). */
typedef mp_status_t (*mp_packed_cfunc_t)(void* self, const mp_value_t* args, int32_t num_args,
                                         mp_value_t* out_ret);
/* MP_API_END */

/* Builders for argument lists: `mp_value_t args[] = {mp_tensor(x), mp_int(n)};` */
static inline mp_value_t mp_int(int64_t v) {
  mp_value_t x;
  x.type_code = MP_TYPE_INT;
  x.flags = 0;
  x.v_int64 = v;
  return x;
}
static inline mp_value_t mp_float(double v) {
  mp_value_t x;
  x.type_code = MP_TYPE_FLOAT;
  x.flags = 0;
  x.v_float64 = v;
  return x;
}
/* |nbytes| of local memory for a kernel's `__local` parameter (OpenCL). */
static inline mp_value_t mp_local_memory(uint64_t nbytes) {
  mp_value_t x;
  x.type_code = MP_TYPE_LOCAL_MEMORY;
  x.flags = 0;
  x.v_int64 = (int64_t)nbytes;
  return x;
}
/* No value: a NULL pointer for a kernel's buffer parameter. */
static inline mp_value_t mp_none(void) {
  mp_value_t x;
  x.type_code = MP_TYPE_NONE;
  x.flags = 0;
  x.v_int64 = 0;
  return x;
}
static inline mp_value_t mp_tensor(DLTensor* v) {
  mp_value_t x;
  x.type_code = MP_TYPE_DLTENSOR;
  x.flags = 0;
  x.v_tensor = v;
  return x;
}

/* The name of an mp_value_t type code, for messages ("int", "array", ...): the one table, used
 * by the runtime and by the wrappers compiled into host code (modpack/backend.h) alike. */
static inline const char* mp_type_code_name(int32_t type_code) {
  switch (type_code) {
    case MP_TYPE_NONE:
      return "None";
    case MP_TYPE_INT:
      return "int";
    case MP_TYPE_FLOAT:
      return "float";
    case MP_TYPE_HANDLE:
      return "handle";
    case MP_TYPE_STR:
      return "str";
    case MP_TYPE_DLTENSOR:
      return "array";
    case MP_TYPE_FUNCTION:
      return "function";
    case MP_TYPE_LOCAL_MEMORY:
      return "local memory";
    default:
      return "unknown";
  }
}

/* Symbols inside a deployable library. Host functions are `__mp_func_<name>`. The module
 * context (see modpack/backend.h) is a set of writable pointers the runtime fills in after
 * dlopen; each is named once here, as an identifier for backend.h's definitions and as a
 * string (MP_CTX_*_SYMBOL) for the runtime's dlsym, so the two cannot drift apart. */
#define MP_FUNC_SYMBOL_PREFIX "__mp_func_"
/* A host function's declared signature (MP_EXPORT_TYPED_*), a NUL-terminated string, for
 * tools that show what a library takes without running it. */
#define MP_SIGNATURE_SYMBOL_PREFIX "__mp_sig_"
#define MP_CTX_LIBRARY __mp_library_ctx                 /* the library's own node in the tree */
#define MP_CTX_GET_FUNCTION __mp_ctx_get_function       /* find a function among its imports */
#define MP_CTX_CALL __mp_ctx_call                       /* call a function found that way */
#define MP_CTX_SET_ERROR __mp_ctx_set_error             /* report an error */
#define MP_CTX_GET_ARRAY __mp_ctx_get_array             /* find a named constant array */
#define MP_CTX_GET_ARRAY_ON __mp_ctx_get_array_on       /* ... on a device */
#define MP_CTX_ALLOC_WORKSPACE __mp_ctx_alloc_workspace /* scratch device memory */
#define MP_CTX_FREE_WORKSPACE __mp_ctx_free_workspace
#define MP_CTX_COPY __mp_ctx_copy             /* copy arrays between devices */
#define MP_CTX_CHECK_ARGS __mp_ctx_check_args /* check arguments against a signature */
#define MP_CTX_MARK_CALL __mp_ctx_mark_call   /* mark the current call failed (or not) */
#define MP_CTX_DESCRIBE_SPAN __mp_ctx_describe_span /* say why an array cannot be addressed */

#define MP__STRINGIFY(x) MP__STRINGIFY_(x)
#define MP__STRINGIFY_(x) #x
#define MP_CTX_LIBRARY_SYMBOL MP__STRINGIFY(MP_CTX_LIBRARY)
#define MP_CTX_GET_FUNCTION_SYMBOL MP__STRINGIFY(MP_CTX_GET_FUNCTION)
#define MP_CTX_CALL_SYMBOL MP__STRINGIFY(MP_CTX_CALL)
#define MP_CTX_SET_ERROR_SYMBOL MP__STRINGIFY(MP_CTX_SET_ERROR)
#define MP_CTX_GET_ARRAY_SYMBOL MP__STRINGIFY(MP_CTX_GET_ARRAY)
#define MP_CTX_GET_ARRAY_ON_SYMBOL MP__STRINGIFY(MP_CTX_GET_ARRAY_ON)
#define MP_CTX_ALLOC_WORKSPACE_SYMBOL MP__STRINGIFY(MP_CTX_ALLOC_WORKSPACE)
#define MP_CTX_FREE_WORKSPACE_SYMBOL MP__STRINGIFY(MP_CTX_FREE_WORKSPACE)
#define MP_CTX_COPY_SYMBOL MP__STRINGIFY(MP_CTX_COPY)
#define MP_CTX_CHECK_ARGS_SYMBOL MP__STRINGIFY(MP_CTX_CHECK_ARGS)
#define MP_CTX_MARK_CALL_SYMBOL MP__STRINGIFY(MP_CTX_MARK_CALL)
#define MP_CTX_DESCRIBE_SPAN_SYMBOL MP__STRINGIFY(MP_CTX_DESCRIBE_SPAN)

/* The context functions' types: what the runtime installs and host code calls. */
typedef mp_status_t (*mp_ctx_get_function_t)(void* ctx, const char* name, void** out_function);
typedef mp_status_t (*mp_ctx_call_t)(void* function, const mp_value_t* args, int32_t num_args,
                                     mp_value_t* out_ret);
typedef void (*mp_ctx_set_error_t)(mp_status_t code, const char* message);
typedef mp_status_t (*mp_ctx_get_array_t)(void* ctx, const char* name, const DLTensor** out_array);
typedef mp_status_t (*mp_ctx_get_array_on_t)(void* ctx, const char* name, DLDevice device,
                                             const DLTensor** out_array);
typedef mp_status_t (*mp_ctx_alloc_workspace_t)(DLDevice device, uint64_t nbytes, void** out_data);
typedef mp_status_t (*mp_ctx_free_workspace_t)(DLDevice device, void* data);
typedef mp_status_t (*mp_ctx_copy_t)(const DLTensor* from, DLTensor* to);
typedef mp_status_t (*mp_ctx_check_args_t)(const char* function, const char* signature,
                                           const mp_value_t* args, int32_t num_args);
/* Sets the failure mark of the calling thread's innermost call to |status| (MP_OK clears it);
 * mp_function_call fails a call whose mark is set when it returns, whatever it returned. */
typedef void (*mp_ctx_mark_call_t)(mp_status_t status);
/* Why |t| cannot be addressed (modpack/tensor_span.h's rules, with its numbers), as the end of
 * a sentence about the array, in |buffer| (400 bytes always hold it); returns |buffer|. The
 * runtime's, so that each library's wrappers need not compile the formatting themselves. */
typedef const char* (*mp_ctx_describe_span_t)(const DLTensor* t, char* buffer, size_t capacity);

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_value_t) == 16, "mp_value_t must be 16 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_ABI_H_ */
