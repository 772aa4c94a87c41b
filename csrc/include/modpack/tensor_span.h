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
 * An array's elements are bits * lanes bits each, laid out as DLPack 1.1 says:
 *   - an element of 8 bits or more is whole bytes (bits * lanes a multiple of 8: float32,
 *     float8_e4m3fn, float4_e2m1fn_x2, which is two 4-bit values in one byte);
 *   - an element under 8 bits (float4_e2m1fn, float6_e2m3fn, lanes 1) is packed: elements share
 *     bytes, the one at position i (the sum of index * stride, counted from the element at
 *     data + byte_offset) in bits [i * bits, (i + 1) * bits) of the bytes from there, counted
 *     from the least significant bit of the first byte (DLPack's "little bit-endian" rule: the
 *     first of two 4-bit values is the low nibble). N packed elements take ceil(N * bits / 8)
 *     bytes; a producer's padded layout (one value per byte,
 *     DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) is refused where the flag is seen, since a
 *     DLTensor alone cannot say it;
 *   - any other width (4 bits x 3 lanes: 12 bits) fits neither, and is refused.
 * An array is usable when
 *   - ndim >= 0, it has a shape when ndim > 0, and every extent is >= 0;
 *   - its elements have a size that packs: bits and lanes > 0, bits * lanes under 8 or a
 *     multiple of 8;
 *   - the product of its non-zero extents, and its bytes (that many elements), are at most
 *     PTRDIFF_MAX, also when another extent is 0 (numpy's rule: an empty array's other extents
 *     still size the rows code computes), so neither the product of the extents nor the byte
 *     size overflows, and an element's index fits in int64;
 *   - with strides: the bytes its elements reach below the first one (negative strides) and
 *     above it, the elements (extent - 1) * |stride| away summed over dimensions (dimensions
 *     of extent 0 or 1 reach nothing, whatever their stride) and sized by the rule above, and
 *     their total, are at most PTRDIFF_MAX;
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
  uint64_t itemsize; /* one element's bytes; 0 for packed elements (under a byte) */
  uint64_t elements; /* the product of the extents (0 for an empty array) */
  uint64_t nbytes;   /* the bytes of that many elements: the array's bytes when it is compact */
  uint64_t below;    /* bytes its elements reach below data + byte_offset (negative strides) */
  uint64_t above;    /* bytes from data + byte_offset to the end of its last element */
  uint32_t bits;     /* one element's bits: bits * lanes */
  int32_t dim;       /* the dimension a problem is in, or -1 */
} mp_tensor_span_t;

/* The rule an array breaks (in the order they are checked: MP_SPAN_BAD_PACKING right after
 * MP_SPAN_NO_ELEMENT_SIZE), or MP_SPAN_OK. */
typedef enum {
  MP_SPAN_OK = 0,
  MP_SPAN_NO_SHAPE,          /* ndim < 0, or ndim > 0 and no shape */
  MP_SPAN_NO_ELEMENT_SIZE,   /* 0 bits or 0 lanes */
  MP_SPAN_NEGATIVE_EXTENT,   /* shape[dim] < 0 */
  MP_SPAN_TOO_LARGE,         /* extents (up to dim), or their bytes, > PTRDIFF_MAX */
  MP_SPAN_STRIDES_TOO_LARGE, /* its strides reach more than PTRDIFF_MAX bytes */
  MP_SPAN_OFFSET_TOO_LARGE,  /* byte_offset, or it plus the bytes above, > PTRDIFF_MAX */
  MP_SPAN_WRAPS,             /* data + byte_offset, or the elements, leave the address space */
  MP_SPAN_BAD_PACKING,       /* bits * lanes over 8 and not whole bytes (4 bits x 3 lanes) */
} mp_span_status_t;

/* The bytes |count| elements of |bits| bits take: ceil(count * bits / 8), whole bytes per
 * element or packed, computed without the count * bits product (which can pass 2^64 for a
 * size that fits). 0 when it overflows 64 bits, else 1. */
static inline int mp_span__bytes(uint64_t count, uint64_t bits, uint64_t* out) {
  uint64_t bytes;
  if (__builtin_mul_overflow(count / 8, bits, &bytes)) return 0;
  return !__builtin_add_overflow(bytes, (count % 8 * bits + 7) / 8, out);
}

/* Element reaches along strides: 128 bits where the compiler has them (GCC and Clang on 64-bit
 * targets), else 64 (packed arrays reaching past 2^64 elements are then refused as too large). */
#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 mp_span__reach_t;
#else
typedef uint64_t mp_span__reach_t;
#endif

/* The layout alone (shape, dtype, strides), without data and byte_offset. Fills |out| (on a
 * failure, the dimension it is in and the element size). */
