/* Signed libraries checked in one read, weights left file-backed (load/verified_library.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap */
#endif
#include "load/verified_library.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/blob.h"
#include "core/bytes.h"
#include "core/crypto.h"
#include "core/error.h"
#include "core/mapped_read.h"
#include "core/trace.h"
#include "files/blob_index.h"
#include "files/seal.h"
#include "files/seal_note.h"
#include "files/signatures.h"
#include "kinds/const/const_payload.h"
#include "library/library.h"
#include "modpack/kinds/const.h"

enum {
  CHUNK = 1 << 20,
  /* Smaller stretches of weights are copied: a window costs a mapping and a system call. */
  MIN_WINDOW = 1 << 20,
  /* Const metadata read to plan windows; a larger one is simply copied. */
  MAX_INDEX = 64 << 20,
};

/* ---- planning: which bytes stay in the file --------------------------------------------- */

static uint64_t round_up(uint64_t value, uint64_t page) {
  return (value + page - 1) / page * page;
}

/* Read [offset, offset + size) of |fd| into a new buffer (NULL on failure). */
static uint8_t* read_part(int fd, uint64_t offset, uint64_t size) {
  uint8_t* buffer = malloc(size ? size : 1);
  if (buffer && !mp_file_read_at(fd, buffer, size, offset)) {
    free(buffer);
    return NULL;
  }
  return buffer;
}

/* The window over const payload |m| of the blob at |blob_offset|, if one is worth making. */
static bool const_window(int fd, uint64_t blob_offset, const mp_blob_module_t* m, uint64_t page,
                         mp_verified_window_t* out) {
  uint64_t at = blob_offset + m->payload_offset;
  uint8_t header[sizeof(mp_const_header_v1_t)];
  if (m->payload_size < sizeof header || !mp_file_read_at(fd, header, sizeof header, at))
    return false;
  uint64_t head_size = mp_const_metadata_size(header, m->payload_size);
  if (head_size > MAX_INDEX) return false;
  uint8_t* head = read_part(fd, at, head_size);
  uint64_t data_start;
  bool ok = head && mp_const_data_start(head, head_size, m->payload_size, &data_start) == MP_OK;
  free(head);
  if (!ok) return false;
  uint64_t begin = round_up(at + data_start, page);
  uint64_t end = (at + m->payload_size) / page * page;
  if (end < begin || end - begin < MIN_WINDOW) return false;
  *out = (mp_verified_window_t){begin, end - begin, NULL};
  return true;
}

/* The windows of the sealed file of |sealed_size| bytes: the page-aligned data of each const
 * payload its blob index names. The index is read and validated here (untrusted: a wrong plan
 * only moves bytes between the copy and the file, and the hash covers both in file order), so
 * any failure simply means no windows. */
static void plan_windows(int fd, uint64_t file_size, const char* path, mp_verified_library_t* v) {
  v->window_count = 0;
  mp_seal_v1_t seal;
  uint8_t raw[MP_SEAL_SIZE];
  uint64_t sealed_size;
  if (mp_seal_read_fd(fd, file_size, path, &seal, raw, &sealed_size) != MP_OK ||
      seal.blob_size == 0) {
    mp_error_clear();
    return;
  }
  uint8_t* index = NULL;
  mp_blob_t* blob = NULL;
  if (mp_blob_index_read(fd, &seal, path, &index, &blob) != MP_OK) {
    mp_error_clear();
    return;
  }
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  uint64_t end = 0; /* windows in file order, disjoint (a payload stored once may be shared) */
  for (uint64_t i = 0; i < info.module_count && v->window_count < MP_VERIFIED_MAX_WINDOWS; ++i) {
    mp_blob_module_t m;
    mp_blob_module(blob, i, &m);
    mp_verified_window_t w;
    if (strcmp(m.type_key, "const") != 0 || !const_window(fd, seal.blob_offset, &m, page, &w) ||
        w.offset < end || w.offset + w.size > sealed_size)
      continue;
    v->windows[v->window_count++] = w;
    end = w.offset + w.size;
  }
  mp_blob_free(blob);
  free(index);
}

