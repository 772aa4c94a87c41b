/* The "const" module kind: named arrays (weights, constants) read in place from the blob.
 *
 * Payload layout (all little-endian; offsets are from the start of the payload, which the
 * blob format aligns to 64 bytes):
 *
 *   u32 version (=1)  u32 reserved (=0)  u64 array_count
 *   array_count records of 48 bytes:
 *     u64 name_offset  u32 name_size  u8 dtype_code  u8 dtype_bits  u16 dtype_lanes
 *     u32 ndim  u32 reserved (=0)  u64 shape_offset (u64[ndim])  u64 data_offset  u64 data_size
 *   shapes, names, then the array data, each array at a multiple of 64 bytes.
 *
 * The arrays handed out are DLTensors whose data points into the mapped library: no copy. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { CONST_VERSION = 1, CONST_HEADER_SIZE = 16, CONST_RECORD_SIZE = 48, CONST_MAX_NDIM = 32 };

typedef struct {
  char* name;
  DLTensor tensor;
  int64_t shape[]; /* tensor.shape points here */
} const_array_t;

typedef struct {
  uint64_t count;
  const_array_t** arrays;
} const_module_t;

static void const_destroy(void* impl) {
  const_module_t* m = impl;
  for (uint64_t i = 0; i < m->count; ++i) {
    if (!m->arrays[i]) continue;
    free(m->arrays[i]->name);
    free(m->arrays[i]);
  }
  free(m->arrays);
  free(m);
}

static uint64_t const_array_count(mp_module_t* self) {
  return ((const_module_t*)mp_module_impl(self))->count;
}

static mp_status_t const_array_at(mp_module_t* self, uint64_t index, const char** out_name,
                                  const DLTensor** out_array) {
  const_module_t* m = mp_module_impl(self);
  *out_name = m->arrays[index]->name;
  *out_array = &m->arrays[index]->tensor;
  return MP_OK;
}

static const mp_module_vtable_t const_vtable = {
    .array_count = const_array_count,
    .array_at = const_array_at,
    .destroy = const_destroy,
};

static bool in_bounds(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

/* The element widths each DLPack type code allows (so a reader sizing a view by its dtype
 * agrees with the byte count checked here). */
static bool dtype_is_valid(DLDataType dtype) {
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
      return dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLFloat:
      return dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
    case kDLBfloat:
      return dtype.bits == 16;
    case kDLComplex:
      return dtype.bits == 64 || dtype.bits == 128;
    case kDLBool:
      return dtype.bits == 8;
    default: /* the float8 formats, DLPack codes 7-14 */
      return dtype.code >= 7 && dtype.code <= 14 && dtype.bits == 8;
  }
}

