/* Function-info records of device kernels: name, argument kinds and dtypes, and the tags of
 * the trailing launch arguments. Shared by every device module kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static char* read_string(mp_reader_t* r, uint32_t max, const char* field, mp_status_t* status) {
  uint32_t size;
  const uint8_t* bytes;
  if (!mp_read_u32(r, &size) || size == 0 || size > max || !mp_read_bytes(r, size, &bytes)) {
    *status = mp_reader_error(r, field);
    return NULL;
  }
  if (memchr(bytes, 0, size)) {
    *status = mp_errorf(MP_ERR_FORMAT, "%s: %s contains a NUL byte", r->what, field);
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
  out->name = read_string(r, 1024, "kernel name", &status);
  if (!out->name) return status;
  if (!mp_read_u32(r, &out->arg_count) || out->arg_count > MP_MAX_KERNEL_ARGS) {
    status = out->arg_count > MP_MAX_KERNEL_ARGS
                 ? mp_errorf(MP_ERR_FORMAT, "%s: kernel %s has %u arguments (at most %d)", r->what,
                             out->name, out->arg_count, MP_MAX_KERNEL_ARGS)
                 : mp_reader_error(r, "argument count");
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
  if (!mp_read_u32(r, &out->launch_count) || out->launch_count > MP_MAX_LAUNCH_TAGS) {
    mp_kernel_info_free(out);
    return mp_reader_error(r, "launch tag count");
  }
  out->launch_tags = calloc(out->launch_count ? out->launch_count : 1, sizeof *out->launch_tags);
  if (!out->launch_tags) {
    mp_kernel_info_free(out);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < out->launch_count; ++i) {
    out->launch_tags[i] = read_string(r, 64, "launch tag", &status);
    if (!out->launch_tags[i]) {
      mp_kernel_info_free(out);
      return status;
    }
  }
  return MP_OK;
}

const char* mp_dtype_string(DLDataType dtype, char* buffer, size_t capacity) {
  const char* base = "unknown";
  switch (dtype.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    case kDLBool: base = "bool"; break;
    case kDLOpaqueHandle: base = "handle"; break;
    default: break;
  }
  if (dtype.lanes == 1)
    snprintf(buffer, capacity, "%s%u", base, dtype.bits);
  else
    snprintf(buffer, capacity, "%s%ux%u", base, dtype.bits, dtype.lanes);
  return buffer;
}

const char* mp_type_code_name(int32_t type_code) {
  switch (type_code) {
    case MP_TYPE_NONE: return "None";
    case MP_TYPE_INT: return "int";
    case MP_TYPE_FLOAT: return "float";
    case MP_TYPE_HANDLE: return "handle";
    case MP_TYPE_STR: return "str";
    case MP_TYPE_DLTENSOR: return "array";
    case MP_TYPE_FUNCTION: return "function";
    default: return "unknown";
  }
}
