/* The payload of a "weights" module (modpack/kinds/weights.h), parsed: the weight files a
 * library refers to (one modpack weight file in version 1; in version 2 one or more files of
 * any format, the shards of one model), and the arrays the module hands out, each with the
 * dtype and shape the library was exported with and, for a file in another format, the
 * checksum and digest recorded of it. The payload is untrusted: every offset, count and size
 * is checked before it is used. */
#ifndef MODPACK_LIBRARY_WEIGHTS_REFERENCE_H_
#define MODPACK_LIBRARY_WEIGHTS_REFERENCE_H_

#include <stdbool.h>
#include <stdint.h>

#include "library/weights_binding.h"
#include "modpack/kinds/weights.h"
#include "modpack/modpack.h"
#include "modpack/weights.h"

typedef struct {
  char* name;
  DLDataType dtype; /* as the library was exported with */
  int32_t ndim;
  int64_t shape[MP_WEIGHTS_MAX_NDIM];
  uint32_t file;      /* the index of its file */
  uint64_t checksum;  /* recorded of it: a file in another format carries none itself */
  uint8_t digest[32];
} mp_weights_ref_array_t;

typedef struct {
  char* name; /* the file's name: no '/' */
  mp_weights_format_t format;
  uint8_t digest[32];         /* its content digest, or its header's SHA-256 */
  uint8_t records_digest[32]; /* another format: the SHA-256 of what was recorded of it */
} mp_weights_ref_file_t;

typedef struct {
  uint64_t file_count;
  mp_weights_ref_file_t* files;
  uint64_t count;
  mp_weights_ref_array_t* arrays; /* in the order the module hands them out */
  uint64_t* by_name;              /* their indices sorted by name; names are unique */
} mp_weights_ref_t;

/* Parse |payload| into |out| (freed with mp_weights_ref_free, also on failure). */
mp_status_t mp_weights_ref_parse(mp_const_byte_span_t payload, mp_weights_ref_t* out);
void mp_weights_ref_free(mp_weights_ref_t* ref);

/* Sort the arrays by name for lookups (mp_weights_ref_find); refuse two of one name. */
mp_status_t mp_weights_ref_index_names(mp_weights_ref_t* ref);
/* The index of the array called |name|, or UINT64_MAX. */
uint64_t mp_weights_ref_find(const mp_weights_ref_t* ref, const char* name);

/* What the reference says of file |file| for a binding: its name, digest, the arrays read
 * from it and, for another format, what was recorded of them. The arrays it points to live in
 * |specs| and |records| (each ref->count long, the caller's), valid as long as |ref|. */
void mp_weights_ref_of_file(const mp_weights_ref_t* ref, uint64_t file, mp_array_spec_t* specs,
                            mp_weight_record_t* records, mp_weights_reference_t* out);

#endif /* MODPACK_LIBRARY_WEIGHTS_REFERENCE_H_ */
