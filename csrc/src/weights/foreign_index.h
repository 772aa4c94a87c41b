/* The index of a weight file in another project's format — safetensors (weights/safetensors.c)
 * or GGUF (weights/gguf.c) — read from the file's header into private memory and validated
 * there, in one form: what modpack hands out of each array (a DLPack dtype and shape over a
 * byte range of the file) and what the format itself says of it (its type name, its blocks).
 *
 * A parser trusts nothing of the file: every size is checked against the file before it is
 * used, every count before anything is allocated for it, the header is read once and bounded
 * (a header claiming more than its format allows is refused before it is read), and every
 * array's range must lie in the file's data region, disjoint from the others. A refusal is
 * MP_ERR_FORMAT (MP_ERR_INCOMPATIBLE for a format version or a type this runtime does not
 * read) whose message names the file, the field and, for an array, its name. What the format
 * says of the data (its values) is not read: the checks of the data are weights/weight_file.c's.
 *
 * Block-quantized types (GGUF's Q8_0, Q4_0, Q4_K, Q6_K, ...) have no DLPack dtype: such an
 * array is handed out as its bytes, a uint8 array of shape [rows..., blocks per row, block
 * bytes], with the format's type and block size beside it (type_name, block_elements,
 * block_bytes) and its shape in elements (logical_shape), for host code and inspect. */
#ifndef MODPACK_WEIGHTS_FOREIGN_INDEX_H_
#define MODPACK_WEIGHTS_FOREIGN_INDEX_H_

#include <stdint.h>

#include "modpack/kinds/weights.h" /* mp_weights_format_t */
#include "modpack/modpack.h"
#include "modpack/weights.h"

enum {
  /* The longest safetensors header read (its JSON): a larger claim is refused unread, as the
   * safetensors library itself refuses headers over 100 MB. */
  MP_SAFETENSORS_MAX_HEADER = 100000000,
  /* The longest GGUF header read (metadata and tensor infos; tokenizer vocabularies make it
   * tens of MB in real models). */
  MP_GGUF_MAX_HEADER = 256 << 20,
  MP_FOREIGN_MAX_TYPE_NAME = 16,
};

typedef struct {
  char* name; /* NUL-terminated UTF-8, 1..MP_WEIGHTS_MAX_NAME bytes, unique in the file */
  /* As modpack hands it out: a DLPack dtype and a shape whose bytes are exactly |size|
   * (uint8 [..., blocks, block_bytes] for a block-quantized type). */
  DLDataType dtype;
  int32_t ndim;
  int64_t shape[MP_WEIGHTS_MAX_NDIM];
  uint64_t offset; /* of its first byte, from the start of the file */
  uint64_t size;   /* of its bytes */
  /* As the format says it: its type's name ("F32", "BF16", "Q4_K"), the type's number in the
   * format (GGUF's ggml type; safetensors: 0), elements and bytes per block (1 and the element
   * size for an unblocked type), and its shape in elements (GGUF's dims, innermost last). */
  char type_name[MP_FOREIGN_MAX_TYPE_NAME];
  uint32_t type_id;
  uint32_t block_elements, block_bytes;
  int32_t logical_ndim;
  int64_t logical_shape[MP_WEIGHTS_MAX_NDIM];
} mp_foreign_array_t;

typedef struct {
  mp_weights_format_t format;
  uint32_t version;     /* the format's version (GGUF: 2 or 3; safetensors: 0) */
  uint64_t header_size; /* the header is the file's bytes [0, header_size): what identifies
                         * its contents (names, types, shapes, ranges), hashed as its digest */
  /* Those bytes, exactly as parsed (the parser's private copy, kept): the digest that binds
   * the file is taken over them, never over a second read a writer could have changed. */
  uint8_t* header;
  uint64_t data_offset; /* the data region: [data_offset, data_offset + data_size) */
  uint64_t data_size;
  uint32_t alignment;   /* what the format aligns arrays to (safetensors: 8, GGUF: its
                         * general.alignment, 32 by default) */
  uint64_t count;
  mp_foreign_array_t* arrays; /* in the order of their offsets */
  /* The format's own metadata as a JSON object ({} when none): safetensors' __metadata__
   * (string values), GGUF's key-value pairs (typed; arrays of more than 64 elements as
   * {"type": ..., "count": n} with their first 64). NUL-terminated. */
  char* metadata_json;
} mp_foreign_index_t;

/* The index of the safetensors file open as |fd| (|file_size| bytes, |path| in messages),
 * read from its header. |head|: the file's first bytes, read already by the caller (telling
 * the format reads a page), taken instead of reading them again; empty for none. Either way
 * the header is parsed from one private copy of its bytes. On success the caller frees *out
 * with mp_foreign_index_free. */
mp_status_t mp_safetensors_read_index(int fd, uint64_t file_size, const char* path,
                                      mp_const_byte_span_t head, mp_foreign_index_t* out);

/* The same for a GGUF file. */
mp_status_t mp_gguf_read_index(int fd, uint64_t file_size, const char* path,
                               mp_const_byte_span_t head, mp_foreign_index_t* out);

void mp_foreign_index_free(mp_foreign_index_t* index);

#endif /* MODPACK_WEIGHTS_FOREIGN_INDEX_H_ */
