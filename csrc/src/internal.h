/* Private declarations shared by the runtime's translation units. Not installed. */
#ifndef MODPACK_INTERNAL_H_
#define MODPACK_INTERNAL_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modpack/modpack.h"

#define MP_VERSION_MAJOR 0
#define MP_VERSION_MINOR 1
#define MP_VERSION_PATCH 0

/* printf-style error: records the message and returns |code|. */
mp_status_t mp_errorf(mp_status_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current error message with context ("loading module[3]: ..."); returns code. */
mp_status_t mp_error_prefix(mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- checked size arithmetic (true on success) ---- */
static inline bool mp_add_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool mp_mul_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* ---- little-endian loads that never assume alignment ---- */
static inline uint16_t mp_load_le16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t mp_load_le32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t mp_load_le64(const uint8_t* p) {
  return (uint64_t)mp_load_le32(p) | ((uint64_t)mp_load_le32(p + 4) << 32);
}

/* ---- objects ---- */
struct mp_library {
  atomic_long refcount;
  void* handle;      /* from dlopen */
  char* path;
  mp_module_t* lib_module; /* the "library" node (not owned) while it lives */
};

typedef struct {
  char* name;
  mp_function_t* function;
} mp_function_cache_entry_t;

struct mp_module {
  atomic_long refcount;
  char* type_key;
  const mp_module_vtable_t* vtable;
  void* impl;
  mp_library_t* library; /* retained; NULL for modules not loaded from a library */
  mp_module_t** imports; /* retained */
  uint64_t import_count;
  uint64_t import_capacity;
  /* Functions handed to host code through the context: kept until the module dies. */
  mp_function_cache_entry_t* context_functions;
  uint64_t context_function_count;
};

/* Append |child| to |parent|'s imports without a cycle check (the blob reader proved the
 * tree acyclic). */
mp_status_t mp_module_append_import(mp_module_t* parent, mp_module_t* child);

/* The "library" module kind: functions looked up with dlsym. */
mp_status_t mp_library_module_create(mp_library_t* library, mp_module_t** out_module);
/* Registers the built-in loaders (const) once. */
void mp_builtin_loaders_init(void);
/* mp_loader_register without triggering the built-ins (used by them). */
mp_status_t mp_loader_register_builtin(const char* type_key, mp_loader_fn_t fn, void* user_data);
/* Loader lookup; on a miss the message lists the registered keys. */
mp_status_t mp_loader_find(const char* type_key, mp_loader_fn_t* out_fn, void** out_user_data);
/* The context functions patched into libraries. */
mp_status_t mp_context_get_function(void* ctx, const char* name, void** out_function);
mp_status_t mp_context_call(void* function, const mp_value_t* args, int32_t num_args,
                            mp_value_t* out_ret);
void mp_context_set_error(mp_status_t code, const char* message);
mp_status_t mp_context_get_array(void* ctx, const char* name, const DLTensor** out_array);
/* Validate an ELF shared object's extents against its file size before dlopen maps it. */
mp_status_t mp_elf_check_file(const char* path);

/* XXH3-64 of the index with its checksum field zeroed; |index_size| >= 64. */
uint64_t mp_index_checksum(const uint8_t* blob, uint64_t index_size);


#endif /* MODPACK_INTERNAL_H_ */
