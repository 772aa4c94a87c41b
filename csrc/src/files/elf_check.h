/* Checks on a shared library's file before dlopen maps it. */
#ifndef MODPACK_FILES_ELF_CHECK_H_
#define MODPACK_FILES_ELF_CHECK_H_

#include <stdbool.h>

#include "modpack/modpack.h"

/* Validate an ELF shared object's extents against its file size (a truncated copy would
 * otherwise kill the process with SIGBUS when its missing pages are touched). */
mp_status_t mp_elf_check_fd(int fd, uint64_t file_size, const char* path);

/* For an ELF file, MP_ERR_INCOMPATIBLE with a message saying what it is when it is not a shared
 * library for this machine: built for another machine (naming both; unless |any_machine|), a
 * relocatable object (a system library, linked into programs), an executable. MP_OK for
 * anything else, including files that are not ELF at all, which the seal and extent checks
 * then describe. */
mp_status_t mp_elf_check_kind(int fd, uint64_t file_size, const char* path, bool any_machine);

/* Its first part: MP_ERR_INCOMPATIBLE, naming both machines, for an ELF file built for another
 * machine (or word size, or byte order) than this one; MP_OK for anything else. */
mp_status_t mp_elf_check_machine(int fd, uint64_t file_size, const char* path);

/* Whether the ELF file defines |name| in its dynamic symbol table (read from the file within
 * fixed bounds: an untrusted file makes it give up, never read without end). To say what a
 * library that modpack refuses is, e.g. one made by TVM. */
bool mp_elf_defines_symbol(int fd, uint64_t file_size, const char* name);

/* Call |visit| with each name the ELF file defines in its dynamic symbol table that starts
 * with |prefix|, the prefix dropped (within the same bounds; nothing for a file whose table
 * cannot be read). For messages: the host functions a misspelt name may have meant. */
void mp_elf_each_defined_symbol(int fd, uint64_t file_size, const char* prefix,
                                void (*visit)(void* context, const char* name), void* context);

#endif /* MODPACK_FILES_ELF_CHECK_H_ */
