/* Reading a weight file in another project's format (safetensors, GGUF) into a weight file
 * object (weights/weight_file_state.h): its index parsed from its header by the format's reader
 * (weights/foreign_index.h), the content digest taken over exactly the header bytes parsed,
 * and what a library recorded of its arrays (their checksums and digests, which such a file
 * does not carry) attached by name. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif
#include <stdlib.h>
#include <string.h>

#include "core/crypto.h"
#include "core/error.h"
#include "weights/weight_file_state.h"

mp_status_t mp_weight_file_read_foreign(mp_weight_file_t* f, int fd, const char* path,
                                        mp_weights_format_t format, mp_const_byte_span_t head,
                                        const mp_weight_record_t* records, uint64_t count) {
  f->format = format;
  mp_foreign_index_t* x = &f->foreign;
  MP_RETURN_IF_ERROR(format == MP_WEIGHTS_FORMAT_GGUF
                         ? mp_gguf_read_index(fd, f->file_size, path, head, x)
                         : mp_safetensors_read_index(fd, f->file_size, path, head, x));
  if (!x->header || x->header_size == 0)
    return mp_errorf(MP_ERR_INTERNAL, "'%s': the reader kept no header", path);
  f->index_size = x->header_size;
  MP_RETURN_IF_ERROR(mp_crypto_sha256(x->header, x->header_size, f->digest));
  f->alignment = x->alignment;
  f->data_offset = x->data_offset;
  f->data_size = x->data_size;
  f->count = x->count;
  f->arrays = calloc(f->count ? f->count : 1, sizeof *f->arrays);
  f->by_name = malloc((f->count ? f->count : 1) * sizeof *f->by_name);
  f->array_checked = calloc(f->count ? f->count : 1, sizeof *f->array_checked);
  if (!f->arrays || !f->by_name || !f->array_checked)
    return mp_out_of_memory("a weight file's arrays");
  for (uint64_t i = 0; i < f->count; ++i) {
    const mp_foreign_array_t* from = &x->arrays[i];
    mp_weight_array_t* a = &f->arrays[i];
    if (!(a->name = strdup(from->name))) return mp_out_of_memory("an array name");
    a->tensor = (DLTensor){NULL, {kDLCPU, 0}, from->ndim, from->dtype, (int64_t*)from->shape,
                           NULL, 0};
    a->offset = from->offset;
    a->size = from->size;
    a->foreign = from;
  }
  MP_RETURN_IF_ERROR(mp_weight_file_index_names(f, path));
  /* Records naming arrays the file lacks are left to the caller's comparison of the arrays
   * the library reads with the file's, which names the first difference. */
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t i = mp_weight_file_find(f, records[k].name);
    if (i == UINT64_MAX) continue;
    f->arrays[i].recorded = true;
    f->arrays[i].checksum = records[k].checksum;
    memcpy(f->arrays[i].digest, records[k].digest, 32);
  }
  return MP_OK;
}
