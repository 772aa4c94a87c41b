/* Arrays owned by the runtime: compact, reference counted, on any device (allocated through
 * the device API), exported to DLPack consumers with a managed tensor that holds a
 * reference. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/error.h"

enum { MP_ARRAY_MAX_NDIM = 32 };

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
  if (ndim < 0 || ndim > MP_ARRAY_MAX_NDIM || (ndim > 0 && !shape))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array ndim %d must be in [0, %d]", (int)ndim,
                     MP_ARRAY_MAX_NDIM);
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
  if (!a) return mp_out_of_memory("an array");
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
  if (!mp_tensor_is_compact(from) || !mp_tensor_is_compact(to))
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
  if (!m) return mp_out_of_memory("a DLPack tensor");
  mp_array_retain(array);
  m->dl_tensor = *array;
  m->manager_ctx = array;
  m->deleter = managed_deleter;
  *out_managed = m;
  return MP_OK;
}
