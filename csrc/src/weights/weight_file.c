/* Weight files opened for use (weights/weight_file.h): their life, one object per version of
 * a file, the mapping, lookups, checks and descriptions. Each format's index is read by its own
 * file (weights/modpack_file.c, weights/foreign_file.c) into weights/weight_file_state.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, qsort_r, MAP_FIXED_NOREPLACE */
#endif
#include "weights/weight_file.h"

#include <errno.h>
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
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_read.h"
#include "files/file.h"
#include "files/signatures.h"
#include "weights/digest.h"
#include "weights/weight_file_state.h"

enum {
  /* Files from this size are mapped at an address congruent to 2 MiB, so the kernel can map
   * the page cache's large folios whole (as libraries' large segments are, format/image.py). */
  LARGE_FILE = 64 << 20,
  HUGE_ALIGNMENT = 2 << 20,
  /* A file's first bytes are read once, to tell its format, and handed to its reader: a
   * safetensors shard's header (names, types, shapes) is mostly within them. */
  HEAD_READ = 4096,
};


static void unmap_file(const uint8_t* map); /* below, with the mappings */

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
  if (f->map) unmap_file(f->map);
  if (f->fd >= 0) close(f->fd);
  mp_device_array_cache_clear(&f->device_arrays);
  pthread_mutex_destroy(&f->check_lock);
  for (uint64_t i = 0; f->arrays && i < f->count; ++i) {
    free((char*)f->arrays[i].name);
    if (f->arrays[i].copied) free(f->arrays[i].tensor.data);
  }
  mp_foreign_index_free(&f->foreign);
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

/* The open object of this version of the file (retained) and set of records (|records_digest|,
 * NULL for none), NULL if none; MP_ERR_IO when the file was rewritten in place under an open
 * version. Under open_lock. */
static mp_status_t find_open(const char* path, const mp_file_id_t* id,
                             const uint8_t* records_digest, mp_weight_file_t** out) {
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
    /* A modpack weight file carries its own records: those of a reference do not apply. */
    const uint8_t* wanted = o->file->format == MP_WEIGHTS_FORMAT_MODPACK ? NULL : records_digest;
    bool same_records = o->file->has_records
                            ? wanted && memcmp(o->file->records_digest, wanted, 32) == 0
                            : !wanted;
    if (same_records && try_retain(o->file)) {
      *out = o->file;
      return MP_OK;
    }
  }
  return MP_OK;
}

/* The open object of the version of the file |path| names now, found without opening it again
 * when an object was opened from the same path: one stat then tells whether the path still
 * names that version. A library's weight files are opened before dlopen and bound again by its
 * tree after it, and libraries often share base weights, so this is the common case of every
 * open after the first. *out: retained, or NULL (then open the file). Under open_lock. */
static mp_status_t find_open_at(const char* path, const uint8_t* records_digest,
                                mp_weight_file_t** out) {
  *out = NULL;
  bool opened_from_path = false;
  for (open_file_t* o = open_files; o && !opened_from_path; o = o->next)
    opened_from_path = strcmp(o->file->path, path) == 0;
  mp_file_id_t id;
  if (!opened_from_path || !mp_file_identify(path, &id)) return MP_OK;
  return find_open(path, &id, records_digest, out);
}

/* The format of the file open as |fd|, from its first bytes (read into |head|, HEAD_READ
 * bytes, *out_head_size of them: none when they could not be read): modpack's magic, GGUF's,
 * or a safetensors header's size followed by its JSON object (safetensors has no magic: a file
 * named *.safetensors is taken as one, so that its reader says what is wrong with it). */