/* ---- reading: hash in file order, copy all but the windows ----------------------------- */

/* What a library's signatures sign: the SHA-256 of |ranges| of the file, in order, with the
 * note's masked bytes read as zeros (version 2: what the seal covers, payloads included); or of
 * its first bytes, the sealed file before its signature block (version 1: one range, no note). */
typedef struct {
  const mp_file_range_t* ranges;
  uint64_t count;
  const mp_seal_note_t* note; /* the masks; NULL for version 1 */
  const char* context;        /* signed before the SHA-256 */
} signed_bytes_t;

/* Hash the file's bytes [begin, end) and, with |copy| >= 0, write them at the same offsets of
 * |copy| (as they are: the masks apply to the hash only). A piece in a hole of the file is
 * hashed as the zeros it reads as, neither read nor written: the copy's own hole there reads
 * as the same zeros (core/mapped_read.h). */
static mp_status_t hash_part(int fd, const char* path, uint64_t begin, uint64_t end, int copy,
                             const signed_bytes_t* what, mp_sha256_t* hash, uint8_t* buffer) {
  _Static_assert((uint64_t)CHUNK <= (uint64_t)MP_ZEROS_SIZE, "a piece of zeros at hand");
  bool holes = mp_file_has_hole(fd, begin, end - begin), in_hole = false;
  uint64_t extent_end = begin; /* the end of the extent (data or hole) |begin| is in */
  while (begin < end) {
    if (begin >= extent_end) extent_end = holes ? mp_file_extent(fd, begin, end, &in_hole) : end;
    size_t n = extent_end - begin < CHUNK ? (size_t)(extent_end - begin) : CHUNK;
    if (in_hole) {
      MP_RETURN_IF_ERROR(mp_sha256_update(hash, mp_zeros(), n));
      begin += n;
      continue;
    }
    if (!mp_file_read_at(fd, buffer, n, begin))
      return mp_errorf(MP_ERR_IO, "cannot read '%s' at byte %" PRIu64 ": %s", path, begin,
                       errno ? strerror(errno) : "the file shrank");
    if (copy >= 0 && !mp_file_write_at(copy, buffer, n, begin))
      return mp_errorf(errno == ENOSPC || errno == ENOMEM ? MP_ERR_RESOURCE_EXHAUSTED : MP_ERR_IO,
                       "cannot copy '%s' into memory: %s", path, strerror(errno));
    if (what->note) mp_seal_note_mask(what->note, begin, buffer, n);
    MP_RETURN_IF_ERROR(mp_sha256_update(hash, buffer, n));
    begin += n;
  }
  return MP_OK;
}

/* Whether window |w| lies whole in one of the signed ranges, clear of every mask: only such a
 * window may stay a mapping of the file. */
static bool window_signed(const mp_verified_window_t* w, const signed_bytes_t* what) {
  bool inside = false;
  for (uint64_t i = 0; i < what->count && !inside; ++i)
    inside = w->offset >= what->ranges[i].begin && w->offset + w->size <= what->ranges[i].end;
  for (uint64_t i = 0; inside && what->note && i < what->note->mask_count; ++i)
    inside = what->note->masks[i].end <= w->offset ||
             what->note->masks[i].begin >= w->offset + w->size;
  return inside;
}

static mp_status_t sha256_sink(void* context, const uint8_t* bytes, uint64_t size) {
  return mp_sha256_update(context, bytes, size);
}

/* Hash window |w| through its mapping, read ahead while hashing (cold), its holes as zeros. */
static mp_status_t hash_window(int fd, const mp_verified_window_t* w, mp_sha256_t* hash) {
  (void)madvise(w->mapping, (size_t)w->size, MADV_SEQUENTIAL);
  mp_status_t status = mp_read_mapped_file(w->mapping, w->size, fd, w->offset, sha256_sink, hash);
  (void)madvise(w->mapping, (size_t)w->size, MADV_NORMAL);
  return status;
}

