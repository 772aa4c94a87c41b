/* Where a loaded library's blob lies in its mapping (mp_library_locate_blob, library/library.h),
 * and where any read-only part of its file does (mp_library_readonly_address):
 * from the `__dev_mblob` symbol, checked against the library's seal and against the program
 * headers the dynamic loader keeps, so no read of the blob can run past the file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr1, dlinfo */
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>

#include "core/error.h"
#include "library/library.h"
#include "library/library_state.h"

/* The program headers the dynamic loader keeps for one loaded object. */
typedef struct {
  ElfW(Addr) base;
  const ElfW(Phdr) * phdr;
  ElfW(Half) phnum;
} phdr_query_t;

static int find_phdrs(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  phdr_query_t* q = data;
  if (info->dlpi_addr != q->base) return 0;
  q->phdr = info->dlpi_phdr;
  q->phnum = info->dlpi_phnum;
  return 1;
}

mp_status_t mp_library_locate_blob(mp_library_t* library, const mp_seal_v1_t* seal,
                                   mp_const_byte_span_t* out_bytes, bool* out_found) {
  if (library->system) {
    *out_found = library->system->blob_size > 0;
    *out_bytes = (mp_const_byte_span_t){library->system->blob, library->system->blob_size};
    return MP_OK;
  }
  const uint8_t* blob = dlsym(library->handle, MP_BLOB_SYMBOL);
  *out_found = blob != NULL;
  if (seal && (blob != NULL) != (seal->blob_size > 0))
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its seal says it has %s blob, but %s is %s",
                     library->path, seal->blob_size ? "a" : "no", MP_BLOB_SYMBOL,
                     blob ? "defined" : "not found");
  if (!blob) return MP_OK;
  Dl_info info;
  const ElfW(Sym)* sym = NULL;
  if (!dladdr1(blob, &info, (void**)&sym, RTLD_DL_SYMENT) || !sym)
    return mp_errorf(MP_ERR_FORMAT, "'%s': cannot find the ELF symbol entry of %s", library->path,
                     MP_BLOB_SYMBOL);
  struct link_map* map = NULL;
  if (dlinfo(library->handle, RTLD_DI_LINKMAP, &map) != 0 || !map)
    return mp_errorf(MP_ERR_IO, "'%s': dlinfo failed: %s", library->path, dlerror());
  uint64_t size = sym->st_size;
  uint64_t vaddr = (uint64_t)(uintptr_t)blob - (uint64_t)map->l_addr;
  if (seal && (vaddr != seal->blob_vaddr || size != seal->blob_size))
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: %s is at %#" PRIx64 " with %" PRIu64
                     " bytes, its seal says %#" PRIx64 " with %" PRIu64,
                     library->path, MP_BLOB_SYMBOL, vaddr, size, seal->blob_vaddr, seal->blob_size);
  /* Find the segment holding the symbol, from the loader's own program headers (the file's
   * copy need not be mapped). */
  phdr_query_t query = {map->l_addr, NULL, 0};
  dl_iterate_phdr(find_phdrs, &query);
  const ElfW(Phdr)* ph = query.phdr;
  uint64_t segment_room = 0;
  bool found = false;
  for (uint64_t i = 0; ph && i < query.phnum; ++i) {
    if (ph[i].p_type != PT_LOAD) continue;
    if (vaddr >= ph[i].p_vaddr && vaddr - ph[i].p_vaddr < ph[i].p_filesz) {
      segment_room = ph[i].p_filesz - (vaddr - ph[i].p_vaddr);
      found = true;
      break;
    }
  }
  if (!found)
    return mp_errorf(MP_ERR_FORMAT, "'%s': %s does not lie in a file-backed segment", library->path,
                     MP_BLOB_SYMBOL);
  if (size == 0 || size > segment_room) size = segment_room; /* symbols made without .size */
  *out_bytes = (mp_const_byte_span_t){blob, size};
  return MP_OK;
}


mp_status_t mp_library_readonly_address(mp_library_t* library, uint64_t offset, uint64_t size,
                                        void** out_address) {
  *out_address = NULL;
  struct link_map* map = NULL;
  if (library->system || dlinfo(library->handle, RTLD_DI_LINKMAP, &map) != 0 || !map)
    return mp_errorf(MP_ERR_INTERNAL, "'%s' has no mapping of its own", library->path);
  phdr_query_t query = {map->l_addr, NULL, 0};
  dl_iterate_phdr(find_phdrs, &query);
  for (uint64_t i = 0; query.phdr && i < query.phnum; ++i) {
    const ElfW(Phdr)* ph = &query.phdr[i];
    if (ph->p_type != PT_LOAD || offset < ph->p_offset || offset - ph->p_offset > ph->p_filesz ||
        size > ph->p_filesz - (offset - ph->p_offset))
      continue;
    if (ph->p_flags & (PF_W | PF_X))
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s': bytes [%" PRIu64 ", +%" PRIu64 ") lie in a writable or executable "
                       "segment",
                       library->path, offset, size);
    *out_address = (void*)(uintptr_t)(map->l_addr + ph->p_vaddr + (offset - ph->p_offset));
    return MP_OK;
  }
  return mp_errorf(MP_ERR_FORMAT, "'%s': bytes [%" PRIu64 ", +%" PRIu64 ") lie in no segment",
                   library->path, offset, size);
}
