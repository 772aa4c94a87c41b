/* The program headers of a shared library, checked as the dynamic loader will use them, before
 * it maps anything: glibc trusts them, so a table a tool rewrote badly (segments that overlap in
 * memory, say, as `strip` once left libraries whose program headers had moved) would crash it
 * instead of failing. */
#ifndef MODPACK_FILES_ELF_SEGMENTS_H_
#define MODPACK_FILES_ELF_SEGMENTS_H_

#include <link.h>
#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* MP_OK when the |count| program headers at |phdrs| of the |file_size|-byte file |path| give the
 * dynamic loader a well-formed image: every PT_LOAD's file bytes in the file, no more of them
 * than it maps, its alignment a power of two that its offset and address agree on, the PT_LOADs
 * in increasing address order without sharing a page, and the segments the loader reads in
 * memory (PT_PHDR, PT_DYNAMIC, PT_TLS, PT_NOTE, PT_GNU_EH_FRAME, PT_GNU_PROPERTY) inside a
 * PT_LOAD. Otherwise MP_ERR_FORMAT, saying which segments disagree and, by |sealed_v2| (the file
 * carries a version 2 seal note), what that most likely means: damage (version 2), or a stripper
 * that rewrote a library with a version 1 seal or none. */
mp_status_t mp_elf_segments_check(const ElfW(Phdr) * phdrs, uint64_t count, uint64_t file_size,
                                  const char* path, bool sealed_v2);

#endif /* MODPACK_FILES_ELF_SEGMENTS_H_ */
