/* Checking a file's seal (modpack/format.h): version 1, the trailer's fields against the file,
 * then XXH3-128 of every byte outside the payloads, read with pread in large chunks; version 2,
 * a library's seal note (files/seal_note.c), which the trailer of such a library only points
 * to. Nothing of the file is mapped or run, so a damaged file gives an error here, never a
 * crash later. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pread */
#endif
#include "files/seal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/checksum.h"
#include "core/error.h"
#include "files/file.h"
#include "files/seal_note.h"
#include "files/signatures.h"

enum {
  CHUNK = 1 << 20,
  DIGEST_FIELD = offsetof(mp_seal_v1_t, digest_low),
  NOTE_HEAD = MP_SEAL_NOTE_HEAD, /* read to find a seal note (files/seal.h) */
  HEAD_READ = 64 << 10,          /* a version 2 check's first read: a small library whole */
};

/* Hash the file's bytes [begin, end) into |hash|. */
static mp_status_t hash_range(int fd, const char* path, uint8_t* buffer, uint64_t begin,
                              uint64_t end, mp_hash128_t* hash) {
  while (begin < end) {
    size_t n = end - begin < CHUNK ? (size_t)(end - begin) : CHUNK;
    if (!mp_file_read_at(fd, buffer, n, begin))
      return mp_errorf(MP_ERR_IO, "cannot read '%s' at byte %" PRIu64 ": %s", path, begin,
                       strerror(errno ? errno : EIO));
    mp_hash128_update(hash, buffer, n);
    begin += n;
  }
  return MP_OK;
}

static mp_seal_v1_t decode(const uint8_t* p) {
  mp_seal_v1_t s;
  s.file_size = mp_load_le64(p + offsetof(mp_seal_v1_t, file_size));
  s.blob_offset = mp_load_le64(p + offsetof(mp_seal_v1_t, blob_offset));
  s.blob_vaddr = mp_load_le64(p + offsetof(mp_seal_v1_t, blob_vaddr));
  s.blob_size = mp_load_le64(p + offsetof(mp_seal_v1_t, blob_size));
  s.payloads_offset = mp_load_le64(p + offsetof(mp_seal_v1_t, payloads_offset));
  s.payloads_size = mp_load_le64(p + offsetof(mp_seal_v1_t, payloads_size));
  s.digest_low = mp_load_le64(p + offsetof(mp_seal_v1_t, digest_low));
  s.digest_high = mp_load_le64(p + offsetof(mp_seal_v1_t, digest_high));
  s.version = mp_load_le32(p + offsetof(mp_seal_v1_t, version));
  s.flags = mp_load_le32(p + offsetof(mp_seal_v1_t, flags));
  memcpy(s.magic, p + offsetof(mp_seal_v1_t, magic), sizeof s.magic);
  return s;
}

/* The fields of a version 1 trailer agree with the file and with each other. (A trailer of a
 * later version never comes here: read_trailer sends it to the note, and note_missing refuses
 * one newer than this runtime.) */
static mp_status_t check_fields(const mp_seal_v1_t* s, uint64_t file_size, const char* path) {
  if (s->version == 0 || s->flags != 0)
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its seal has version %u and flags %u", path,
                     s->version, s->flags);
  if (s->file_size != file_size)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: its seal says the file has %" PRIu64
                     " bytes, but it has %" PRIu64 "; copy or export it again",
                     path, s->file_size, file_size);
  uint64_t body = file_size - MP_SEAL_SIZE;
  bool blob_ok = s->blob_size == 0
                     ? s->blob_offset == 0 && s->blob_vaddr == 0
                     : s->blob_offset <= body && s->blob_size <= body - s->blob_offset;
  bool payloads_ok = s->payloads_size == 0 ||
                     (s->blob_size > 0 && s->payloads_offset >= s->blob_offset &&
                      s->payloads_offset - s->blob_offset <= s->blob_size &&
                      s->payloads_size <= s->blob_size - (s->payloads_offset - s->blob_offset));
  if (!blob_ok || !payloads_ok)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: its seal places the blob at [%" PRIu64 ", +%" PRIu64
                     ") and the payloads at [%" PRIu64 ", +%" PRIu64 ") in a %" PRIu64 "-byte file",
                     path, s->blob_offset, s->blob_size, s->payloads_offset, s->payloads_size,
                     file_size);
  return MP_OK;
}

/* A trailer that says the seal is a note, in a file where none was found: a seal newer than
 * this runtime (whose note it does not know), or a damaged version 2 library. */
