/* The version 2 seal: the note found through the program headers, what the seal covers, and
 * its digest checked by reading the file (files/seal_note.h; docs/format.md, "The seal"). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pread */
#endif
#include "files/seal_note.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/bytes.h"
#include "core/checksum.h"
#include "core/error.h"
#include "files/elf_segments.h"
#include "files/file.h"

enum {
  EHDR_SIZE = 64,
  PHDR_SIZE = 56,
  NOTE_HEADER_SIZE = 12 + 8, /* namesz, descsz, type, then the name "modpack\0" */
  MAX_NOTES = 1 << 20,       /* a PT_NOTE segment larger than this is not searched */
  DESC_DIGEST = offsetof(mp_seal_note_v2_t, digest_low),
  DESC_SLOTS = offsetof(mp_seal_note_v2_t, signatures),
};

/* The notes are read where the runtime loads what they seal: 64-bit little-endian hosts. */
#if __SIZEOF_POINTER__ == 8 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MP_SEAL_NOTES 1
#else
#define MP_SEAL_NOTES 0
#endif

/* [offset, offset + size) of the file, from |head| when it holds them, else read. */
static bool read_part(int fd, const uint8_t* head, uint64_t head_size, void* out, uint64_t size,
                      uint64_t offset) {
  if (mp_in_bounds(offset, size, head_size)) {
    memcpy(out, head + offset, (size_t)size);
    return true;
  }
  return mp_file_read_at(fd, out, (size_t)size, offset);
}

static mp_status_t unreadable(const char* path, uint64_t offset) {
  return mp_errorf(MP_ERR_IO, "cannot read '%s' at byte %" PRIu64 ": %s", path, offset,
                   strerror(errno ? errno : EIO));
}

