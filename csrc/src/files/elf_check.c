/* Pre-dlopen validation of a shared object's extents.
 *
 * The dynamic loader maps segments by what the ELF headers claim; if the file is shorter
 * (a truncated copy or download), touching the missing pages kills the process with SIGBUS.
 * Checking the headers against the real file size first turns that crash into an error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pread */
#endif
#include "files/elf_check.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "files/elf_segments.h"
#include "files/file.h"

/* This machine as the ELF headers name it, from how the runtime was compiled (0: unknown). */
#if defined(__x86_64__)
#define MP_THIS_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define MP_THIS_MACHINE EM_AARCH64
#elif defined(__i386__)
#define MP_THIS_MACHINE EM_386
#elif defined(__arm__)
#define MP_THIS_MACHINE EM_ARM
#elif defined(__riscv)
#define MP_THIS_MACHINE EM_RISCV
#elif defined(__powerpc64__)
#define MP_THIS_MACHINE EM_PPC64
#elif defined(__s390x__)
#define MP_THIS_MACHINE EM_S390
#else
#define MP_THIS_MACHINE 0
#endif

static const char* machine_name(unsigned machine, char* buffer, size_t size) {
  switch (machine) {
    case EM_X86_64:
      return "x86-64";
    case EM_AARCH64:
      return "aarch64";
    case EM_386:
      return "x86 (32-bit)";
    case EM_ARM:
      return "arm (32-bit)";
    case EM_RISCV:
      return "riscv";
    case EM_PPC64:
      return "ppc64";
    case EM_S390:
      return "s390x";
    default:
      snprintf(buffer, size, "ELF machine %u", machine);
      return buffer;
  }
}

/* The ELF header's identification, type and machine (in this machine's byte order); false for
 * a file that is not ELF. */
static bool read_kind(int fd, uint64_t file_size, unsigned char ident[EI_NIDENT], unsigned* type,
                      unsigned* machine) {
  /* The fields needed are at the same offsets in 32- and 64-bit headers. */
  unsigned char head[EI_NIDENT + 4]; /* e_ident, e_type, e_machine: one read */
  if (file_size < sizeof head || !mp_file_read_at(fd, head, sizeof head, 0) ||
      memcmp(head, ELFMAG, SELFMAG) != 0)
    return false;
  memcpy(ident, head, EI_NIDENT);
  Elf32_Half type_and_machine[2];
  memcpy(type_and_machine, head + EI_NIDENT, sizeof type_and_machine);
  *type = type_and_machine[0], *machine = type_and_machine[1];
  if (ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB)) {
    *type = ((*type & 0xff) << 8) | (*type >> 8);
    *machine = ((*machine & 0xff) << 8) | (*machine >> 8);
  }
  return true;
}

mp_status_t mp_elf_check_machine(int fd, uint64_t file_size, const char* path) {
  unsigned char ident[EI_NIDENT];
  unsigned type, machine;
  if (!read_kind(fd, file_size, ident, &type, &machine)) return MP_OK;
  bool swapped =
      ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB);
  bool other_class = ident[EI_CLASS] != (__SIZEOF_POINTER__ == 8 ? ELFCLASS64 : ELFCLASS32);
  if (MP_THIS_MACHINE && (machine != MP_THIS_MACHINE || other_class || swapped)) {
    char built[32], here[32];
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' was built for %s (%d-bit, %s-endian); this machine is %s: load it on "
                     "a machine of its kind (or under qemu-user), or export it again with a "
                     "compiler for this one",
                     path, machine_name(machine, built, sizeof built),
                     ident[EI_CLASS] == ELFCLASS64 ? 64 : 32,
                     ident[EI_DATA] == ELFDATA2MSB ? "big" : "little",
                     machine_name(MP_THIS_MACHINE, here, sizeof here));
  }
  return MP_OK;
}

mp_status_t mp_elf_check_kind(int fd, uint64_t file_size, const char* path, bool any_machine) {
  unsigned char ident[EI_NIDENT];
  unsigned type, machine;
  if (!read_kind(fd, file_size, ident, &type, &machine)) return MP_OK;
  if (!any_machine) MP_RETURN_IF_ERROR(mp_elf_check_machine(fd, file_size, path));
  if (type == ET_REL)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is a relocatable object file, not a shared library: a system library "
                     "(export_library(..., system_lib=NAME)) is linked into a program and loaded "
                     "with mp_module_load_system_lib (Python: modpack.load_system_lib(NAME)); "
                     "export a .so for load_module",
                     path);
  if (type == ET_EXEC)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' is an executable, not a shared library: export a .so for load_module",
                     path);
  return MP_OK;
}

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
  /* Then the segments as the dynamic loader will map them (files/elf_segments.h). */
  ElfW(Phdr)* phdrs = malloc((size_t)eh.e_phnum * sizeof *phdrs + 1);
  if (!phdrs) {
    status = mp_out_of_memory("reading program headers");
  } else if (!mp_file_read_at(fd, phdrs, (size_t)eh.e_phnum * sizeof *phdrs, eh.e_phoff)) {
    status = mp_errorf(MP_ERR_IO, "cannot read '%s'", path);
  } else {
    status = mp_elf_segments_check(phdrs, eh.e_phnum, file_size, path, false); /* unsealed */
  }
  free(phdrs);
done:
  return status;
}

