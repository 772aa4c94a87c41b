/* Reading a modpack weight file (modpack/weights.h) into a weight file object
 * (weights/weight_file_state.h): every size of its header checked against the file before
 * anything is read or hashed, its seal (which covers every byte but the arrays), its index read
 * into private memory with its checksum and parsed there, every record and the data ranges
 * (aligned, inside the data region, in order, disjoint or exactly shared), and its signature
 * records. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/checksum.h"
#include "core/crypto.h"
#include "core/dtype.h"
#include "core/error.h"
#include "files/seal.h"
#include "files/signatures.h"
#include "weights/weight_file_state.h"

#define HEADER_FIELD(field) offsetof(mp_weights_header_v1_t, field)
#define RECORD_FIELD(field) offsetof(mp_weights_record_v1_t, field)

#define damaged mp_weight_file_damaged

/* The header's sizes against the file and each other, before anything is read or hashed. */
static mp_status_t read_header(int fd, const char* path, uint64_t file_size,
                               mp_weight_file_t* f, uint32_t* out_header_size) {
  uint8_t h[MP_WEIGHTS_HEADER_SIZE];
  if (file_size < sizeof h || !mp_file_read_at(fd, h, sizeof h, 0) ||
      memcmp(h, MP_WEIGHTS_MAGIC, 8) != 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a modpack weight file (no \\x89MPW magic at its start): give a "
                     "file written by modpack.save_weights or export_library(weights=...)",
                     path);
  uint16_t major = mp_load_le16(h + HEADER_FIELD(format_major));
  uint16_t minor = mp_load_le16(h + HEADER_FIELD(format_minor));
  if (major != MP_WEIGHTS_FORMAT_MAJOR)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is a version %u.%u weight file; this runtime reads version %d.x: %s",
                     path, major, minor, MP_WEIGHTS_FORMAT_MAJOR,
                     major > MP_WEIGHTS_FORMAT_MAJOR ? "upgrade modpack"
                                                     : "save it again with this modpack");
  uint32_t header_size = mp_load_le32(h + HEADER_FIELD(header_size));
  f->index_size = mp_load_le64(h + HEADER_FIELD(index_size));
  f->count = mp_load_le64(h + HEADER_FIELD(array_count));
  f->data_offset = mp_load_le64(h + HEADER_FIELD(data_offset));
  f->data_size = mp_load_le64(h + HEADER_FIELD(data_size));
  f->alignment = mp_load_le32(h + HEADER_FIELD(alignment));
  uint32_t flags = mp_load_le32(h + HEADER_FIELD(flags));
  if (flags != 0)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' uses weight file flags 0x%x this runtime does not know: upgrade "
                     "modpack",
                     path, flags);
  uint64_t room = file_size - MP_SEAL_SIZE;
  if (header_size < MP_WEIGHTS_HEADER_SIZE || f->index_size < header_size ||
      f->index_size > room || f->alignment < MP_WEIGHTS_MIN_ALIGNMENT ||
      f->alignment > MP_WEIGHTS_MAX_ALIGNMENT || (f->alignment & (f->alignment - 1)) != 0 ||
      f->data_offset < f->index_size || f->data_offset % f->alignment != 0 ||
      f->data_offset > room || f->data_size > room - f->data_offset ||
      f->count > (f->index_size - header_size) / MP_WEIGHTS_RECORD_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged or truncated: its header places %" PRIu64
                     " records, an index of %" PRIu64 " bytes and data at [%" PRIu64 ", +%" PRIu64
                     ") (alignment %u) in a %" PRIu64 "-byte file",
                     path, f->count, f->index_size, f->data_offset, f->data_size, f->alignment,
                     file_size);
  *out_header_size = header_size;
  return MP_OK;
}

/* The seal must frame the data region exactly as weights.h says, and match. */
static mp_status_t check_seal(int fd, const char* path, uint64_t file_size,
                              const mp_weight_file_t* f, uint64_t* out_sealed_size) {
  mp_seal_v1_t seal;
  uint8_t raw[MP_SEAL_SIZE];
  mp_status_t status = mp_seal_read_fd(fd, file_size, path, &seal, raw, out_sealed_size);
  if (status == MP_ERR_NOT_FOUND) return damaged(path, "it carries no seal at its end");
  MP_RETURN_IF_ERROR(status);
  uint64_t end = f->data_offset + f->data_size;
  if (seal.blob_offset != 0 || seal.blob_vaddr != 0 || seal.blob_size != end ||
      seal.payloads_offset != f->data_offset || seal.payloads_size != f->data_size ||
      *out_sealed_size != end + MP_SEAL_SIZE)
    return damaged(path, "its seal does not frame its data");
  return mp_seal_check_fd(fd, file_size, path, &seal);
}

