/* A sealed file (a library or a weight file) opened for loading: a regular file only, and which
 * version of which file it is, so that a file replaced or rewritten after it was loaded is told
 * from the loaded one; and private copies of files, sealed against writes. */
#ifndef MODPACK_FILES_FILE_H_
#define MODPACK_FILES_FILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  uint64_t device, inode; /* which file */
  /* And which version of it: its size, its modification and change times, and the digest of
   * its seal (zeros for a library loaded unsealed). The change time is what makes an in-place
   * edit visible: a file's owner can put its modification time back (utime), but every write
   * and every utime sets the change time to the clock's now, which only who may set the
   * system clock can turn back. */
  uint64_t size;
  int64_t mtime_ns, ctime_ns;
  uint64_t digest_low, digest_high;
} mp_file_id_t;

/* Open |path| read-only. FIFOs, devices, sockets and directories are refused with a message
 * (opened without blocking, so a FIFO with no writer cannot hang the caller). On success *out_fd
 * is the caller's, and *out_id holds all but the digest. */
mp_status_t mp_file_open(const char* path, int* out_fd, mp_file_id_t* out_id);

/* Which version of which file |path| names now, without opening it (one stat): for telling
 * whether a file opened before is still the one at |path|. false when it cannot be statted or
 * is not a regular file (the caller then opens it, and mp_file_open says what is wrong). */
bool mp_file_identify(const char* path, mp_file_id_t* out_id);

/* A private, sealed copy of |size| bytes at |data|, as a descriptor positioned like a file:
 * a memfd (F_SEAL_WRITE, _GROW, _SHRINK, _SEAL: nobody can change it once written), or where
 * memfd_create does not exist, an unnamed file in $TMPDIR (O_TMPFILE, else created and
 * unlinked at once). *out_id identifies it like a file's (each copy a file of its own). */
mp_status_t mp_file_from_memory(const void* data, uint64_t size, int* out_fd, mp_file_id_t* out_id);

/* The parts of mp_file_from_memory, for copies filled piece by piece: a new unnamed file
 * (*out_sealable: whether it can be sealed; |purpose| names it in messages), then, once it
 * is filled, sealed and identified (its descriptor closed on failure). */
mp_status_t mp_file_anonymous(const char* purpose, int* out_fd, bool* out_sealable);
mp_status_t mp_file_finish_copy(int fd, bool sealable, int* out_fd, mp_file_id_t* out_id);

/* Read exactly |n| bytes at |offset| of |fd| (retrying short reads and EINTR); false at the end
 * of the file or on an error (errno says which). */
bool mp_file_read_at(int fd, void* buffer, size_t n, uint64_t offset);

/* Write all |n| bytes at |offset| of |fd|; false with errno set otherwise. */
bool mp_file_write_at(int fd, const void* buffer, size_t n, uint64_t offset);

/* Whether |a| and |b| are the same file (device and inode). */
bool mp_file_same_file(const mp_file_id_t* a, const mp_file_id_t* b);

/* Whether |a| and |b| are the same version of one file. */
bool mp_file_same_version(const mp_file_id_t* a, const mp_file_id_t* b);

#endif /* MODPACK_FILES_FILE_H_ */