static mp_status_t format_of(int fd, const char* path, uint64_t file_size, uint8_t* head,
                             size_t* out_head_size, mp_weights_format_t* out) {
  memset(head, 0, 16);
  size_t n = file_size < HEAD_READ ? (size_t)file_size : HEAD_READ;
  bool read = file_size >= 9 && mp_file_read_at(fd, head, n, 0);
  *out_head_size = read ? n : 0;
  size_t length = strlen(path), suffix = sizeof ".safetensors" - 1;
  bool named = length >= suffix && strcmp(path + length - suffix, ".safetensors") == 0;
  if (read && memcmp(head, MP_WEIGHTS_MAGIC, 8) == 0) {
    *out = MP_WEIGHTS_FORMAT_MODPACK;
  } else if (read && memcmp(head, "GGUF", 4) == 0) {
    *out = MP_WEIGHTS_FORMAT_GGUF;
  } else if ((read && head[8] == '{') || named) {
    *out = MP_WEIGHTS_FORMAT_SAFETENSORS;
  } else {
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is not a weight file modpack reads: it has none of the magics of a "
                     "modpack weight file (\\x89MPW), a GGUF file (GGUF) or a safetensors "
                     "file (an 8-byte header size, then '{'); give a file written by "
                     "modpack.save_weights, safetensors or gguf",
                     path);
  }
  return MP_OK;
}

/* ---- mappings: one per version of a file ---------------------------------------------------
 *
 * Objects of one version of a file opened with different records (a safetensors file loaded on
 * its own and through a library that recorded its digests) share its mapping: one mapping per
 * file per process, one page-cache copy. */

typedef struct mapping {
  mp_file_id_t id;
  const uint8_t* map;
  uint64_t size;
  long users;
  struct mapping* next;
} mapping_t;
static mapping_t* mappings; /* under map_lock */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

static void unmap_file(const uint8_t* map) {
  pthread_mutex_lock(&map_lock);
  for (mapping_t** p = &mappings; *p; p = &(*p)->next) {
    mapping_t* m = *p;
    if (m->map != map) continue;
    if (--m->users == 0) {
      *p = m->next;
      munmap((void*)m->map, (size_t)m->size);
      free(m);
    }
    break;
  }
  pthread_mutex_unlock(&map_lock);
}

static mp_status_t map_new(int fd, const char* path, mp_weight_file_t* f);

static mp_status_t map_file(int fd, const char* path, mp_weight_file_t* f) {
  pthread_mutex_lock(&map_lock);
  mapping_t* found = NULL;
  for (mapping_t* m = mappings; m && !found; m = m->next)
    if (mp_file_same_version(&m->id, &f->id)) found = m;
  mp_status_t status = MP_OK;
  if (found) {
    ++found->users;
    f->map = found->map;
    f->map_size = found->size;
  } else {
    mapping_t* m = calloc(1, sizeof *m);
    status = m ? map_new(fd, path, f) : mp_out_of_memory("a weight file's mapping");
    if (status == MP_OK) {
      *m = (mapping_t){f->id, f->map, f->map_size, 1, mappings};
      mappings = m;
    } else {
      free(m);
    }
  }
  pthread_mutex_unlock(&map_lock);
  for (uint64_t i = 0; status == MP_OK && i < f->count; ++i)
    f->arrays[i].tensor.data = (void*)(f->map + f->arrays[i].offset);
  return status;
}

/* Whether the kernel itself places large file mappings at 2 MiB-aligned addresses (Linux 6.x
 * does, for files of filesystems with large folios): 1 until a large mapping comes back
 * unaligned. Then one mmap places a file; otherwise a reservation, a fixed mapping in it and
 * two trims do, four system calls a file, which a model in many shards pays for each. */
static atomic_int kernel_aligns = 1;

/* |size| bytes of |fd| mapped at a 2 MiB-aligned address inside a reservation of anonymous
 * address space, the reservation around it given back; MAP_FAILED on failure. */
