/*
 * modpack/kinds/weights.h — the "weights" kind's payload: a reference to a weight file
 * (modpack/weights.h) instead of the arrays themselves. It names the file (found beside the
 * library, or where the caller says), the file's content digest, and the arrays this module
 * hands out with the dtype and shape the library was exported with, so that a different file
 * is refused before any host code runs, naming the first difference.
 *
 *   header (mp_weights_ref_header_v1_t, 64 bytes)
 *   array_count records (mp_weights_ref_record_v1_t, 32 bytes each)
 *   shapes (u64 per dimension), array names, the file name
 *
 * Little-endian; the reader decodes fields at their offsetof(); offsets are from the start of
 * the payload. The Python writer (modpack/modules/weights.py) checks its structs against these.
 */
#ifndef MODPACK_KINDS_WEIGHTS_H_
#define MODPACK_KINDS_WEIGHTS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_WEIGHTS_REF_VERSION = 1,
  /* A weight file's name: a file name (no '/'), 1..255 bytes. */
  MP_WEIGHTS_REF_MAX_FILE_NAME = 255,
};

typedef struct {
  uint32_t version;  /* MP_WEIGHTS_REF_VERSION */
  uint32_t reserved; /* 0 */
  uint8_t digest[32];         /* the weight file's content digest (modpack/weights.h) */
  uint64_t file_name_offset;  /* the weight file's name, UTF-8 without '/' or NUL */
  uint32_t file_name_size;
  uint32_t reserved2; /* 0 */
  uint64_t array_count;
} mp_weights_ref_header_v1_t;

typedef struct {
  uint64_t name_offset; /* an array of the file, 1..MP_WEIGHTS_MAX_NAME bytes */
  uint32_t name_size;
  uint8_t dtype_code; /* the dtype and shape it was exported with */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  uint32_t ndim;
  uint32_t reserved; /* 0 */
  uint64_t shape_offset;
} mp_weights_ref_record_v1_t;
/* MP_API_END */

/* The kind's type key. */
#define MP_WEIGHTS_KIND "weights"

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_weights_ref_header_v1_t) == 64, "weights reference header");
_Static_assert(sizeof(mp_weights_ref_record_v1_t) == 32, "weights reference record");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_WEIGHTS_H_ */
