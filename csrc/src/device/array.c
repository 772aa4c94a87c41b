/* Arrays owned by the runtime, reference counted, on any device: allocated through the device
 * API (compact), or adopted from a DLPack producer (its memory, its layout, its read-only flag;
 * the producer's deleter runs on the last release). Exported to DLPack consumers with a managed
 * tensor (legacy or versioned) that holds a reference. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "modpack/tensor_span.h"

enum { MP_ARRAY_MAX_NDIM = 32 };

typedef struct {
  DLTensor tensor; /* first: a DLTensor* of an array is the array */
  atomic_long refcount;
  uint32_t flags; /* MP_ARRAY_* */
  /* An adopted DLPack tensor (its deleter frees the memory), or NULL: the data is the
   * runtime's, freed through the device API. */
  void* managed;
  int versioned; /* |managed| is a DLManagedTensorVersioned */
  int64_t shape[]; /* ndim extents, then (for a strided adopted tensor) ndim strides */
} mp_array_t;

/* 0 for an array whose size cannot be computed (no shape, elements of no size, a negative
 * extent, more than PTRDIFF_MAX bytes: mp_tensor_layout's rules), never a wrapped product: code
 * that reads or allocates that many bytes then touches nothing, and mp_array_copy refuses such
 * an array by name. */
uint64_t mp_array_nbytes(const DLTensor* array) {
  mp_tensor_span_t span;
  return array && mp_tensor_layout(array, &span) == MP_SPAN_OK ? span.nbytes : 0;
}

mp_status_t mp_array_empty(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                           DLTensor** out_array) {
  *out_array = NULL;
  if (ndim < 0 || ndim > MP_ARRAY_MAX_NDIM || (ndim > 0 && !shape))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array ndim %d must be in [0, %d]", (int)ndim,
                     MP_ARRAY_MAX_NDIM);
  /* The same rules as every array the runtime reads (modpack/tensor_span.h). */
  DLTensor layout = {NULL, device, ndim, dtype, (int64_t*)shape, NULL, 0};
  mp_tensor_span_t span;
  mp_span_status_t problem = mp_tensor_layout(&layout, &span);
  if (problem != MP_SPAN_OK) {
    char why[400];
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array too large or malformed: %s",
                     mp_tensor_span_describe(&layout, problem, &span, why, sizeof why));
  }
  uint64_t nbytes = span.nbytes;
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
  if (a->managed && a->versioned) {
    DLManagedTensorVersioned* m = a->managed;
    if (m->deleter) m->deleter(m);
  } else if (a->managed) {
    DLManagedTensor* m = a->managed;
    if (m->deleter) m->deleter(m);
  } else {
    mp_device_free(a->tensor.device, a->tensor.data);
  }
  free(a);
}

uint32_t mp_array_flags(const DLTensor* array) {
  return array ? ((const mp_array_t*)array)->flags : 0;
}

/* Adopt |tensor| (of |managed|, legacy or versioned) as an array, if it is one the runtime can
 * hold: a known device type, at most MP_ARRAY_MAX_NDIM dimensions, every byte it reaches
 * addressable (mp_tensor_span). The shape (and strides, unless compact) are copied. */
static mp_status_t adopt(const DLTensor* tensor, void* managed, int versioned, uint32_t flags,
                         DLTensor** out_array) {
  *out_array = NULL;
  if (tensor->ndim < 0 || tensor->ndim > MP_ARRAY_MAX_NDIM)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a DLPack tensor of %d dimensions: arrays have 0 to %d", (int)tensor->ndim,
                     MP_ARRAY_MAX_NDIM);
  if (!mp_device_type_name((int32_t)tensor->device.device_type))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a DLPack tensor on device type %d, which this runtime does not support",
                     (int)tensor->device.device_type);
  mp_tensor_span_t span;
  mp_span_status_t problem = mp_tensor_span(tensor, &span);
  if (problem != MP_SPAN_OK) {
    char why[400];
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "a DLPack tensor the runtime cannot use: %s",
                     mp_tensor_span_describe(tensor, problem, &span, why, sizeof why));
  }
  int strided = !mp_tensor_is_compact(tensor);
  int32_t ndim = tensor->ndim;
  mp_array_t* a =
      calloc(1, sizeof *a + (size_t)(ndim ? ndim : 1) * (strided ? 2 : 1) * sizeof(int64_t));
  if (!a) return mp_out_of_memory("an array");
  atomic_init(&a->refcount, 1);
  a->flags = flags;
  a->managed = managed;
  a->versioned = versioned;
  if (ndim) memcpy(a->shape, tensor->shape, (size_t)ndim * sizeof(int64_t));
  a->tensor = *tensor;
  a->tensor.shape = a->shape;
  a->tensor.strides = NULL;
  if (strided) {
    memcpy(a->shape + ndim, tensor->strides, (size_t)ndim * sizeof(int64_t));
    a->tensor.strides = a->shape + ndim;
  }
  *out_array = &a->tensor;
  return MP_OK;
}