static int by_begin(const void* a, const void* b) {
  const mp_file_range_t *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* The note header the seal note starts with. */
static void note_header(uint8_t out[NOTE_HEADER_SIZE]) {
  const uint32_t words[3] = {8, MP_SEAL_NOTE_DESC_SIZE, MP_SEAL_NOTE_TYPE};
  for (int w = 0; w < 3; ++w)
    for (int b = 0; b < 4; ++b) out[4 * w + b] = (uint8_t)(words[w] >> (8 * b));
  memcpy(out + 12, MP_SEAL_NOTE_NAME, 8); /* with its NUL */
}

mp_status_t mp_seal_refuse_newer(const char* path, uint32_t version) {
  return mp_errorf(MP_ERR_INCOMPATIBLE,
                   "'%s' has a version %u seal; this runtime reads seal versions 1 to %d: "
                   "upgrade modpack to load it",
                   path, version, MP_SEAL_VERSION);
}

/* The file offset of the seal note's descriptor: the first 4-byte-aligned seal note header in a
 * PT_NOTE segment, read where a PT_LOAD maps it (as the loader sees it), or 0 (none). A note of
 * modpack's seal type whose descriptor has another size and says a version above this
 * runtime's (a later seal's note) is refused as newer when no seal note is found. */
static mp_status_t find_note(int fd, const char* path, const uint8_t* head, uint64_t head_size,
                             const ElfW(Phdr) * phdrs, uint64_t count, uint64_t* out) {
  *out = 0;
  uint32_t newer = 0;
  uint8_t want[NOTE_HEADER_SIZE];
  note_header(want);
  for (uint64_t i = 0; i < count && *out == 0; ++i) {
    const ElfW(Phdr)* n = &phdrs[i];
    if (n->p_type != PT_NOTE || n->p_filesz < NOTE_HEADER_SIZE + MP_SEAL_NOTE_DESC_SIZE ||
        n->p_filesz > MAX_NOTES)
      continue;
    uint64_t offset = 0;
    bool mapped = false;
    for (uint64_t j = 0; j < count && !mapped; ++j) {
      const ElfW(Phdr)* l = &phdrs[j];
      if (l->p_type == PT_LOAD && n->p_vaddr >= l->p_vaddr && n->p_vaddr - l->p_vaddr <= l->p_filesz &&
          n->p_filesz <= l->p_filesz - (n->p_vaddr - l->p_vaddr)) {
        offset = l->p_offset + (n->p_vaddr - l->p_vaddr);
        mapped = true;
      }
    }
    if (!mapped) continue;
    uint8_t* notes = malloc((size_t)n->p_filesz);
    if (!notes) return mp_out_of_memory("reading a library's notes");
    if (!read_part(fd, head, head_size, notes, n->p_filesz, offset)) {
      free(notes);
      return unreadable(path, offset);
    }
    for (uint64_t at = 0; at + NOTE_HEADER_SIZE + 4 <= n->p_filesz; at += 4) {
      if (memcmp(notes + at, want, 4) != 0 || memcmp(notes + at + 8, want + 8, 12) != 0)
        continue; /* not modpack's seal note, whatever its descriptor's size */
      if (memcmp(notes + at + 4, want + 4, 4) == 0) {
        if (at + NOTE_HEADER_SIZE + MP_SEAL_NOTE_DESC_SIZE > n->p_filesz) continue;
        *out = offset + at + NOTE_HEADER_SIZE;
        break;
      }
      uint32_t version = mp_load_le32(notes + at + NOTE_HEADER_SIZE);
      if (version > MP_SEAL_VERSION && newer == 0) newer = version;
    }
    free(notes);
  }
  if (*out == 0 && newer != 0) return mp_seal_refuse_newer(path, newer);
  return MP_OK;
}

/* Whether the file's first |head_size| bytes hold a version 2 seal note (at a multiple of 4
 * bytes, where linkers put notes, in the first segment): found without the program headers,
 * to say what malformed ones mean. */
static bool has_v2_note(const uint8_t* head, uint64_t head_size) {
  uint8_t want[NOTE_HEADER_SIZE];
  note_header(want);
  for (uint64_t at = 0; at + NOTE_HEADER_SIZE + 4 <= head_size; at += 4)
    if (memcmp(head + at, want, NOTE_HEADER_SIZE) == 0 &&
        mp_load_le32(head + at + NOTE_HEADER_SIZE) == MP_SEAL_VERSION)
      return true;
  return false;
}

/* The note's fields against the file: where it says the blob lies must be file bytes a PT_LOAD
 * maps at the address it says, the payloads inside the blob. */
static mp_status_t check_fields(const mp_seal_v1_t* s, const ElfW(Phdr) * phdrs, uint64_t count,
                                const char* path) {
  bool blob_ok = false;
  if (s->blob_size == 0) {
    blob_ok = s->blob_offset == 0 && s->blob_vaddr == 0;
  } else {
    for (uint64_t i = 0; i < count && !blob_ok; ++i) {
      const ElfW(Phdr)* l = &phdrs[i];
      blob_ok = l->p_type == PT_LOAD && s->blob_offset >= l->p_offset &&
                s->blob_offset - l->p_offset <= l->p_filesz &&
                s->blob_size <= l->p_filesz - (s->blob_offset - l->p_offset) &&
                s->blob_vaddr >= l->p_vaddr &&
                s->blob_vaddr - l->p_vaddr == s->blob_offset - l->p_offset;
    }
  }
  bool payloads_ok = s->payloads_size == 0 ? s->payloads_offset == 0 || s->blob_size > 0
                                           : s->blob_size > 0 && s->payloads_offset >= s->blob_offset &&
                                                 s->payloads_offset - s->blob_offset <= s->blob_size &&
                                                 s->payloads_size <= s->blob_size - (s->payloads_offset -
                                                                                     s->blob_offset);
  if (!blob_ok || !payloads_ok)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: its seal places the blob at [%" PRIu64 ", +%" PRIu64
                     ") (address %#" PRIx64 ") and the payloads at [%" PRIu64 ", +%" PRIu64
                     "), which no loadable segment holds so; copy or export it again",
                     path, s->blob_offset, s->blob_size, s->blob_vaddr, s->payloads_offset,
                     s->payloads_size);
  return MP_OK;
}

/* Decode the descriptor at |d| into |out|. */
static mp_status_t decode(const uint8_t* d, const char* path, mp_seal_note_t* out) {
  mp_seal_v1_t* s = &out->seal;
  s->version = mp_load_le32(d + offsetof(mp_seal_note_v2_t, version));
  s->flags = mp_load_le32(d + offsetof(mp_seal_note_v2_t, flags));
  s->blob_vaddr = mp_load_le64(d + offsetof(mp_seal_note_v2_t, blob_vaddr));
  s->blob_size = mp_load_le64(d + offsetof(mp_seal_note_v2_t, blob_size));
  s->blob_offset = mp_load_le64(d + offsetof(mp_seal_note_v2_t, blob_offset));
  s->payloads_offset = mp_load_le64(d + offsetof(mp_seal_note_v2_t, payloads_offset));
  s->payloads_size = mp_load_le64(d + offsetof(mp_seal_note_v2_t, payloads_size));
  s->digest_low = mp_load_le64(d + offsetof(mp_seal_note_v2_t, digest_low));
  s->digest_high = mp_load_le64(d + offsetof(mp_seal_note_v2_t, digest_high));
  memcpy(s->magic, MP_SEAL_MAGIC, sizeof s->magic);
  uint32_t slots = mp_load_le32(d + offsetof(mp_seal_note_v2_t, signature_slots));
  uint32_t reserved = mp_load_le32(d + offsetof(mp_seal_note_v2_t, reserved));
  memcpy(out->signatures, d + DESC_SLOTS, sizeof out->signatures);
  static const uint8_t zeros[DESC_SLOTS] = {0};
  if (s->version == 0 && memcmp(d, zeros, DESC_SLOTS) == 0)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "'%s' carries modpack's seal note, but it was never sealed (linked from the "
                     "objects of an export by another tool)",
                     path);
  if (s->version > MP_SEAL_VERSION) return mp_seal_refuse_newer(path, s->version);
  if (s->version != MP_SEAL_VERSION || s->flags != 0 || slots != MP_SEAL_NOTE_SIGNATURES ||
      reserved != 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: its seal note has version %u, flags %u and %u signature "
                     "slots; copy or export it again",
                     path, s->version, s->flags, slots);
  /* Each slot free (zeros) or a record in its form, which every load checks: only a signed
   * load can tell more (whether the signature holds). */
  static const uint8_t empty[MP_SIGNATURE_SIZE] = {0};
  for (int i = 0; i < MP_SEAL_NOTE_SIGNATURES; ++i) {
    const uint8_t* r = out->signatures + i * MP_SIGNATURE_SIZE;
    if (memcmp(r, empty, MP_SIGNATURE_SIZE) == 0) continue;
    if (memcmp(r, MP_SIGNATURE_MAGIC, 8) != 0 ||
        mp_load_le32(r + offsetof(mp_signature_v1_t, algorithm)) != MP_SIGNATURE_ED25519 ||
        mp_load_le32(r + offsetof(mp_signature_v1_t, reserved)) != 0 ||
        memcmp(r + offsetof(mp_signature_v1_t, reserved2), empty, 16) != 0)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s' is damaged: signature slot %d of its seal note holds no signature "
                       "record; copy or export it again",
                       path, i);
  }
  return MP_OK;
}

