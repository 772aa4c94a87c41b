/* A host function's declared signature, parsed and checked in one pass over the arguments
 * (device/signature.h has the grammar). Nothing is allocated: named extents live in a small
 * table on the stack, and every message is written from the signature's own text. */
#include "device/signature.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "modpack/tensor_span.h"

enum {
  MAX_RANK = 32,       /* as arrays anywhere in modpack */
  MAX_NAMED = 16,      /* distinct extent names in one signature */
  MAX_NAME_BYTES = 48, /* a parameter's or an extent's name, with its NUL */
};

typedef enum { DIM_FIXED, DIM_NAMED, DIM_ANY } dim_kind_t;

typedef struct {
  dim_kind_t kind;
  int64_t extent; /* DIM_FIXED */
  int32_t named;  /* DIM_NAMED: index into the extent table */
} dim_spec_t;

typedef struct {
  bool any_dtype;
  DLDataType dtype;
  bool any_shape;
  int32_t ndim;
  dim_spec_t dims[MAX_RANK];
  uint64_t devices; /* bit per DLPack device type; 0: any device */
  bool strided;
  const char* text; /* the type as written, for messages */
  int text_length;
} array_spec_t;

/* An extent name and, once an argument has fixed it, its value and where it came from. */
typedef struct {
  char name[MAX_NAME_BYTES];
  bool bound;
  int64_t value;
  int32_t arg;
  char param[MAX_NAME_BYTES];
} named_extent_t;

typedef struct {
  const char* function;
  const char* text;
  size_t pos;
  named_extent_t named[MAX_NAMED];
  int32_t num_named;
} checker_t;

/* ---- parsing ---------------------------------------------------------------------------- */

static mp_status_t malformed(const checker_t* c, const char* what) {
  return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                   "%s: its declared signature \"%s\" is malformed at character %zu: %s (a bug in "
                   "the host code's MP_EXPORT_TYPED_* line: see modpack/backend.h for the form)",
                   c->function, c->text, c->pos + 1, what);
}

static void skip_spaces(checker_t* c) {
  while (c->text[c->pos] == ' ' || c->text[c->pos] == '\t' || c->text[c->pos] == '\n') ++c->pos;
}

static bool is_name_start(char ch) {
  return isalpha((unsigned char)ch) || ch == '_';
}

static bool is_name_char(char ch) {
  return isalnum((unsigned char)ch) || ch == '_';
}

/* An identifier into |out|; false (with a message) if there is none or it is too long. */
static mp_status_t parse_name(checker_t* c, char* out, const char* what) {
  skip_spaces(c);
  if (!is_name_start(c->text[c->pos])) return malformed(c, what);
  size_t n = 0;
  while (is_name_char(c->text[c->pos])) {
    if (n + 1 >= MAX_NAME_BYTES) return malformed(c, "a name longer than 47 characters");
    out[n++] = c->text[c->pos++];
  }
  out[n] = '\0';
  return MP_OK;
}

/* Every dtype a signature may name, as mp_dtype_string spells it (checked against it by the
 * tests), in a table: parsing runs on every call, so no formatting here. The float6 and float4
 * formats are DLPack 1.1's packed ones (modpack/tensor_span.h): float4_e2m1fn[n] is n 4-bit
 * values, two a byte; float4_e2m1fn_x2[n] is n bytes of two values each (PyTorch's). */
static bool parse_dtype_name(const char* name, DLDataType* out) {
  static const struct {
    const char* name;
    uint8_t code, bits;
    uint16_t lanes;
  } dtypes[] = {
      {"float32", kDLFloat, 32, 1},
      {"float16", kDLFloat, 16, 1},
      {"float64", kDLFloat, 64, 1},
      {"bfloat16", kDLBfloat, 16, 1},
      {"int8", kDLInt, 8, 1},
      {"int16", kDLInt, 16, 1},
      {"int32", kDLInt, 32, 1},
      {"int64", kDLInt, 64, 1},
      {"uint8", kDLUInt, 8, 1},
      {"uint16", kDLUInt, 16, 1},
      {"uint32", kDLUInt, 32, 1},
      {"uint64", kDLUInt, 64, 1},
      {"bool", kDLBool, 8, 1},
      {"bool8", kDLBool, 8, 1},
      {"complex64", kDLComplex, 64, 1},
      {"complex128", kDLComplex, 128, 1},
      {"float8_e3m4", kDLFloat8_e3m4, 8, 1},
      {"float8_e4m3", kDLFloat8_e4m3, 8, 1},
      {"float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8, 1},
      {"float8_e4m3fn", kDLFloat8_e4m3fn, 8, 1},
      {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8, 1},
      {"float8_e5m2", kDLFloat8_e5m2, 8, 1},
      {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8, 1},
      {"float8_e8m0fnu", kDLFloat8_e8m0fnu, 8, 1},
      {"float6_e2m3fn", kDLFloat6_e2m3fn, 6, 1},
      {"float6_e3m2fn", kDLFloat6_e3m2fn, 6, 1},
      {"float4_e2m1fn", kDLFloat4_e2m1fn, 4, 1},
      {"float4_e2m1fn_x2", kDLFloat4_e2m1fn, 4, 2},
  };
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i) {
    if (strcmp(dtypes[i].name, name) == 0) {
      *out = (DLDataType){dtypes[i].code, dtypes[i].bits, dtypes[i].lanes};
      return true;
    }
  }
  return false;
}

