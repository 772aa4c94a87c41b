/*
 * modpack/weights.h — the weight file format, version 1: named arrays in a file of their own,
 * outside the code, that libraries refer to by name and content digest (the `weights` kind,
 * modpack/kinds/weights.h), that several libraries and processes map once, and that a loaded
 * tree can swap for another. docs/format.md describes it byte by byte.
 *
 *   [header 64 B][array_count records x 96 B][shapes][names][zero padding]  <- index_size
 *   [zero padding to data_offset][array data, each at a multiple of `alignment`, zero padding
 *   between]                                                           <- data_offset + data_size
 *   [seal: mp_seal_v1_t (format.h), 80 B][optional signature block (format.h)]
 *
 * Two digests, for two jobs:
 * - integrity, as in a library: XXH3-64 of every array (`checksum`), the index checksum, and
 *   the seal over every byte outside the data region;
 * - identity and authenticity: each array's `digest` is its chunked SHA-256 (below), and the
 *   file's *content digest* is the SHA-256 of the index, bytes [0, index_size), which holds
 *   every name, dtype, shape, offset and array digest. So one 32-byte value names the whole
 *   content; a library binds it, a signature signs it, and each array can be checked on its
 *   own (on first use) or all of them in parallel.
 *
 * Chunked SHA-256 of n bytes: the SHA-256 of the concatenated SHA-256 digests of its
 * MP_WEIGHTS_DIGEST_CHUNK-byte chunks (the last one shorter; none for n = 0, which gives the
 * SHA-256 of nothing). Chunks hash on as many threads as there are cores.
 *
 * The seal's fields for a weight file: blob_offset 0, blob_vaddr 0, blob_size data_offset +
 * data_size, payloads_offset data_offset, payloads_size data_size. A signature record signs
 * MP_WEIGHTS_SIGNATURE_CONTEXT followed by the content digest (not the SHA-256 of the file, as
 * a library's does), so a signed file's arrays can be verified one at a time.
 *
 * Little-endian; the reader decodes fields at their offsetof() and never casts. The Python
 * writer (modpack/weights/) checks its struct formats against these structs.
 */
#ifndef MODPACK_WEIGHTS_H_
#define MODPACK_WEIGHTS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_WEIGHTS_FORMAT_MAJOR = 1,
  MP_WEIGHTS_FORMAT_MINOR = 0,
  MP_WEIGHTS_HEADER_SIZE = 64,
  MP_WEIGHTS_RECORD_SIZE = 96,
  /* Every array starts at a multiple of the file's alignment, at least this (a power of two). */
  MP_WEIGHTS_MIN_ALIGNMENT = 64,
  MP_WEIGHTS_MAX_ALIGNMENT = 1 << 21,
  MP_WEIGHTS_MAX_NDIM = 32,
  MP_WEIGHTS_MAX_NAME = 4096,
  MP_WEIGHTS_DIGEST_SIZE = 32,
  /* The chunk of the chunked SHA-256 that array digests use. */
  MP_WEIGHTS_DIGEST_CHUNK = 1 << 22,
};

typedef struct {
  uint8_t magic[8]; /* MP_WEIGHTS_MAGIC */
  uint16_t format_major;
  uint16_t format_minor;
  uint32_t header_size;  /* >= 64; a later minor may grow it */
  uint64_t index_size;   /* header, records, shapes, names and zero padding: a multiple of 64 */
  uint64_t array_count;  /* records */
  uint64_t data_offset;  /* the data region: a multiple of `alignment`, >= index_size */
  uint64_t data_size;    /* to the end of the last array */
  uint32_t alignment;    /* of every array's data_offset: a power of two >= 64 */
  uint32_t flags;        /* none defined: unknown bits are refused as incompatible */
  uint64_t index_checksum; /* XXH3-64 of [0, index_size) with this field read as zero */
} mp_weights_header_v1_t;

typedef struct {
  uint64_t name_offset;  /* from the start of the file, inside the index */
  uint32_t name_size;    /* 1..MP_WEIGHTS_MAX_NAME bytes of UTF-8, no NUL; names are unique */
  uint8_t dtype_code;    /* DLPack dtype */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  uint32_t ndim;         /* <= MP_WEIGHTS_MAX_NDIM */
  uint32_t flags;        /* 0 */
  uint64_t shape_offset; /* ndim u64 extents, from the start of the file, inside the index */
  uint64_t data_offset;  /* from the start of the file: a multiple of the alignment */
  uint64_t data_size;    /* product(shape) * bits * lanes / 8 */
  uint64_t checksum;     /* XXH3-64 of the data */
  uint8_t digest[32];    /* chunked SHA-256 of the data */
  uint64_t reserved;     /* 0 */
} mp_weights_record_v1_t;
/* MP_API_END */

/* "\x89MPW\r\n\x1a\n": like the blob's magic, catches text-mode mangling. */
#define MP_WEIGHTS_MAGIC "\x89MPW\r\n\x1a\n"
/* What a weight file's signature records sign, before its content digest. */
#define MP_WEIGHTS_SIGNATURE_CONTEXT "modpack weights signature v1\n"

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_weights_header_v1_t) == MP_WEIGHTS_HEADER_SIZE, "weights header");
_Static_assert(sizeof(mp_weights_record_v1_t) == MP_WEIGHTS_RECORD_SIZE, "weights record");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_WEIGHTS_H_ */