void mp_seal_note_free(mp_seal_note_t* note) {
  free(note->ranges);
  free(note->masks);
  note->ranges = note->masks = NULL;
  note->range_count = note->mask_count = 0;
}

/* What the seal covers and what of it is masked (files/seal_note.h), into |out|. */
static mp_status_t coverage(const ElfW(Phdr) * phdrs, uint64_t count, uint64_t phoff,
                            mp_seal_note_t* out) {
  out->ranges = malloc((size_t)(count + 2) * sizeof *out->ranges);
  out->masks = malloc((size_t)(2 * count + 4) * sizeof *out->masks);
  if (!out->ranges || !out->masks) return mp_out_of_memory("checking a seal");
  uint64_t n = 0, m = 0;
  out->ranges[n++] = (mp_file_range_t){0, EHDR_SIZE};
  out->ranges[n++] = (mp_file_range_t){phoff, phoff + count * PHDR_SIZE};
  out->masks[m++] = (mp_file_range_t){40, 48}; /* e_shoff */
  out->masks[m++] = (mp_file_range_t){58, 64}; /* e_shentsize, e_shnum, e_shstrndx */
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t at = phoff + i * PHDR_SIZE;
    out->masks[m++] = (mp_file_range_t){at + offsetof(ElfW(Phdr), p_paddr),
                                        at + offsetof(ElfW(Phdr), p_paddr) + 8};
    if (phdrs[i].p_type != PT_LOAD) {
      out->masks[m++] = (mp_file_range_t){at + offsetof(ElfW(Phdr), p_offset),
                                          at + offsetof(ElfW(Phdr), p_offset) + 8};
    } else if (phdrs[i].p_filesz > 0) {
      out->ranges[n++] = (mp_file_range_t){phdrs[i].p_offset, phdrs[i].p_offset + phdrs[i].p_filesz};
    }
  }
  out->masks[m++] = (mp_file_range_t){out->note + DESC_DIGEST, out->note + DESC_DIGEST + 16};
  out->masks[m++] = (mp_file_range_t){out->note + DESC_SLOTS, out->note + MP_SEAL_NOTE_DESC_SIZE};
  qsort(out->ranges, (size_t)n, sizeof *out->ranges, by_begin);
  qsort(out->masks, (size_t)m, sizeof *out->masks, by_begin);
  uint64_t merged = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (merged > 0 && out->ranges[i].begin <= out->ranges[merged - 1].end) {
      if (out->ranges[i].end > out->ranges[merged - 1].end)
        out->ranges[merged - 1].end = out->ranges[i].end;
    } else {
      out->ranges[merged++] = out->ranges[i];
    }
  }
  out->range_count = merged;
  out->mask_count = m;
  return MP_OK;
}

