/* Pre-dlopen validation of a shared object's extents.
 *
 * The dynamic loader maps segments by what the ELF headers claim; if the file is shorter
 * (a truncated copy or download), touching the missing pages kills the process with SIGBUS.
 * Checking the headers against the real file size first turns that crash into an error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pread */
#endif
#include "load/elf_check.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static bool read_exact(int fd, void* buf, size_t n, uint64_t offset) {
  uint8_t* p = buf;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got <= 0) return false;
    p += got;
    n -= (size_t)got;
    offset += (uint64_t)got;
  }
  return true;
}

mp_status_t mp_elf_check_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return mp_errorf(errno == ENOENT ? MP_ERR_NOT_FOUND : MP_ERR_IO, "cannot open '%s': %s", path,
                     strerror(errno));
  mp_status_t status = MP_OK;
  struct stat st;
  ElfW(Ehdr) eh;
  if (fstat(fd, &st) != 0) {
    status = mp_errorf(MP_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    goto done;
  }
  uint64_t file_size = (uint64_t)st.st_size;
  if (file_size < sizeof eh || !read_exact(fd, &eh, sizeof eh, 0) ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    status = mp_errorf(MP_ERR_FORMAT,
                       "'%s' is not an ELF shared library (%" PRIu64 " bytes, no ELF header)", path,
                       file_size);
    goto done;
  }
#if __SIZEOF_POINTER__ == 8
  const int expected_class = ELFCLASS64;
#else
  const int expected_class = ELFCLASS32;
#endif
  if (eh.e_ident[EI_CLASS] != expected_class || eh.e_type != ET_DYN) {
    status = mp_errorf(MP_ERR_INCOMPATIBLE,
                       "'%s' is not a shared library for this machine (ELF class %d, type %d)",
                       path, eh.e_ident[EI_CLASS], eh.e_type);
    goto done;
  }
  if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phoff > file_size ||
      (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr)) > file_size - eh.e_phoff) {
    status = mp_errorf(MP_ERR_FORMAT,
                       "'%s' is truncated or damaged: its program headers lie outside the "
                       "%" PRIu64 "-byte file; copy or export it again",
                       path, file_size);
    goto done;
  }
  if (eh.e_shnum > 0 &&
      (eh.e_shoff > file_size || (uint64_t)eh.e_shnum * eh.e_shentsize > file_size - eh.e_shoff)) {
    status =
        mp_errorf(MP_ERR_FORMAT,
                  "'%s' is truncated: its section headers end at byte %" PRIu64
                  " but the file has %" PRIu64 " bytes; copy or export it again",
                  path, (uint64_t)eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize, file_size);
    goto done;
  }
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    ElfW(Phdr) ph;
    if (!read_exact(fd, &ph, sizeof ph, eh.e_phoff + i * sizeof ph)) {
      status = mp_errorf(MP_ERR_IO, "cannot read '%s'", path);
      goto done;
    }
    if (ph.p_type != PT_LOAD) continue;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) {
      status = mp_errorf(MP_ERR_FORMAT,
                         "'%s' is truncated: segment %" PRIu64 " needs bytes up to %" PRIu64
                         " but the file has %" PRIu64 "; copy or export it again",
                         path, i, (uint64_t)ph.p_offset + (uint64_t)ph.p_filesz, file_size);
      goto done;
    }
  }
done:
  close(fd);
  return status;
}
