/* The version 2 seal (modpack/format.h): its note, found through a library's program headers;
 * what the seal covers (the bytes the dynamic loader reads and maps); and the check of its
 * digest. Read before any of the file is mapped for use, like the trailer of version 1. */
#ifndef MODPACK_FILES_SEAL_NOTE_H_
#define MODPACK_FILES_SEAL_NOTE_H_

#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  mp_file_range_t* ranges; /* what the seal covers: sorted, disjoint, inside the file */
  uint64_t range_count;
  mp_file_range_t* masks; /* the pieces of them read as zeros, sorted */
  uint64_t mask_count;
  uint64_t note;     /* the file offset of the note's descriptor (mp_seal_note_v2_t) */
  mp_seal_v1_t seal; /* its fields, decoded (version 2; file_size: the file's size) */
  uint8_t signatures[MP_SEAL_NOTE_SIGNATURES * MP_SIGNATURE_SIZE]; /* its slots, as read */
} mp_seal_note_t;

/* The seal note of the |file_size|-byte file open as |fd| (|path| in messages) and what it
 * covers, after checking the program headers (files/elf_segments.h) and the note's fields
 * against them; nothing is hashed. |head| holds the file's first |head_size| bytes (fewer than
 * the file, or none): what lies in them is not read again. MP_ERR_NOT_FOUND when the file is
 * not a 64-bit little-endian ELF file, or carries no seal note, or one never sealed (the
 * message says which); MP_ERR_FORMAT when its headers or its note are damaged;
 * MP_ERR_INCOMPATIBLE for a note newer than this runtime. On success, the caller frees *out with
 * mp_seal_note_free. */
mp_status_t mp_seal_note_read(int fd, uint64_t file_size, const char* path, const uint8_t* head,
                              uint64_t head_size, mp_seal_note_t* out);
void mp_seal_note_free(mp_seal_note_t* note);

/* MP_ERR_INCOMPATIBLE: the file |path| has a seal of |version|, newer than this runtime reads
 * (the message names the newest it reads, and says to upgrade modpack). */
mp_status_t mp_seal_refuse_newer(const char* path, uint32_t version);

/* Zero the masked bytes in |bytes|, which hold the file's bytes [offset, offset + size). */
void mp_seal_note_mask(const mp_seal_note_t* note, uint64_t offset, uint8_t* bytes,
                       uint64_t size);

/* Check the note's XXH3-128 digest: the covered bytes but the payloads, masked, in file order.
 * |buffer| (|capacity| bytes) holds the file's first |head_size| bytes, which are not read
 * again; it is reused for the rest. */
mp_status_t mp_seal_note_check(int fd, const char* path, const mp_seal_note_t* note,
                               uint8_t* buffer, uint64_t head_size, uint64_t capacity);

#endif /* MODPACK_FILES_SEAL_NOTE_H_ */
