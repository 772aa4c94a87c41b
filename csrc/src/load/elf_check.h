/* Checks on a shared library's file before dlopen maps it. */
#ifndef MODPACK_LOAD_ELF_CHECK_H_
#define MODPACK_LOAD_ELF_CHECK_H_

#include "modpack/modpack.h"

/* Validate an ELF shared object's extents against its file size (a truncated copy would
 * otherwise kill the process with SIGBUS when its missing pages are touched). */
mp_status_t mp_elf_check_fd(int fd, uint64_t file_size, const char* path);

#endif /* MODPACK_LOAD_ELF_CHECK_H_ */
