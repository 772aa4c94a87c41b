/* The "weights" payload, parsed (library/weights_reference.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "library/weights_reference.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/crypto.h"
#include "core/dtype.h"
#include "core/error.h"

#define V1_HEADER(field) offsetof(mp_weights_ref_header_v1_t, field)
#define V1_RECORD(field) offsetof(mp_weights_ref_record_v1_t, field)
#define V2_HEADER(field) offsetof(mp_weights_ref_header_v2_t, field)
#define V2_FILE(field) offsetof(mp_weights_ref_file_v2_t, field)
#define V2_RECORD(field) offsetof(mp_weights_ref_record_v2_t, field)

void mp_weights_ref_free(mp_weights_ref_t* ref) {
  for (uint64_t i = 0; ref->files && i < ref->file_count; ++i) free(ref->files[i].name);
  for (uint64_t i = 0; ref->arrays && i < ref->count; ++i) free(ref->arrays[i].name);
  free(ref->files);
  free(ref->arrays);
  free(ref->by_name);
  memset(ref, 0, sizeof *ref);
}

/* A string of the payload: |size| bytes at |offset|, in bounds, UTF-8 without NUL. */
static char* payload_string(mp_const_byte_span_t p, uint64_t offset, uint64_t size) {
  if (size == 0 || !mp_in_bounds(offset, size, p.size) || memchr(p.data + offset, 0, size) ||
      mp_utf8_invalid_at(p.data + offset, size) < size)
    return NULL;
  char* s = malloc(size + 1);
  if (s) {
    memcpy(s, p.data + offset, size);
    s[size] = '\0';
  }
  return s;
}

static bool all_zero(const uint8_t* bytes, size_t size) {
  for (size_t i = 0; i < size; ++i)
    if (bytes[i]) return false;
  return true;
}

/* A file's name: a file name (no '/', not "." or ".."), 1..MP_WEIGHTS_REF_MAX_FILE_NAME bytes. */
static mp_status_t file_name(mp_const_byte_span_t p, uint64_t offset, uint32_t size,
                             char** out) {
  *out = size <= MP_WEIGHTS_REF_MAX_FILE_NAME ? payload_string(p, offset, size) : NULL;
  if (!*out || strchr(*out, '/') || strcmp(*out, ".") == 0 || strcmp(*out, "..") == 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "weights payload: a weight file's name is not a file name of 1 to %d bytes",
                     MP_WEIGHTS_REF_MAX_FILE_NAME);
  return MP_OK;
}

/* The name, dtype and shape of array record |i| (the fields versions 1 and 2 share), at |r|. */
static mp_status_t array_fields(mp_const_byte_span_t p, uint64_t i, uint64_t name_offset,
                                uint32_t name_size, const uint8_t* dtype_at, uint32_t ndim,
                                uint64_t shape_offset, mp_weights_ref_array_t* a) {
  a->dtype = (DLDataType){dtype_at[0], dtype_at[1], mp_load_le16(dtype_at + 2)};
  if (name_size > MP_WEIGHTS_MAX_NAME || ndim > MP_WEIGHTS_MAX_NDIM ||
      !mp_in_bounds(shape_offset, (uint64_t)ndim * 8, p.size) || !mp_dtype_is_valid(a->dtype))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: array record %" PRIu64 " is malformed", i);
  a->ndim = (int32_t)ndim;
  for (uint32_t d = 0; d < ndim; ++d) {
    uint64_t extent = mp_load_le64(p.data + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX)
      return mp_errorf(MP_ERR_FORMAT,
                       "weights payload: array record %" PRIu64 " has a shape that overflows", i);
    a->shape[d] = (int64_t)extent;
  }
  a->name = payload_string(p, name_offset, name_size);
  if (!a->name)
    return mp_errorf(MP_ERR_FORMAT,
                     "weights payload: array record %" PRIu64 "'s name is out of bounds or not "
                     "UTF-8",
                     i);
  return MP_OK;
}