/* A device type named in a signature: the common ones without asking the registry. */
static bool parse_device_name(const char* name, int32_t* out_device_type) {
  if (strcmp(name, "cpu") == 0) {
    *out_device_type = kDLCPU;
    return true;
  }
  if (strcmp(name, "cuda") == 0) {
    *out_device_type = kDLCUDA;
    return true;
  }
  if (strcmp(name, "opencl") == 0) {
    *out_device_type = kDLOpenCL;
    return true;
  }
  return mp_device_type_from_name(name, out_device_type) == MP_OK;
}

static int32_t find_named(checker_t* c, const char* name) {
  for (int32_t i = 0; i < c->num_named; ++i)
    if (strcmp(c->named[i].name, name) == 0) return i;
  return -1;
}

static mp_status_t parse_dim(checker_t* c, dim_spec_t* dim) {
  skip_spaces(c);
  char ch = c->text[c->pos];
  if (ch == '*') {
    ++c->pos;
    dim->kind = DIM_ANY;
    return MP_OK;
  }
  if (isdigit((unsigned char)ch)) {
    int64_t extent = 0;
    while (isdigit((unsigned char)c->text[c->pos])) {
      if (extent > (INT64_MAX - 9) / 10) return malformed(c, "an extent too large");
      extent = extent * 10 + (c->text[c->pos++] - '0');
    }
    dim->kind = DIM_FIXED;
    dim->extent = extent;
    return MP_OK;
  }
  char name[MAX_NAME_BYTES];
  MP_RETURN_IF_ERROR(parse_name(c, name, "expected an extent: a number, a name or *"));
  int32_t index = find_named(c, name);
  if (index < 0) {
    if (c->num_named == MAX_NAMED) return malformed(c, "more than 16 extent names");
    index = c->num_named++;
    memcpy(c->named[index].name, name, strlen(name) + 1);
    c->named[index].bound = false;
  }
  dim->kind = DIM_NAMED;
  dim->named = index;
  return MP_OK;
}

static mp_status_t parse_shape(checker_t* c, array_spec_t* spec) {
  ++c->pos; /* '[' */
  skip_spaces(c);
  if (c->text[c->pos] == ']') {
    ++c->pos;
    spec->ndim = 0;
    return MP_OK;
  }
  if (strncmp(c->text + c->pos, "...", 3) == 0) {
    c->pos += 3;
    skip_spaces(c);
    if (c->text[c->pos] != ']') return malformed(c, "`...` stands alone: `[...]`");
    ++c->pos;
    spec->any_shape = true;
    return MP_OK;
  }
  for (;;) {
    if (spec->ndim == MAX_RANK) return malformed(c, "more than 32 dimensions");
    MP_RETURN_IF_ERROR(parse_dim(c, &spec->dims[spec->ndim++]));
    skip_spaces(c);
    if (c->text[c->pos] == ']') {
      ++c->pos;
      return MP_OK;
    }
    if (c->text[c->pos] != ',') return malformed(c, "expected `,` or `]` after an extent");
    ++c->pos;
  }
}

