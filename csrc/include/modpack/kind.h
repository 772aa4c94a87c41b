/*
 * modpack/kind.h — for code that adds a module kind: a loader (`loadbinary_<type_key>`), the
 * module's vtable, and functions with state.
 *
 * A kind is a type key, a payload format and a loader that turns a payload into a module. The
 * runtime finds the loader by type key when it reads a blob; the built-in kinds (const,
 * opencl, cuda) are registered the same way as yours. Embedders that only load libraries need
 * modpack/modpack.h alone.
 *
 *   static mp_status_t load_mine(void* user_data, const mp_loader_args_t* args,
 *                                mp_module_t** out_module) {
 *     mine_t* state = parse(args->payload);          // read in place, do not copy large parts
 *     return mp_module_create(args->type_key, &mine_vtable, state, out_module);
 *   }
 *   mp_loader_register("mine", load_mine, NULL);
 */
#ifndef MODPACK_KIND_H_
#define MODPACK_KIND_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
/* What a module kind implements. Any member may be NULL. */
typedef struct {
  /* Find |name| in this module alone; set *out_function (a new reference) or leave it NULL
   * when absent and return MP_OK. */
  mp_status_t (*get_function)(mp_module_t* self, const char* name, mp_function_t** out_function);
  /* Named arrays the module carries (constants, weights). Views stay valid while the module
   * lives. */
  uint64_t (*array_count)(mp_module_t* self);
  mp_status_t (*array_at)(mp_module_t* self, uint64_t index, const char** out_name,
                          const DLTensor** out_array);
  /* Release the implementation state given to mp_module_create. */
  void (*destroy)(void* impl);
  /* The functions the module offers by name (e.g. its kernels), for listing. */
  uint64_t (*function_count)(mp_module_t* self);
  const char* (*function_name)(mp_module_t* self, uint64_t index);
  /* Kind-specific facts as the members of a JSON object (e.g. `"variants": [...]`), written
   * NUL-terminated into |buffer| (truncated to |capacity|); *out_length receives the length
   * the members need. */
  mp_status_t (*describe)(mp_module_t* self, char* buffer, uint64_t capacity, uint64_t* out_length);
} mp_module_vtable_t;

/* Create a module of kind |type_key| around |impl| (owned by the module from now on, even on
 * failure). |vtable| must outlive the module. */
MP_API mp_status_t mp_module_create(const char* type_key, const mp_module_vtable_t* vtable,
                                    void* impl, mp_module_t** out_module);
/* The state given to mp_module_create. */
MP_API void* mp_module_impl(const mp_module_t* module);
/* Name a module (1..MP_MODULE_MAX_NAME bytes, no '/' and no NUL), once, before it is shared:
 * its functions can then be looked up as "name/function" (e.g. two device modules built from
 * one source with different options, which define the same kernel names). */
MP_API mp_status_t mp_module_set_name(mp_module_t* module, const char* name);

/* Wrap |fn| with its state |self|; |destroy_self| (may be NULL) runs when the last reference
 * goes. |owner| (may be NULL) is retained for the function's lifetime. */
MP_API mp_status_t mp_function_create(mp_packed_cfunc_t fn, void* self,
                                      void (*destroy_self)(void* self), mp_module_t* owner,
                                      mp_function_t** out_function);

typedef struct {
  const char* type_key;
  /* The payload, in place inside the loaded library: read it, do not copy large parts. */
  mp_const_byte_span_t payload;
  /* The library holding the payload (borrowed; NULL when a tool loads a payload on its own).
   * The runtime keeps it loaded while the module the loader returns lives; retain it to keep
   * views alive beyond that. */
  mp_library_t* library;
  /* The entry's flags (modpack/format.h, MP_FORMAT_ENTRY_*): MP_FORMAT_ENTRY_CODE_FRAMES when
   * the payload's device code is stored in code frames, which only the built-in device kinds
   * read (the runtime refuses the flag for any other loader). */
  uint32_t entry_flags;
  /* The MP_LOAD_* flags the load was asked with (modpack.h): a device kind reads
   * MP_LOAD_NO_KERNEL_CACHE. 0 when a tool loads a payload on its own. */
  uint32_t load_flags;
  /* The library's path as the load names it, for messages and log lines (NULL when a tool
   * loads a payload on its own). */
  const char* library_path;
} mp_loader_args_t;

typedef mp_status_t (*mp_loader_fn_t)(void* user_data, const mp_loader_args_t* args,
                                      mp_module_t** out_module);

/* Register the loader (`loadbinary_<type_key>`) for one type key. MP_ERR_ALREADY_EXISTS when
 * the key has one (the built-in kinds' keys included). */
MP_API mp_status_t mp_loader_register(const char* type_key, mp_loader_fn_t fn, void* user_data);
MP_API mp_status_t mp_loader_unregister(const char* type_key);
/* Write the registered type keys, comma-separated and sorted, into |buffer| (always
 * NUL-terminated when |capacity| > 0); returns the length the full list needs. */
MP_API uint64_t mp_loader_list(char* buffer, uint64_t capacity);

/* The |index|-th launch tag of a built-in device kind's kernels ("global.x" for opencl,
 * "blockIdx.x" for cuda, ...), in the order the kind's launch slots use; NULL past the end or
 * for a kind without launch tags. Writers take the tag names from here. */
MP_API const char* mp_kind_launch_tag(const char* type_key, uint32_t index);
/* The type key of the |index|-th built-in kind ("const", "opencl", "cuda", ...), in the order
 * of the one list of built-in kinds (csrc/src/kinds/builtin.c); NULL past the last. Tests,
 * fuzz targets and tools iterate this rather than naming kinds. (The library layer's own
 * "weights" kind, references to weight files, is not in it.) */
MP_API const char* mp_builtin_kind(uint32_t index);
/* MP_API_END */

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KIND_H_ */