static mp_status_t parse_v1(mp_const_byte_span_t p, mp_weights_ref_t* ref) {
  if (mp_load_le32(p.data + V1_HEADER(reserved)) != 0 ||
      mp_load_le32(p.data + V1_HEADER(reserved2)) != 0)
    return mp_errorf(MP_ERR_FORMAT, "weights payload: reserved header fields are not 0");
  ref->files = calloc(1, sizeof *ref->files);
  if (!ref->files) return mp_out_of_memory("a weights module");
  ref->file_count = 1;
  mp_weights_ref_file_t* file = &ref->files[0];
  file->format = MP_WEIGHTS_FORMAT_MODPACK;
  memcpy(file->digest, p.data + V1_HEADER(digest), 32);
  MP_RETURN_IF_ERROR(file_name(p, mp_load_le64(p.data + V1_HEADER(file_name_offset)),
                               mp_load_le32(p.data + V1_HEADER(file_name_size)), &file->name));
  uint64_t count = mp_load_le64(p.data + V1_HEADER(array_count));
  uint64_t header = sizeof(mp_weights_ref_header_v1_t);
  if (count > (p.size - header) / sizeof(mp_weights_ref_record_v1_t))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: %" PRIu64 " array records do not fit in %"
                     PRIu64 " bytes", count, p.size);
  ref->arrays = calloc(count ? count : 1, sizeof *ref->arrays);
  if (!ref->arrays) return mp_out_of_memory("a weights module");
  for (; ref->count < count; ++ref->count) {
    const uint8_t* r = p.data + header + ref->count * sizeof(mp_weights_ref_record_v1_t);
    if (mp_load_le32(r + V1_RECORD(reserved)) != 0)
      return mp_errorf(MP_ERR_FORMAT, "weights payload: array record %" PRIu64 " is malformed",
                       ref->count);
    MP_RETURN_IF_ERROR(array_fields(p, ref->count, mp_load_le64(r + V1_RECORD(name_offset)),
                                    mp_load_le32(r + V1_RECORD(name_size)),
                                    r + V1_RECORD(dtype_code), mp_load_le32(r + V1_RECORD(ndim)),
                                    mp_load_le64(r + V1_RECORD(shape_offset)),
                                    &ref->arrays[ref->count]));
  }
  return MP_OK;
}

/* The SHA-256 of what was recorded of file |f|'s arrays (name, NUL, XXH3-64 little-endian,
 * chunked SHA-256, in the payload's order): what a file opened with those records is known
 * by (weights/weight_file.h). */
static mp_status_t records_digest(mp_weights_ref_t* ref, uint32_t f) {
  /* One buffer, hashed at once: a digest per update costs more than these bytes do. */
  enum { FIXED = 8 + 32 };
  uint64_t size = 0;
  for (uint64_t i = 0; i < ref->count; ++i)
    if (ref->arrays[i].file == f) size += strlen(ref->arrays[i].name) + 1 + FIXED;
  uint8_t* bytes = malloc(size ? (size_t)size : 1);
  if (!bytes) return mp_out_of_memory("a weights module's records");
  uint8_t* at = bytes;
  for (uint64_t i = 0; i < ref->count; ++i) {
    const mp_weights_ref_array_t* a = &ref->arrays[i];
    if (a->file != f) continue;
    size_t name = strlen(a->name) + 1;
    memcpy(at, a->name, name);
    mp_store_le64(at + name, a->checksum);
    memcpy(at + name + 8, a->digest, 32);
    at += name + FIXED;
  }
  mp_status_t status = mp_crypto_sha256(bytes, size, ref->files[f].records_digest);
  free(bytes);
  return status;
}

static int by_file_name(const void* a, const void* b, void* files) {
  const mp_weights_ref_file_t* f = files;
  return strcmp(f[*(const uint32_t*)a].name, f[*(const uint32_t*)b].name);
}