static mp_status_t note_missing(const uint8_t* raw, const char* path) {
  uint32_t version = mp_load_le32(raw + offsetof(mp_seal_v1_t, version));
  if (version > MP_SEAL_VERSION) return mp_seal_refuse_newer(path, version);
  char why[256];
  snprintf(why, sizeof why, "%s", mp_error_message());
  return mp_errorf(MP_ERR_FORMAT,
                   "'%s' is damaged: it ends with the trailer of a version %u seal, but %s; copy "
                   "or export it again",
                   path, version, why);
}

/* The seal a file says it has: a version 1 trailer, read and checked into |out| (*out_note
 * false); or a note to look for (*out_note true, |raw| then holds a version 2 trailer, or no
 * trailer at all when *out_trailer is false). */
static mp_status_t read_trailer(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out,
                                uint8_t raw[MP_SEAL_SIZE], uint64_t* out_sealed_size,
                                bool* out_note, bool* out_trailer) {
  bool read =
      file_size >= MP_SEAL_SIZE && mp_file_read_at(fd, raw, MP_SEAL_SIZE, file_size - MP_SEAL_SIZE);
  if (read && memcmp(raw + MP_SEAL_SIZE - 8, MP_SIGNATURES_MAGIC, 8) == 0) {
    /* A signed library: its seal ends where its signature block begins. */
    uint64_t signatures;
    MP_RETURN_IF_ERROR(mp_signatures_locate(fd, file_size, path, &file_size, &signatures));
    read =
        file_size >= MP_SEAL_SIZE && mp_file_read_at(fd, raw, MP_SEAL_SIZE, file_size - MP_SEAL_SIZE);
  }
  *out_trailer =
      read && memcmp(raw + offsetof(mp_seal_v1_t, magic), MP_SEAL_MAGIC, sizeof out->magic) == 0;
  *out_sealed_size = file_size;
  /* A seal note, or no seal: the trailer of a version 2 library only says which. */
  *out_note = !*out_trailer ||
              mp_load_le32(raw + offsetof(mp_seal_v1_t, version)) > MP_SEAL_TRAILER_VERSION;
  if (*out_note) return MP_OK;
  *out = decode(raw);
  return check_fields(out, file_size, path);
}

/* The seal note of the file, read with its first |head_size| bytes at |head|, or why none. */
static mp_status_t read_note(int fd, uint64_t file_size, const char* path, const uint8_t* head,
                             uint64_t head_size, const uint8_t* raw, bool trailer,
                             mp_seal_note_t* out) {
  mp_status_t status = mp_seal_note_read(fd, file_size, path, head, head_size, out);
  if (status != MP_ERR_NOT_FOUND) return status;
  if (trailer) return note_missing(raw, path);
  return mp_errorf(MP_ERR_NOT_FOUND,
                   "'%s' carries no modpack seal (no seal note, no seal trailer): modpack's "
                   "export did not make it, or it lost its seal after export",
                   path);
}

mp_status_t mp_seal_read_fd(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out,
                            uint8_t raw[MP_SEAL_SIZE], uint64_t* out_sealed_size) {
  bool note, trailer;
  MP_RETURN_IF_ERROR(
      read_trailer(fd, file_size, path, out, raw, out_sealed_size, &note, &trailer));
  if (!note) return MP_OK;
  uint8_t head[NOTE_HEAD];
  uint64_t head_size = file_size < sizeof head ? file_size : sizeof head;
  if (!mp_file_read_at(fd, head, (size_t)head_size, 0)) head_size = 0;
  mp_seal_note_t found;
  MP_RETURN_IF_ERROR(read_note(fd, file_size, path, head, head_size, raw, trailer, &found));
  *out = found.seal;
  mp_seal_note_free(&found);
  return MP_OK;
}

/* The longest piece the digest of |note| reads: a covered range, the payloads cut out. */
static uint64_t longest_piece(const mp_seal_note_t* note) {
  uint64_t skip_begin = note->seal.payloads_offset;
  uint64_t skip_end = note->seal.payloads_offset + note->seal.payloads_size;
  uint64_t longest = 0;
  for (uint64_t i = 0; i < note->range_count; ++i) {
    uint64_t begin = note->ranges[i].begin, end = note->ranges[i].end;
    uint64_t pieces[2][2] = {{begin, end}, {0, 0}};
    if (skip_end > skip_begin && skip_begin < end && begin < skip_end) {
      pieces[0][1] = skip_begin > begin ? skip_begin : begin;
      pieces[1][0] = skip_end > begin ? skip_end : begin;
      pieces[1][1] = end > pieces[1][0] ? end : pieces[1][0];
    }
    for (int k = 0; k < 2; ++k)
      if (pieces[k][1] - pieces[k][0] > longest) longest = pieces[k][1] - pieces[k][0];
  }
  return longest;
}