/* SHA-256 of the signed bytes, each window hashed through its mapping (made here), the rest
 * read (and copied into |copy| when >= 0). Windows outside them are dropped (copied). */
static mp_status_t hash_file(int fd, const char* path, const signed_bytes_t* what, int copy,
                             mp_verified_library_t* v, uint8_t digest[32]) {
  uint64_t kept = 0;
  for (uint64_t i = 0; i < v->window_count; ++i)
    if (window_signed(&v->windows[i], what)) v->windows[kept++] = v->windows[i];
  v->window_count = kept;
  mp_sha256_t* hash;
  MP_RETURN_IF_ERROR(mp_sha256_begin(&hash));
  uint8_t* buffer = malloc(CHUNK);
  mp_status_t status = buffer ? MP_OK : mp_out_of_memory("reading a library");
  uint64_t next = 0; /* the next window */
  v->hashed = 0;
  for (uint64_t r = 0; r < what->count && status == MP_OK; ++r) {
    uint64_t cursor = what->ranges[r].begin, end = what->ranges[r].end;
    v->hashed += end - cursor;
    for (; next < v->window_count && v->windows[next].offset < end && status == MP_OK; ++next) {
      mp_verified_window_t* w = &v->windows[next];
      status = hash_part(fd, path, cursor, w->offset, copy, what, hash, buffer);
      if (status != MP_OK) break;
      void* map = mmap(NULL, (size_t)w->size, PROT_READ, MAP_SHARED, fd, (off_t)w->offset);
      if (map == MAP_FAILED) {
        status = mp_errorf(MP_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        break;
      }
      w->mapping = map;
      status = hash_window(fd, w, hash);
      cursor = w->offset + w->size;
    }
    if (status == MP_OK) status = hash_part(fd, path, cursor, end, copy, what, hash, buffer);
  }
  free(buffer);
  if (status != MP_OK) {
    mp_sha256_abandon(hash);
    return status;
  }
  return mp_sha256_finish(hash, digest);
}

/* A library's signatures and what they sign. */
typedef struct {
  uint8_t* block;       /* the records, one after another (a new buffer) */
  uint64_t count;       /* how many */
  uint64_t signed_size; /* version 1: the sealed file before the block, which follows */
  bool in_note;         /* version 2: the records are the seal note's filled slots */
  mp_seal_note_t note;  /* version 2: the note, what the seal covers and its masks */
  mp_file_range_t whole; /* version 1: [0, signed_size) */
  signed_bytes_t what;
} signatures_t;

static void signatures_free(signatures_t* s) {
  free(s->block);
  s->block = NULL;
  if (s->in_note) mp_seal_note_free(&s->note);
}

/* The signatures of the file open as |fd| (the caller frees *out with signatures_free): a
 * library sealed by its note keeps them in the note's slots, and they sign what the seal
 * covers, so that they hold as long as the seal does (through strippers too); any other keeps
 * them in a block after the seal, and they sign the file before the block. */
static mp_status_t read_signatures(int fd, uint64_t file_size, const char* path,
                                   signatures_t* out) {
  memset(out, 0, sizeof *out);
  mp_seal_v1_t seal;
  uint8_t raw[MP_SEAL_SIZE];
  uint64_t sealed_size;
  mp_status_t status = mp_seal_read_fd(fd, file_size, path, &seal, raw, &sealed_size);
  if (status == MP_OK && seal.version == MP_SEAL_VERSION) {
    uint8_t head[4096];
    uint64_t head_size = file_size < sizeof head ? file_size : sizeof head;
    if (!mp_file_read_at(fd, head, (size_t)head_size, 0)) head_size = 0;
    MP_RETURN_IF_ERROR(mp_seal_note_read(fd, file_size, path, head, head_size, &out->note));
    out->in_note = true;
    out->what = (signed_bytes_t){out->note.ranges, out->note.range_count, &out->note,
                                 MP_SIGNATURE_CONTEXT_V2};
    out->block = malloc(sizeof out->note.signatures);
    if (!out->block) return mp_out_of_memory("reading signatures");
    static const uint8_t empty[MP_SIGNATURE_SIZE] = {0};
    for (uint64_t i = 0; i < MP_SEAL_NOTE_SIGNATURES; ++i) {
      const uint8_t* slot = out->note.signatures + i * MP_SIGNATURE_SIZE;
      if (memcmp(slot, empty, MP_SIGNATURE_SIZE) != 0)
        memcpy(out->block + out->count++ * MP_SIGNATURE_SIZE, slot, MP_SIGNATURE_SIZE);
    }
    return MP_OK;
  }
  if (status != MP_OK && status != MP_ERR_NOT_FOUND) return status; /* damaged */
  mp_error_clear(); /* no seal, or one of version 1: the block, checked as it always was */
  MP_RETURN_IF_ERROR(mp_signatures_locate(fd, file_size, path, &out->signed_size, &out->count));
  out->whole = (mp_file_range_t){0, out->signed_size};
  out->what = (signed_bytes_t){&out->whole, 1, NULL, MP_SIGNATURE_CONTEXT};
  out->block = read_part(fd, out->signed_size, file_size - out->signed_size);
  if (!out->block)
    return mp_errorf(MP_ERR_IO, "cannot read the signatures of '%s': %s", path,
                     errno ? strerror(errno) : "the file shrank");
  return MP_OK;
}

/* Check the records against the digest of what they sign. */
static mp_status_t check_records(const signatures_t* s, const char* path,
                                 const mp_trusted_key_t* keys, uint64_t num_keys,
                                 const uint8_t digest[32], mp_signature_info_t* infos,
                                 uint64_t capacity, bool* out_trusted) {
  size_t context = strlen(s->what.context);
  uint8_t message[64 + 32];
  memcpy(message, s->what.context, context);
  memcpy(message + context, digest, 32);
  return mp_signatures_check(s->block, s->count, path, keys, num_keys, message, context + 32,
                             infos, capacity, out_trusted);
}

/* ---- the plan checked against what was verified ------------------------------------------ */

static bool same_ranges(const mp_file_range_t* a, const mp_file_range_t* b, uint64_t count) {
  return count == 0 || memcmp(a, b, count * sizeof *a) == 0;
}

/* Whether two readings of a seal note say the same: where it is, what it seals, what it covers
 * and masks. */
static bool same_note(const mp_seal_note_t* a, const mp_seal_note_t* b) {
  const mp_seal_v1_t *x = &a->seal, *y = &b->seal;
  return a->note == b->note && x->file_size == y->file_size && x->blob_offset == y->blob_offset &&
         x->blob_vaddr == y->blob_vaddr && x->blob_size == y->blob_size &&
         x->payloads_offset == y->payloads_offset && x->payloads_size == y->payloads_size &&
         x->digest_low == y->digest_low && x->digest_high == y->digest_high &&
         x->version == y->version && x->flags == y->flags && a->range_count == b->range_count &&
         a->mask_count == b->mask_count && same_ranges(a->ranges, b->ranges, a->range_count) &&
         same_ranges(a->masks, b->masks, a->mask_count);
}

static mp_status_t changed_while_verified(const char* path, const char* what) {
  return mp_errorf(MP_ERR_UNTRUSTED,
                   "'%s' changed while it was being verified (%s): nothing of it was loaded; "
                   "load it again once nothing writes to it, or with a private copy "
                   "(private_copy=True, MP_LOAD_PRIVATE_COPY), which maps none of the file",
                   path, what);
}

/* The plan (which ranges to hash, which stay mapped from the file) was made from reads of the
 * file before it was hashed, which a writer racing the load controls. Make it again from the
 * verified copy, whose bytes are the hashed ones: the seal note must be the one whose ranges
 * were hashed, and every window kept must be one the verified blob index gives, that is the
 * page-aligned data of a signed const payload. Bytes a window covers are a hole in the copy,
 * so this re-planning sees only verified bytes or zeros; what it reads (the note, the blob
 * index, the const headers) lies outside every window it yields, so zeros in them would
 * have made it yield another plan. Otherwise a writer could show the planner a longer const
 * entry, keep the next payload (a kernel) mapped from the file, and write it after the load. */
static mp_status_t check_plan(int copy, uint64_t copy_size, uint64_t sealed_size,
                              const char* path, const signatures_t* sigs,
                              const mp_verified_library_t* v) {
  if (sigs->in_note) {
    uint8_t head[4096];
    uint64_t head_size = copy_size < sizeof head ? copy_size : sizeof head;
    if (!mp_file_read_at(copy, head, (size_t)head_size, 0)) head_size = 0;
    mp_seal_note_t verified;
    mp_status_t status = mp_seal_note_read(copy, copy_size, path, head, head_size, &verified);
    if (status != MP_OK) {
      mp_error_clear();
      return changed_while_verified(path, "its seal note as hashed is not the one read first");
    }
    bool same = same_note(&verified, &sigs->note);
    mp_seal_note_free(&verified);
    if (!same)
      return changed_while_verified(path, "the ranges hashed are not the ones its seal note "
                                          "as hashed covers");
  }
  if (v->window_count == 0) return MP_OK;
  mp_verified_library_t* derived = calloc(1, sizeof *derived);
  if (!derived) return mp_out_of_memory("checking a signed load");
  plan_windows(copy, sealed_size, path, derived);
  bool planned = true;
  for (uint64_t i = 0; i < v->window_count && planned; ++i) {
    planned = false;
    for (uint64_t k = 0; k < derived->window_count && !planned; ++k)
      planned = derived->windows[k].offset == v->windows[i].offset &&
                derived->windows[k].size == v->windows[i].size &&
                window_signed(&derived->windows[k], &sigs->what);
  }
  free(derived);
  if (!planned)
    return changed_while_verified(path, "bytes left mapped from the file are not the data of a "
                                        "const payload of its signed blob index");
  return MP_OK;
}

/* ---- the public face ------------------------------------------------------------------ */

void mp_verified_library_discard(mp_verified_library_t* v) {
  for (uint64_t i = 0; i < v->window_count; ++i)
    if (v->windows[i].mapping) munmap(v->windows[i].mapping, (size_t)v->windows[i].size);
  v->window_count = 0;
}

mp_status_t mp_verified_library_make(const char* path, const mp_trusted_key_t* keys,
                                     uint64_t num_keys, bool private_copy,
                                     mp_verified_library_t* out) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(mp_file_open(path, &fd, &id));
  signatures_t sigs;
  mp_status_t status = read_signatures(fd, id.size, path, &sigs);
  uint64_t count = sigs.count;
  if (status == MP_OK && count == 0)
    status = mp_signatures_require_trusted(NULL, 0, 0, false, path);
  int copy = -1;
  bool sealable = false;
  if (status == MP_OK) status = mp_file_anonymous("a verified copy of a library", &copy, &sealable);
  if (status == MP_OK && ftruncate(copy, (off_t)id.size) != 0)
    status = mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "cannot copy '%s' into memory: %s", path,
                       strerror(errno));
  if (status == MP_OK && !private_copy)
    plan_windows(fd, sigs.in_note ? id.size : sigs.signed_size, path, out);
  uint8_t digest[32];
  double clock = mp_trace_now_ms();
  /* Version 2: only what is signed goes into the copy (the rest, which nothing loads, stays
   * zeros); version 1: all of it, the block after the signed bytes. */
  if (status == MP_OK) status = hash_file(fd, path, &sigs.what, copy, out, digest);
  out->hash_ms = mp_trace_now_ms() - clock;
  if (status == MP_OK && !sigs.in_note &&
      !mp_file_write_at(copy, sigs.block, id.size - sigs.signed_size, sigs.signed_size))
    status = mp_errorf(MP_ERR_IO, "cannot copy '%s' into memory: %s", path, strerror(errno));
  mp_signature_info_t infos[8];
  bool trusted = false;
  if (status == MP_OK)
    status = check_records(&sigs, path, keys, num_keys, digest, infos, 8, &trusted);
  if (status == MP_OK)
    status = mp_signatures_require_trusted(infos, count, count < 8 ? count : 8, trusted, path);
  if (status == MP_OK)
    status = check_plan(copy, id.size, sigs.in_note ? id.size : sigs.signed_size, path, &sigs,
                        out);
  signatures_free(&sigs);
  close(fd);
  if (status == MP_OK) {
    /* Sealed only now: a memfd cannot be sealed against writes while written. */
    status = mp_file_finish_copy(copy, sealable, &out->fd, &out->id);
    copy = -1;
  }
  if (status != MP_OK) {
    if (copy >= 0) close(copy);
    mp_verified_library_discard(out);
  }
  return status;
}