/* Decode and check record |i| against the index, filling arrays[i]. */
static mp_status_t read_record(mp_weight_file_t* f, const char* path, uint64_t i,
                               uint32_t header_size, int64_t* shape) {
  const uint8_t* r = f->index + header_size + i * MP_WEIGHTS_RECORD_SIZE;
  uint64_t name_offset = mp_load_le64(r + RECORD_FIELD(name_offset));
  uint32_t name_size = mp_load_le32(r + RECORD_FIELD(name_size));
  DLDataType dtype = {r[RECORD_FIELD(dtype_code)], r[RECORD_FIELD(dtype_bits)],
                      mp_load_le16(r + RECORD_FIELD(dtype_lanes))};
  uint32_t ndim = mp_load_le32(r + RECORD_FIELD(ndim));
  uint64_t shape_offset = mp_load_le64(r + RECORD_FIELD(shape_offset));
  mp_weight_array_t* a = &f->arrays[i];
  a->offset = mp_load_le64(r + RECORD_FIELD(data_offset));
  a->size = mp_load_le64(r + RECORD_FIELD(data_size));
  a->checksum = mp_load_le64(r + RECORD_FIELD(checksum));
  memcpy(a->digest, r + RECORD_FIELD(digest), 32);
  a->recorded = true;
  uint64_t metadata = header_size + f->count * MP_WEIGHTS_RECORD_SIZE; /* names, shapes after */
  char what[160];
  if (mp_load_le32(r + RECORD_FIELD(flags)) != 0 || mp_load_le64(r + RECORD_FIELD(reserved)) != 0)
    snprintf(what, sizeof what, "array record %" PRIu64 " has reserved bits set", i);
  else if (name_size == 0 || name_size > MP_WEIGHTS_MAX_NAME || name_offset < metadata ||
           !mp_in_bounds(name_offset, name_size, f->index_size))
    snprintf(what, sizeof what, "array record %" PRIu64 " has a name outside its index", i);
  else if (memchr(f->index + name_offset, 0, name_size) ||
           mp_utf8_invalid_at(f->index + name_offset, name_size) < name_size)
    snprintf(what, sizeof what, "array record %" PRIu64 "'s name is not UTF-8 without NUL", i);
  else if (ndim > MP_WEIGHTS_MAX_NDIM || shape_offset < metadata ||
           !mp_in_bounds(shape_offset, (uint64_t)ndim * 8, f->index_size))
    snprintf(what, sizeof what, "array record %" PRIu64 " has %u dimensions outside its index", i,
             ndim);
  else if (!mp_dtype_is_valid(dtype))
    snprintf(what, sizeof what, "array record %" PRIu64 " has an invalid dtype", i);
  else if (a->offset % f->alignment != 0 || a->offset < f->data_offset ||
           !mp_in_bounds(a->offset - f->data_offset, a->size, f->data_size))
    snprintf(what, sizeof what, "array record %" PRIu64 "'s data lies outside the data region", i);
  else
    what[0] = '\0';
  if (what[0]) return damaged(path, what);
  /* Bytes of |count| elements: whole bytes each, or packed below a byte (DLPack 1.1's sub-byte
   * types: ceil(count * bits / 8), modpack/tensor_span.h). */
  uint64_t element_bits = (uint64_t)dtype.bits * dtype.lanes, count = 1, bytes;
  for (uint32_t d = 0; d < ndim; ++d) {
    uint64_t extent = mp_load_le64(f->index + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX || !mp_mul_u64(count, extent, &count))
      return damaged(path, "an array's shape overflows");
    shape[d] = (int64_t)extent;
  }
  if (element_bits % 8 == 0 ? !mp_mul_u64(count, element_bits / 8, &bytes)
                            : !mp_mul_u64(count / 8, element_bits, &bytes) ||
                                  !mp_add_u64(bytes, (count % 8 * element_bits + 7) / 8, &bytes))
    return damaged(path, "an array's shape overflows");
  if (bytes != a->size) {
    snprintf(what, sizeof what,
             "array record %" PRIu64 " holds %" PRIu64 " bytes, its shape and dtype %" PRIu64, i,
             a->size, bytes);
    return damaged(path, what);
  }
  char* name = malloc((size_t)name_size + 1);
  if (!name) return mp_out_of_memory("an array name");
  memcpy(name, f->index + name_offset, name_size);
  name[name_size] = '\0';
  a->name = name;
  a->tensor = (DLTensor){NULL, {kDLCPU, 0}, (int32_t)ndim, dtype, shape, NULL, 0};
  return MP_OK;
}

