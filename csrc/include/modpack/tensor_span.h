/*
 * modpack/tensor_span.h — the bytes a DLTensor's elements reach, computed without overflow.
 *
 * A DLTensor says where its elements are (data + byte_offset, then strides counted in
 * elements) and nothing bounds it: a DLPack producer can describe shape [2^32, 2^32] over a
 * 4 KiB buffer, a byte_offset of 2^63, or a data pointer its elements wrap around from. Code
 * that computes `data + byte_offset + index * itemsize` for such an array overflows before it
 * reads anything. mp_tensor_span computes what an array reaches with every product and sum
 * checked, and says which rule it breaks; the runtime refuses such arrays wherever it reads
 * them (typed signatures, copies, mp_array_nbytes) and so do the wrappers of modpack/backend.h
 * before host code runs. Header-only, for C and C++: host code never links the runtime, and
 * both sides share this one computation.
 *
 * An array is usable when
 *   - ndim >= 0, it has a shape when ndim > 0, and every extent is >= 0;
 *   - its elements have a size: bits and lanes > 0 (an element is bits * lanes rounded up to
 *     whole bytes);
 *   - the product of its non-zero extents times the element size is at most PTRDIFF_MAX, also
 *     when another extent is 0 (numpy's rule: an empty array's other extents still size the rows
 *     code computes), so neither the product of the extents nor the byte size overflows;
 *   - with strides: the bytes its elements reach below the first one (negative strides) and
 *     above it, each the sum over dimensions of (extent - 1) * |stride| * element size, and
 *     their total, are at most PTRDIFF_MAX (dimensions of extent 0 or 1 reach nothing, whatever
 *     their stride);
 *   - byte_offset, and byte_offset plus the bytes above the first element, are at most
 *     PTRDIFF_MAX;
 *   - data + byte_offset, less the bytes below and plus the bytes above, stays inside the
 *     address space (nothing wraps), whatever the device (a handle plus an offset included).
 * An empty array (an extent of 0) reaches no byte. Whether the memory is really there is the
 * producer's word: no one can check that from a pointer.
 */
#ifndef MODPACK_TENSOR_SPAN_H_
#define MODPACK_TENSOR_SPAN_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "modpack/dltensor.h"

/* What an array reaches, in bytes. */
typedef struct {
  uint64_t itemsize; /* one element: bits * lanes rounded up to bytes */
  uint64_t elements; /* the product of the extents (0 for an empty array) */
  uint64_t nbytes;   /* elements * itemsize: the array's bytes when it is compact */
  uint64_t below;    /* bytes its elements reach below data + byte_offset (negative strides) */
  uint64_t above;    /* bytes from data + byte_offset to the end of its last element */
  int32_t dim;       /* the dimension a problem is in, or -1 */
} mp_tensor_span_t;

/* The rule an array breaks (in the order they are checked), or MP_SPAN_OK. */
typedef enum {
  MP_SPAN_OK = 0,
  MP_SPAN_NO_SHAPE,          /* ndim < 0, or ndim > 0 and no shape */
  MP_SPAN_NO_ELEMENT_SIZE,   /* 0 bits or 0 lanes */
  MP_SPAN_NEGATIVE_EXTENT,   /* shape[dim] < 0 */
  MP_SPAN_TOO_LARGE,         /* extents (up to dim) times the element size > PTRDIFF_MAX */
  MP_SPAN_STRIDES_TOO_LARGE, /* its strides reach more than PTRDIFF_MAX bytes */
  MP_SPAN_OFFSET_TOO_LARGE,  /* byte_offset, or it plus the bytes above, > PTRDIFF_MAX */
  MP_SPAN_WRAPS,             /* data + byte_offset, or the elements, leave the address space */
} mp_span_status_t;

/* The layout alone (shape, dtype, strides), without data and byte_offset. Fills |out| (on a
 * failure, the dimension it is in and the element size). */