static mp_status_t read_array(const uint8_t* p, uint64_t payload_size, uint64_t i,
                              const_array_t** out) {
  const uint8_t* r = p + CONST_HEADER_SIZE + i * CONST_RECORD_SIZE;
  uint64_t name_offset = mp_load_le64(r);
  uint32_t name_size = mp_load_le32(r + 8);
  DLDataType dtype = {r[12], r[13], mp_load_le16(r + 14)};
  uint32_t ndim = mp_load_le32(r + 16);
  uint64_t shape_offset = mp_load_le64(r + 24);
  uint64_t data_offset = mp_load_le64(r + 32);
  uint64_t data_size = mp_load_le64(r + 40);
  if (mp_load_le32(r + 20) != 0)
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: reserved field is not 0", i);
  if (name_size == 0 || !in_bounds(name_offset, name_size, payload_size))
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name lies outside the payload", i);
  if (ndim > CONST_MAX_NDIM || !in_bounds(shape_offset, (uint64_t)ndim * 8, payload_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64
                     "]: ndim %u is over %d or its shape lies outside the payload",
                     i, ndim, CONST_MAX_NDIM);
  if (data_offset % MP_FORMAT_PAYLOAD_ALIGNMENT != 0 ||
      !in_bounds(data_offset, data_size, payload_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64 "]: data [%" PRIu64 ", +%" PRIu64
                     ") is misaligned or outside the %" PRIu64 "-byte payload",
                     i, data_offset, data_size, payload_size);
  if (dtype.lanes == 0 || !dtype_is_valid(dtype))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64 "]: invalid dtype (code %u, bits %u, lanes %u)", i,
                     dtype.code, dtype.bits, dtype.lanes);
  uint64_t expected = (uint64_t)dtype.bits * dtype.lanes / 8;
  const_array_t* a = calloc(1, sizeof *a + (ndim ? ndim : 1) * sizeof(int64_t));
  if (!a) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t d = 0; d < ndim; ++d) {
    uint64_t extent = mp_load_le64(p + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX || !mp_mul_u64(expected, extent, &expected)) {
      free(a);
      return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: shape overflows", i);
    }
    a->shape[d] = (int64_t)extent;
  }
  if (expected != data_size) {
    free(a);
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64 "]: %" PRIu64
                     " data bytes do not match its shape and "
                     "dtype (%" PRIu64 " bytes)",
                     i, data_size, expected);
  }
  a->name = malloc((size_t)name_size + 1);
  if (!a->name) {
    free(a);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(a->name, p + name_offset, name_size);
  a->name[name_size] = '\0';
  if (strlen(a->name) != name_size) {
    free(a->name), free(a);
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name contains a NUL byte", i);
  }
  a->tensor.data = (void*)(p + data_offset); /* read-only: the mapping is not writable */
  a->tensor.device = (DLDevice){kDLCPU, 0};
  a->tensor.ndim = (int32_t)ndim;
  a->tensor.dtype = dtype;
  a->tensor.shape = a->shape;
  a->tensor.strides = NULL;
  a->tensor.byte_offset = 0;
  *out = a;
  return MP_OK;
}

static mp_status_t load_const(void* user_data, const mp_loader_args_t* args,
                              mp_module_t** out_module) {
  (void)user_data;
  const uint8_t* p = args->payload.data;
  uint64_t size = args->payload.size;
  if (size < CONST_HEADER_SIZE)
    return mp_errorf(MP_ERR_FORMAT, "const payload of %" PRIu64 " bytes is shorter than its header",
                     size);
  uint32_t version = mp_load_le32(p);
  if (version != CONST_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "const payload version %u is not supported (this runtime reads %d)", version,
                     CONST_VERSION);
  if (mp_load_le32(p + 4) != 0)
    return mp_errorf(MP_ERR_FORMAT, "const payload: reserved header field is not 0");
  uint64_t count = mp_load_le64(p + 8);
  if (count > (size - CONST_HEADER_SIZE) / CONST_RECORD_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "const payload: %" PRIu64 " array records do not fit in %" PRIu64 " bytes",
                     count, size);
  const_module_t* m = calloc(1, sizeof *m);
  if (m) m->arrays = calloc(count ? count : 1, sizeof *m->arrays);
  if (!m || !m->arrays) {
    free(m);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  m->count = count;
  for (uint64_t i = 0; i < count; ++i) {
    mp_status_t status = read_array(p, size, i, &m->arrays[i]);
    if (status != MP_OK) {
      const_destroy(m);
      return status;
    }
  }
  return mp_module_create("const", &const_vtable, m, out_module);
}

static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

mp_status_t mp_load_opencl(void* user_data, const mp_loader_args_t* args, mp_module_t** out_module);
mp_status_t mp_load_cuda(void* user_data, const mp_loader_args_t* args, mp_module_t** out_module);

static void register_builtins(void) {
  mp_loader_register_builtin("const", load_const, NULL);
  mp_loader_register_builtin("opencl", mp_load_opencl, NULL);
  mp_loader_register_builtin("cuda", mp_load_cuda, NULL);
}

void mp_builtin_loaders_init(void) {
  pthread_once(&builtin_once, register_builtins);
}