static void* map_in_reservation(int fd, size_t size) {
  size_t span = size + HUGE_ALIGNMENT;
  uint8_t* room = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (room == MAP_FAILED) return MAP_FAILED;
  uintptr_t mask = (uintptr_t)HUGE_ALIGNMENT - 1;
  uint8_t* at = (uint8_t*)(((uintptr_t)room + mask) & ~mask);
  void* map = mmap(at, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (map == MAP_FAILED) {
    munmap(room, span);
    return MAP_FAILED;
  }
  if (at > room) munmap(room, (size_t)(at - room));
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uint8_t* end = (uint8_t*)(((uintptr_t)(at + size) + page - 1) & ~(page - 1));
  uint8_t* room_end = room + span;
  if (room_end > end) munmap(end, (size_t)(room_end - end));
  return map;
}

/* Map the whole file read-only and shared; large files at a 2 MiB-aligned address, so the
 * kernel can map the page cache's large folios whole. */
static mp_status_t map_new(int fd, const char* path, mp_weight_file_t* f) {
  f->map_size = f->file_size;
  size_t size = (size_t)f->file_size;
  void* map = MAP_FAILED;
  if (f->file_size >= LARGE_FILE && atomic_load(&kernel_aligns)) {
    map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED && ((uintptr_t)map & (HUGE_ALIGNMENT - 1)) != 0) {
      munmap(map, size);
      map = MAP_FAILED;
      atomic_store(&kernel_aligns, 0);
    }
  }
  if (map == MAP_FAILED && f->file_size >= LARGE_FILE) map = map_in_reservation(fd, size);
  if (map == MAP_FAILED) map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return mp_errorf(errno == ENOMEM ? MP_ERR_RESOURCE_EXHAUSTED : MP_ERR_IO,
                     "cannot map '%s': %s", path, strerror(errno));
  f->map = map;
  return MP_OK;
}

/* An array's data that is not aligned to its element size in the file (safetensors places
 * arrays back to back) is handed out as a private aligned copy, made now, once. */
static mp_status_t copy_misaligned(mp_weight_file_t* f) {
  for (uint64_t i = 0; i < f->count; ++i) {
    mp_weight_array_t* a = &f->arrays[i];
    uint64_t element = ((uint64_t)a->tensor.dtype.bits * a->tensor.dtype.lanes + 7) / 8;
    if (element <= 1 || (uintptr_t)(f->map + a->offset) % element == 0) continue;
    void* copy = aligned_alloc(64, (a->size + 63) / 64 * 64);
    if (!copy) return mp_out_of_memory("an aligned copy of a misaligned array");
    memcpy(copy, f->map + a->offset, (size_t)a->size);
    a->tensor.data = copy;
    a->copied = true;
  }
  return MP_OK;
}

static mp_status_t open_new(int fd, const char* path, const mp_file_id_t* id,
                            mp_weights_format_t format, mp_const_byte_span_t head,
                            const mp_weight_record_t* records,
                            uint64_t count, const uint8_t* records_digest,
                            mp_weight_file_t** out) {
  mp_weight_file_t* f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return mp_out_of_memory("a weight file");
  }
  atomic_init(&f->refcount, 1);
  f->fd = -1; /* until it is open: the caller's until then */
  pthread_mutex_init(&f->check_lock, NULL);
  mp_device_array_cache_init(&f->device_arrays);
  f->id = *id;
  f->file_size = id->size;
  f->has_records = records_digest != NULL;
  if (records_digest) memcpy(f->records_digest, records_digest, 32);
  mp_status_t status = format == MP_WEIGHTS_FORMAT_MODPACK
                           ? mp_weight_file_read_modpack(f, fd, path)
                           : mp_weight_file_read_foreign(f, fd, path, format, head, records,
                                                         count);
  if (status == MP_OK) status = map_file(fd, path, f);
  if (status == MP_OK) status = copy_misaligned(f);
  if (status != MP_OK) {
    destroy(f);
    return status;
  }
  f->fd = fd; /* kept, to tell its holes (mp_file_is_hole) */
  *out = f;
  return MP_OK;
}

