/* The device API: one table of operations per device type, the CPU implementation, and
 * runtime-owned arrays (with DLPack export) built on it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- CPU ---------------------------------------------------------------------------------- */

static mp_status_t cpu_count(int32_t* out_count) {
  *out_count = 1;
  return MP_OK;
}

static mp_status_t cpu_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  snprintf(buffer, capacity, "cpu %d", (int)device_id);
  return MP_OK;
}

static mp_status_t cpu_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  (void)device_id;
  /* 64-byte alignment, as DLPack recommends for vectorised kernels. */
  if (nbytes > UINT64_MAX - 63)
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes", nbytes);
  uint64_t rounded = (nbytes + 63) / 64 * 64;
  *out_data = aligned_alloc(64, rounded ? rounded : 64);
  if (!*out_data)
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "cannot allocate %" PRIu64 " bytes on the CPU",
                     nbytes);
  return MP_OK;
}

static mp_status_t cpu_free(int32_t device_id, void* data) {
  (void)device_id;
  free(data);
  return MP_OK;
}

static mp_status_t cpu_copy_from_host(int32_t device_id, const void* host, void* data,
                                      uint64_t offset, uint64_t nbytes) {
  (void)device_id;
  memcpy((uint8_t*)data + offset, host, nbytes);
  return MP_OK;
}

static mp_status_t cpu_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                    void* host, uint64_t nbytes) {
  (void)device_id;
  memcpy(host, (const uint8_t*)data + offset, nbytes);
  return MP_OK;
}

static mp_status_t cpu_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                   void* to, uint64_t to_offset, uint64_t nbytes) {
  (void)device_id;
  memmove((uint8_t*)to + to_offset, (const uint8_t*)from + from_offset, nbytes);
  return MP_OK;
}

static mp_status_t cpu_synchronize(int32_t device_id) {
  (void)device_id;
  return MP_OK;
}

const mp_device_api_t mp_cpu_device_api = {
    .name = "cpu",
    .count = cpu_count,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_from_host,
    .copy_to_host = cpu_copy_to_host,
    .copy_within = cpu_copy_within,
    .synchronize = cpu_synchronize,
};

/* ---- dispatch ----------------------------------------------------------------------------- */

const mp_device_api_t* mp_device_api(int32_t device_type) {
  switch (device_type) {
    case kDLCPU:
      return &mp_cpu_device_api;
    case kDLOpenCL:
      return &mp_opencl_device_api;
    case kDLCUDA:
      return &mp_cuda_device_api;
    default:
      mp_errorf(MP_ERR_INVALID_ARGUMENT,
                "device type %d is not supported by this runtime (supported: cpu=%d, cuda=%d, "
                "opencl=%d)",
                (int)device_type, kDLCPU, kDLCUDA, kDLOpenCL);
      return NULL;
  }
}

static mp_status_t check_device(DLDevice device, const mp_device_api_t** out_api) {
  const mp_device_api_t* api = mp_device_api(device.device_type);
  if (!api) return mp_error_code();
  int32_t count = 0;
  mp_status_t status = api->count(&count);
  if (status != MP_OK) return status;
  if (device.device_id < 0 || device.device_id >= count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s device %d does not exist (%d available)",
                     api->name, (int)device.device_id, (int)count);
  *out_api = api;
  return MP_OK;
}

mp_status_t mp_device_count(int32_t device_type, int32_t* out_count) {
  *out_count = 0;
  const mp_device_api_t* api = mp_device_api(device_type);
  return api ? api->count(out_count) : mp_error_code();
}

mp_status_t mp_device_name(DLDevice device, char* buffer, uint64_t capacity) {
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->describe(device.device_id, buffer, capacity) : status;
}

mp_status_t mp_device_alloc(DLDevice device, uint64_t nbytes, void** out_data) {
  *out_data = NULL;
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->alloc(device.device_id, nbytes, out_data) : status;
}

mp_status_t mp_device_free(DLDevice device, void* data) {
  if (!data) return MP_OK;
  const mp_device_api_t* api = mp_device_api(device.device_type);
  return api ? api->free(device.device_id, data) : mp_error_code();
}

mp_status_t mp_device_copy(const void* from, uint64_t from_offset, DLDevice from_device, void* to,
                           uint64_t to_offset, DLDevice to_device, uint64_t nbytes) {
  if (nbytes == 0) return MP_OK;
  const mp_device_api_t *from_api = NULL, *to_api = NULL;
  mp_status_t status = check_device(from_device, &from_api);
  if (status == MP_OK) status = check_device(to_device, &to_api);
  if (status != MP_OK) return status;
  bool from_host = from_device.device_type == kDLCPU, to_host = to_device.device_type == kDLCPU;
  if (from_host && to_host) return cpu_copy_within(0, from, from_offset, to, to_offset, nbytes);
  if (from_host)
    return to_api->copy_from_host(to_device.device_id, (const uint8_t*)from + from_offset, to,
                                  to_offset, nbytes);
  if (to_host)
    return from_api->copy_to_host(from_device.device_id, from, from_offset,
                                  (uint8_t*)to + to_offset, nbytes);
  if (from_device.device_type == to_device.device_type &&
      from_device.device_id == to_device.device_id)
    return from_api->copy_within(from_device.device_id, from, from_offset, to, to_offset, nbytes);
  return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                   "copies between %s:%d and %s:%d go through the host: copy to a CPU array first",
                   from_api->name, (int)from_device.device_id, to_api->name,
                   (int)to_device.device_id);
}

