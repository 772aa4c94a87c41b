/* A dynamic symbol of a shared library, looked up in its file as the dynamic loader's dlsym
 * looks it up in the loaded object: so that a check made before (or instead of) dlopen knows
 * what the loader will find after it, whatever the section headers (which the dynamic loader
 * never reads, and the seal does not cover) say. */
#ifndef MODPACK_FILES_ELF_DYNAMIC_H_
#define MODPACK_FILES_ELF_DYNAMIC_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

typedef struct {
  bool found;
  uint8_t type;   /* STT_OBJECT, STT_FUNC, ... */
  uint64_t value; /* st_value: its address in the library's image (before relocation) */
  uint64_t size;  /* st_size */
} mp_elf_symbol_t;

/* Look up |name| in the object in the |file_size|-byte file |fd| (|path| names it in
 * messages) as dlsym(handle, name) finds it in that object: the dynamic segment (PT_DYNAMIC)
 * and the tables it names (DT_GNU_HASH, else DT_HASH; DT_SYMTAB, DT_STRTAB, DT_VERSYM), each
 * read where a PT_LOAD maps its address; a symbol counts as glibc counts it (a value, or
 * SHN_ABS or TLS; a type lookups return; global, weak or unique; not hidden by its version, and
 * one version at most). *out is cleared first; out->found says whether it was found.
 * MP_ERR_FORMAT when the tables are not there to read or are malformed (a hash chain that
 * never ends, a table outside what the segments map): the dynamic loader would fail or
 * misbehave on them. Bounded on any input. */
mp_status_t mp_elf_dynamic_symbol(int fd, uint64_t file_size, const char* path, const char* name,
                                  mp_elf_symbol_t* out);

#endif /* MODPACK_FILES_ELF_DYNAMIC_H_ */
