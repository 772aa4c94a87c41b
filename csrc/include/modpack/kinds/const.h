/*
 * modpack/kinds/const.h — the "const" kind's payload: named arrays (weights, constants) that
 * loading hands out as zero-copy read-only views into the mapped library.
 *
 *   header (mp_const_header_v1_t, 16 bytes)
 *   array_count records (mp_const_record_v1_t, 48 bytes each)
 *   shapes (u64 per dimension), names, then the array data, each array's data at a multiple
 *   of MP_CONST_DATA_ALIGNMENT from the start of the payload
 *
 * Little-endian; the reader decodes fields at their offsetof() and never casts. The Python
 * writer (modpack/modules/const/) checks its struct formats against these structs.
 */
#ifndef MODPACK_KINDS_CONST_H_
#define MODPACK_KINDS_CONST_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_CONST_PAYLOAD_VERSION = 1,
  MP_CONST_MAX_NDIM = 32,
  MP_CONST_DATA_ALIGNMENT = 64,
  MP_CONST_MAX_NAME = 4096,
};

typedef struct {
  uint32_t version;  /* MP_CONST_PAYLOAD_VERSION */
  uint32_t reserved; /* must be 0 */
  uint64_t array_count;
} mp_const_header_v1_t;

typedef struct {
  uint64_t name_offset; /* from the start of the payload */
  uint32_t name_size;   /* 1..MP_CONST_MAX_NAME bytes, no NUL */
  uint8_t dtype_code;   /* DLPack dtype */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  uint32_t ndim;         /* <= MP_CONST_MAX_NDIM */
  uint32_t reserved;     /* must be 0 */
  uint64_t shape_offset; /* ndim u64 extents */
  uint64_t data_offset;  /* a multiple of MP_CONST_DATA_ALIGNMENT */
  uint64_t data_size;    /* product(shape) * bits * lanes / 8 */
} mp_const_record_v1_t;
/* MP_API_END */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_const_header_v1_t) == 16, "const payload header must be 16 bytes");
_Static_assert(sizeof(mp_const_record_v1_t) == 48, "const array record must be 48 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_CONST_H_ */