static mp_status_t open_file(const char* path, const mp_weight_record_t* records, uint64_t count,
                             const uint8_t* records_digest, mp_weight_file_t** out_file) {
  *out_file = NULL;
  pthread_mutex_lock(&open_lock);
  mp_status_t found = find_open_at(path, records_digest, out_file);
  pthread_mutex_unlock(&open_lock);
  if (found != MP_OK || *out_file) return found;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(mp_file_open(path, &fd, &id));
  mp_weights_format_t format = MP_WEIGHTS_FORMAT_MODPACK;
  uint8_t head[HEAD_READ];
  size_t head_size = 0;
  mp_status_t status = format_of(fd, path, id.size, head, &head_size, &format);
  if (format == MP_WEIGHTS_FORMAT_MODPACK) records_digest = NULL; /* it has its own */
  pthread_mutex_lock(&open_lock);
  if (status == MP_OK) status = find_open(path, &id, records_digest, out_file);
  open_file_t* entry = NULL;
  if (status == MP_OK && !*out_file) {
    entry = malloc(sizeof *entry);
    status = entry ? open_new(fd, path, &id, format, (mp_const_byte_span_t){head, head_size},
                              records, count, records_digest, out_file)
                   : mp_out_of_memory("a weight file");
    if (status == MP_OK) {
      *entry = (open_file_t){*out_file, open_files};
      open_files = entry;
      entry = NULL;
      fd = -1; /* the new file's now */
    }
  }
  pthread_mutex_unlock(&open_lock);
  free(entry);
  if (fd >= 0) close(fd);
  return status;
}

mp_status_t mp_weight_file_open(const char* path, mp_weight_file_t** out_file) {
  return open_file(path, NULL, 0, NULL, out_file);
}

mp_status_t mp_weight_file_open_recorded(const char* path, const mp_weight_record_t* records,
                                         uint64_t count, const uint8_t records_digest[32],
                                         mp_weight_file_t** out_file) {
  return open_file(path, records, count, records_digest, out_file);
}

/* ---- reading ----------------------------------------------------------------------------- */

const char* mp_weight_file_path(const mp_weight_file_t* file) {
  return file->path;
}

mp_weights_format_t mp_weight_file_format(const mp_weight_file_t* file) {
  return file->format;
}

