/* Weight files opened for use (weights/weight_file.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, MAP_FIXED_NOREPLACE */
#endif
#include "weights/weight_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/checksum.h"
#include "core/crypto.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_read.h"
#include "files/file.h"
#include "files/seal.h"
#include "files/signatures.h"
#include "weights/digest.h"

#define HEADER_FIELD(field) offsetof(mp_weights_header_v1_t, field)
#define RECORD_FIELD(field) offsetof(mp_weights_record_v1_t, field)

enum {
  /* Files from this size are mapped at an address congruent to 2 MiB, so the kernel can map
   * the page cache's large folios whole (as libraries' large segments are, format/image.py). */
  LARGE_FILE = 64 << 20,
  HUGE_ALIGNMENT = 2 << 20,
};

struct mp_weight_file {
  atomic_long refcount;
  char* path;
  mp_file_id_t id;
  uint64_t file_size;
  uint32_t alignment;
  uint64_t data_offset, data_size;
  uint8_t* index; /* the private copy of [0, index_size) */
  uint64_t index_size;
  uint8_t digest[32];
  const uint8_t* map; /* the whole file, read-only and shared */
  int fd;             /* the file, for where its holes are (core/mapped_read.h); -1: unknown */
  uint64_t map_size;
  uint64_t count;
  mp_weight_array_t* arrays;
  int64_t* shapes;   /* every array's extents, one block */
  uint64_t* by_name; /* array indices sorted by name, for lookups */
  uint8_t* signatures; /* the signature block's records (NULL: unsigned) */
  uint64_t signature_count;
  pthread_mutex_t check_lock;
  uint32_t checks_made; /* MP_WEIGHTS_CHECK_*, under check_lock */
  atomic_uchar* array_checked; /* per array: its digest was checked */
  mp_device_array_cache_t device_arrays;
};

/* ---- the open files of the process ------------------------------------------------------ */

typedef struct open_file {
  mp_weight_file_t* file;
  struct open_file* next;
} open_file_t;
static open_file_t* open_files; /* under open_lock */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

static bool try_retain(mp_weight_file_t* file) {
  long count = atomic_load(&file->refcount);
  while (count > 0)
    if (atomic_compare_exchange_weak(&file->refcount, &count, count + 1)) return true;
  return false;
}

void mp_weight_file_retain(mp_weight_file_t* file) {
  if (file) atomic_fetch_add_explicit(&file->refcount, 1, memory_order_relaxed);
}

static void destroy(mp_weight_file_t* f) {
  if (f->map) munmap((void*)f->map, (size_t)f->map_size);
  if (f->fd >= 0) close(f->fd);
  mp_device_array_cache_clear(&f->device_arrays);
  pthread_mutex_destroy(&f->check_lock);
  for (uint64_t i = 0; f->arrays && i < f->count; ++i) free((char*)f->arrays[i].name);
  free(f->arrays);
  free(f->shapes);
  free(f->by_name);
  free(f->array_checked);
  free(f->signatures);
  free(f->index);
  free(f->path);
  free(f);
}