/* Unique ranges appear in increasing order; a range before the furthest end so far must be
 * exactly an earlier one (an array stored once for several names). Found by binary search
 * over the unique ranges, so n arrays cost n log n. */
static mp_status_t check_ranges(const mp_weight_file_t* f, const char* path) {
  uint64_t* unique = malloc((f->count ? f->count : 1) * sizeof *unique);
  if (!unique) return mp_out_of_memory("checking a weight file");
  uint64_t n = 0, end = f->data_offset;
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; i < f->count && status == MP_OK; ++i) {
    const mp_weight_array_t* a = &f->arrays[i];
    if (a->offset >= end) {
      unique[n++] = i;
      end = a->offset + a->size;
      continue;
    }
    uint64_t low = 0, high = n;
    while (low < high) {
      uint64_t mid = low + (high - low) / 2;
      if (f->arrays[unique[mid]].offset < a->offset) low = mid + 1;
      else high = mid;
    }
    const mp_weight_array_t* same = low < n ? &f->arrays[unique[low]] : NULL;
    if (!same || same->offset != a->offset || same->size != a->size ||
        same->checksum != a->checksum || memcmp(same->digest, a->digest, 32) != 0)
      status = damaged(path, "two arrays' data overlap");
  }
  free(unique);
  return status;
}

static mp_status_t read_index(int fd, const char* path, mp_weight_file_t* f,
                              uint32_t header_size) {
  f->index = malloc((size_t)f->index_size);
  if (!f->index) return mp_out_of_memory("a weight file's index");
  if (!mp_file_read_at(fd, f->index, (size_t)f->index_size, 0))
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  if (mp_index_checksum(f->index, f->index_size) !=
      mp_load_le64(f->index + HEADER_FIELD(index_checksum)))
    return damaged(path, "its index checksum does not match");
  MP_RETURN_IF_ERROR(mp_crypto_sha256(f->index, f->index_size, f->digest));
  f->arrays = calloc(f->count ? f->count : 1, sizeof *f->arrays);
  f->shapes = calloc(f->count * MP_WEIGHTS_MAX_NDIM + 1, sizeof *f->shapes);
  f->by_name = malloc((f->count ? f->count : 1) * sizeof *f->by_name);
  f->array_checked = calloc(f->count ? f->count : 1, sizeof *f->array_checked);
  if (!f->arrays || !f->shapes || !f->by_name || !f->array_checked)
    return mp_out_of_memory("a weight file's arrays");
  for (uint64_t i = 0; i < f->count; ++i)
    MP_RETURN_IF_ERROR(read_record(f, path, i, header_size, f->shapes + i * MP_WEIGHTS_MAX_NDIM));
  MP_RETURN_IF_ERROR(check_ranges(f, path));
  return mp_weight_file_index_names(f, path);
}

static mp_status_t read_signature_records(int fd, const char* path, uint64_t file_size,
                                          mp_weight_file_t* f) {
  uint64_t sealed_size, count;
  MP_RETURN_IF_ERROR(mp_signatures_locate(fd, file_size, path, &sealed_size, &count));
  if (count == 0) return MP_OK;
  f->signatures = malloc((size_t)(count * MP_SIGNATURE_SIZE));
  if (!f->signatures) return mp_out_of_memory("a weight file's signatures");
  if (!mp_file_read_at(fd, f->signatures, (size_t)(count * MP_SIGNATURE_SIZE), sealed_size))
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  f->signature_count = count;
  return MP_OK;
}

mp_status_t mp_weight_file_read_modpack(mp_weight_file_t* f, int fd, const char* path) {
  f->format = MP_WEIGHTS_FORMAT_MODPACK;
  uint32_t header_size = 0;
  uint64_t sealed_size = 0;
  MP_RETURN_IF_ERROR(read_header(fd, path, f->file_size, f, &header_size));
  MP_RETURN_IF_ERROR(check_seal(fd, path, f->file_size, f, &sealed_size));
  MP_RETURN_IF_ERROR(read_index(fd, path, f, header_size));
  return read_signature_records(fd, path, f->file_size, f);
}
