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
 * Version 2 refers to one or more files, each modpack's own or in another project's format
 * (safetensors, GGUF: read in place, weights/foreign_index.h in the runtime), as a model
 * sharded over several files is:
 *
 *   header (mp_weights_ref_header_v2_t, 64 bytes)
 *   file_count files (mp_weights_ref_file_v2_t, 64 bytes each)
 *   array_count records (mp_weights_ref_record_v2_t, 96 bytes each)
 *   shapes, array names, file names
 *
 * A file's digest is, for modpack's format, its content digest; for another format, the
 * SHA-256 of its header (the bytes that say every array's name, type, shape and place), and
 * since such a file records no checksums or digests of its arrays, each array's record carries
 * them: its XXH3-64 and chunked SHA-256 (modpack/weights.h), so that the file is checked, and
 * vouched for by a signed library, as a modpack weight file is. Version 1 stays what modpack
 * writes for one modpack weight file.
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
  MP_WEIGHTS_REF_VERSION_FILES = 2, /* several files, any format (below) */
  /* The most files one weights module refers to (the shards of one model). */
  MP_WEIGHTS_REF_MAX_FILES = 4096,
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

/* The formats a weight file may be in. */
typedef enum {
  MP_WEIGHTS_FORMAT_MODPACK = 0,     /* modpack/weights.h */
  MP_WEIGHTS_FORMAT_SAFETENSORS = 1, /* Hugging Face's safetensors */
  MP_WEIGHTS_FORMAT_GGUF = 2,        /* ggml's GGUF, version 2 or 3 */
} mp_weights_format_t;

typedef struct {
  uint32_t version;    /* MP_WEIGHTS_REF_VERSION_FILES */
  uint32_t file_count; /* 1..MP_WEIGHTS_REF_MAX_FILES */
  uint64_t array_count;
  uint8_t reserved[48]; /* 0 */
} mp_weights_ref_header_v2_t;

typedef struct {
  uint8_t digest[32];        /* see above: content digest, or the SHA-256 of the header */
  uint64_t name_offset;      /* the file's name, UTF-8 without '/' or NUL */
  uint32_t name_size;        /* 1..MP_WEIGHTS_REF_MAX_FILE_NAME */
  uint32_t format;           /* mp_weights_format_t */
  uint8_t reserved[16];      /* 0 */
} mp_weights_ref_file_v2_t;

typedef struct {
  uint64_t name_offset; /* an array of its file, 1..MP_WEIGHTS_MAX_NAME bytes */
  uint32_t name_size;
  uint8_t dtype_code; /* the dtype and shape it was exported with */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  uint32_t ndim;
  uint32_t file; /* the index of its file */
  uint64_t shape_offset;
  uint64_t checksum;  /* XXH3-64 of its bytes (another format; 0 for modpack's, which has its own) */
  uint8_t digest[32]; /* chunked SHA-256 of its bytes (likewise) */
  uint8_t reserved[24]; /* 0 */
} mp_weights_ref_record_v2_t;
/* MP_API_END */

/* The kind's type key. */
#define MP_WEIGHTS_KIND "weights"

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_weights_ref_header_v1_t) == 64, "weights reference header");
_Static_assert(sizeof(mp_weights_ref_record_v1_t) == 32, "weights reference record");
_Static_assert(sizeof(mp_weights_ref_header_v2_t) == 64, "weights reference header, v2");
_Static_assert(sizeof(mp_weights_ref_file_v2_t) == 64, "weights reference file, v2");
_Static_assert(sizeof(mp_weights_ref_record_v2_t) == 96, "weights reference record, v2");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_WEIGHTS_H_ */
