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
#include "load/file.h"

mp_status_t mp_elf_check_fd(int fd, uint64_t file_size, const char* path) {
  mp_status_t status = MP_OK;
  ElfW(Ehdr) eh;
  if (file_size < sizeof eh || !mp_file_read_at(fd, &eh, sizeof eh, 0) ||
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
    if (!mp_file_read_at(fd, &ph, sizeof ph, eh.e_phoff + i * sizeof ph)) {
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
  return status;
}