/* Bounds for a symbol search on an untrusted file: it gives up rather than read without end. */
enum { MAX_SYMBOLS = 1 << 20, MAX_NAME = 256 }; /* (e_shnum is 16 bits: at most 65535 sections) */

/* Whether symbol |name| of the dynamic symbol table of the file (section |s|) is defined. */
static bool dynsym_defines(int fd, uint64_t file_size, const ElfW(Shdr) * s,
                           const ElfW(Shdr) * strtab, const char* name) {
  size_t length = strlen(name);
  if (s->sh_entsize != sizeof(ElfW(Sym)) || s->sh_offset > file_size ||
      s->sh_size > file_size - s->sh_offset || length >= MAX_NAME)
    return false;
  uint64_t count = s->sh_size / sizeof(ElfW(Sym));
  for (uint64_t i = 0; i < count && i < MAX_SYMBOLS; ++i) {
    ElfW(Sym) sym;
    char found[MAX_NAME];
    if (!mp_file_read_at(fd, &sym, sizeof sym, s->sh_offset + i * sizeof sym)) return false;
    if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab->sh_size ||
        strtab->sh_size - sym.st_name < length + 1 ||
        strtab->sh_offset + sym.st_name + length + 1 > file_size)
      continue;
    if (!mp_file_read_at(fd, found, length + 1, strtab->sh_offset + sym.st_name)) return false;
    if (memcmp(found, name, length + 1) == 0) return true;
  }
  return false;
}

bool mp_elf_defines_symbol(int fd, uint64_t file_size, const char* name) {
  ElfW(Ehdr) eh;
  if (file_size < sizeof eh || !mp_file_read_at(fd, &eh, sizeof eh, 0) ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_shentsize != sizeof(ElfW(Shdr)) ||
      eh.e_shnum == 0 || eh.e_shoff > file_size ||
      (uint64_t)eh.e_shnum * sizeof(ElfW(Shdr)) > file_size - eh.e_shoff)
    return false;
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    ElfW(Shdr) s, strtab;
    if (!mp_file_read_at(fd, &s, sizeof s, eh.e_shoff + i * sizeof s)) return false;
    if (s.sh_type != SHT_DYNSYM || s.sh_link >= eh.e_shnum ||
        !mp_file_read_at(fd, &strtab, sizeof strtab, eh.e_shoff + s.sh_link * sizeof strtab))
      continue;
    if (dynsym_defines(fd, file_size, &s, &strtab, name)) return true;
  }
  return false;
}

/* The symbols of one dynamic symbol table (section |s|, names in |strtab|) that |prefix| starts,
 * read a bounded batch at a time. */
static void each_dynsym(int fd, uint64_t file_size, const ElfW(Shdr) * s,
                        const ElfW(Shdr) * strtab, const char* prefix,
                        void (*visit)(void* context, const char* name), void* context) {
  size_t length = strlen(prefix);
  if (s->sh_entsize != sizeof(ElfW(Sym)) || s->sh_offset > file_size ||
      s->sh_size > file_size - s->sh_offset || strtab->sh_offset > file_size ||
      strtab->sh_size > file_size - strtab->sh_offset || length >= MAX_NAME)
    return;
  uint64_t count = s->sh_size / sizeof(ElfW(Sym));
  ElfW(Sym) batch[256];
  for (uint64_t i = 0; i < count && i < MAX_SYMBOLS; i += sizeof batch / sizeof batch[0]) {
    uint64_t n = count - i < sizeof batch / sizeof batch[0] ? count - i
                                                           : sizeof batch / sizeof batch[0];
    if (!mp_file_read_at(fd, batch, (size_t)n * sizeof batch[0],
                         s->sh_offset + i * sizeof batch[0]))
      return;
    for (uint64_t k = 0; k < n; ++k) {
      char found[MAX_NAME];
      uint64_t at = batch[k].st_name, room = strtab->sh_size;
      if (batch[k].st_shndx == SHN_UNDEF || at >= room) continue;
      size_t take = room - at < sizeof found - 1 ? (size_t)(room - at) : sizeof found - 1;
      if (!mp_file_read_at(fd, found, take, strtab->sh_offset + at)) continue;
      found[take] = '\0';
      /* (a name that does not end within the bytes read is longer than any compared) */
      if (memchr(found, '\0', take) && strncmp(found, prefix, length) == 0 &&
          found[length] != '\0')
        visit(context, found + length);
    }
  }
}

void mp_elf_each_defined_symbol(int fd, uint64_t file_size, const char* prefix,
                                void (*visit)(void* context, const char* name), void* context) {
  ElfW(Ehdr) eh;
  if (file_size < sizeof eh || !mp_file_read_at(fd, &eh, sizeof eh, 0) ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_shentsize != sizeof(ElfW(Shdr)) ||
      eh.e_shnum == 0 || eh.e_shoff > file_size ||
      (uint64_t)eh.e_shnum * sizeof(ElfW(Shdr)) > file_size - eh.e_shoff)
    return;
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    ElfW(Shdr) s, strtab;
    if (!mp_file_read_at(fd, &s, sizeof s, eh.e_shoff + i * sizeof s)) return;
    if (s.sh_type != SHT_DYNSYM || s.sh_link >= eh.e_shnum ||
        !mp_file_read_at(fd, &strtab, sizeof strtab, eh.e_shoff + s.sh_link * sizeof strtab))
      continue;
    each_dynsym(fd, file_size, &s, &strtab, prefix, visit, context);
  }
}
