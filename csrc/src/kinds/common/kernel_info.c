/* Function-info records of device kernels and the per-call checks shared by every device kind
 * (kinds/common/kernel_info.h). */
#include "kinds/common/kernel_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"

void mp_kernel_info_free(mp_kernel_info_t* info) {
  free(info->name);
  free(info->symbol);
  free(info->args);
  for (uint32_t i = 0; info->launch_tags && i < info->launch_count; ++i) free(info->launch_tags[i]);
  free(info->launch_tags);
  for (uint32_t i = 0; info->fixed_tags && i < info->fixed_count; ++i) free(info->fixed_tags[i]);
  free(info->fixed_tags);
  free(info->fixed_values);
  memset(info, 0, sizeof *info);
}

/* |count| launch tags at |r| into a new array (*out, |count| entries). */
static mp_status_t read_tags(mp_reader_t* r, uint32_t count, const char* where, char*** out) {
  *out = calloc(count ? count : 1, sizeof **out);
  if (!*out) return mp_out_of_memory("launch tags");
  for (uint32_t i = 0; i < count; ++i)
    MP_RETURN_IF_ERROR(
        mp_read_string(r, MP_KERNEL_MAX_LAUNCH_TAG, where, "launch tag", &(*out)[i]));
  return MP_OK;
}

mp_status_t mp_kernel_info_read(mp_reader_t* r, uint32_t version, mp_kernel_info_t* out) {
  memset(out, 0, sizeof *out);
  MP_RETURN_IF_ERROR(mp_read_string(r, MP_KERNEL_MAX_NAME, "", "kernel name", &out->name));
  char where[MP_KERNEL_MAX_NAME + 16]; /* "kernel NAME: " */
  snprintf(where, sizeof where, "kernel %s: ", out->name);
  if (!mp_read_u32(r, &out->arg_count)) return mp_reader_error(r, "argument count");
  if (out->arg_count > MP_KERNEL_MAX_ARGS)
    return mp_errorf(MP_ERR_FORMAT, "%s: %sargument count of %u exceeds %d", r->what, where,
                     out->arg_count, MP_KERNEL_MAX_ARGS);
  out->args = calloc(out->arg_count ? out->arg_count : 1, sizeof *out->args);
  if (!out->args) return mp_out_of_memory("kernel arguments");
  for (uint32_t i = 0; i < out->arg_count; ++i) {
    uint8_t kind, code, bits, lanes;
    if (!mp_read_u8(r, &kind) || !mp_read_u8(r, &code) || !mp_read_u8(r, &bits) ||
        !mp_read_u8(r, &lanes))
      return mp_reader_error(r, "kernel argument");
    uint8_t last_kind = version >= 2 ? MP_KERNEL_ARG_NULL : MP_KERNEL_ARG_LOCAL;
    if (kind > last_kind || bits == 0 || lanes == 0)
      return mp_errorf(MP_ERR_FORMAT, "%s: %sargument %u has kind %u, bits %u, lanes %u", r->what,
                       where, i, kind, bits, lanes);
    out->args[i] = (mp_kernel_arg_t){kind, {code, bits, lanes}};
    out->passed_count += kind != MP_KERNEL_ARG_NULL;
  }
  if (!mp_read_u32(r, &out->launch_count)) return mp_reader_error(r, "launch tag count");
  if (out->launch_count > MP_KERNEL_MAX_LAUNCH_TAGS)
    return mp_errorf(MP_ERR_FORMAT, "%s: %slaunch tag count of %u exceeds %d", r->what, where,
                     out->launch_count, MP_KERNEL_MAX_LAUNCH_TAGS);
  MP_RETURN_IF_ERROR(read_tags(r, out->launch_count, where, &out->launch_tags));
  if (version < 2) return MP_OK;
  MP_RETURN_IF_ERROR(mp_read_optional_string(r, MP_KERNEL_MAX_NAME, where, "symbol", &out->symbol));
  if (!mp_read_u32(r, &out->fixed_count)) return mp_reader_error(r, "fixed launch count");
  if (out->fixed_count > MP_KERNEL_MAX_LAUNCH_TAGS)
    return mp_errorf(MP_ERR_FORMAT, "%s: %sfixed launch count of %u exceeds %d", r->what, where,
                     out->fixed_count, MP_KERNEL_MAX_LAUNCH_TAGS);
  out->fixed_tags = calloc(out->fixed_count ? out->fixed_count : 1, sizeof *out->fixed_tags);
  out->fixed_values = calloc(out->fixed_count ? out->fixed_count : 1, sizeof *out->fixed_values);
  if (!out->fixed_tags || !out->fixed_values) return mp_out_of_memory("fixed launch values");
  for (uint32_t i = 0; i < out->fixed_count; ++i) {
    MP_RETURN_IF_ERROR(
        mp_read_string(r, MP_KERNEL_MAX_LAUNCH_TAG, where, "launch tag", &out->fixed_tags[i]));
    if (!mp_read_u64(r, &out->fixed_values[i])) return mp_reader_error(r, "fixed launch value");
  }
  return MP_OK;
}