static inline mp_span_status_t mp_tensor_layout(const DLTensor* t, mp_tensor_span_t* out) {
  out->itemsize = out->elements = out->nbytes = out->below = out->above = 0;
  out->bits = 0;
  out->dim = -1;
  if (t->ndim < 0 || (t->ndim > 0 && !t->shape)) return MP_SPAN_NO_SHAPE;
  if (t->dtype.bits == 0 || t->dtype.lanes == 0) return MP_SPAN_NO_ELEMENT_SIZE;
  const uint64_t limit = (uint64_t)PTRDIFF_MAX;
  const uint64_t bits = (uint64_t)t->dtype.bits * t->dtype.lanes;
  out->bits = (uint32_t)bits;
  if (bits > 8 && bits % 8 != 0) return MP_SPAN_BAD_PACKING;
  const uint64_t itemsize = bits % 8 == 0 ? bits / 8 : 0;
  out->itemsize = itemsize;
  /* Whole bytes: the non-zero extents times the element size, as bytes (PTRDIFF_MAX at most);
   * packed: the non-zero extents, as elements (PTRDIFF_MAX at most, so their fewer bytes are
   * too). One multiplication per dimension either way: this runs on every call. */
  uint64_t size = itemsize ? itemsize : 1;
  int empty = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    const int64_t extent = t->shape[d];
    if (extent < 0) {
      out->dim = d;
      return MP_SPAN_NEGATIVE_EXTENT;
    }
    if (extent == 0) {
      empty = 1;
    } else if (__builtin_mul_overflow(size, (uint64_t)extent, &size) || size > limit) {
      out->dim = d;
      return MP_SPAN_TOO_LARGE;
    }
  }
  if (empty) return MP_SPAN_OK; /* it reaches no byte, whatever its strides */
  uint64_t bytes = size;
  if (!itemsize && !mp_span__bytes(size, bits, &bytes)) return MP_SPAN_TOO_LARGE; /* (never) */
  out->nbytes = bytes;
  out->elements = itemsize ? bytes / itemsize : size;
  if (!t->strides) {
    out->above = bytes;
    return MP_SPAN_OK;
  }
  /* Reaches in elements, wider than 64 bits where the compiler has them: packed elements (1 to
   * 7 bits) can reach past 2^64 elements and still within PTRDIFF_MAX bytes. */
  mp_span__reach_t below = 0, above = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    const uint64_t last = (uint64_t)t->shape[d] - 1;
    if (last == 0) continue;
    const int64_t stride = t->strides[d];
    const uint64_t magnitude = stride < 0 ? 0 - (uint64_t)stride : (uint64_t)stride;
    mp_span__reach_t* side = stride < 0 ? &below : &above;
    mp_span__reach_t reach;
    if (__builtin_mul_overflow((mp_span__reach_t)last, (mp_span__reach_t)magnitude, &reach) ||
        __builtin_add_overflow(*side, reach, side)) {
      out->dim = d;
      return MP_SPAN_STRIDES_TOO_LARGE;
    }
  }
  /* Below: the lowest element starts below * bits bits under the first one; above: the
   * highest one ends (above + 1) * bits bits past its start; each rounded up to bytes. */
  mp_span__reach_t low, high;
  if (__builtin_mul_overflow(below, (mp_span__reach_t)bits, &low) ||
      __builtin_add_overflow(above, (mp_span__reach_t)1, &high) ||
      __builtin_mul_overflow(high, (mp_span__reach_t)bits, &high))
    return MP_SPAN_STRIDES_TOO_LARGE;
  low = low / 8 + (low % 8 != 0);
  high = high / 8 + (high % 8 != 0);
  if (low > limit || high > limit || low + high > limit) return MP_SPAN_STRIDES_TOO_LARGE;
  out->below = (uint64_t)low;
  out->above = (uint64_t)high;
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
  char element[32];              /* "4-byte", "4-bit packed" */
  const long long limit = (long long)PTRDIFF_MAX;
  if (span->itemsize)
    snprintf(element, sizeof element, "%llu-byte", (unsigned long long)span->itemsize);
  else
    snprintf(element, sizeof element, "%u-bit packed", (unsigned)span->bits);
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
               "its shape %s of %s elements is more than %lld %s (PTRDIFF_MAX), more than an "
               "array can address",
               mp_span__list(t->shape, t->ndim, shape, sizeof shape), element, limit,
               span->itemsize ? "bytes" : "elements or bytes");
      break;
    case MP_SPAN_STRIDES_TOO_LARGE:
      snprintf(buffer, capacity,
               "its strides %s over shape %s (of %s elements) reach more than %lld bytes "
               "(PTRDIFF_MAX)",
               mp_span__list(t->strides, t->ndim, strides, sizeof strides),
               mp_span__list(t->shape, t->ndim, shape, sizeof shape), element, limit);
      break;
    case MP_SPAN_BAD_PACKING:
      snprintf(buffer, capacity,
               "its elements are %u bits (%u bits x %u lanes), which do not pack: DLPack packs an "
               "element under a byte into shared bytes (two float4_e2m1fn per byte) and one of a "
               "byte or more must be whole bytes (float4_e2m1fn_x2: 4 bits x 2 lanes)",
               (unsigned)span->bits, (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
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
