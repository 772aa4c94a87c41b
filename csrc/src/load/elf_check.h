/* Checks on a shared library's file before dlopen maps it. */
#ifndef MODPACK_LOAD_ELF_CHECK_H_
#define MODPACK_LOAD_ELF_CHECK_H_

#include <stdbool.h>

#include "modpack/modpack.h"

/* Validate an ELF shared object's extents against its file size (a truncated copy would
 * otherwise kill the process with SIGBUS when its missing pages are touched). */
mp_status_t mp_elf_check_fd(int fd, uint64_t file_size, const char* path);

/* For an ELF file, MP_ERR_INCOMPATIBLE with a message saying what it is when it is not a shared
 * library for this machine: built for another machine (naming both), a relocatable object (a
 * system library, linked into programs), an executable. MP_OK for anything else, including
 * files that are not ELF at all, which the seal and extent checks then describe. */
mp_status_t mp_elf_check_kind(int fd, uint64_t file_size, const char* path);

/* Whether the ELF file defines |name| in its dynamic symbol table (read from the file within
 * fixed bounds: an untrusted file makes it give up, never read without end). To say what a
 * library that modpack refuses is, e.g. one made by TVM. */
bool mp_elf_defines_symbol(int fd, uint64_t file_size, const char* name);

#endif /* MODPACK_LOAD_ELF_CHECK_H_ */