static inline mp_span_status_t mp_tensor_layout(const DLTensor* t, mp_tensor_span_t* out) {
  out->itemsize = out->elements = out->nbytes = out->below = out->above = 0;
  out->dim = -1;
  if (t->ndim < 0 || (t->ndim > 0 && !t->shape)) return MP_SPAN_NO_SHAPE;
  if (t->dtype.bits == 0 || t->dtype.lanes == 0) return MP_SPAN_NO_ELEMENT_SIZE;
  const uint64_t limit = (uint64_t)PTRDIFF_MAX;
  const uint64_t itemsize = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
  out->itemsize = itemsize;
  uint64_t bytes = itemsize; /* the non-zero extents times the element size */
  int empty = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    const int64_t extent = t->shape[d];
    if (extent < 0) {
      out->dim = d;
      return MP_SPAN_NEGATIVE_EXTENT;
    }
    if (extent == 0) {
      empty = 1;
    } else if (__builtin_mul_overflow(bytes, (uint64_t)extent, &bytes) || bytes > limit) {
      out->dim = d;
      return MP_SPAN_TOO_LARGE;
    }
  }
  if (empty) return MP_SPAN_OK; /* it reaches no byte, whatever its strides */
  out->nbytes = bytes;
  out->elements = bytes / itemsize;
  if (!t->strides) {
    out->above = bytes;
    return MP_SPAN_OK;
  }
  uint64_t below = 0, above = 0; /* in elements */
  for (int32_t d = 0; d < t->ndim; ++d) {
    const uint64_t last = (uint64_t)t->shape[d] - 1;
    if (last == 0) continue;
    const int64_t stride = t->strides[d];
    const uint64_t magnitude = stride < 0 ? 0 - (uint64_t)stride : (uint64_t)stride;
    uint64_t* side = stride < 0 ? &below : &above;
    uint64_t reach;
    if (__builtin_mul_overflow(last, magnitude, &reach) ||
        __builtin_add_overflow(*side, reach, side)) {
      out->dim = d;
      return MP_SPAN_STRIDES_TOO_LARGE;
    }
  }
  uint64_t total;
  if (__builtin_mul_overflow(below, itemsize, &below) ||
      __builtin_mul_overflow(above, itemsize, &above) ||
      __builtin_add_overflow(above, itemsize, &above) ||
      __builtin_add_overflow(below, above, &total) || total > limit)
    return MP_SPAN_STRIDES_TOO_LARGE;
  out->below = below;
  out->above = above;
  return MP_SPAN_OK;
}

/* Whether the |nbytes| from |address| + |offset| stay inside the address space, with the offset
 * and the offset plus the bytes at most PTRDIFF_MAX: the check for copies of raw bytes. */
static inline int mp_byte_range_fits(const void* address, uint64_t offset, uint64_t nbytes) {
  uint64_t end;
  if (__builtin_add_overflow(offset, nbytes, &end) || end > (uint64_t)PTRDIFF_MAX) return 0;
  if (__builtin_add_overflow((uint64_t)(uintptr_t)address, end, &end)) return 0;
#if UINTPTR_MAX < UINT64_MAX
  if (end > UINTPTR_MAX) return 0;
#endif
  return 1;
}

/* The whole check: the layout (mp_tensor_layout), then byte_offset and data. */
static inline mp_span_status_t mp_tensor_span(const DLTensor* t, mp_tensor_span_t* out) {
  mp_span_status_t status = mp_tensor_layout(t, out);
  if (status != MP_SPAN_OK) return status;
  uint64_t end;
  if (t->byte_offset > (uint64_t)PTRDIFF_MAX ||
      __builtin_add_overflow(t->byte_offset, out->above, &end) || end > (uint64_t)PTRDIFF_MAX)
    return MP_SPAN_OFFSET_TOO_LARGE;
  uint64_t first;
  if (__builtin_add_overflow((uint64_t)(uintptr_t)t->data, t->byte_offset, &first) ||
      first < out->below || __builtin_add_overflow(first, out->above, &end))
    return MP_SPAN_WRAPS;
#if UINTPTR_MAX < UINT64_MAX
  if (end > UINTPTR_MAX) return MP_SPAN_WRAPS;
#endif
  return MP_SPAN_OK;
}