/* `dtype[dims] flags...` after a parameter's colon. */
static mp_status_t parse_array(checker_t* c, array_spec_t* spec) {
  /* Field by field: the dims are written as they are parsed (this runs on every call). */
  spec->any_dtype = false;
  spec->any_shape = false;
  spec->ndim = 0;
  spec->devices = 0;
  spec->strided = false;
  spec->text_length = 0;
  skip_spaces(c);
  spec->text = c->text + c->pos;
  char word[MAX_NAME_BYTES];
  MP_RETURN_IF_ERROR(parse_name(c, word, "expected a dtype (float32, int64, any, ...)"));
  if (strcmp(word, "any") == 0) {
    spec->any_dtype = true;
  } else if (!parse_dtype_name(word, &spec->dtype)) {
    c->pos -= strlen(word);
    return malformed(c,
                     "unknown dtype (bool, int8..int64, uint8..uint64, float16/32/64, "
                     "bfloat16, complex64/128, float8/float6/float4 names, any)");
  }
  skip_spaces(c);
  if (c->text[c->pos] == '[')
    MP_RETURN_IF_ERROR(parse_shape(c, spec));
  else
    spec->any_shape = true;
  for (;;) {
    skip_spaces(c);
    if (!is_name_start(c->text[c->pos])) break;
    size_t at = c->pos;
    MP_RETURN_IF_ERROR(parse_name(c, word, "expected a flag"));
    if (strcmp(word, "strided") == 0) {
      spec->strided = true;
      continue;
    }
    int32_t device_type;
    if (!parse_device_name(word, &device_type) || device_type < 0 || device_type >= 64) {
      c->pos = at;
      return malformed(c, "unknown flag: `strided` or a device type (cpu, cuda, opencl)");
    }
    spec->devices |= UINT64_C(1) << device_type;
  }
  spec->text_length = (int)(c->text + c->pos - spec->text);
  while (spec->text_length > 0 && spec->text[spec->text_length - 1] == ' ') --spec->text_length;
  return MP_OK;
}

/* ---- checking --------------------------------------------------------------------------- */

static const char* shape_string(const DLTensor* t, char* buffer, size_t capacity) {
  size_t n = (size_t)snprintf(buffer, capacity, "[");
  for (int32_t d = 0; d < t->ndim && n < capacity; ++d)
    n += (size_t)snprintf(buffer + n, capacity - n, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (n < capacity) snprintf(buffer + n, capacity - n, "]");
  return buffer;
}

/* "cpu:0", "cuda:1", "opencl:0": the runtime's name of the device type and the device id, as
 * users name devices; a type this runtime does not know by its DLPack number. */
static const char* device_string(DLDevice device, char* buffer, size_t capacity) {
  const char* type = mp_device_type_name(device.device_type);
  if (type)
    snprintf(buffer, capacity, "%s:%d", type, (int)device.device_id);
  else
    snprintf(buffer, capacity,
             "DLPack device type %d, device %d (a type this runtime does not know)",
             (int)device.device_type, (int)device.device_id);
  return buffer;
}

#define ARG_ERROR(fmt, ...)                                                                  \
  mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: argument %d (%s) must be %.*s: " fmt, c->function, \
            (int)arg, param, spec->text_length, spec->text, __VA_ARGS__)

static mp_status_t check_extent(checker_t* c, const array_spec_t* spec, int32_t arg,
                                const char* param, const DLTensor* t, int32_t d) {
  const dim_spec_t* dim = &spec->dims[d];
  int64_t got = t->shape[d];
  char shape[160];
  if (dim->kind == DIM_FIXED && got != dim->extent)
    return ARG_ERROR("dimension %d is %lld where the signature says %lld (shape %s)", (int)d,
                     (long long)got, (long long)dim->extent, shape_string(t, shape, sizeof shape));
  if (dim->kind != DIM_NAMED) return MP_OK;
  named_extent_t* named = &c->named[dim->named];
  if (!named->bound) {
    named->bound = true;
    named->value = got;
    named->arg = arg;
    memcpy(named->param, param, strlen(param) + 1); /* both MAX_NAME_BYTES buffers */
    return MP_OK;
  }
  if (got != named->value)
    return ARG_ERROR("dimension %d is %lld, but %s = %lld from argument %d (%s) (shape %s)", (int)d,
                     (long long)got, named->name, (long long)named->value, (int)named->arg,
                     named->param, shape_string(t, shape, sizeof shape));
  return MP_OK;
}

static mp_status_t check_array(checker_t* c, const array_spec_t* spec, int32_t arg,
                               const char* param, const mp_value_t* value) {
  if (value->type_code != MP_TYPE_DLTENSOR || !value->v_tensor)
    return ARG_ERROR("got %s", mp_type_code_name(value->type_code));
  const DLTensor* t = value->v_tensor;
  char got[128];
  if (!spec->any_dtype && (t->dtype.code != spec->dtype.code || t->dtype.bits != spec->dtype.bits ||
                           t->dtype.lanes != spec->dtype.lanes)) {
    /* The same 4- or 6-bit format in another packing: say what each counts. */
    bool repacked = t->dtype.code == spec->dtype.code && t->dtype.bits == spec->dtype.bits &&
                    t->dtype.bits < 8;
    return ARG_ERROR("its dtype is %s%s", mp_dtype_string(t->dtype, got, sizeof got),
                     repacked ? ", the same format packed otherwise (a lanes-1 dtype counts "
                                "values, packed several to a byte; a _x2 dtype counts bytes of "
                                "two values each, as torch.float4_e2m1fn_x2)"
                              : "");
  }
  if (spec->devices) {
    int32_t type = t->device.device_type;
    if (type < 0 || type >= 64 || !(spec->devices & (UINT64_C(1) << type)))
      return ARG_ERROR("it is on %s", device_string(t->device, got, sizeof got));
  }
  if (t->ndim < 0 || t->ndim > MAX_RANK || (t->ndim > 0 && !t->shape))
    return ARG_ERROR("it has %d dimensions%s", (int)t->ndim,
                     t->ndim > MAX_RANK ? " (at most 32)"
                     : t->ndim > 0      ? " and no shape"
                                        : "");
  if (!spec->any_shape && t->ndim != spec->ndim)
    return ARG_ERROR("it has %d dimension%s", (int)t->ndim, t->ndim == 1 ? "" : "s");
  bool empty = false;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0)
      return ARG_ERROR("dimension %d is negative (%lld)", (int)d, (long long)t->shape[d]);
    empty = empty || t->shape[d] == 0;
  }
  if (!spec->any_shape)
    for (int32_t d = 0; d < t->ndim; ++d)
      MP_RETURN_IF_ERROR(check_extent(c, spec, arg, param, t, d));
  if (!empty && !t->data) return ARG_ERROR("%s", "its data pointer is NULL");
  /* Every byte its elements reach must be addressable without overflow, before anything
   * (the compactness check included) multiplies its extents or strides. */
  mp_tensor_span_t span;
  mp_span_status_t problem = mp_tensor_span(t, &span);
  if (problem != MP_SPAN_OK) {
    char why[400];
    return ARG_ERROR("%s", mp_tensor_span_describe(t, problem, &span, why, sizeof why));
  }
  if (!spec->strided && !mp_tensor_is_compact(t))
    return ARG_ERROR("%s",
                     "it is strided, not compact row-major (pass a contiguous copy: "
                     "numpy.ascontiguousarray), or declare the parameter `strided`");
  /* The C type an element is read as must be aligned: a complex number as its parts. */
  uint64_t align = t->dtype.bits / 8u;
  if (t->dtype.code == kDLComplex) align /= 2;
  if (align > 1) {
    uint64_t start = t->byte_offset;
    if (t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost)
      start += (uint64_t)(uintptr_t)t->data;
    if (start % align)
      return ARG_ERROR("its first element is not aligned to %llu bytes (pass an aligned copy)",
                       (unsigned long long)align);
  }
  return MP_OK;
}
#undef ARG_ERROR

