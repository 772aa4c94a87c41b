/* Program headers checked before the dynamic loader sees them (files/elf_segments.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "files/elf_segments.h"

#include <elf.h>
#include <inttypes.h>
#include <stdbool.h>
#include <unistd.h>

#include "core/error.h"

#ifndef PT_GNU_PROPERTY
#define PT_GNU_PROPERTY 0x6474e553
#endif

/* Said of every refusal: where such program headers come from, and what to do. A library
 * with a version 1 seal (or none) was most likely stripped: GNU strip moved the program headers
 * of such libraries into overlapping segments. Strippers keep a version 2 library's program
 * headers, so there they are damage. */
#define MP_SEGMENTS_ADVICE_V1                                                                  \
  "its program headers are damaged. It was most likely stripped after export: strip, objcopy " \
  "and packagers' strip steps move the program headers of libraries with a version 1 seal, "   \
  "which modpacks before the version 2 seal exported, this way. Export it again with this "    \
  "modpack, whose libraries strippers keep intact (docs/format.md), or ship it unstripped"
#define MP_SEGMENTS_ADVICE_V2                                                                  \
  "its program headers are damaged (it has a version 2 seal, whose libraries strippers leave " \
  "intact, so the copy is damaged or a tool rewrote it); copy or export it again"

static bool is_power_of_two(uint64_t x) { return (x & (x - 1)) == 0; }

/* Whether [vaddr, vaddr + size) lies in the memory of a PT_LOAD. */
static bool in_a_load(const ElfW(Phdr) * phdrs, uint64_t count, uint64_t vaddr, uint64_t size) {
  for (uint64_t i = 0; i < count; ++i) {
    const ElfW(Phdr)* p = &phdrs[i];
    if (p->p_type == PT_LOAD && vaddr >= p->p_vaddr && vaddr - p->p_vaddr <= p->p_memsz &&
        size <= p->p_memsz - (vaddr - p->p_vaddr))
      return true;
  }
  return false;
}

static const char* segment_name(uint32_t type) {
  switch (type) {
    case PT_PHDR:
      return "PT_PHDR";
    case PT_DYNAMIC:
      return "PT_DYNAMIC";
    case PT_TLS:
      return "PT_TLS";
    case PT_NOTE:
      return "PT_NOTE";
    case PT_GNU_EH_FRAME:
      return "PT_GNU_EH_FRAME";
    default:
      return "PT_GNU_PROPERTY";
  }
}

mp_status_t mp_elf_segments_check(const ElfW(Phdr) * phdrs, uint64_t count, uint64_t file_size,
                                  const char* path, bool sealed_v2) {
  const char* advice = sealed_v2 ? MP_SEGMENTS_ADVICE_V2 : MP_SEGMENTS_ADVICE_V1;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t previous_end = 0; /* the page after the previous PT_LOAD's memory */
  uint64_t previous = 0;
  bool any = false;
  for (uint64_t i = 0; i < count; ++i) {
    const ElfW(Phdr)* p = &phdrs[i];
    if (p->p_type != PT_LOAD) continue;
    if (p->p_offset > file_size || p->p_filesz > file_size - p->p_offset)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s' is truncated: segment %" PRIu64 " needs bytes up to %" PRIu64
                       " but the file has %" PRIu64 "; copy or export it again",
                       path, i, (uint64_t)p->p_offset + (uint64_t)p->p_filesz, file_size);
    if (p->p_filesz > p->p_memsz || !is_power_of_two(p->p_align) ||
        (p->p_align > 1 && p->p_offset % p->p_align != p->p_vaddr % p->p_align) ||
        p->p_memsz > UINT64_MAX - page || p->p_vaddr > UINT64_MAX - page - p->p_memsz)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s': loadable segment %" PRIu64 " is malformed (offset %#" PRIx64
                       ", address %#" PRIx64 ", %" PRIu64 " bytes in the file, %" PRIu64
                       " in memory, alignment %#" PRIx64 "): %s",
                       path, i, (uint64_t)p->p_offset, (uint64_t)p->p_vaddr,
                       (uint64_t)p->p_filesz, (uint64_t)p->p_memsz, (uint64_t)p->p_align, advice);
    if (p->p_memsz == 0) continue;
    uint64_t start = p->p_vaddr / page * page;
    if (any && start < previous_end)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s': loadable segments %" PRIu64 " and %" PRIu64
                       " overlap in memory or are out of order (%#" PRIx64 " after %#" PRIx64
                       "): %s",
                       path, previous, i, (uint64_t)p->p_vaddr, (uint64_t)phdrs[previous].p_vaddr,
                       advice);
    previous_end = (p->p_vaddr + p->p_memsz + page - 1) / page * page;
    previous = i;
    any = true;
  }
  if (!any) /* eu-strip leaves a version 1 library so: every program header PT_NULL */
    return mp_errorf(MP_ERR_FORMAT, "'%s' has no loadable segment: %s", path, advice);
  for (uint64_t i = 0; i < count; ++i) {
    const ElfW(Phdr)* p = &phdrs[i];
    bool read_in_memory = p->p_type == PT_PHDR || p->p_type == PT_DYNAMIC ||
                          p->p_type == PT_TLS || p->p_type == PT_NOTE ||
                          p->p_type == PT_GNU_EH_FRAME || p->p_type == PT_GNU_PROPERTY;
    uint64_t size = p->p_type == PT_TLS ? p->p_filesz : p->p_memsz; /* TLS: its image */
    if (read_in_memory && size > 0 && !in_a_load(phdrs, count, p->p_vaddr, size))
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s': segment %" PRIu64 " (%s, %" PRIu64 " bytes at %#" PRIx64
                       ") lies outside every loadable segment: %s",
                       path, i, segment_name(p->p_type), size, (uint64_t)p->p_vaddr, advice);
  }
  return MP_OK;
}