/* "[4294967296, 4294967296]": |count| values into |buffer| (cut short if it is too small). */
static inline const char* mp_span__list(const int64_t* values, int32_t count, char* buffer,
                                        size_t capacity) {
  int wrote = snprintf(buffer, capacity, "[");
  size_t n = wrote > 0 ? (size_t)wrote : 0;
  for (int32_t d = 0; d < count && n < capacity; ++d) {
    wrote = snprintf(buffer + n, capacity - n, d ? ", %lld" : "%lld", (long long)values[d]);
    if (wrote < 0) return buffer;
    n += (size_t)wrote;
  }
  if (n + 1 < capacity) {
    buffer[n] = ']';
    buffer[n + 1] = '\0';
  }
  return buffer;
}

/* Why |t| broke the rule |status| names (from mp_tensor_span or mp_tensor_layout, with the
 * |span| it filled), as the end of a sentence about the array: "its shape [...] of 4-byte
 * elements is more than 9223372036854775807 bytes (PTRDIFF_MAX), ..."; 400 bytes always hold
 * it. Returns |buffer|. */
static inline const char* mp_tensor_span_describe(const DLTensor* t, mp_span_status_t status,
                                                  const mp_tensor_span_t* span, char* buffer,
                                                  size_t capacity) {
  char shape[120], strides[120]; /* with the text around them, within 400 bytes */
  const long long limit = (long long)PTRDIFF_MAX;
  const unsigned long long itemsize = span->itemsize;
  const unsigned long long data = (unsigned long long)(uintptr_t)t->data;
  const unsigned long long offset = t->byte_offset;
  if (capacity == 0) return buffer;
  switch (status) {
    case MP_SPAN_OK:
      snprintf(buffer, capacity, "it is a usable array");
      break;
    case MP_SPAN_NO_SHAPE:
      snprintf(buffer, capacity, "it has %d dimensions%s", (int)t->ndim,
               t->ndim > 0 ? " and no shape" : "");
      break;
    case MP_SPAN_NO_ELEMENT_SIZE:
      snprintf(buffer, capacity, "its elements have no size (a dtype of %u bits and %u lanes)",
               (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
      break;
    case MP_SPAN_NEGATIVE_EXTENT:
      snprintf(buffer, capacity, "dimension %d is negative (%lld)", (int)span->dim,
               (long long)t->shape[span->dim]);
      break;
    case MP_SPAN_TOO_LARGE:
      snprintf(buffer, capacity,
               "its shape %s of %llu-byte elements is more than %lld bytes (PTRDIFF_MAX), more "
               "than an array can address",
               mp_span__list(t->shape, t->ndim, shape, sizeof shape), itemsize, limit);
      break;
    case MP_SPAN_STRIDES_TOO_LARGE:
      snprintf(buffer, capacity,
               "its strides %s over shape %s (of %llu-byte elements) reach more than %lld bytes "
               "(PTRDIFF_MAX)",
               mp_span__list(t->strides, t->ndim, strides, sizeof strides),
               mp_span__list(t->shape, t->ndim, shape, sizeof shape), itemsize, limit);
      break;
    case MP_SPAN_OFFSET_TOO_LARGE:
      if (offset > (unsigned long long)limit)
        snprintf(buffer, capacity, "its byte_offset %llu is more than %lld (PTRDIFF_MAX)",
                 offset, limit);
      else
        snprintf(buffer, capacity,
                 "its byte_offset %llu plus the %llu bytes its elements reach is more than %lld "
                 "(PTRDIFF_MAX)",
                 offset, (unsigned long long)span->above, limit);
      break;
    case MP_SPAN_WRAPS: {
      unsigned long long first;
      if (__builtin_add_overflow(data, offset, &first))
        snprintf(buffer, capacity,
                 "its data pointer 0x%llx plus byte_offset %llu wraps around the address space",
                 data, offset);
      else if (first < span->below)
        snprintf(buffer, capacity,
                 "its elements start %llu bytes below data 0x%llx + byte_offset %llu (negative "
                 "strides), below address 0",
                 (unsigned long long)span->below, data, offset);
      else
        snprintf(buffer, capacity,
                 "its elements end %llu bytes past data 0x%llx + byte_offset %llu, past the end "
                 "of the address space",
                 (unsigned long long)span->above, data, offset);
      break;
    }
    default:
      snprintf(buffer, capacity, "it breaks an unknown rule (%d)", (int)status);
      break;
  }
  return buffer;
}

#endif /* MODPACK_TENSOR_SPAN_H_ */