/* The files are named once each (sorted, not compared pairwise: a payload may hold many). */
static mp_status_t check_file_names(const mp_weights_ref_t* ref) {
  uint32_t* order = malloc(ref->file_count * sizeof *order);
  if (!order) return mp_out_of_memory("a weights module");
  for (uint32_t i = 0; i < ref->file_count; ++i) order[i] = i;
  qsort_r(order, ref->file_count, sizeof *order, by_file_name, ref->files);
  mp_status_t status = MP_OK;
  for (uint64_t i = 1; i < ref->file_count && status == MP_OK; ++i)
    if (strcmp(ref->files[order[i - 1]].name, ref->files[order[i]].name) == 0)
      status = mp_errorf(MP_ERR_FORMAT, "weights payload: the weight file '%s' is named twice",
                         ref->files[order[i]].name);
  free(order);
  return status;
}

static mp_status_t parse_v2(mp_const_byte_span_t p, mp_weights_ref_t* ref) {
  uint64_t header = sizeof(mp_weights_ref_header_v2_t);
  uint32_t file_count = mp_load_le32(p.data + V2_HEADER(file_count));
  uint64_t count = mp_load_le64(p.data + V2_HEADER(array_count));
  if (!all_zero(p.data + V2_HEADER(reserved), 48))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: reserved header fields are not 0");
  if (file_count == 0 || file_count > MP_WEIGHTS_REF_MAX_FILES ||
      file_count > (p.size - header) / sizeof(mp_weights_ref_file_v2_t))
    return mp_errorf(MP_ERR_FORMAT,
                     "weights payload: %u weight files (1 to %d, in %" PRIu64 " bytes)",
                     file_count, MP_WEIGHTS_REF_MAX_FILES, p.size);
  uint64_t records = header + (uint64_t)file_count * sizeof(mp_weights_ref_file_v2_t);
  if (count > (p.size - records) / sizeof(mp_weights_ref_record_v2_t))
    return mp_errorf(MP_ERR_FORMAT, "weights payload: %" PRIu64 " array records do not fit in %"
                     PRIu64 " bytes", count, p.size);
  ref->files = calloc(file_count, sizeof *ref->files);
  ref->arrays = calloc(count ? count : 1, sizeof *ref->arrays);
  if (!ref->files || !ref->arrays) return mp_out_of_memory("a weights module");
  for (; ref->file_count < file_count; ++ref->file_count) {
    const uint8_t* f = p.data + header + ref->file_count * sizeof(mp_weights_ref_file_v2_t);
    mp_weights_ref_file_t* file = &ref->files[ref->file_count];
    uint32_t format = mp_load_le32(f + V2_FILE(format));
    if (!all_zero(f + V2_FILE(reserved), 16))
      return mp_errorf(MP_ERR_FORMAT, "weights payload: file record %" PRIu64 " has reserved "
                       "bytes set", ref->file_count);
    if (format > MP_WEIGHTS_FORMAT_GGUF)
      return mp_errorf(MP_ERR_INCOMPATIBLE,
                       "weights payload: weight file format %u is not one this runtime reads "
                       "(modpack's, safetensors, GGUF): upgrade modpack",
                       format);
    file->format = (mp_weights_format_t)format;
    memcpy(file->digest, f + V2_FILE(digest), 32);
    MP_RETURN_IF_ERROR(file_name(p, mp_load_le64(f + V2_FILE(name_offset)),
                                 mp_load_le32(f + V2_FILE(name_size)), &file->name));
  }
  MP_RETURN_IF_ERROR(check_file_names(ref));
  for (; ref->count < count; ++ref->count) {
    const uint8_t* r = p.data + records + ref->count * sizeof(mp_weights_ref_record_v2_t);
    mp_weights_ref_array_t* a = &ref->arrays[ref->count];
    a->file = mp_load_le32(r + V2_RECORD(file));
    a->checksum = mp_load_le64(r + V2_RECORD(checksum));
    memcpy(a->digest, r + V2_RECORD(digest), 32);
    if (a->file >= file_count || !all_zero(r + V2_RECORD(reserved), 24))
      return mp_errorf(MP_ERR_FORMAT, "weights payload: array record %" PRIu64 " is malformed",
                       ref->count);
    MP_RETURN_IF_ERROR(array_fields(p, ref->count, mp_load_le64(r + V2_RECORD(name_offset)),
                                    mp_load_le32(r + V2_RECORD(name_size)),
                                    r + V2_RECORD(dtype_code), mp_load_le32(r + V2_RECORD(ndim)),
                                    mp_load_le64(r + V2_RECORD(shape_offset)), a));
  }
  for (uint32_t f = 0; f < file_count; ++f)
    if (ref->files[f].format != MP_WEIGHTS_FORMAT_MODPACK)
      MP_RETURN_IF_ERROR(records_digest(ref, f));
  return MP_OK;
}