bool mp_weight_file_records_match(const mp_weight_file_t* file, const uint8_t* records_digest) {
  if (!file->has_records) return !records_digest || file->format == MP_WEIGHTS_FORMAT_MODPACK;
  return records_digest && memcmp(file->records_digest, records_digest, 32) == 0;
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

bool mp_weight_file_holds(const mp_weight_file_t* file, const DLTensor* array) {
  uintptr_t first = (uintptr_t)&file->arrays[0].tensor, at = (uintptr_t)array;
  return file->count > 0 && at >= first && (at - first) % sizeof *file->arrays == 0 &&
         (at - first) / sizeof *file->arrays < file->count;
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
  if (f->format != MP_WEIGHTS_FORMAT_MODPACK)
    return mp_errorf(MP_ERR_UNTRUSTED,
                     "array '%s' of '%s' does not match the SHA-256 digest the library recorded "
                     "of it: the file is not the one the library was exported (and signed) "
                     "with; get that one again from its source",
                     f->arrays[i].name, f->path);
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

/* The bytes of |a| that are used: its private copy, or the mapping (whose holes the checks
 * skip, core/mapped_read.h). */
static mp_const_byte_span_t bytes_of(const mp_weight_file_t* f, const mp_weight_array_t* a,
                                     int* out_fd) {
  *out_fd = a->copied ? -1 : f->fd;
  return (mp_const_byte_span_t){a->copied ? a->tensor.data : f->map + a->offset, a->size};
}

static mp_status_t not_recorded(const mp_weight_file_t* f, const mp_weight_array_t* a) {
  return mp_errorf(MP_ERR_UNTRUSTED,
                   "array '%s' of '%s' has no recorded digest to check it against: a file in "
                   "another format (safetensors, GGUF) is vouched for by the library that "
                   "recorded its arrays' digests when it was exported",
                   a->name, f->path);
}

/* Every distinct recorded array's XXH3 (in file order), and in a modpack file the zeros
 * between them. Arrays nothing recorded have nothing to be checked against. */
static mp_status_t check_checksums(const mp_weight_file_t* f) {
  uint64_t cursor = f->data_offset;
  for (uint64_t i = 0; i < f->count; ++i) {
    const mp_weight_array_t* a = &f->arrays[i];
    if (a->offset < cursor || !a->recorded) continue; /* stored once, checked once */
    if (f->format == MP_WEIGHTS_FORMAT_MODPACK && !zeros_between(f, cursor, a->offset))
      return mp_weight_file_damaged(f->path, "a byte between its arrays is not zero");
    int fd;
    mp_const_byte_span_t bytes = bytes_of(f, a, &fd);
    uint64_t actual = mp_checksum_mapped_file(bytes, fd, a->offset);
    if (actual != a->checksum && f->format != MP_WEIGHTS_FORMAT_MODPACK)
      return mp_errorf(MP_ERR_MISMATCH,
                       "'%s' is not the file the library was exported with: array '%s' holds "
                       "other bytes (XXH3 %016" PRIx64 ", recorded %016" PRIx64 "), under the "
                       "same names, types and shapes; export the library again with this file, "
                       "or load it with its own and swap this one in (swap_weights)",
                       f->path, a->name, actual, a->checksum);
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
    if (a->offset < cursor || !a->recorded || atomic_load(&f->array_checked[i])) continue;
    int fd;
    mp_const_byte_span_t bytes = bytes_of(f, a, &fd);
    jobs[n] = (mp_digest_job_t){bytes.data, bytes.size, fd, a->offset, {0}};
    which[n++] = i;
    cursor = a->offset + a->size;
  }
  mp_status_t status = mp_chunked_sha256(jobs, n);
  for (uint64_t k = 0; k < n && status == MP_OK; ++k) {
    if (memcmp(jobs[k].digest, f->arrays[which[k]].digest, 32) != 0)
      status = digest_mismatch(f, which[k]);
  }
  /* Arrays stored once share their check. */
  for (uint64_t i = 0; i < f->count && status == MP_OK; ++i)
    if (f->arrays[i].recorded) atomic_store(&f->array_checked[i], 1);
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
  if (!a->recorded) return not_recorded(file, a);
  int fd;
  mp_const_byte_span_t bytes = bytes_of(file, a, &fd);
  mp_digest_job_t job = {bytes.data, bytes.size, fd, a->offset, {0}};
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

/* What another format says of an array: its type, blocks, shape in elements, and whether it
 * is handed out as a copy. */
static void describe_foreign(mp_json_t* j, const mp_weight_array_t* a) {
  const mp_foreign_array_t* x = a->foreign;
  mp_json_printf(j, ", \"type\": ");
  mp_json_string(j, x->type_name);
  mp_json_printf(j, ", \"type_id\": %u, \"block\": [%u, %u], \"logical_shape\": [",
                 x->type_id, x->block_elements, x->block_bytes);
  for (int32_t d = 0; d < x->logical_ndim; ++d)
    mp_json_printf(j, "%s%" PRId64, d ? ", " : "", x->logical_shape[d]);
  mp_json_printf(j, "], \"copied\": %s", a->copied ? "true" : "false");
}

mp_status_t mp_weight_file_describe(const mp_weight_file_t* f, char* buffer, uint64_t capacity,
                                    uint64_t* out_length) {
  mp_json_t j = {buffer, capacity, 0};
  if (buffer && capacity) buffer[0] = '\0';
  static const char* const formats[] = {"modpack", "safetensors", "gguf"};
  mp_json_printf(&j, "{\"path\": ");
  mp_json_string(&j, f->path);
  mp_json_printf(&j, ", \"format\": \"%s\"", formats[f->format]);
  if (f->format != MP_WEIGHTS_FORMAT_MODPACK)
    mp_json_printf(&j, ", \"format_version\": %u, \"metadata\": %s", f->foreign.version,
                   f->foreign.metadata_json ? f->foreign.metadata_json : "{}");
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
    mp_json_printf(&j, "], \"offset\": %" PRIu64 ", \"size\": %" PRIu64, a->offset, a->size);
    if (a->recorded) {
      mp_json_printf(&j, ", \"checksum\": \"%016" PRIx64 "\", \"digest\": \"sha256:",
                     a->checksum);
      hex(&j, a->digest, 32);
      mp_json_printf(&j, "\"");
    } else {
      mp_json_printf(&j, ", \"checksum\": null, \"digest\": null");
    }
    if (a->foreign) describe_foreign(&j, a);
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "]}");
  if (out_length) *out_length = j.length;
  return MP_OK;
}