mp_status_t mp_array_from_dlpack(DLManagedTensor* managed, DLTensor** out_array) {
  if (!out_array) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_array_from_dlpack: no output");
  *out_array = NULL;
  if (!managed) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_array_from_dlpack of NULL");
  return adopt(&managed->dl_tensor, managed, 0, 0, out_array);
}

mp_status_t mp_array_from_dlpack_versioned(DLManagedTensorVersioned* managed,
                                           DLTensor** out_array) {
  if (!out_array)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_array_from_dlpack_versioned: no output");
  *out_array = NULL;
  if (!managed)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_array_from_dlpack_versioned of NULL");
  if (managed->version.major != DLPACK_MAJOR_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "a DLPack %u.%u tensor: this runtime reads DLPack %d.x",
                     (unsigned)managed->version.major, (unsigned)managed->version.minor,
                     DLPACK_MAJOR_VERSION);
  /* A DLTensor cannot say that its sub-byte elements are padded, so an array of them could
   * not tell whoever it is passed to: they are taken packed only (modpack/tensor_span.h). */
  DLDataType dtype = managed->dl_tensor.dtype;
  if ((managed->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) &&
      (unsigned)dtype.bits * dtype.lanes < 8) {
    char name[64];
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a DLPack tensor of %s its producer marks padded (one value per byte, "
                     "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED): the runtime takes sub-byte "
                     "types packed, DLPack's default (two 4-bit values per byte)",
                     mp_dtype_string(dtype, name, sizeof name));
  }
  uint32_t flags = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? MP_ARRAY_READ_ONLY : 0;
  return adopt(&managed->dl_tensor, managed, 1, flags, out_array);
}

/* |array| as one side of a copy: every byte it reaches addressable (mp_tensor_span). */
static mp_status_t check_copy_side(const DLTensor* array, const char* side,
                                   mp_tensor_span_t* out_span) {
  if (!array) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array copy: the %s array is NULL", side);
  mp_span_status_t problem = mp_tensor_span(array, out_span);
  if (problem == MP_SPAN_OK) return MP_OK;
  char why[400];
  return mp_errorf(MP_ERR_INVALID_ARGUMENT, "array copy refuses the %s array: %s", side,
                   mp_tensor_span_describe(array, problem, out_span, why, sizeof why));
}

mp_status_t mp_array_copy(const DLTensor* from, DLTensor* to) {
  mp_tensor_span_t from_span, to_span;
  MP_RETURN_IF_ERROR(check_copy_side(from, "source", &from_span));
  MP_RETURN_IF_ERROR(check_copy_side(to, "destination", &to_span));
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
                        to->device, from_span.nbytes);
}

static void managed_deleter(DLManagedTensor* self) {
  mp_array_release(self->manager_ctx);
  free(self);
}

static void versioned_deleter(DLManagedTensorVersioned* self) {
  mp_array_release(self->manager_ctx);
  free(self);
}

mp_status_t mp_array_to_dlpack(DLTensor* array, DLManagedTensor** out_managed) {
  *out_managed = NULL;
  if (mp_array_flags(array) & MP_ARRAY_READ_ONLY)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "the array is read-only, which a DLPack tensor before 1.0 cannot say: "
                     "export it with mp_array_to_dlpack_versioned, or copy it first");
  DLManagedTensor* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a DLPack tensor");
  mp_array_retain(array);
  m->dl_tensor = *array;
  m->manager_ctx = array;
  m->deleter = managed_deleter;
  *out_managed = m;
  return MP_OK;
}

mp_status_t mp_array_to_dlpack_versioned(DLTensor* array, uint64_t flags,
                                         DLManagedTensorVersioned** out_managed) {
  *out_managed = NULL;
  DLManagedTensorVersioned* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a DLPack tensor");
  mp_array_retain(array);
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = DLPACK_MINOR_VERSION;
  m->manager_ctx = array;
  m->deleter = versioned_deleter;
  m->flags = flags & ~(uint64_t)DLPACK_FLAG_BITMASK_READ_ONLY;
  if (mp_array_flags(array) & MP_ARRAY_READ_ONLY) m->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  m->dl_tensor = *array;
  *out_managed = m;
  return MP_OK;
}