const char* mp_kernel_symbol(const mp_kernel_info_t* info) {
  return info->symbol ? info->symbol : info->name;
}

void mp_kernel_info_describe(mp_json_t* j, const mp_kernel_info_t* info) {
  mp_json_printf(j, "{\"name\": ");
  mp_json_string(j, info->name);
  if (info->symbol) {
    mp_json_printf(j, ", \"symbol\": ");
    mp_json_string(j, info->symbol);
  }
  mp_json_printf(j, ", \"args\": [");
  for (uint32_t a = 0; a < info->arg_count; ++a) {
    const mp_kernel_arg_t* arg = &info->args[a];
    char dtype[32];
    if (arg->kind != MP_KERNEL_ARG_SCALAR && arg->dtype.code == kDLOpaqueHandle)
      snprintf(dtype, sizeof dtype, "void"); /* an untyped pointer: any dtype */
    else
      mp_dtype_string(arg->dtype, dtype, sizeof dtype);
    static const char* const prefixes[] = {"", "", "local ", "null "};
    mp_json_printf(j, "%s\"%s%s%s\"", a ? ", " : "", prefixes[arg->kind], dtype,
                   arg->kind == MP_KERNEL_ARG_SCALAR ? "" : "*");
  }
  mp_json_printf(j, "], \"launch\": [");
  for (uint32_t t = 0; t < info->launch_count; ++t) {
    mp_json_printf(j, "%s", t ? ", " : "");
    mp_json_string(j, info->launch_tags[t]);
  }
  mp_json_printf(j, "]");
  if (info->fixed_count) {
    mp_json_printf(j, ", \"fixed\": {");
    for (uint32_t t = 0; t < info->fixed_count; ++t) {
      mp_json_printf(j, "%s", t ? ", " : "");
      mp_json_string(j, info->fixed_tags[t]);
      mp_json_printf(j, ": %llu", (unsigned long long)info->fixed_values[t]);
    }
    mp_json_printf(j, "}");
  }
  mp_json_printf(j, "}");
}

/* ---- calling kernels: checks and conversions shared by device module kinds ----------------- */

mp_status_t mp_kernel_bind(const mp_kernel_info_t* info, const mp_value_t* args, int32_t num_args,
                           const mp_value_t** out_params, const mp_value_t** out_launch) {
  uint32_t expected = info->passed_count + info->launch_count;
  if (num_args < 0 || (uint32_t)num_args != expected)
    return mp_errorf(
        MP_ERR_INVALID_ARGUMENT,
        "%s: expected %u arguments (%u kernel arguments + %u launch dimensions), got %d",
        info->name, expected, info->passed_count, info->launch_count, (int)num_args);
  uint32_t v = 0;
  for (uint32_t i = 0; i < info->arg_count; ++i)
    out_params[i] = info->args[i].kind == MP_KERNEL_ARG_NULL ? NULL : &args[v++];
  *out_launch = args + v;
  return MP_OK;
}

mp_status_t mp_kernel_check_buffer(const mp_kernel_info_t* info, uint32_t index,
                                   const mp_value_t* value) {
  const mp_kernel_arg_t* a = &info->args[index];
  bool untyped = a->dtype.code == kDLOpaqueHandle;
  char want[32], got[32];
  if (value->type_code == MP_TYPE_NONE) return MP_OK; /* a NULL pointer */
  if (value->type_code != MP_TYPE_DLTENSOR || !value->v_tensor)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u must be an array (%s) or None, got %s", info->name, index,
                     untyped ? "any dtype" : mp_dtype_string(a->dtype, want, sizeof want),
                     mp_type_code_name(value->type_code));
  const DLTensor* t = value->v_tensor;
  if (!untyped && (t->dtype.code != a->dtype.code || t->dtype.bits != a->dtype.bits ||
                   t->dtype.lanes != a->dtype.lanes))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u must have dtype %s, got %s",
                     info->name, index, mp_dtype_string(a->dtype, want, sizeof want),
                     mp_dtype_string(t->dtype, got, sizeof got));
  if (!mp_tensor_is_compact(t))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u is not compact (row-major); kernels get a plain pointer, "
                     "so pass a contiguous array",
                     info->name, index);
  return MP_OK;
}

mp_status_t mp_kernel_check_local(const mp_kernel_info_t* info, uint32_t index,
                                  const mp_value_t* value, uint64_t* out_nbytes) {
  if (value->type_code != MP_TYPE_LOCAL_MEMORY || value->v_int64 <= 0)
    return mp_errorf(
        MP_ERR_INVALID_ARGUMENT,
        "%s: argument %u is __local memory: pass its size in bytes, "
        "modpack.local_memory(nbytes) (C: mp_local_memory(nbytes)), got %s",
        info->name, index,
        value->type_code == MP_TYPE_LOCAL_MEMORY ? "0 bytes" : mp_type_code_name(value->type_code));
  *out_nbytes = (uint64_t)value->v_int64;
  return MP_OK;
}

