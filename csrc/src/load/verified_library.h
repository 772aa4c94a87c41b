/* A signed library checked before anything of it is mapped or run, without a private copy of
 * its weights.
 *
 * The file is read once, in order, and hashed (SHA-256, what its signatures sign). What the
 * process will execute or parse — code, headers, the blob's index, every payload but the data
 * of const modules — is copied as it is read into a sealed memfd, the *verified copy*, which is
 * what dlopen maps: a writer who changes the file afterwards changes none of it. The data of
 * const modules (the weights, usually nearly all of the file) is not copied: it is hashed
 * through a read-only shared mapping of the file itself (a *window*), left as a hole in the
 * copy, and after dlopen that very mapping is moved (mremap) over the hole in the library's
 * image. So the weights stay file-backed and shared between processes, one copy in the page
 * cache, and the bytes hashed are the bytes used. What a later writer can still do to them is
 * in docs/trust.md. */
#ifndef MODPACK_LOAD_VERIFIED_LIBRARY_H_
#define MODPACK_LOAD_VERIFIED_LIBRARY_H_

#include <stdbool.h>
#include <stdint.h>

#include "files/file.h"
#include "modpack/modpack.h"

enum { MP_VERIFIED_MAX_WINDOWS = 64 };

typedef struct {
  uint64_t offset, size; /* the file's bytes [offset, offset + size), page-aligned */
  void* mapping;         /* their read-only shared mapping, hashed; NULL once placed */
} mp_verified_window_t;

typedef struct {
  int fd;          /* the verified copy (a sealed memfd), the caller's to load or close */
  mp_file_id_t id; /* its identity */
  uint64_t window_count;
  mp_verified_window_t windows[MP_VERIFIED_MAX_WINDOWS];
  uint64_t hashed;    /* bytes hashed, and how long it took, for the load trace */
  double hash_ms;
} mp_verified_library_t;

/* Read the library at |path| once as described above and check that a signature by one of
 * |keys| (1 to 16) holds over it: MP_ERR_UNTRUSTED, saying why, otherwise. With
 * |private_copy|, every byte goes into the copy (no windows): nothing a later writer does to
 * the file reaches the process, at the cost of the payloads' memory in every process. */
mp_status_t mp_verified_library_make(const char* path, const mp_trusted_key_t* keys,
                                     uint64_t num_keys, bool private_copy,
                                     mp_verified_library_t* out);

/* Move the windows into |library| (the copy, just dlopen'd and nothing of it yet run but its
 * constructors, which must not read its payloads), over the holes they left. */
mp_status_t mp_verified_library_place(mp_verified_library_t* verified, mp_library_t* library);

/* Unmap the windows not placed (the descriptor is left to the caller). */
void mp_verified_library_discard(mp_verified_library_t* verified);

/* mp_signatures_check_file (modpack.h): the signers of the library at |path| and, when one
 * of them is trusted, whether their signatures hold over its bytes (read once, not copied). */
mp_status_t mp_verified_library_check(const char* path, const mp_trusted_key_t* keys,
                                      uint64_t num_keys, mp_signature_info_t* out_infos,
                                      uint64_t capacity, uint64_t* out_count);

#endif /* MODPACK_LOAD_VERIFIED_LIBRARY_H_ */
