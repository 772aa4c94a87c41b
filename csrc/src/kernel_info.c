/* Function-info records of device kernels: name, argument kinds and dtypes, and the tags of
 * the trailing launch arguments. Shared by every device module kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Limits of a record (modpack/modules/kernel_info.py enforces the same when writing); the
 * counts' limits are MP_MAX_KERNEL_ARGS and MP_MAX_LAUNCH_TAGS. */
enum { MP_MAX_KERNEL_NAME = 1024, MP_MAX_LAUNCH_TAG = 64 };

/* A length-prefixed string of 1..|max| bytes without NUL. |kernel| names the record for
 * messages (NULL while reading the kernel's own name). A size out of range is reported as
 * the violated limit, not as a truncated payload. */
static char* read_string(mp_reader_t* r, uint32_t max, const char* field, const char* kernel,
                         mp_status_t* status) {
  uint32_t size;
  const uint8_t* bytes;
  char where[MP_MAX_KERNEL_NAME + 16] = ""; /* "kernel NAME: " */
  if (kernel) snprintf(where, sizeof where, "kernel %s: ", kernel);
  if (!mp_read_u32(r, &size)) {
    *status = mp_reader_error(r, field);
    return NULL;
  }
  if (size == 0) {
    *status = mp_errorf(MP_ERR_FORMAT, "%s: %s%s is empty", r->what, where, field);
    return NULL;
  }
  if (size > max) {
    *status = mp_errorf(MP_ERR_FORMAT, "%s: %s%s of %u bytes exceeds %u", r->what, where, field,
                        size, max);
    return NULL;
  }
  if (!mp_read_bytes(r, size, &bytes)) {
    *status = mp_reader_error(r, field);
    return NULL;
  }
  if (memchr(bytes, 0, size)) {
    *status = mp_errorf(MP_ERR_FORMAT, "%s: %s%s contains a NUL byte", r->what, where, field);
    return NULL;
  }
  char* s = malloc((size_t)size + 1);
  if (!s) {
    *status = mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  memcpy(s, bytes, size);
  s[size] = '\0';
  return s;
}

void mp_kernel_info_free(mp_kernel_info_t* info) {
  free(info->name);
  free(info->args);
  for (uint32_t i = 0; info->launch_tags && i < info->launch_count; ++i) free(info->launch_tags[i]);
  free(info->launch_tags);
  memset(info, 0, sizeof *info);
}

mp_status_t mp_kernel_info_read(mp_reader_t* r, mp_kernel_info_t* out) {
  memset(out, 0, sizeof *out);
  mp_status_t status = MP_OK;
  out->name = read_string(r, MP_MAX_KERNEL_NAME, "kernel name", NULL, &status);
  if (!out->name) return status;
  if (!mp_read_u32(r, &out->arg_count)) {
    mp_kernel_info_free(out);
    return mp_reader_error(r, "argument count");
  }
  if (out->arg_count > MP_MAX_KERNEL_ARGS) {
    status = mp_errorf(MP_ERR_FORMAT, "%s: kernel %s: argument count of %u exceeds %d", r->what,
                       out->name, out->arg_count, MP_MAX_KERNEL_ARGS);
    mp_kernel_info_free(out);
    return status;
  }
  out->args = calloc(out->arg_count ? out->arg_count : 1, sizeof *out->args);
  if (!out->args) {
    mp_kernel_info_free(out);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < out->arg_count; ++i) {
    uint8_t kind, code, bits, lanes;
    if (!mp_read_u8(r, &kind) || !mp_read_u8(r, &code) || !mp_read_u8(r, &bits) ||
        !mp_read_u8(r, &lanes)) {
      mp_kernel_info_free(out);
      return mp_reader_error(r, "kernel argument");
    }
    if (kind > MP_ARG_SCALAR || bits == 0 || lanes == 0) {
      status = mp_errorf(MP_ERR_FORMAT, "%s: kernel %s argument %u has kind %u, bits %u, lanes %u",
                         r->what, out->name, i, kind, bits, lanes);
      mp_kernel_info_free(out);
      return status;
    }
    out->args[i] = (mp_kernel_arg_t){kind, {code, bits, lanes}};
  }
  if (!mp_read_u32(r, &out->launch_count)) {
    mp_kernel_info_free(out);
    return mp_reader_error(r, "launch tag count");
  }
  if (out->launch_count > MP_MAX_LAUNCH_TAGS) {
    status = mp_errorf(MP_ERR_FORMAT, "%s: kernel %s: launch tag count of %u exceeds %d", r->what,
                       out->name, out->launch_count, MP_MAX_LAUNCH_TAGS);
    mp_kernel_info_free(out);
    return status;
  }
  out->launch_tags = calloc(out->launch_count ? out->launch_count : 1, sizeof *out->launch_tags);
  if (!out->launch_tags) {
    mp_kernel_info_free(out);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < out->launch_count; ++i) {
    out->launch_tags[i] = read_string(r, MP_MAX_LAUNCH_TAG, "launch tag", out->name, &status);
    if (!out->launch_tags[i]) {
      mp_kernel_info_free(out);
      return status;
    }
  }
  return MP_OK;
}

MP_API const char* mp_dtype_string(DLDataType dtype, char* buffer, size_t capacity) {
  /* Indexed by DLPack type code; codes from 7 on are float8 formats whose name says it all. */
  static const char* const names[] = {
      "int",
      "uint",
      "float",
      "handle",
      "bfloat",
      "complex",
      "bool",
      "float8_e3m4",
      "float8_e4m3",
      "float8_e4m3b11fnuz",
      "float8_e4m3fn",
      "float8_e4m3fnuz",
      "float8_e5m2",
      "float8_e5m2fnuz",
      "float8_e8m0fnu",
  };
  enum { NAMED = sizeof names / sizeof names[0], FIRST_FLOAT8 = 7 };
  const char* base = dtype.code < NAMED ? names[dtype.code] : "unknown";
  char bits[8] = "";
  if (dtype.code < FIRST_FLOAT8 || dtype.code >= NAMED)
    snprintf(bits, sizeof bits, "%u", dtype.bits);
  if (dtype.lanes == 1)
    snprintf(buffer, capacity, "%s%s", base, bits);
  else
    snprintf(buffer, capacity, "%s%sx%u", base, bits, dtype.lanes);
  return buffer;
}

const char* mp_type_code_name(int32_t type_code) {
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
    default:
      return "unknown";
  }
}