mp_status_t mp_device_synchronize(DLDevice device) {
  const mp_device_api_t* api = NULL;
  mp_status_t status = check_device(device, &api);
  return status == MP_OK ? api->synchronize(device.device_id) : status;
}

/* ---- streams: per thread, per device ----------------------------------------------------- */

enum { STREAM_DEVICE_TYPES = 16, STREAM_DEVICES = 64 };
static _Thread_local void* current_streams[STREAM_DEVICE_TYPES][STREAM_DEVICES];

static bool stream_slot(DLDevice device) {
  return device.device_type >= 0 && device.device_type < STREAM_DEVICE_TYPES &&
         device.device_id >= 0 && device.device_id < STREAM_DEVICES;
}

mp_status_t mp_device_set_stream(DLDevice device, void* stream, void** out_previous) {
  if (out_previous) *out_previous = NULL;
  if (!stream_slot(device))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "no stream slot for device type %d, id %d",
                     (int)device.device_type, (int)device.device_id);
  if (out_previous) *out_previous = current_streams[device.device_type][device.device_id];
  current_streams[device.device_type][device.device_id] = stream;
  return MP_OK;
}

void* mp_device_get_stream(DLDevice device) {
  return stream_slot(device) ? current_streams[device.device_type][device.device_id] : NULL;
}

/* ---- arrays ------------------------------------------------------------------------------- */

typedef struct {
  DLTensor tensor; /* first: a DLTensor* of an array is the array */
  atomic_long refcount;
  int64_t shape[];
} mp_array_t;

uint64_t mp_array_nbytes(const DLTensor* array) {
  uint64_t n = ((uint64_t)array->dtype.bits * array->dtype.lanes + 7) / 8;
  for (int32_t d = 0; d < array->ndim; ++d) n *= (uint64_t)array->shape[d];
  return n;
}

mp_status_t mp_array_empty(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                           DLTensor** out_array) {
  *out_array = NULL;
  if (ndim < 0 || ndim > 32 || (ndim > 0 && !shape))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array ndim %d must be in [0, 32]", (int)ndim);
  if (dtype.bits == 0 || dtype.lanes == 0)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array dtype has 0 bits or lanes");
  uint64_t nbytes = ((uint64_t)dtype.bits * dtype.lanes + 7) / 8;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0 || !mp_mul_u64(nbytes, (uint64_t)shape[d], &nbytes) ||
        nbytes > (uint64_t)INT64_MAX)
      return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array shape[%d] = %lld is negative or too large",
                       (int)d, (long long)shape[d]);
  }
  mp_array_t* a = calloc(1, sizeof *a + (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
  if (!a) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  mp_status_t status = mp_device_alloc(device, nbytes ? nbytes : 1, &a->tensor.data);
  if (status != MP_OK) {
    free(a);
    return status;
  }
  atomic_init(&a->refcount, 1);
  if (ndim) memcpy(a->shape, shape, (size_t)ndim * sizeof(int64_t));
  a->tensor.device = device;
  a->tensor.ndim = ndim;
  a->tensor.dtype = dtype;
  a->tensor.shape = a->shape;
  a->tensor.strides = NULL;
  a->tensor.byte_offset = 0;
  *out_array = &a->tensor;
  return MP_OK;
}

void mp_array_retain(DLTensor* array) {
  if (array) atomic_fetch_add_explicit(&((mp_array_t*)array)->refcount, 1, memory_order_relaxed);
}

void mp_array_release(DLTensor* array) {
  if (!array) return;
  mp_array_t* a = (mp_array_t*)array;
  if (atomic_fetch_sub_explicit(&a->refcount, 1, memory_order_acq_rel) != 1) return;
  mp_device_free(a->tensor.device, a->tensor.data);
  free(a);
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

mp_status_t mp_array_copy(const DLTensor* from, DLTensor* to) {
  if (from->ndim != to->ndim || from->dtype.code != to->dtype.code ||
      from->dtype.bits != to->dtype.bits || from->dtype.lanes != to->dtype.lanes)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "array copy needs the same dtype and ndim on both sides");
  for (int32_t d = 0; d < from->ndim; ++d)
    if (from->shape[d] != to->shape[d])
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "array copy needs the same shape (dimension %d: %lld vs %lld)", (int)d,
                       (long long)from->shape[d], (long long)to->shape[d]);
  if (!is_compact(from) || !is_compact(to))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array copy needs compact (row-major) arrays");
  return mp_device_copy(from->data, from->byte_offset, from->device, to->data, to->byte_offset,
                        to->device, mp_array_nbytes(from));
}

static void managed_deleter(DLManagedTensor* self) {
  mp_array_release(self->manager_ctx);
  free(self);
}

mp_status_t mp_array_to_dlpack(DLTensor* array, DLManagedTensor** out_managed) {
  *out_managed = NULL;
  DLManagedTensor* m = calloc(1, sizeof *m);
  if (!m) return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  mp_array_retain(array);
  m->dl_tensor = *array;
  m->manager_ctx = array;
  m->deleter = managed_deleter;
  *out_managed = m;
  return MP_OK;
}