/* "cpu:0", "opencl:1": the device an array is on, as users name devices (the CPU is the
 * runtime's own; every other device type comes with its kind). */
static const char* array_device(DLDevice device, char* buffer, size_t capacity) {
  const mp_device_api_t* api =
      device.device_type == kDLCPU ? NULL : mp_registry_find_device(device.device_type);
  const char* type = device.device_type == kDLCPU ? "cpu" : api ? api->name : NULL;
  if (type)
    snprintf(buffer, capacity, "%s:%d", type, (int)device.device_id);
  else
    snprintf(buffer, capacity,
             "DLPack device type %d, device %d (a type this runtime does not know)",
             (int)device.device_type, (int)device.device_id);
  return buffer;
}

mp_status_t mp_kernel_check_devices(const mp_kernel_info_t* info, const mp_value_t* const* params,
                                    const mp_device_api_t* device, const char* how_to_create,
                                    int32_t* out_device) {
  const char* kind = device->display_name;
  const char* article = strchr("AEIOU", kind[0]) ? "an" : "a";
  *out_device = -1;
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    if (info->args[i].kind != MP_KERNEL_ARG_BUFFER || params[i]->type_code == MP_TYPE_NONE)
      continue;
    const DLTensor* t = params[i]->v_tensor;
    char where[128];
    if ((int32_t)t->device.device_type != device->device_type)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: argument %u is an array on %s, not on %s %s device; create it with %s",
                       info->name, i, array_device(t->device, where, sizeof where), article, kind,
                       how_to_create);
    if (*out_device < 0)
      *out_device = t->device.device_id;
    else if (*out_device != t->device.device_id)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: arrays on %s devices %d and %d in one call",
                       info->name, kind, (int)*out_device, (int)t->device.device_id);
  }
  return MP_OK;
}
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, exponent = (x >> 23) & 0xffu, mantissa = x & 0x7fffffu;
  if (exponent == 0xff) return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  int32_t e = (int32_t)exponent - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) { /* subnormal half, or zero */
    if (e < -10) return (uint16_t)sign;
    mantissa |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e), half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (mantissa >> 13), rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half; /* may carry into infinity */
  return (uint16_t)half;
}

static uint16_t float_to_bfloat(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

mp_status_t mp_kernel_pack_scalar(const mp_kernel_info_t* info, uint32_t index,
                                  const mp_value_t* value, mp_kernel_scalar_t* out,
                                  size_t* out_size) {
  const mp_kernel_arg_t* arg = &info->args[index];
  const char* name = info->name;
  char want[32];
  mp_dtype_string(arg->dtype, want, sizeof want);
  bool is_float = arg->dtype.code == kDLFloat || arg->dtype.code == kDLBfloat;
  if (value->type_code == MP_TYPE_FLOAT && !is_float)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u must be an integer (%s), got float",
                     name, index, want);
  if (value->type_code != MP_TYPE_INT && value->type_code != MP_TYPE_FLOAT)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u must be a number (%s), got %s", name,
                     index, want, mp_type_code_name(value->type_code));
  if (arg->dtype.lanes != 1)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: scalar argument %u has vector dtype %s, which "
                     "cannot be passed",
                     name, index, want);
  double d = value->type_code == MP_TYPE_FLOAT ? value->v_float64 : (double)value->v_int64;
  int64_t i = value->v_int64;
  uint8_t code = arg->dtype.code, bits = arg->dtype.bits;
  memset(out, 0, sizeof *out);
  if (code == kDLFloat && bits == 16)
    out->u16 = float_to_half((float)d);
  else if (code == kDLBfloat && bits == 16)
    out->u16 = float_to_bfloat((float)d);
  else if (code == kDLFloat && bits == 32)
    out->f32 = (float)d;
  else if (code == kDLFloat && bits == 64)
    out->f64 = d;
  else if (code == kDLBool && bits == 8)
    out->u8 = i != 0;
  else if (code == kDLInt && bits == 8)
    out->i8 = (int8_t)i;
  else if (code == kDLInt && bits == 16)
    out->i16 = (int16_t)i;
  else if (code == kDLInt && bits == 32)
    out->i32 = (int32_t)i;
  else if (code == kDLInt && bits == 64)
    out->i64 = i;
  else if (code == kDLUInt && bits == 8)
    out->u8 = (uint8_t)i;
  else if (code == kDLUInt && bits == 16)
    out->u16 = (uint16_t)i;
  else if (code == kDLUInt && bits == 32)
    out->u32 = (uint32_t)i;
  else if (code == kDLUInt && bits == 64)
    out->u64 = (uint64_t)i;
  else
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: scalar argument %u has unsupported dtype %s",
                     name, index, want);
  if (out_size) *out_size = bits / 8;
  return MP_OK;
}