void mp_weight_file_release(mp_weight_file_t* file) {
  if (!file || atomic_fetch_sub_explicit(&file->refcount, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_lock(&open_lock);
  for (open_file_t** p = &open_files; *p; p = &(*p)->next)
    if ((*p)->file == file) {
      open_file_t* gone = *p;
      *p = gone->next;
      free(gone);
      break;
    }
  pthread_mutex_unlock(&open_lock);
  destroy(file);
}

/* The open object of this version of the file (retained), NULL if none; MP_ERR_IO when the
 * file was rewritten in place under an open version. Under open_lock. */
static mp_status_t find_open(const char* path, const mp_file_id_t* id, mp_weight_file_t** out) {
  *out = NULL;
  for (open_file_t* o = open_files; o; o = o->next) {
    if (!mp_file_same_file(&o->file->id, id)) continue;
    if (!mp_file_same_version(&o->file->id, id)) {
      if (atomic_load(&o->file->refcount) == 0) continue; /* going */
      return mp_errorf(MP_ERR_IO,
                       "'%s' was rewritten in place while an earlier version of it is in use: "
                       "the arrays mapped from it no longer match what was checked. Replace "
                       "weight files by writing a new file and renaming it over the old "
                       "(save_weights does), or drop what uses the old version first",
                       path);
    }
    if (try_retain(o->file)) {
      *out = o->file;
      return MP_OK;
    }
  }
  return MP_OK;
}

/* ---- validating ------------------------------------------------------------------------ */

static mp_status_t damaged(const char* path, const char* what) {
  return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: %s; copy or save it again", path, what);
}

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
  uint64_t bytes = (uint64_t)dtype.bits * dtype.lanes / 8;
  for (uint32_t d = 0; d < ndim; ++d) {
    uint64_t extent = mp_load_le64(f->index + shape_offset + 8 * d);
    if (extent > (uint64_t)INT64_MAX || !mp_mul_u64(bytes, extent, &bytes))
      return damaged(path, "an array's shape overflows");
    shape[d] = (int64_t)extent;
  }
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

static int by_name(const void* a, const void* b, void* file) {
  const mp_weight_file_t* f = file;
  return strcmp(f->arrays[*(const uint64_t*)a].name, f->arrays[*(const uint64_t*)b].name);
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
  for (uint64_t i = 0; i < f->count; ++i) f->by_name[i] = i;
  qsort_r(f->by_name, f->count, sizeof *f->by_name, by_name, f);
  for (uint64_t i = 1; i < f->count; ++i)
    if (strcmp(f->arrays[f->by_name[i - 1]].name, f->arrays[f->by_name[i]].name) == 0)
      return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: two arrays are named '%s'", path,
                       f->arrays[f->by_name[i]].name);
  return MP_OK;
}

/* Map the whole file read-only and shared; large files at a 2 MiB-congruent address. */
static mp_status_t map_file(int fd, const char* path, mp_weight_file_t* f) {
  f->map_size = f->file_size;
  void* map = MAP_FAILED;
  if (f->file_size >= LARGE_FILE) {
    size_t span = (size_t)f->file_size + HUGE_ALIGNMENT;
    uint8_t* room = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (room != MAP_FAILED) {
      uint8_t* at = (uint8_t*)(((uintptr_t)room + HUGE_ALIGNMENT - 1) & ~(uintptr_t)(HUGE_ALIGNMENT - 1));
      map = mmap(at, (size_t)f->file_size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
      if (map == MAP_FAILED) {
        munmap(room, span);
      } else { /* give back the reservation around it */
        if (at > room) munmap(room, (size_t)(at - room));
        uint8_t* end = at + f->file_size;
        uint8_t* room_end = room + span;
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        end = (uint8_t*)(((uintptr_t)end + page - 1) & ~(page - 1));
        if (room_end > end) munmap(end, (size_t)(room_end - end));
      }
    }
  }
  if (map == MAP_FAILED) map = mmap(NULL, (size_t)f->file_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return mp_errorf(errno == ENOMEM ? MP_ERR_RESOURCE_EXHAUSTED : MP_ERR_IO,
                     "cannot map '%s': %s", path, strerror(errno));
  f->map = map;
  for (uint64_t i = 0; i < f->count; ++i) f->arrays[i].tensor.data = (void*)(f->map + f->arrays[i].offset);
  return MP_OK;
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

static mp_status_t open_new(int fd, const char* path, const mp_file_id_t* id,
                            mp_weight_file_t** out) {
  mp_weight_file_t* f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return mp_out_of_memory("a weight file");
  }
  atomic_init(&f->refcount, 1);
  f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* -1 on failure: holes are then read */
  pthread_mutex_init(&f->check_lock, NULL);
  mp_device_array_cache_init(&f->device_arrays);
  f->id = *id;
  f->file_size = id->size;
  uint32_t header_size = 0;
  uint64_t sealed_size = 0;
  mp_status_t status = read_header(fd, path, id->size, f, &header_size);
  if (status == MP_OK) status = check_seal(fd, path, id->size, f, &sealed_size);
  if (status == MP_OK) status = read_index(fd, path, f, header_size);
  if (status == MP_OK) status = read_signature_records(fd, path, id->size, f);
  if (status == MP_OK) status = map_file(fd, path, f);
  if (status != MP_OK) {
    destroy(f);
    return status;
  }
  *out = f;
  return MP_OK;
}

mp_status_t mp_weight_file_open(const char* path, mp_weight_file_t** out_file) {
  *out_file = NULL;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(mp_file_open(path, &fd, &id));
  pthread_mutex_lock(&open_lock);
  mp_status_t status = find_open(path, &id, out_file);
  open_file_t* entry = NULL;
  if (status == MP_OK && !*out_file) {
    entry = malloc(sizeof *entry);
    status = entry ? open_new(fd, path, &id, out_file) : mp_out_of_memory("a weight file");
    if (status == MP_OK) {
      *entry = (open_file_t){*out_file, open_files};
      open_files = entry;
      entry = NULL;
    }
  }
  pthread_mutex_unlock(&open_lock);
  free(entry);
  close(fd); /* the mapping stays */
  return status;
}

/* ---- reading ----------------------------------------------------------------------------- */

const char* mp_weight_file_path(const mp_weight_file_t* file) {
  return file->path;
}

const uint8_t* mp_weight_file_digest(const mp_weight_file_t* file) {
  return file->digest;
}

uint64_t mp_weight_file_count(const mp_weight_file_t* file) {
  return file->count;
}

const mp_weight_array_t* mp_weight_file_array(const mp_weight_file_t* file, uint64_t index) {
  return index < file->count ? &file->arrays[index] : NULL;
}

uint64_t mp_weight_file_find(const mp_weight_file_t* file, const char* name) {
  uint64_t low = 0, high = file->count;
  while (low < high) {
    uint64_t mid = low + (high - low) / 2;
    int order = strcmp(file->arrays[file->by_name[mid]].name, name);
    if (order == 0) return file->by_name[mid];
    if (order < 0) low = mid + 1;
    else high = mid;
  }
  return UINT64_MAX;
}

uint64_t mp_weight_file_size(const mp_weight_file_t* file) {
  return file->file_size;
}

uint32_t mp_weight_file_alignment(const mp_weight_file_t* file) {
  return file->alignment;
}

mp_device_array_cache_t* mp_weight_file_device_arrays(mp_weight_file_t* file) {
  return &file->device_arrays;
}

/* ---- comparing -------------------------------------------------------------------------- */

/* "float32[4096, 11008]" */
static const char* array_type(DLDataType dtype, int32_t ndim, const int64_t* shape, char* out,
                              size_t capacity) {
  char name[32];
  int n = snprintf(out, capacity, "%s[", mp_dtype_string(dtype, name, sizeof name));
  for (int32_t d = 0; d < ndim && n > 0 && (size_t)n < capacity; ++d)
    n += snprintf(out + n, capacity - (size_t)n, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (n > 0 && (size_t)n < capacity) snprintf(out + n, capacity - (size_t)n, "]");
  return out;
}

static bool same_type(const DLTensor* have, const mp_array_spec_t* want) {
  if (have->dtype.code != want->dtype.code || have->dtype.bits != want->dtype.bits ||
      have->dtype.lanes != want->dtype.lanes || have->ndim != want->ndim)
    return false;
  for (int32_t d = 0; d < have->ndim; ++d)
    if (have->shape[d] != want->shape[d]) return false;
  return true;
}

mp_status_t mp_weight_file_match(const mp_weight_file_t* file, const mp_array_spec_t* specs,
                                 uint64_t count, bool exact, const char* what) {
  for (uint64_t i = 0; i < count; ++i) {
    const mp_array_spec_t* want = &specs[i];
    uint64_t at = mp_weight_file_find(file, want->name);
    if (at == UINT64_MAX)
      return mp_errorf(MP_ERR_MISMATCH, "'%s' has no array '%s', which %s has", file->path,
                       want->name, what);
    const DLTensor* have = &file->arrays[at].tensor;
    if (!same_type(have, want)) {
      char a[256], b[256];
      return mp_errorf(MP_ERR_MISMATCH, "array '%s' is %s in '%s', but %s in %s", want->name,
                       array_type(have->dtype, have->ndim, have->shape, a, sizeof a), file->path,
                       array_type(want->dtype, want->ndim, want->shape, b, sizeof b), what);
    }
  }
  if (exact && file->count != count) {
    for (uint64_t i = 0; i < file->count; ++i) {
      bool known = false;
      for (uint64_t k = 0; k < count && !known; ++k)
        known = strcmp(specs[k].name, file->arrays[i].name) == 0;
      if (!known)
        return mp_errorf(MP_ERR_MISMATCH, "'%s' has an array '%s', which %s does not have",
                         file->path, file->arrays[i].name, what);
    }
  }
  return MP_OK;
}

/* ---- checking ---------------------------------------------------------------------------- */

static mp_status_t digest_mismatch(const mp_weight_file_t* f, uint64_t i) {
  return mp_errorf(MP_ERR_UNTRUSTED,
                   "array '%s' of '%s' does not match its SHA-256 digest: the file was changed "
                   "after it was saved or signed; get it again from its source",
                   f->arrays[i].name, f->path);
}

/* Whether the file's bytes [begin, end) are all zero, holes skipped. */
static bool zeros_between(const mp_weight_file_t* f, uint64_t begin, uint64_t end) {
  for (uint64_t at = begin; at < end; at += MP_ZEROS_SIZE) {
    uint64_t n = end - at < MP_ZEROS_SIZE ? end - at : MP_ZEROS_SIZE;
    if (!mp_file_is_hole(f->fd, at, n) && memcmp(f->map + at, mp_zeros(), (size_t)n) != 0)
      return false;
  }
  return true;
}

/* Every distinct array's XXH3 (in file order), and the zeros between them. */
static mp_status_t check_checksums(const mp_weight_file_t* f) {
  uint64_t cursor = f->data_offset;
  for (uint64_t i = 0; i < f->count; ++i) {
    const mp_weight_array_t* a = &f->arrays[i];
    if (a->offset < cursor) continue; /* stored once, checked once */
    if (!zeros_between(f, cursor, a->offset))
      return damaged(f->path, "a byte between its arrays is not zero");
    uint64_t actual = mp_checksum_mapped_file(
        (mp_const_byte_span_t){f->map + a->offset, a->size}, f->fd, a->offset);
    if (actual != a->checksum)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s' is damaged: array '%s' does not match its checksum (stored %016" PRIx64
                       ", computed %016" PRIx64 "); copy or save it again",
                       f->path, a->name, a->checksum, actual);
    cursor = a->offset + a->size;
  }
  return MP_OK;
}

static mp_status_t check_digests(mp_weight_file_t* f) {
  mp_digest_job_t* jobs = calloc(f->count ? f->count : 1, sizeof *jobs);
  uint64_t* which = malloc((f->count ? f->count : 1) * sizeof *which);
  if (!jobs || !which) {
    free(jobs), free(which);
    return mp_out_of_memory("checking a weight file");
  }
  uint64_t n = 0, cursor = f->data_offset;
  for (uint64_t i = 0; i < f->count; ++i) {
    const mp_weight_array_t* a = &f->arrays[i];
    if (a->offset < cursor || atomic_load(&f->array_checked[i])) continue;
    jobs[n] = (mp_digest_job_t){f->map + a->offset, a->size, f->fd, a->offset, {0}};
    which[n++] = i;
    cursor = a->offset + a->size;
  }
  mp_status_t status = mp_chunked_sha256(jobs, n);
  for (uint64_t k = 0; k < n && status == MP_OK; ++k) {
    if (memcmp(jobs[k].digest, f->arrays[which[k]].digest, 32) != 0)
      status = digest_mismatch(f, which[k]);
  }
  /* Arrays stored once share their check. */
  for (uint64_t i = 0; i < f->count && status == MP_OK; ++i) atomic_store(&f->array_checked[i], 1);
  free(jobs);
  free(which);
  return status;
}

mp_status_t mp_weight_file_check(mp_weight_file_t* file, uint32_t checks) {
  pthread_mutex_lock(&file->check_lock);
  uint32_t todo = checks & ~file->checks_made;
  mp_status_t status = MP_OK;
  if (todo & MP_WEIGHTS_CHECK_CHECKSUMS) status = check_checksums(file);
  if (status == MP_OK && (todo & MP_WEIGHTS_CHECK_DIGESTS)) status = check_digests(file);
  if (status == MP_OK) file->checks_made |= todo;
  pthread_mutex_unlock(&file->check_lock);
  return status;
}

mp_status_t mp_weight_file_check_array(mp_weight_file_t* file, uint64_t index) {
  if (index >= file->count) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "no array %" PRIu64, index);
  if (atomic_load(&file->array_checked[index])) return MP_OK;
  const mp_weight_array_t* a = &file->arrays[index];
  mp_digest_job_t job = {file->map + a->offset, a->size, file->fd, a->offset, {0}};
  MP_RETURN_IF_ERROR(mp_chunked_sha256(&job, 1));
  if (memcmp(job.digest, a->digest, 32) != 0) return digest_mismatch(file, index);
  atomic_store(&file->array_checked[index], 1); /* racing first uses both hash: no harm */
  return MP_OK;
}

bool mp_weight_file_array_checked(const mp_weight_file_t* file, uint64_t index) {
  return index < file->count && atomic_load(&file->array_checked[index]);
}

mp_status_t mp_weight_file_signatures(const mp_weight_file_t* file, const mp_trusted_key_t* keys,
                                      uint64_t num_keys, mp_signature_info_t* out_infos,
                                      uint64_t capacity, uint64_t* out_count, bool* out_trusted) {
  *out_count = file->signature_count;
  *out_trusted = false;
  if (file->signature_count == 0) return MP_OK;
  const size_t context = sizeof MP_WEIGHTS_SIGNATURE_CONTEXT - 1;
  uint8_t message[sizeof MP_WEIGHTS_SIGNATURE_CONTEXT - 1 + 32];
  memcpy(message, MP_WEIGHTS_SIGNATURE_CONTEXT, context);
  memcpy(message + context, file->digest, 32);
  return mp_signatures_check(file->signatures, file->signature_count, file->path, keys, num_keys,
                             message, sizeof message, out_infos, capacity, out_trusted);
}

/* ---- describing -------------------------------------------------------------------------- */

static void hex(mp_json_t* j, const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) mp_json_printf(j, "%02x", bytes[i]);
}

mp_status_t mp_weight_file_describe(const mp_weight_file_t* f, char* buffer, uint64_t capacity,
                                    uint64_t* out_length) {
  mp_json_t j = {buffer, capacity, 0};
  if (buffer && capacity) buffer[0] = '\0';
  mp_json_printf(&j, "{\"path\": ");
  mp_json_string(&j, f->path);
  mp_json_printf(&j, ", \"size\": %" PRIu64 ", \"alignment\": %u, \"digest\": \"sha256:", f->file_size,
                 f->alignment);
  hex(&j, f->digest, 32);
  mp_json_printf(&j, "\", \"index_size\": %" PRIu64 ", \"data_offset\": %" PRIu64
                     ", \"data_size\": %" PRIu64 ", \"signatures\": %" PRIu64 ", \"arrays\": [",
                 f->index_size, f->data_offset, f->data_size, f->signature_count);
  for (uint64_t i = 0; i < f->count; ++i) {
    const mp_weight_array_t* a = &f->arrays[i];
    char dtype[32];
    mp_json_printf(&j, "%s{\"name\": ", i ? ", " : "");
    mp_json_string(&j, a->name);
    mp_json_printf(&j, ", \"dtype\": \"%s\", \"shape\": [",
                   mp_dtype_string(a->tensor.dtype, dtype, sizeof dtype));
    for (int32_t d = 0; d < a->tensor.ndim; ++d)
      mp_json_printf(&j, "%s%" PRId64, d ? ", " : "", a->tensor.shape[d]);
    mp_json_printf(&j, "], \"offset\": %" PRIu64 ", \"size\": %" PRIu64
                       ", \"checksum\": \"%016" PRIx64 "\", \"digest\": \"sha256:",
                   a->offset, a->size, a->checksum);
    hex(&j, a->digest, 32);
    mp_json_printf(&j, "\"}");
  }
  mp_json_printf(&j, "]}");
  if (out_length) *out_length = j.length;
  return MP_OK;
}
