/* A writer racing a load with perfect timing, for tests/test_trust.py: preloaded into a process
 * (LD_PRELOAD), it watches the process's reads of one file and, just after the first read that
 * reaches the last byte of a region, writes other bytes over that region of the file. That is
 * the attack docs/trust.md must survive, without its luck: whatever the loader read of the
 * region before that moment it read as the file first held it, and everything after, as the
 * writer left it.
 *
 * $TIMED_WRITER_FILE: the file watched (matched by device and inode, so any descriptor of it);
 * $TIMED_WRITER_AT: the region's first byte; $TIMED_WRITER_BYTES: a file whose bytes are
 * written there (the region is as long). It acts once per process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int done;

static void write_region(const char* path, off_t at, const char* bytes_path, off_t size) {
  int in = open(bytes_path, O_RDONLY), out = open(path, O_WRONLY);
  char* buffer = malloc((size_t)size);
  if (in >= 0 && out >= 0 && buffer && read(in, buffer, (size_t)size) == size &&
      pwrite(out, buffer, (size_t)size, at) == size)
    done = 1;
  free(buffer);
  if (in >= 0) close(in);
  if (out >= 0) close(out);
}

static void after_read(int fd, off_t offset, ssize_t got) {
  const char* path = getenv("TIMED_WRITER_FILE");
  const char* at_text = getenv("TIMED_WRITER_AT");
  const char* bytes_path = getenv("TIMED_WRITER_BYTES");
  struct stat watched, read_from, bytes;
  if (done || got <= 0 || !path || !at_text || !bytes_path || fstat(fd, &read_from) != 0 ||
      stat(path, &watched) != 0 || read_from.st_ino != watched.st_ino ||
      read_from.st_dev != watched.st_dev || stat(bytes_path, &bytes) != 0 || bytes.st_size == 0)
    return;
  off_t at = (off_t)strtoll(at_text, NULL, 10), last = at + bytes.st_size - 1;
  if (offset <= last && last < offset + got) write_region(path, at, bytes_path, bytes.st_size);
}

typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);

ssize_t pread(int fd, void* buffer, size_t n, off_t offset) {
  static pread_fn real;
  if (!real) real = (pread_fn)dlsym(RTLD_NEXT, "pread");
  ssize_t got = real(fd, buffer, n, offset);
  after_read(fd, offset, got);
  return got;
}

ssize_t pread64(int fd, void* buffer, size_t n, off_t offset) {
  static pread_fn real;
  if (!real) real = (pread_fn)dlsym(RTLD_NEXT, "pread64");
  ssize_t got = real(fd, buffer, n, offset);
  after_read(fd, offset, got);
  return got;
}
