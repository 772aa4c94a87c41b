/* Opening library files (load/file.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "load/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

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
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out_id = (mp_file_id_t){
      .device = (uint64_t)st.st_dev,
      .inode = (uint64_t)st.st_ino,
      .size = (uint64_t)st.st_size,
      .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
  };
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

bool mp_file_same_file(const mp_file_id_t* a, const mp_file_id_t* b) {
  return a->device == b->device && a->inode == b->inode;
}

bool mp_file_same_version(const mp_file_id_t* a, const mp_file_id_t* b) {
  return mp_file_same_file(a, b) && a->size == b->size && a->mtime_ns == b->mtime_ns &&
         a->digest_low == b->digest_low && a->digest_high == b->digest_high;
}