mp_status_t mp_verified_library_place(mp_verified_library_t* v, mp_library_t* library) {
  for (uint64_t i = 0; i < v->window_count; ++i) {
    mp_verified_window_t* w = &v->windows[i];
    void* target;
    MP_RETURN_IF_ERROR(mp_library_readonly_address(library, w->offset, w->size, &target));
    if ((uintptr_t)target % (uintptr_t)sysconf(_SC_PAGESIZE) != 0)
      return mp_errorf(MP_ERR_FORMAT, "'%s': its payloads are not page-aligned in memory",
                       mp_library_path(library));
    void* moved = mremap(w->mapping, (size_t)w->size, (size_t)w->size,
                         MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (moved == MAP_FAILED)
      return mp_errorf(MP_ERR_IO, "'%s': cannot move its verified payloads into place: %s",
                       mp_library_path(library), strerror(errno));
    w->mapping = NULL; /* the library's image owns it now: dlclose unmaps it */
  }
  return MP_OK;
}

mp_status_t mp_verified_library_check(const char* path, const mp_trusted_key_t* keys,
                                      uint64_t num_keys, mp_signature_info_t* out_infos,
                                      uint64_t capacity, uint64_t* out_count) {
  *out_count = 0;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(mp_file_open(path, &fd, &id));
  signatures_t sigs;
  mp_status_t status = read_signatures(fd, id.size, path, &sigs);
  uint64_t count = sigs.count;
  mp_signature_info_t* infos = status == MP_OK ? calloc(count ? count : 1, sizeof *infos) : NULL;
  if (status == MP_OK && !infos) status = mp_out_of_memory("reading signatures");
  bool trusted = false;
  if (status == MP_OK && count > 0) /* who signed: listing signers costs no hashing */
    status = mp_signatures_check(sigs.block, count, path, keys, num_keys, NULL, 0, infos, count,
                                 &trusted);
  bool any_trusted = false;
  for (uint64_t i = 0; status == MP_OK && i < count; ++i) any_trusted |= infos[i].trusted != 0;
  if (status == MP_OK && any_trusted) {
    mp_verified_library_t none = {.fd = -1};
    uint8_t digest[32];
    status = hash_file(fd, path, &sigs.what, -1, &none, digest);
    if (status == MP_OK)
      status = check_records(&sigs, path, keys, num_keys, digest, infos, count, &trusted);
  }
  for (uint64_t i = 0; status == MP_OK && out_infos && i < count && i < capacity; ++i)
    out_infos[i] = infos[i];
  free(infos);
  signatures_free(&sigs);
  close(fd);
  if (status == MP_OK) *out_count = count;
  return status;
}
