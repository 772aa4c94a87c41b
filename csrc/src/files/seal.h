/* The seal of every file modpack writes, libraries and weight files alike (modpack/format.h):
 * a trailer, or a library's seal note (files/seal_note.h) that its trailer points to, checked
 * by reading the file before any of it is mapped for use. */
#ifndef MODPACK_FILES_SEAL_H_
#define MODPACK_FILES_SEAL_H_

#include "modpack/modpack.h"

/* How much of a file mp_seal_read_fd reads from its start, after its trailer, to find a seal
 * note (version 2): the headers and notes of most libraries, which are read again only when
 * they lie beyond. */
enum { MP_SEAL_NOTE_HEAD = 4096 };

/* mp_seal_check_file (modpack.h) on an open file of |file_size| bytes; |path| names it in
 * messages. */
mp_status_t mp_seal_check_fd(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out);

/* The seal's fields, read and checked against the file, without hashing anything: where the
 * blob and the payloads lie (to plan reads; untrusted until mp_seal_check_fd or a signature
 * vouches for the bytes). |raw| receives the trailer's bytes and *out_sealed_size the size of
 * the sealed file (before a signature block). MP_ERR_NOT_FOUND when there is no seal. */
mp_status_t mp_seal_read_fd(int fd, uint64_t file_size, const char* path, mp_seal_v1_t* out,
                            uint8_t raw[MP_SEAL_SIZE], uint64_t* out_sealed_size);

#endif /* MODPACK_FILES_SEAL_H_ */
