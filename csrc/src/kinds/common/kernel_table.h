/* The part every device kind shares: its kernels' records, read from the payload against the
 * kind's launch tags, found by name, listed, described and turned into functions.
 *
 * A device kind's module state starts with an mp_kernel_table_t (checked with a static
 * assertion), so the table's get_function, function_count and function_name serve directly as
 * the kind's vtable entries; a found kernel becomes a function calling the kind's |call| with
 * an mp_kernel_ref_t as its state. */
#ifndef MODPACK_KINDS_COMMON_KERNEL_TABLE_H_
#define MODPACK_KINDS_COMMON_KERNEL_TABLE_H_

#include <stdbool.h>
#include <stdint.h>

#include "core/bytes.h"
#include "core/json.h"
#include "core/registry.h"
#include "kinds/common/kernel_info.h"

/* A kernel's launch: the slot (index of the tag in the kind's tag list) of each launch
 * argument a call passes, and the values the record fixes, by slot. */
typedef struct {
  int8_t slots[MP_KERNEL_MAX_LAUNCH_TAGS];
  uint32_t fixed_mask; /* bit per slot */
  uint64_t fixed[MP_KERNEL_MAX_LAUNCH_TAGS];
} mp_kernel_launch_t;

typedef struct {
  uint32_t count;
  mp_kernel_info_t* kernels;
  mp_kernel_launch_t* launch; /* per kernel */
  /* The kind's launcher: a packed function whose state is an mp_kernel_ref_t. */
  mp_packed_cfunc_t call;
} mp_kernel_table_t;

/* What a kernel function carries: the module state (which starts with the table) and which
 * kernel. */
typedef struct {
  void* module;
  uint32_t kernel;
} mp_kernel_ref_t;

/* Reads a u32 kernel count and that many records (layout |record_version|) at |r|. Each
 * launch tag, passed or fixed, must be one of |kind|'s and appear at most once per kernel; with
 * |unique_names|, two kernels may not share a name. On failure the table holds what was read so
 * far (free it with mp_kernel_table_free). */
mp_status_t mp_kernel_table_read(mp_reader_t* r, const mp_kind_t* kind, uint32_t record_version,
                                 bool unique_names, mp_kernel_table_t* table);
/* The launch values of a call: |defaults| (one per slot of the kind), then the record's fixed
 * values, then the call's |values| for its launch tags, which must be ints in [0, |limits|[slot]]
 * (named in messages by the tag). */
mp_status_t mp_kernel_table_launch(const mp_kernel_table_t* table, uint32_t kernel,
                                   const mp_value_t* values, const uint64_t* defaults,
                                   const uint64_t* limits, uint32_t slot_count,
                                   uint64_t* out_launch);
void mp_kernel_table_free(mp_kernel_table_t* table);
/* A device module's optional name at |r| (u32 size, 0 for none; at most MP_MODULE_MAX_NAME
 * bytes, no '/'): *out is a new string, or NULL when unnamed. */
mp_status_t mp_kernel_read_module_name(mp_reader_t* r, char** out);
/* `"kernels": [{...}, ...]` */
void mp_kernel_table_describe(mp_json_t* j, const mp_kernel_table_t* table);

/* Vtable entries for a module whose state starts with its kernel table. */
mp_status_t mp_kernel_table_get_function(mp_module_t* self, const char* name,
                                         mp_function_t** out_function);
uint64_t mp_kernel_table_function_count(mp_module_t* self);
const char* mp_kernel_table_function_name(mp_module_t* self, uint64_t index);

#endif /* MODPACK_KINDS_COMMON_KERNEL_TABLE_H_ */