/* ---- calling kernels: checks and conversions shared by device module kinds ----------------- */

mp_status_t mp_kernel_check_count(const mp_kernel_info_t* info, int32_t num_args) {
  uint32_t expected = info->arg_count + info->launch_count;
  if (num_args < 0 || (uint32_t)num_args != expected)
    return mp_errorf(
        MP_ERR_INVALID_ARGUMENT,
        "%s: expected %u arguments (%u kernel arguments + %u launch dimensions), got %d",
        info->name, expected, info->arg_count, info->launch_count, (int)num_args);
  return MP_OK;
}

static bool is_compact(const DLTensor* t) {
  if (!t->strides) return true;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expected) return false;
    expected *= t->shape[d];
  }
  return true;
}

mp_status_t mp_kernel_check_buffer(const mp_kernel_info_t* info, uint32_t index,
                                   const mp_value_t* value) {
  const mp_kernel_arg_t* a = &info->args[index];
  bool untyped = a->dtype.code == kDLOpaqueHandle;
  char want[32], got[32];
  if (value->type_code != MP_TYPE_DLTENSOR || !value->v_tensor)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u must be an array (%s), got %s",
                     info->name, index,
                     untyped ? "any dtype" : mp_dtype_string(a->dtype, want, sizeof want),
                     mp_type_code_name(value->type_code));
  const DLTensor* t = value->v_tensor;
  if (!untyped && (t->dtype.code != a->dtype.code || t->dtype.bits != a->dtype.bits ||
                   t->dtype.lanes != a->dtype.lanes))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %u must have dtype %s, got %s",
                     info->name, index, mp_dtype_string(a->dtype, want, sizeof want),
                     mp_dtype_string(t->dtype, got, sizeof got));
  if (!is_compact(t))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u is not compact (row-major); kernels get a plain pointer, "
                     "so pass a contiguous array",
                     info->name, index);
  return MP_OK;
}

mp_status_t mp_kernel_check_devices(const mp_kernel_info_t* info, const mp_value_t* args,
                                    int32_t device_type, const char* how_to_create,
                                    int32_t* out_device) {
  const char* kind = device_type == kDLCUDA ? "CUDA" : device_type == kDLOpenCL ? "OpenCL" : "the";
  *out_device = -1;
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    if (info->args[i].kind != MP_ARG_BUFFER) continue;
    const DLTensor* t = args[i].v_tensor;
    if (t->device.device_type != device_type)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: argument %u is an array on device type %d, not on %s %s device; "
                       "create it with %s",
                       info->name, i, (int)t->device.device_type,
                       device_type == kDLOpenCL ? "an" : "a", kind, how_to_create);
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