static int by_name(const void* a, const void* b, void* ref) {
  const mp_weights_ref_t* r = ref;
  return strcmp(r->arrays[*(const uint64_t*)a].name, r->arrays[*(const uint64_t*)b].name);
}

mp_status_t mp_weights_ref_index_names(mp_weights_ref_t* ref) {
  free(ref->by_name);
  ref->by_name = malloc((ref->count ? ref->count : 1) * sizeof *ref->by_name);
  if (!ref->by_name) return mp_out_of_memory("a weights module");
  for (uint64_t i = 0; i < ref->count; ++i) ref->by_name[i] = i;
  qsort_r(ref->by_name, ref->count, sizeof *ref->by_name, by_name, ref);
  for (uint64_t i = 1; i < ref->count; ++i)
    if (strcmp(ref->arrays[ref->by_name[i - 1]].name, ref->arrays[ref->by_name[i]].name) == 0)
      return mp_errorf(MP_ERR_FORMAT, "weights payload: two arrays are named '%s'",
                       ref->arrays[ref->by_name[i]].name);
  return MP_OK;
}

uint64_t mp_weights_ref_find(const mp_weights_ref_t* ref, const char* name) {
  uint64_t low = 0, high = ref->count;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    int order = strcmp(ref->arrays[ref->by_name[mid]].name, name);
    if (order == 0) return ref->by_name[mid];
    if (order < 0) low = mid + 1;
    else high = mid;
  }
  return UINT64_MAX;
}

mp_status_t mp_weights_ref_parse(mp_const_byte_span_t p, mp_weights_ref_t* out) {
  memset(out, 0, sizeof *out);
  if (p.size < 64)
    return mp_errorf(MP_ERR_FORMAT, "weights payload of %" PRIu64 " bytes is shorter than its "
                     "header", p.size);
  uint32_t version = mp_load_le32(p.data);
  if (version != MP_WEIGHTS_REF_VERSION && version != MP_WEIGHTS_REF_VERSION_FILES)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "weights payload version %u is not supported (this runtime reads %d and "
                     "%d): upgrade modpack",
                     version, MP_WEIGHTS_REF_VERSION, MP_WEIGHTS_REF_VERSION_FILES);
  MP_RETURN_IF_ERROR(version == MP_WEIGHTS_REF_VERSION ? parse_v1(p, out) : parse_v2(p, out));
  return mp_weights_ref_index_names(out);
}

void mp_weights_ref_of_file(const mp_weights_ref_t* ref, uint64_t file, mp_array_spec_t* specs,
                            mp_weight_record_t* records, mp_weights_reference_t* out) {
  const mp_weights_ref_file_t* f = &ref->files[file];
  uint64_t n = 0;
  for (uint64_t i = 0; i < ref->count; ++i) {
    const mp_weights_ref_array_t* a = &ref->arrays[i];
    if (a->file != file) continue;
    specs[n] = (mp_array_spec_t){a->name, a->dtype, a->ndim, a->shape};
    records[n].name = a->name;
    records[n].checksum = a->checksum;
    memcpy(records[n].digest, a->digest, 32);
    ++n;
  }
  bool foreign = f->format != MP_WEIGHTS_FORMAT_MODPACK;
  *out = (mp_weights_reference_t){f->name,
                                  f->digest,
                                  specs,
                                  n,
                                  foreign ? records : NULL,
                                  foreign ? n : 0,
                                  foreign ? f->records_digest : NULL};
}