/* A version 2 seal: the note read from the file's head (one read: all a small library's
 * covered bytes), then the rest of what the digest covers into a buffer no larger than its
 * longest piece, so that a library whose payloads make most of the file reads, allocates and
 * touches only its few covered pages. */
static mp_status_t check_note(int fd, uint64_t file_size, const char* path, const uint8_t* raw,
                              bool trailer, mp_seal_v1_t* out) {
  uint64_t head_size = file_size < HEAD_READ ? file_size : HEAD_READ;
  uint8_t* buffer = malloc((size_t)head_size + 1);
  if (!buffer) return mp_out_of_memory("checking the seal");
  if (!mp_file_read_at(fd, buffer, (size_t)head_size, 0)) head_size = 0;
  mp_seal_note_t note;
  mp_status_t status = read_note(fd, file_size, path, buffer, head_size, raw, trailer, &note);
  if (status == MP_OK) {
    uint64_t capacity = longest_piece(&note);
    capacity = capacity < CHUNK ? capacity : CHUNK;
    if (capacity > head_size) {
      uint8_t* larger = realloc(buffer, (size_t)capacity + 1);
      if (larger)
        buffer = larger;
      else
        status = mp_out_of_memory("checking the seal");
    } else {
      capacity = head_size;
    }
    if (status == MP_OK) status = mp_seal_note_check(fd, path, &note, buffer, head_size, capacity);
    if (status == MP_OK) *out = note.seal;
    mp_seal_note_free(&note);
  }
  free(buffer);
  return status;
}

mp_status_t mp_seal_check_fd(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out) {
  uint8_t raw[MP_SEAL_SIZE];
  mp_seal_v1_t seal;
  bool note, has_trailer;
  MP_RETURN_IF_ERROR(
      read_trailer(fd, file_size, path, &seal, raw, &file_size, &note, &has_trailer));
  if (note) return check_note(fd, file_size, path, raw, has_trailer, out);

  /* [0, payloads) then [end of payloads, digest field): one range when there are none. */
  uint64_t trailer = file_size - MP_SEAL_SIZE;
  uint64_t first_end = seal.payloads_size ? seal.payloads_offset : 0;
  uint64_t second_begin = seal.payloads_size ? seal.payloads_offset + seal.payloads_size : 0;
  /* No larger than the longer range: a small library's buffer comes from the heap, not from
   * a mapping made and unmapped for it. */
  uint64_t longest = first_end > trailer + DIGEST_FIELD - second_begin
                         ? first_end
                         : trailer + DIGEST_FIELD - second_begin;
  uint8_t* buffer = malloc(longest < CHUNK ? (size_t)longest + 1 : CHUNK);
  mp_hash128_t* hash = mp_hash128_new();
  mp_status_t status = buffer && hash ? MP_OK : mp_out_of_memory("checking the seal");
  static const uint8_t zeros[16] = {0};
  if (status == MP_OK) status = hash_range(fd, path, buffer, 0, first_end, hash);
  if (status == MP_OK)
    status = hash_range(fd, path, buffer, second_begin, trailer + DIGEST_FIELD, hash);
  if (status == MP_OK) {
    mp_hash128_update(hash, zeros, sizeof zeros);
    mp_hash128_update(hash, raw + DIGEST_FIELD + sizeof zeros,
                      MP_SEAL_SIZE - DIGEST_FIELD - sizeof zeros);
    mp_digest128_t digest = mp_hash128_digest(hash);
    if (digest.low != seal.digest_low || digest.high != seal.digest_high)
      status = mp_errorf(MP_ERR_FORMAT,
                         "'%s' is damaged: its bytes outside the payloads (code, headers, "
                         "symbol tables, the blob's index) do not match its seal "
                         "(XXH3-128 %016" PRIx64 "%016" PRIx64 ", sealed %016" PRIx64 "%016" PRIx64
                         "); copy or export it again",
                         path, digest.high, digest.low, seal.digest_high, seal.digest_low);
  }
  free(buffer);
  if (hash) mp_hash128_free(hash);
  if (status == MP_OK) *out = seal;
  return status;
}

mp_status_t mp_seal_check_file(const char* path, mp_seal_v1_t* out_seal) {
  if (!path || !out_seal)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_seal_check_file: NULL argument");
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(mp_file_open(path, &fd, &id));
  mp_status_t status = mp_seal_check_fd(fd, id.size, path, out_seal);
  close(fd);
  return status;
}
