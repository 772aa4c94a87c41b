/* Blob indexes read ahead of dlopen (files/blob_index.h). */
#include "files/blob_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/blob.h"
#include "core/bytes.h"
#include "core/error.h"
#include "files/file.h"

enum { MAX_PAYLOAD_READ = 64 << 20 };

mp_status_t mp_blob_index_read(int fd, const mp_seal_v1_t* seal, const char* path,
                               uint8_t** out_index, mp_blob_t** out_blob) {
  *out_index = NULL;
  *out_blob = NULL;
  if (seal->blob_size == 0) return mp_errorf(MP_ERR_NOT_FOUND, "'%s' has no blob", path);
  uint8_t header[MP_FORMAT_HEADER_SIZE];
  if (seal->blob_size < sizeof header ||
      !mp_file_read_at(fd, header, sizeof header, seal->blob_offset))
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its blob header cannot be read", path);
  uint64_t index_size = mp_load_le64(header + offsetof(mp_format_header_v1_t, index_size));
  if (index_size < sizeof header || index_size > seal->blob_size)
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its blob index claims %" PRIu64 " bytes",
                     path, index_size);
  if (index_size > MP_BLOB_INDEX_MAX)
    return mp_errorf(MP_ERR_FORMAT, "'%s': its blob index of %" PRIu64 " bytes is too large to "
                     "read ahead", path, index_size);
  uint8_t* index = malloc((size_t)index_size);
  if (!index) return mp_out_of_memory("a blob index");
  if (!mp_file_read_at(fd, index, (size_t)index_size, seal->blob_offset)) {
    free(index);
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  }
  mp_status_t status = mp_blob_parse_index((mp_const_byte_span_t){index, index_size},
                                           seal->blob_size, out_blob);
  if (status != MP_OK) {
    free(index);
    return mp_error_prefix(status, "'%s': %s", path, MP_BLOB_SYMBOL);
  }
  *out_index = index;
  return MP_OK;
}

mp_status_t mp_blob_payload_read(int fd, const mp_seal_v1_t* seal, const mp_blob_t* blob,
                                 const mp_blob_module_t* module, const char* path,
                                 uint8_t** out_payload) {
  *out_payload = NULL;
  if (module->payload_size > MAX_PAYLOAD_READ)
    return mp_errorf(MP_ERR_FORMAT, "'%s': a %s payload of %" PRIu64 " bytes is too large", path,
                     module->type_key, module->payload_size);
  uint8_t* payload = malloc(module->payload_size ? (size_t)module->payload_size : 1);
  if (!payload) return mp_out_of_memory("a payload");
  if (!mp_file_read_at(fd, payload, (size_t)module->payload_size,
                       seal->blob_offset + module->payload_offset)) {
    free(payload);
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  }
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  if ((info.flags & MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS) &&
      mp_checksum((mp_const_byte_span_t){payload, module->payload_size}) !=
          module->payload_checksum) {
    free(payload);
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its %s payload does not match its checksum",
                     path, module->type_key);
  }
  *out_payload = payload;
  return MP_OK;
}