mp_status_t mp_signature_check(const char* function, const char* signature, const mp_value_t* args,
                               int32_t num_args) {
  checker_t c; /* not zeroed whole: the extent table fills as names appear */
  c.function = function ? function : "host function";
  c.text = signature;
  c.pos = 0;
  c.num_named = 0;
  if (!signature) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: NULL signature", c.function);
  if (num_args < 0 || (num_args > 0 && !args))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: bad argument array", c.function);
  /* The count first: a signature that does not fit the function is the host code's bug, which
   * should not hide behind a complaint about an argument. */
  int32_t entries = 1, depth = 0;
  bool blank = true;
  for (const char* p = signature; *p; ++p) {
    depth += (*p == '[') - (*p == ']');
    entries += *p == ',' && depth == 0;
    blank = blank && (*p == ' ' || *p == '\t' || *p == '\n');
  }
  if (blank) entries = 0;
  if (entries != num_args)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: its declared signature \"%s\" names %d parameter%s, but the function "
                     "takes %d (a bug in the host code's MP_EXPORT_TYPED_* line)",
                     c.function, c.text, (int)entries, entries == 1 ? "" : "s", (int)num_args);
  if (entries == 0) return MP_OK;
  int32_t arg = 0;
  for (;; ++arg) {
    char param[MAX_NAME_BYTES];
    MP_RETURN_IF_ERROR(parse_name(&c, param, "expected a parameter name"));
    skip_spaces(&c);
    if (c.text[c.pos] == ':') {
      ++c.pos;
      array_spec_t spec;
      MP_RETURN_IF_ERROR(parse_array(&c, &spec));
      MP_RETURN_IF_ERROR(check_array(&c, &spec, arg, param, &args[arg]));
    }
    skip_spaces(&c);
    if (c.text[c.pos] == '\0') return MP_OK;
    if (c.text[c.pos] != ',' || arg + 1 == num_args)
      return malformed(&c, "expected `,` between parameters");
    ++c.pos;
  }
}
