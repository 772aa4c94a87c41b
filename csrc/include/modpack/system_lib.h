/*
 * modpack/system_lib.h — a deployable library linked into a program instead of dlopen'd.
 *
 * export_library("name.o" or "name.a", system_lib="NAME") writes the host code and the blob
 * as one relocatable object whose only interface is
 *
 *   const mp_system_lib_t* modpack_system_lib_NAME(void);
 *
 * It returns a constant description of the library: its blob, and the symbols the runtime
 * would otherwise find with dlsym (the host functions and the module context's slots). A
 * program calls it and hands the result to mp_module_load_system_lib (modpack.h): nothing is
 * registered by static constructors, so no `--whole-archive` is needed, and several system
 * libraries live in one program (every other symbol of theirs carries the NAME prefix).
 */
#ifndef MODPACK_SYSTEM_LIB_H_
#define MODPACK_SYSTEM_LIB_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_SYSTEM_LIB_MAGIC = 0x62696c6d, /* "mlib" in little-endian bytes */
  MP_SYSTEM_LIB_VERSION = 1,        /* this layout of mp_system_lib_t */
  MP_SYSTEM_LIB_MAX_SYMBOLS = 1 << 20,
};

/* A symbol of the library as dlsym would name it ("__mp_func_affine") and its address. */
typedef struct {
  const char* name;
  void* address;
} mp_system_lib_symbol_t;

typedef struct {
  uint32_t magic;   /* MP_SYSTEM_LIB_MAGIC */
  uint32_t version; /* MP_SYSTEM_LIB_VERSION */
  const char* name; /* NAME, as in modpack_system_lib_NAME */
  const uint8_t* blob;
  uint64_t blob_size; /* 0 (and blob NULL) for host code only */
  const mp_system_lib_symbol_t* symbols;
  uint64_t num_symbols;
} mp_system_lib_t;
/* MP_API_END */

/* The module context's slots as symbol entries, for the generated description (the code that
 * uses it includes modpack/backend.h first, which defines them). */
/* clang-format off */
#define MP_SYSTEM_LIB_CONTEXT_SYMBOLS                                  \
  {MP_CTX_LIBRARY_SYMBOL, (void*)&MP_CTX_LIBRARY},                     \
  {MP_CTX_GET_FUNCTION_SYMBOL, (void*)&MP_CTX_GET_FUNCTION},           \
  {MP_CTX_CALL_SYMBOL, (void*)&MP_CTX_CALL},                           \
  {MP_CTX_SET_ERROR_SYMBOL, (void*)&MP_CTX_SET_ERROR},                 \
  {MP_CTX_GET_ARRAY_SYMBOL, (void*)&MP_CTX_GET_ARRAY},                 \
  {MP_CTX_GET_ARRAY_ON_SYMBOL, (void*)&MP_CTX_GET_ARRAY_ON},           \
  {MP_CTX_ALLOC_WORKSPACE_SYMBOL, (void*)&MP_CTX_ALLOC_WORKSPACE},     \
  {MP_CTX_FREE_WORKSPACE_SYMBOL, (void*)&MP_CTX_FREE_WORKSPACE},       \
  {MP_CTX_COPY_SYMBOL, (void*)&MP_CTX_COPY},                           \
  {MP_CTX_CHECK_ARGS_SYMBOL, (void*)&MP_CTX_CHECK_ARGS},             \
  {MP_CTX_MARK_CALL_SYMBOL, (void*)&MP_CTX_MARK_CALL},                 \
  {MP_CTX_DESCRIBE_SPAN_SYMBOL, (void*)&MP_CTX_DESCRIBE_SPAN}
/* clang-format on */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_SYSTEM_LIB_H_ */
