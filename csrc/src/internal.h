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
static inline uint16_t mp_load_le16(const uint8_t* p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mp_load_le32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t mp_load_le64(const uint8_t* p) {
  return (uint64_t)mp_load_le32(p) | ((uint64_t)mp_load_le32(p + 4) << 32);
}

/* ---- objects ---- */

/* A function host code looked up through its context. Host code keeps the pointer (in a
 * static) for as long as the library is loaded, so entries belong to the library, not to
 * its "library" node: the resolved function is dropped when that node dies and resolved
 * again against the next one. */
typedef struct mp_context_entry {
  char* name;
  mp_function_t* function; /* NULL until resolved, and after the "library" node dies */
  mp_library_t* library;
  struct mp_context_entry* next;
} mp_context_entry_t;

struct mp_library {
  atomic_long refcount;
  void* handle; /* from dlopen */
  char* path;
  mp_module_t* lib_module; /* the "library" node (not owned) while it lives */
  mp_context_entry_t* context_entries;
};

struct mp_module {
  atomic_long refcount;
  char* type_key;
  const mp_module_vtable_t* vtable;
  void* impl;
  mp_library_t* library; /* retained; NULL for modules not loaded from a library */
  mp_module_t** imports; /* retained */
  uint64_t import_count;
  uint64_t import_capacity;
};

/* |name| in |root| and then, if |query_imports|, its imports (each module once); sets
 * *out_function or leaves it NULL without an error. */
mp_status_t mp_module_find_function(mp_module_t* root, const char* name, int32_t query_imports,
                                    mp_function_t** out_function);
/* Append |child| to |parent|'s imports without a cycle check (the blob reader proved the
 * tree acyclic). */
mp_status_t mp_module_append_import(mp_module_t* parent, mp_module_t* child);

/* Called when |module|'s last reference goes: drops it from the library's bookkeeping (root of
 * the live tree, "library" node) under the load lock, so no load can revive it. */
void mp_library_forget_module(mp_library_t* library, mp_module_t* module);

/* The "library" module kind: functions looked up with dlsym. */
/* |out_reused|: the library's surviving node was returned (its imports already wired). */
mp_status_t mp_library_module_create(mp_library_t* library, mp_module_t** out_module,
                                     bool* out_reused);
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

/* Check every payload's XXH3-64 (each distinct payload once). */
mp_status_t mp_blob_verify_payloads(const mp_blob_t* blob);

/* XXH3-64 of the index with its checksum field zeroed; |index_size| >= 64. */
uint64_t mp_index_checksum(const uint8_t* blob, uint64_t index_size);

/* ---- devices ---- */

/* What a device type implements. Offsets are in bytes from the `data` pointer. */
typedef struct {
  const char* name; /* "cpu", "opencl", "cuda" */
  mp_status_t (*count)(int32_t* out_count);
  mp_status_t (*describe)(int32_t device_id, char* buffer, uint64_t capacity);
  mp_status_t (*alloc)(int32_t device_id, uint64_t nbytes, void** out_data);
  mp_status_t (*free)(int32_t device_id, void* data);
  mp_status_t (*copy_from_host)(int32_t device_id, const void* host, void* data, uint64_t offset,
                                uint64_t nbytes);
  mp_status_t (*copy_to_host)(int32_t device_id, const void* data, uint64_t offset, void* host,
                              uint64_t nbytes);
  mp_status_t (*copy_within)(int32_t device_id, const void* from, uint64_t from_offset, void* to,
                             uint64_t to_offset, uint64_t nbytes);
  mp_status_t (*synchronize)(int32_t device_id);
} mp_device_api_t;

extern const mp_device_api_t mp_cpu_device_api;
extern const mp_device_api_t mp_opencl_device_api;
extern const mp_device_api_t mp_cuda_device_api;
/* The API of |device_type|, or NULL with an error naming the supported types. */
const mp_device_api_t* mp_device_api(int32_t device_type);

/* ---- loading vendor drivers with dlopen (driver_loading.c) ---- */
typedef struct {
  const char* name;
  void* slot; /* address of the function pointer to fill */
} mp_symbol_slot_t;

/* How a one-time initialisation went; a failure's message is replayed on every later use. */
typedef struct {
  mp_status_t status;
  char message[1024];
} mp_outcome_t;

bool mp_resolve_symbol(void* library, const char* name, void* slot);
/* Resolves every slot; returns NULL, or the name of the first symbol the library lacks. */
const char* mp_resolve_symbols(void* library, const mp_symbol_slot_t* slots, size_t count);
void mp_outcome_fail(mp_outcome_t* outcome, mp_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* MP_OK, or the remembered failure set as this thread's error. */
mp_status_t mp_outcome_raise(const mp_outcome_t* outcome);

/* ---- a bounds-checked cursor over payload bytes ---- */
typedef struct {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos;
  const char* what; /* for messages: "opencl payload" */
} mp_reader_t;

bool mp_read_u8(mp_reader_t* r, uint8_t* out);
bool mp_read_u32(mp_reader_t* r, uint32_t* out);
bool mp_read_u64(mp_reader_t* r, uint64_t* out);
/* |*out| points into the payload (no copy); fails if |n| bytes are not there. */
bool mp_read_bytes(mp_reader_t* r, uint64_t n, const uint8_t** out);
/* The error for a failed read: names the payload and the position. */
mp_status_t mp_reader_error(const mp_reader_t* r, const char* field);

/* ---- kernel function-info records (shared by device module kinds) ---- */
enum { MP_ARG_BUFFER = 0, MP_ARG_SCALAR = 1 };
enum { MP_MAX_KERNEL_ARGS = 256, MP_MAX_LAUNCH_TAGS = 16 };

typedef struct {
  uint8_t kind; /* MP_ARG_BUFFER or MP_ARG_SCALAR */
  DLDataType dtype;
} mp_kernel_arg_t;

typedef struct {
  char* name;
  uint32_t arg_count;
  mp_kernel_arg_t* args;
  uint32_t launch_count;
  char** launch_tags; /* e.g. "global.x", "local.x", "blockIdx.x", "dyn_shared_memory" */
} mp_kernel_info_t;

/* Reads one record: u32 name_size, name, u32 arg_count, {u8 kind, u8 code, u8 bits, u8 lanes}
 * per arg, u32 launch_count, {u32 size, bytes} per tag. */
mp_status_t mp_kernel_info_read(mp_reader_t* r, mp_kernel_info_t* out);
void mp_kernel_info_free(mp_kernel_info_t* info);
/* Calling a kernel from packed arguments: its arguments, then one integer per launch tag. */
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

mp_status_t mp_kernel_check_count(const mp_kernel_info_t* info, int32_t num_args);
/* Argument |index| must be a compact array of the record's dtype (any dtype if untyped). */
mp_status_t mp_kernel_check_buffer(const mp_kernel_info_t* info, uint32_t index,
                                   const mp_value_t* value);
/* Every array argument must be on |device_type|, all on one device (its id, or -1 if there is
 * no array argument, goes to |out_device|); |how_to_create| completes the error message. */
mp_status_t mp_kernel_check_devices(const mp_kernel_info_t* info, const mp_value_t* args,
                                    int32_t device_type, const char* how_to_create,
                                    int32_t* out_device);
/* |value| converted to scalar argument |index|'s dtype (float16 and bfloat16 included);
 * |out_size| (may be NULL) receives its size in bytes. */
mp_status_t mp_kernel_pack_scalar(const mp_kernel_info_t* info, uint32_t index,
                                  const mp_value_t* value, mp_kernel_scalar_t* out,
                                  size_t* out_size);

const char* mp_type_code_name(int32_t type_code);

/* ---- JSON text for describe() (always NUL-terminated, truncates silently) ---- */
typedef struct {
  char* buffer;
  uint64_t capacity;
  uint64_t length;
} mp_json_t;

void mp_json_printf(mp_json_t* j, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void mp_json_string(mp_json_t* j, const char* s);
/* {"name": ..., "args": ["float32*", "int32"], "launch": [...]} */
void mp_json_kernel_info(mp_json_t* j, const mp_kernel_info_t* info, bool comma);

#endif /* MODPACK_INTERNAL_H_ */
