/* Opening sealed files, and private copies of them (files/file.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "files/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

static mp_file_id_t id_of(const struct stat* st) {
  return (mp_file_id_t){
      .device = (uint64_t)st->st_dev,
      .inode = (uint64_t)st->st_ino,
      .size = (uint64_t)st->st_size,
      .mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
      .ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec,
  };
}

static const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

mp_status_t mp_file_open(const char* path, int* out_fd, mp_file_id_t* out_id) {
  *out_fd = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return mp_errorf(errno == ENOENT ? MP_ERR_NOT_FOUND : MP_ERR_IO, "cannot open '%s': %s", path,
                     strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int error = errno;
    close(fd);
    return mp_errorf(MP_ERR_IO, "cannot stat '%s': %s", path, strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "'%s' is %s, not a library file: give the path of an exported .so", path,
                     kind_of(st.st_mode));
  }
  /* O_NONBLOCK stays: it only kept the open from waiting on a FIFO, and reads and mappings of
   * a regular file ignore it. */
  *out_id = id_of(&st);
  *out_fd = fd;
  return MP_OK;
}

bool mp_file_identify(const char* path, mp_file_id_t* out_id) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *out_id = id_of(&st);
  return true;
}

/* An unnamed file for a copy: a memfd, else one in the temporary folder. */
static int anonymous_file(bool* sealable) {
  *sealable = true;
#ifdef MFD_ALLOW_SEALING
  int fd = memfd_create("modpack-library", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0 || errno != ENOSYS) return fd;
#endif
  *sealable = false;
  const char* folder = getenv("TMPDIR");
  if (!folder || !*folder) folder = "/tmp";
  int fd_tmp = open(folder, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_tmp >= 0) return fd_tmp;
  char name[4096];
  snprintf(name, sizeof name, "%s/modpack-library-XXXXXX", folder);
  fd_tmp = mkostemp(name, O_CLOEXEC);
  if (fd_tmp >= 0) unlink(name);
  return fd_tmp;
}

/* Write all of |data| to |fd|; false with errno set otherwise. */
static bool write_all(int fd, const uint8_t* p, uint64_t size) {
  for (uint64_t left = size; left > 0;) {
    ssize_t wrote = write(fd, p, left > (1u << 30) ? (1u << 30) : (size_t)left);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      if (wrote == 0) errno = ENOSPC;
      return false;
    }
    p += wrote;
    left -= (uint64_t)wrote;
  }
  return true;
}

mp_status_t mp_file_anonymous(const char* purpose, int* out_fd, bool* out_sealable) {
  *out_fd = anonymous_file(out_sealable);
  if (*out_fd < 0)
    return mp_errorf(MP_ERR_IO, "cannot create a file for %s: %s", purpose, strerror(errno));
  return MP_OK;
}

static mp_status_t copy_failed(int fd, uint64_t size, const char* from) {
  int error = errno;
  close(fd);
  return mp_errorf(error == ENOSPC || error == ENOMEM ? MP_ERR_RESOURCE_EXHAUSTED : MP_ERR_IO,
                   "cannot copy a %" PRIu64 "-byte library from %s: %s", size, from,
                   strerror(error));
}

mp_status_t mp_file_from_memory(const void* data, uint64_t size, int* out_fd,
                                mp_file_id_t* out_id) {
  *out_fd = -1;
  bool sealable;
  int fd;
  MP_RETURN_IF_ERROR(mp_file_anonymous("a library in memory", &fd, &sealable));
  if (!write_all(fd, data, size)) return copy_failed(fd, size, "memory");
  return mp_file_finish_copy(fd, sealable, out_fd, out_id);
}

/* Seal |fd| against writes, growing and shrinking. The kernel refuses the write seal with EBUSY
 * while something holds a transient reference to one of its pages (page reclaim or monitoring
 * does, briefly): that is retried for up to about 0.1 s. */
static int seal_copy(int fd) {
#ifdef F_SEAL_WRITE
  for (int attempt = 0;; ++attempt) {
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
      return 0;
    if (errno != EBUSY || attempt == 100) return -1;
    struct timespec pause = {0, 1000000}; /* 1 ms */
    nanosleep(&pause, NULL);
  }
#else
  (void)fd;
  return 0;
#endif
}

mp_status_t mp_file_finish_copy(int fd, bool sealable, int* out_fd, mp_file_id_t* out_id) {
  if (sealable && seal_copy(fd) != 0) {
    int error = errno;
    close(fd);
    return mp_errorf(MP_ERR_IO, "cannot seal the copy of a library: %s", strerror(error));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int error = errno;
    close(fd);
    return mp_errorf(MP_ERR_IO, "cannot stat the copy of a library: %s", strerror(error));
  }
  *out_id = id_of(&st);
  *out_fd = fd;
  return MP_OK;
}

bool mp_file_read_at(int fd, void* buffer, size_t n, uint64_t offset) {
  uint8_t* p = buffer;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= (size_t)got;
    offset += (uint64_t)got;
  }
  return true;
}

bool mp_file_write_at(int fd, const void* buffer, size_t n, uint64_t offset) {
  const uint8_t* p = buffer;
  while (n > 0) {
    ssize_t wrote = pwrite(fd, p, n, (off_t)offset);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      if (wrote == 0) errno = ENOSPC;
      return false;
    }
    p += wrote;
    n -= (size_t)wrote;
    offset += (uint64_t)wrote;
  }
  return true;
}

bool mp_file_same_file(const mp_file_id_t* a, const mp_file_id_t* b) {
  return a->device == b->device && a->inode == b->inode;
}

bool mp_file_same_version(const mp_file_id_t* a, const mp_file_id_t* b) {
  return mp_file_same_file(a, b) && a->size == b->size && a->mtime_ns == b->mtime_ns &&
         a->ctime_ns == b->ctime_ns &&
         a->digest_low == b->digest_low && a->digest_high == b->digest_high;
}