/* mp_seal_note_read, with the note's fields decoded and checked when |check_note| (a load, a
 * tool), or not read at all (mp_seal_coverage: a writer, before it fills them in). */
static mp_status_t read_note(int fd, uint64_t file_size, const char* path, const uint8_t* head,
                             uint64_t head_size, bool check_note, mp_seal_note_t* out) {
  memset(out, 0, sizeof *out);
  uint8_t ehdr[EHDR_SIZE];
  bool elf64le = MP_SEAL_NOTES && file_size >= EHDR_SIZE &&
                 read_part(fd, head, head_size, ehdr, EHDR_SIZE, 0) &&
                 memcmp(ehdr, ELFMAG, SELFMAG) == 0 && ehdr[EI_CLASS] == ELFCLASS64 &&
                 ehdr[EI_DATA] == ELFDATA2LSB;
  if (!elf64le)
    return mp_errorf(MP_ERR_NOT_FOUND, "'%s' is not a 64-bit little-endian ELF file", path);
  uint64_t phoff = mp_load_le64(ehdr + offsetof(Elf64_Ehdr, e_phoff));
  uint64_t phentsize = mp_load_le16(ehdr + offsetof(Elf64_Ehdr, e_phentsize));
  uint64_t count = mp_load_le16(ehdr + offsetof(Elf64_Ehdr, e_phnum));
  /* A relocatable object (a .tar's member, a system library) has no program headers, through
   * which alone a seal note is found: it is not sealed by a note (a .tar's seal is its
   * MODPACK-SEAL member; a system library carries none), as before version 2. A library whose
   * e_type or e_phnum were damaged so is refused by its trailer's version (or as unsealed). */
  if (mp_load_le16(ehdr + offsetof(Elf64_Ehdr, e_type)) == ET_REL || count == 0)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "'%s' has no program headers (a relocatable object, not a shared library), "
                     "so no seal note",
                     path);
  if (phentsize != PHDR_SIZE || count == 0 || count == PN_XNUM ||
      !mp_in_bounds(phoff, count * PHDR_SIZE, file_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is truncated or damaged: its program headers (%" PRIu64
                     " of %" PRIu64 " bytes at byte %" PRIu64 ") do not lie in the %" PRIu64
                     "-byte file; copy or export it again",
                     path, count, phentsize, phoff, file_size);
  ElfW(Phdr)* phdrs = malloc((size_t)(count * PHDR_SIZE));
  if (!phdrs) return mp_out_of_memory("reading program headers");
  mp_status_t status = read_part(fd, head, head_size, phdrs, count * PHDR_SIZE, phoff)
                           ? mp_elf_segments_check(phdrs, count, file_size, path,
                                                   has_v2_note(head, head_size))
                           : unreadable(path, phoff);
  if (status == MP_OK) status = find_note(fd, path, head, head_size, phdrs, count, &out->note);
  if (status == MP_OK && out->note == 0)
    status = mp_errorf(MP_ERR_NOT_FOUND, "'%s' carries no seal note", path);
  uint8_t desc[MP_SEAL_NOTE_DESC_SIZE];
  if (check_note && status == MP_OK &&
      !read_part(fd, head, head_size, desc, sizeof desc, out->note))
    status = unreadable(path, out->note);
  if (check_note && status == MP_OK) status = decode(desc, path, out);
  if (check_note && status == MP_OK) status = check_fields(&out->seal, phdrs, count, path);
  if (status == MP_OK) status = coverage(phdrs, count, phoff, out);
  free(phdrs);
  out->seal.file_size = file_size;
  if (status != MP_OK) mp_seal_note_free(out);
  return status;
}

mp_status_t mp_seal_note_read(int fd, uint64_t file_size, const char* path, const uint8_t* head,
                              uint64_t head_size, mp_seal_note_t* out) {
  return read_note(fd, file_size, path, head, head_size, true, out);
}

mp_status_t mp_seal_coverage(int fd, mp_file_range_t* ranges, uint64_t range_capacity,
                             uint64_t* out_range_count, mp_file_range_t* masks,
                             uint64_t mask_capacity, uint64_t* out_mask_count,
                             uint64_t* out_note) {
  if (fd < 0 || !out_range_count || !out_mask_count || !out_note ||
      (range_capacity && !ranges) || (mask_capacity && !masks))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_seal_coverage: NULL or invalid argument");
  struct stat st;
  if (fstat(fd, &st) != 0)
    return mp_errorf(MP_ERR_IO, "mp_seal_coverage: cannot stat descriptor %d: %s", fd,
                     strerror(errno));
  char path[32];
  snprintf(path, sizeof path, "descriptor %d", fd);
  mp_seal_note_t note;
  mp_status_t status = read_note(fd, (uint64_t)st.st_size, path, NULL, 0, false, &note);
  if (status != MP_OK) return status;
  *out_range_count = note.range_count;
  *out_mask_count = note.mask_count;
  *out_note = note.note;
  for (uint64_t i = 0; i < note.range_count && i < range_capacity; ++i) ranges[i] = note.ranges[i];
  for (uint64_t i = 0; i < note.mask_count && i < mask_capacity; ++i) masks[i] = note.masks[i];
  mp_seal_note_free(&note);
  return MP_OK;
}

/* Hash the file's bytes [offset, offset + size), held at |bytes|, with the masked ones as
 * zeros. */
static void hash_masked(mp_hash128_t* hash, const mp_seal_note_t* note, uint64_t offset,
                        const uint8_t* bytes, uint64_t size) {
  static const uint8_t zeros[MP_SEAL_NOTE_DESC_SIZE] = {0};
  uint64_t at = offset, end = offset + size;
  for (uint64_t i = 0; i < note->mask_count && note->masks[i].begin < end; ++i) {
    const mp_file_range_t* m = &note->masks[i];
    if (m->end <= at) continue;
    if (m->begin > at) {
      mp_hash128_update(hash, bytes + (at - offset), (size_t)(m->begin - at));
      at = m->begin;
    }
    uint64_t zero_end = m->end < end ? m->end : end;
    while (at < zero_end) {
      uint64_t n = zero_end - at < sizeof zeros ? zero_end - at : sizeof zeros;
      mp_hash128_update(hash, zeros, (size_t)n);
      at += n;
    }
  }
  if (at < end) mp_hash128_update(hash, bytes + (at - offset), (size_t)(end - at));
}

void mp_seal_note_mask(const mp_seal_note_t* note, uint64_t offset, uint8_t* bytes,
                       uint64_t size) {
  for (uint64_t i = 0; i < note->mask_count && note->masks[i].begin < offset + size; ++i) {
    const mp_file_range_t* m = &note->masks[i];
    if (m->end <= offset) continue;
    uint64_t begin = m->begin > offset ? m->begin : offset;
    uint64_t end = m->end < offset + size ? m->end : offset + size;
    memset(bytes + (begin - offset), 0, (size_t)(end - begin));
  }
}

/* Hash [begin, end) of the file: what of it |buffer| holds as the head, then read into it. */
static mp_status_t hash_piece(int fd, const char* path, const mp_seal_note_t* note,
                              mp_hash128_t* hash, uint8_t* buffer, uint64_t head_size,
                              uint64_t capacity, uint64_t begin, uint64_t end) {
  if (begin < head_size) {
    uint64_t stop = end < head_size ? end : head_size;
    hash_masked(hash, note, begin, buffer + begin, stop - begin);
    begin = stop;
  }
  while (begin < end) { /* past the head, which is no longer needed: ranges come in order */
    uint64_t n = end - begin < capacity ? end - begin : capacity;
    if (!mp_file_read_at(fd, buffer, (size_t)n, begin)) return unreadable(path, begin);
    hash_masked(hash, note, begin, buffer, n);
    begin += n;
  }
  return MP_OK;
}

mp_status_t mp_seal_note_check(int fd, const char* path, const mp_seal_note_t* note,
                               uint8_t* buffer, uint64_t head_size, uint64_t capacity) {
  mp_hash128_t* hash = mp_hash128_new();
  if (!hash) return mp_out_of_memory("checking the seal");
  uint64_t skip_begin = note->seal.payloads_offset;
  uint64_t skip_end = note->seal.payloads_offset + note->seal.payloads_size;
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; i < note->range_count && status == MP_OK; ++i) {
    uint64_t begin = note->ranges[i].begin, end = note->ranges[i].end;
    if (skip_end > skip_begin && skip_begin < end && begin < skip_end) {
      if (begin < skip_begin)
        status = hash_piece(fd, path, note, hash, buffer, head_size, capacity, begin, skip_begin);
      begin = skip_end > begin ? skip_end : begin;
    }
    if (status == MP_OK && begin < end)
      status = hash_piece(fd, path, note, hash, buffer, head_size, capacity, begin, end);
  }
  if (status == MP_OK) {
    mp_digest128_t digest = mp_hash128_digest(hash);
    if (digest.low != note->seal.digest_low || digest.high != note->seal.digest_high)
      status = mp_errorf(MP_ERR_FORMAT,
                         "'%s' is damaged: the bytes the dynamic loader reads (headers, code, "
                         "data, dynamic symbols, the blob's index) do not match its seal "
                         "(XXH3-128 %016" PRIx64 "%016" PRIx64 ", sealed %016" PRIx64 "%016" PRIx64
                         "): the copy is damaged, or a tool changed what it loads after export "
                         "(strippers do not: they keep the seal); copy or export it again",
                         path, digest.high, digest.low, note->seal.digest_high,
                         note->seal.digest_low);
  }
  mp_hash128_free(hash);
  return status;
}
