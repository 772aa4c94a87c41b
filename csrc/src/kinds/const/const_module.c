/* The "const" module kind: named arrays (weights, constants) read in place from the blob. The
 * payload layout is in modpack/kinds/const.h. The arrays handed out are DLTensors whose data
 * points into the mapped library: no copy. */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"
#include "kinds/const/const_payload.h"
#include "modpack/kinds/const.h"

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

#define RECORD_FIELD(field) offsetof(mp_const_record_v1_t, field)

/* Array record |i|, checked against the payload before anything is kept. */
static mp_status_t read_array(const uint8_t* p, uint64_t payload_size, uint64_t i,
                              const_array_t** out) {
  const uint8_t* r = p + sizeof(mp_const_header_v1_t) + i * sizeof(mp_const_record_v1_t);
  uint64_t name_offset = mp_load_le64(r + RECORD_FIELD(name_offset));
  uint32_t name_size = mp_load_le32(r + RECORD_FIELD(name_size));
  DLDataType dtype = {r[RECORD_FIELD(dtype_code)], r[RECORD_FIELD(dtype_bits)],
                      mp_load_le16(r + RECORD_FIELD(dtype_lanes))};
  uint32_t ndim = mp_load_le32(r + RECORD_FIELD(ndim));
  uint64_t shape_offset = mp_load_le64(r + RECORD_FIELD(shape_offset));
  uint64_t data_offset = mp_load_le64(r + RECORD_FIELD(data_offset));
  uint64_t data_size = mp_load_le64(r + RECORD_FIELD(data_size));
  if (mp_load_le32(r + RECORD_FIELD(reserved)) != 0)
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: reserved field is not 0", i);
  if (name_size == 0 || name_size > MP_CONST_MAX_NAME)
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name of %u bytes (1 to %d allowed)",
                     i, name_size, MP_CONST_MAX_NAME);
  if (!mp_in_bounds(name_offset, name_size, payload_size))
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name lies outside the payload", i);
  if (ndim > MP_CONST_MAX_NDIM || !mp_in_bounds(shape_offset, (uint64_t)ndim * 8, payload_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64
                     "]: ndim %u is over %d or its shape lies outside the payload",
                     i, ndim, MP_CONST_MAX_NDIM);
  if (data_offset % MP_CONST_DATA_ALIGNMENT != 0 ||
      !mp_in_bounds(data_offset, data_size, payload_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64 "]: data [%" PRIu64 ", +%" PRIu64
                     ") is misaligned or outside the %" PRIu64 "-byte payload",
                     i, data_offset, data_size, payload_size);
  if (!mp_dtype_is_valid(dtype))
    return mp_errorf(MP_ERR_FORMAT,
                     "const array[%" PRIu64 "]: invalid dtype (code %u, bits %u, lanes %u)", i,
                     dtype.code, dtype.bits, dtype.lanes);
  if (memchr(p + name_offset, 0, name_size))
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name contains a NUL byte", i);
  if (mp_utf8_invalid_at(p + name_offset, name_size) < name_size)
    return mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: name is not UTF-8", i);
  uint64_t expected = (uint64_t)dtype.bits * dtype.lanes / 8;
  const_array_t* a = calloc(1, sizeof *a + (ndim ? ndim : 1) * sizeof(int64_t));
  if (!a) return mp_out_of_memory("a const array");
  mp_status_t status = MP_OK;
  for (uint32_t d = 0; d < ndim && status == MP_OK; ++d) {
    uint64_t extent = mp_load_le64(p + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX || !mp_mul_u64(expected, extent, &expected))
      status = mp_errorf(MP_ERR_FORMAT, "const array[%" PRIu64 "]: shape overflows", i);
    a->shape[d] = (int64_t)extent;
  }
  if (status == MP_OK && expected != data_size)
    status = mp_errorf(MP_ERR_FORMAT,
                       "const array[%" PRIu64 "]: %" PRIu64
                       " data bytes do not match its shape and dtype (%" PRIu64 " bytes)",
                       i, data_size, expected);
  if (status == MP_OK && !(a->name = malloc((size_t)name_size + 1)))
    status = mp_out_of_memory("a const array name");
  if (status != MP_OK) {
    free(a);
    return status;
  }
  memcpy(a->name, p + name_offset, name_size);
  a->name[name_size] = '\0';
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

static int compare_names(const void* a, const void* b) {
  return strcmp((*(const const_array_t* const*)a)->name, (*(const const_array_t* const*)b)->name);
}

/* Two arrays of one name would be found differently by Python (the last) and by host code's
 * lookup (the first): refused. Sorted copies, so thousands of arrays cost n log n. */
static mp_status_t check_unique_names(const const_module_t* m) {
  if (m->count < 2) return MP_OK;
  const_array_t** sorted = malloc(m->count * sizeof *sorted);
  if (!sorted) return mp_out_of_memory("the const array names");
  memcpy(sorted, m->arrays, m->count * sizeof *sorted);
  qsort(sorted, m->count, sizeof *sorted, compare_names);
  mp_status_t status = MP_OK;
  for (uint64_t i = 1; i < m->count && status == MP_OK; ++i)
    if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
      status =
          mp_errorf(MP_ERR_FORMAT, "const payload: two arrays are named '%s'", sorted[i]->name);
  free(sorted);
  return status;
}

#define HEADER_FIELD(field) offsetof(mp_const_header_v1_t, field)

static mp_status_t load_const(void* user_data, const mp_loader_args_t* args,
                              mp_module_t** out_module) {
  (void)user_data;
  const uint8_t* p = args->payload.data;
  uint64_t size = args->payload.size;
  if (size < sizeof(mp_const_header_v1_t))
    return mp_errorf(MP_ERR_FORMAT, "const payload of %" PRIu64 " bytes is shorter than its header",
                     size);
  uint32_t version = mp_load_le32(p + HEADER_FIELD(version));
  if (version != MP_CONST_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "const payload version %u is not supported (this runtime reads %d)", version,
                     MP_CONST_PAYLOAD_VERSION);
  if (mp_load_le32(p + HEADER_FIELD(reserved)) != 0)
    return mp_errorf(MP_ERR_FORMAT, "const payload: reserved header field is not 0");
  uint64_t count = mp_load_le64(p + HEADER_FIELD(array_count));
  if (count > (size - sizeof(mp_const_header_v1_t)) / sizeof(mp_const_record_v1_t))
    return mp_errorf(MP_ERR_FORMAT,
                     "const payload: %" PRIu64 " array records do not fit in %" PRIu64 " bytes",
                     count, size);
  const_module_t* m = calloc(1, sizeof *m);
  if (m) m->arrays = calloc(count ? count : 1, sizeof *m->arrays);
  if (!m || !m->arrays) {
    free(m);
    return mp_out_of_memory("a const module");
  }
  m->count = count;
  for (uint64_t i = 0; i < count; ++i) {
    mp_status_t status = read_array(p, size, i, &m->arrays[i]);
    if (status != MP_OK) {
      const_destroy(m);
      return status;
    }
  }
  mp_status_t status = check_unique_names(m);
  if (status != MP_OK) {
    const_destroy(m);
    return status;
  }
  return mp_module_create("const", &const_vtable, m, out_module);
}

uint64_t mp_const_metadata_size(const uint8_t* header, uint64_t payload_size) {
  if (payload_size < sizeof(mp_const_header_v1_t)) return payload_size;
  uint64_t count = mp_load_le64(header + HEADER_FIELD(array_count));
  uint64_t room = (payload_size - sizeof(mp_const_header_v1_t)) / sizeof(mp_const_record_v1_t);
  return sizeof(mp_const_header_v1_t) +
         (count < room ? count : room) * sizeof(mp_const_record_v1_t);
}

mp_status_t mp_const_data_start(const uint8_t* head, uint64_t head_size, uint64_t payload_size,
                                uint64_t* out_start) {
  *out_start = payload_size;
  if (head_size < sizeof(mp_const_header_v1_t) || head_size > payload_size ||
      mp_load_le32(head + HEADER_FIELD(version)) != MP_CONST_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_FORMAT, "not a const payload header");
  uint64_t count = mp_load_le64(head + HEADER_FIELD(array_count));
  if (count > (head_size - sizeof(mp_const_header_v1_t)) / sizeof(mp_const_record_v1_t))
    return mp_errorf(MP_ERR_FORMAT, "const payload records beyond the bytes read");
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* r = head + sizeof(mp_const_header_v1_t) + i * sizeof(mp_const_record_v1_t);
    uint64_t offset = mp_load_le64(r + RECORD_FIELD(data_offset));
    if (mp_load_le64(r + RECORD_FIELD(data_size)) > 0 && offset < *out_start)
      *out_start = offset;
  }
  if (*out_start < head_size) return mp_errorf(MP_ERR_FORMAT, "const data among its records");
  return MP_OK;
}

const mp_kind_t mp_const_kind = {
    .type_key = "const",
    .load = load_const,
};
