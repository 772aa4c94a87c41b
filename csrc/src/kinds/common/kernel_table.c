/* A device kind's kernels: read, found, listed, described (kinds/common/kernel_table.h). */
#include "kinds/common/kernel_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* |tag|'s index in |kind|'s launch tags. */
static mp_status_t launch_slot(const mp_reader_t* r, const mp_kind_t* kind,
                               const mp_kernel_info_t* info, const char* tag, int8_t* out) {
  for (uint32_t i = 0; i < kind->launch_tag_count; ++i) {
    if (strcmp(tag, kind->launch_tags[i]) == 0) {
      *out = (int8_t)i;
      return MP_OK;
    }
  }
  char expected[512] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < kind->launch_tag_count && used < sizeof expected; ++i) {
    int n = snprintf(expected + used, sizeof expected - used, "%s%s", i ? ", " : "",
                     kind->launch_tags[i]);
    if (n > 0) used += (size_t)n;
  }
  return mp_errorf(MP_ERR_FORMAT, "%s: kernel %s has unknown launch tag '%s' (expected one of: %s)",
                   r->what, info->name, tag, expected);
}

mp_status_t mp_kernel_table_read(mp_reader_t* r, const mp_kind_t* kind, uint32_t record_version,
                                 bool unique_names, mp_kernel_table_t* table) {
  uint32_t count;
  /* A record takes at least 12 bytes: no count can claim more records than that allows. */
  if (!mp_read_u32(r, &count) || count > (r->size - r->pos) / 12)
    return mp_reader_error(r, "kernel count");
  table->kernels = calloc(count ? count : 1, sizeof *table->kernels);
  table->launch = calloc(count ? count : 1, sizeof *table->launch);
  if (!table->kernels || !table->launch) return mp_out_of_memory("the kernel table");
  for (uint32_t k = 0; k < count; ++k) {
    mp_kernel_info_t* info = &table->kernels[k];
    table->count = k + 1; /* so that a partly read record is freed too */
    MP_RETURN_IF_ERROR(mp_kernel_info_read(r, record_version, info));
    mp_kernel_launch_t* launch = &table->launch[k];
    uint32_t seen = 0; /* bit per slot */
    for (uint32_t t = 0; t < info->launch_count + info->fixed_count; ++t) {
      bool fixed = t >= info->launch_count;
      const char* tag = fixed ? info->fixed_tags[t - info->launch_count] : info->launch_tags[t];
      int8_t slot;
      MP_RETURN_IF_ERROR(launch_slot(r, kind, info, tag, &slot));
      if (seen & (1u << slot))
        return mp_errorf(MP_ERR_FORMAT, "%s: kernel %s has launch tag '%s' twice", r->what,
                         info->name, tag);
      seen |= 1u << slot;
      if (fixed) {
        launch->fixed_mask |= 1u << slot;
        launch->fixed[slot] = info->fixed_values[t - info->launch_count];
      } else {
        launch->slots[t] = slot;
      }
    }
    for (uint32_t j = 0; unique_names && j < k; ++j)
      if (strcmp(table->kernels[j].name, info->name) == 0)
        return mp_errorf(MP_ERR_FORMAT, "%s: kernel %s is declared twice", r->what, info->name);
  }
  return MP_OK;
}

mp_status_t mp_kernel_read_module_name(mp_reader_t* r, char** out) {
  MP_RETURN_IF_ERROR(mp_read_optional_string(r, MP_MODULE_MAX_NAME, "", "module name", out));
  if (*out && strchr(*out, '/'))
    return mp_errorf(MP_ERR_FORMAT, "%s: module name '%s' contains '/'", r->what, *out);
  return MP_OK;
}

void mp_kernel_table_free(mp_kernel_table_t* table) {
  for (uint32_t k = 0; table->kernels && k < table->count; ++k)
    mp_kernel_info_free(&table->kernels[k]);
  free(table->kernels);
  free(table->launch);
  table->kernels = NULL;
  table->launch = NULL;
  table->count = 0;
}

mp_status_t mp_kernel_table_launch(const mp_kernel_table_t* table, uint32_t kernel,
                                   const mp_value_t* values, const uint64_t* defaults,
                                   const uint64_t* limits, uint32_t slot_count,
                                   uint64_t* out_launch) {
  const mp_kernel_info_t* info = &table->kernels[kernel];
  const mp_kernel_launch_t* launch = &table->launch[kernel];
  for (uint32_t s = 0; s < slot_count; ++s)
    out_launch[s] = launch->fixed_mask & (1u << s) ? launch->fixed[s] : defaults[s];
  for (uint32_t t = 0; t < info->launch_count; ++t) {
    const mp_value_t* v = &values[t];
    int8_t slot = launch->slots[t];
    if (v->type_code != MP_TYPE_INT || v->v_int64 < 0 || (uint64_t)v->v_int64 > limits[slot])
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: launch argument %u (%s) must be an int in [0, %llu]", info->name,
                       info->passed_count + t, info->launch_tags[t],
                       (unsigned long long)limits[slot]);
    out_launch[slot] = (uint64_t)v->v_int64;
  }
  return MP_OK;
}

void mp_kernel_table_describe(mp_json_t* j, const mp_kernel_table_t* table) {
  mp_json_printf(j, "\"kernels\": [");
  for (uint32_t k = 0; k < table->count; ++k) {
    if (k) mp_json_printf(j, ", ");
    mp_kernel_info_describe(j, &table->kernels[k]);
  }
  mp_json_printf(j, "]");
}

mp_status_t mp_kernel_table_get_function(mp_module_t* self, const char* name,
                                         mp_function_t** out_function) {
  mp_kernel_table_t* table = mp_module_impl(self);
  for (uint32_t k = 0; k < table->count; ++k) {
    if (strcmp(table->kernels[k].name, name) != 0) continue;
    mp_kernel_ref_t* ref = malloc(sizeof *ref);
    if (!ref) return mp_out_of_memory("a kernel function");
    *ref = (mp_kernel_ref_t){table, k};
    return mp_function_create(table->call, ref, free, self, out_function);
  }
  return MP_OK;
}

uint64_t mp_kernel_table_function_count(mp_module_t* self) {
  return ((mp_kernel_table_t*)mp_module_impl(self))->count;
}

const char* mp_kernel_table_function_name(mp_module_t* self, uint64_t index) {
  return ((mp_kernel_table_t*)mp_module_impl(self))->kernels[index].name;
}
