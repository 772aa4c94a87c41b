/* A dynamic symbol looked up in a library's file as dlsym finds it (files/elf_dynamic.h). The
 * steps and the rules are glibc's (elf/dl-lookup.c: do_lookup_x, check_match), read from the
 * file with bounds on every read and every loop, so a crafted file gives an error, never a
 * hang or a read past what its segments map. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "files/elf_dynamic.h"

#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "files/file.h"

enum {
  MAX_DYNAMIC = 1 << 16, /* dynamic entries read at most */
  MAX_CHAIN = 1 << 20,   /* hash chain links followed at most */
  MAX_NAME = 256,
  BLOOM_BITS = 64, /* a GNU hash bloom word: an ElfW(Addr) on the 64-bit targets modpack reads */
};

/* The symbol types a lookup returns (glibc's ALLOWED_STT). */
#define ALLOWED_TYPES                                                                   \
  ((1u << STT_NOTYPE) | (1u << STT_OBJECT) | (1u << STT_FUNC) | (1u << STT_COMMON) | \
   (1u << STT_TLS) | (1u << STT_GNU_IFUNC))

typedef struct {
  int fd;
  uint64_t file_size;
  const char* path;
  const ElfW(Phdr) * phdrs;
  uint64_t count;
} image_t;

typedef struct {
  uint64_t symtab, strtab, strsz, gnu_hash, hash, versym;
  bool has_symtab, has_strtab, has_gnu_hash, has_hash, has_versym;
} tables_t;

/* The chain walk's state: the symbol found, and glibc's count of versioned candidates. */
typedef struct {
  bool done;
  ElfW(Sym) versioned;
  uint64_t versions;
} walk_t;

static mp_status_t damaged(const image_t* im, const char* what) {
  return mp_errorf(MP_ERR_FORMAT,
                   "'%s' is damaged: %s (the dynamic loader reads it to find symbols); copy or "
                   "export it again",
                   im->path, what);
}

/* Read |size| bytes at address |vaddr| of the image, from the file bytes of a PT_LOAD that maps
 * them all (where the dynamic loader reads them). */
static bool read_vaddr(const image_t* im, uint64_t vaddr, void* buffer, uint64_t size) {
  for (uint64_t i = 0; i < im->count; ++i) {
    const ElfW(Phdr)* p = &im->phdrs[i];
    if (p->p_type != PT_LOAD || vaddr < p->p_vaddr || vaddr - p->p_vaddr > p->p_filesz ||
        size > p->p_filesz - (vaddr - p->p_vaddr))
      continue;
    uint64_t offset = p->p_offset + (vaddr - p->p_vaddr);
    return mp_in_bounds(offset, size, im->file_size) &&
           mp_file_read_at(im->fd, buffer, (size_t)size, offset);
  }
  return false;
}

/* |base| + |index| * |scale|, read as |size| bytes; false when it overflows or lies unmapped. */
static bool read_at_index(const image_t* im, uint64_t base, uint64_t index, uint64_t scale,
                          void* buffer, uint64_t size) {
  uint64_t at;
  return mp_mul_u64(index, scale, &at) && mp_add_u64(base, at, &at) &&
         read_vaddr(im, at, buffer, size);
}

static uint32_t gnu_hash(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + (uint8_t)*s;
  return h;
}

static uint32_t sysv_hash(const char* s) {
  uint32_t h = 0;
  for (; *s; ++s) {
    h = (h << 4) + (uint8_t)*s;
    uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

/* The tables the dynamic segment names; *out_found false when there is no dynamic segment. */
static mp_status_t read_tables(const image_t* im, tables_t* t, bool* out_found) {
  memset(t, 0, sizeof *t);
  t->strsz = UINT64_MAX;
  const ElfW(Phdr)* dynamic = NULL;
  for (uint64_t i = 0; i < im->count && !dynamic; ++i)
    if (im->phdrs[i].p_type == PT_DYNAMIC) dynamic = &im->phdrs[i];
  *out_found = dynamic != NULL;
  if (!dynamic) return MP_OK;
  uint64_t count = dynamic->p_memsz / sizeof(ElfW(Dyn));
  for (uint64_t i = 0; i < count; ++i) {
    ElfW(Dyn) d;
    if (i >= MAX_DYNAMIC || !read_at_index(im, dynamic->p_vaddr, i, sizeof d, &d, sizeof d))
      return damaged(im, "its dynamic segment");
    if (d.d_tag == DT_NULL) break;
    switch (d.d_tag) {
      case DT_SYMTAB:
        t->symtab = d.d_un.d_ptr, t->has_symtab = true;
        break;
      case DT_STRTAB:
        t->strtab = d.d_un.d_ptr, t->has_strtab = true;
        break;
      case DT_STRSZ:
        t->strsz = d.d_un.d_val;
        break;
      case DT_SYMENT:
        if (d.d_un.d_val != sizeof(ElfW(Sym))) return damaged(im, "its DT_SYMENT");
        break;
      case DT_GNU_HASH:
        t->gnu_hash = d.d_un.d_ptr, t->has_gnu_hash = true;
        break;
      case DT_HASH:
        t->hash = d.d_un.d_ptr, t->has_hash = true;
        break;
      case DT_VERSYM:
        t->versym = d.d_un.d_ptr, t->has_versym = true;
        break;
      default:
        break;
    }
  }
  if ((t->has_gnu_hash || t->has_hash) && !(t->has_symtab && t->has_strtab))
    return damaged(im, "its dynamic segment names a hash table but no symbol or string table");
  return MP_OK;
}

/* Symbol |index| as check_match judges it for dlsym (no version asked, the newest wanted): a
 * match, a versioned candidate (counted in |walk|), or neither. */
static mp_status_t consider(const image_t* im, const tables_t* t, uint64_t index,
                            const char* name, size_t length, walk_t* walk,
                            mp_elf_symbol_t* out) {
  ElfW(Sym) sym;
  if (!read_at_index(im, t->symtab, index, sizeof sym, &sym, sizeof sym))
    return damaged(im, "a symbol its hash table names lies outside its segments");
  unsigned type = ELF64_ST_TYPE(sym.st_info);
  if ((sym.st_value == 0 && sym.st_shndx != SHN_ABS && type != STT_TLS) ||
      !((1u << type) & ALLOWED_TYPES) || sym.st_name > t->strsz ||
      length + 1 > t->strsz - sym.st_name)
    return MP_OK;
  char found[MAX_NAME];
  if (!read_at_index(im, t->strtab, sym.st_name, 1, found, length + 1))
    return damaged(im, "a symbol's name lies outside its segments");
  if (memcmp(found, name, length + 1) != 0) return MP_OK;
  if (t->has_versym) {
    uint16_t version;
    if (!read_at_index(im, t->versym, index, sizeof version, &version, sizeof version))
      return damaged(im, "its symbol versions (DT_VERSYM)");
    if ((version & 0x7fff) >= 2) { /* versioned: taken only if it is the one visible version */
      if (!(version & 0x8000) && walk->versions++ == 0) walk->versioned = sym;
      return MP_OK;
    }
  }
  walk->done = true;
  unsigned bind = ELF64_ST_BIND(sym.st_info);
  if (bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE)
    *out = (mp_elf_symbol_t){true, (uint8_t)type, sym.st_value, sym.st_size};
  return MP_OK; /* a local one: this object gives nothing */
}

/* Walk the chain of a GNU hash table (DT_GNU_HASH), its bloom filter first. */
static mp_status_t walk_gnu(const image_t* im, const tables_t* t, const char* name, walk_t* walk,
                            mp_elf_symbol_t* out) {
  uint32_t head[4]; /* nbuckets, symoffset, bloom words, bloom shift */
  if (!read_vaddr(im, t->gnu_hash, head, sizeof head))
    return damaged(im, "its GNU hash table");
  if (head[0] == 0) return MP_OK; /* an empty table: nothing to find */
  if (head[2] == 0) return damaged(im, "its GNU hash table has no bloom filter");
  if (head[3] >= 32) /* a hash is shifted right by it: a linker writes 5 to 10 or so */
    return damaged(im, "its GNU hash table's bloom shift is 32 or more");
  uint32_t h = gnu_hash(name);
  uint64_t word;
  if (!read_at_index(im, t->gnu_hash + sizeof head, (h / BLOOM_BITS) & (head[2] - 1),
                     sizeof word, &word, sizeof word))
    return damaged(im, "its GNU hash table's bloom filter");
  if (!((word >> (h % BLOOM_BITS)) & (word >> ((h >> head[3]) % BLOOM_BITS)) & 1)) return MP_OK;
  uint64_t buckets = t->gnu_hash + sizeof head + (uint64_t)head[2] * sizeof word;
  uint32_t bucket;
  if (!read_at_index(im, buckets, h % head[0], sizeof bucket, &bucket, sizeof bucket))
    return damaged(im, "its GNU hash table's buckets");
  if (bucket == 0) return MP_OK;
  /* The chain's first entry is symbol |symoffset|'s (glibc's l_gnu_chain_zero). */
  uint64_t chain = buckets + (uint64_t)head[0] * sizeof bucket - (uint64_t)head[1] * sizeof bucket;
  for (uint64_t index = bucket, n = 0; n < MAX_CHAIN; ++index, ++n) {
    uint32_t link;
    if (!read_at_index(im, chain, index, sizeof link, &link, sizeof link))
      return damaged(im, "its GNU hash table's chains");
    if (((link ^ h) >> 1) == 0) {
      MP_RETURN_IF_ERROR(consider(im, t, index, name, strlen(name), walk, out));
      if (walk->done) return MP_OK;
    }
    if (link & 1) return MP_OK;
  }
  return damaged(im, "a chain of its GNU hash table never ends");
}

/* Walk the chain of a System V hash table (DT_HASH). */
static mp_status_t walk_sysv(const image_t* im, const tables_t* t, const char* name,
                             walk_t* walk, mp_elf_symbol_t* out) {
  uint32_t head[2]; /* nbucket, nchain */
  if (!read_vaddr(im, t->hash, head, sizeof head)) return damaged(im, "its hash table");
  if (head[0] == 0) return MP_OK;
  uint32_t index;
  if (!read_at_index(im, t->hash + sizeof head, sysv_hash(name) % head[0], sizeof index, &index,
                     sizeof index))
    return damaged(im, "its hash table's buckets");
  uint64_t chain = t->hash + sizeof head + (uint64_t)head[0] * sizeof index;
  for (uint64_t n = 0; index != STN_UNDEF; ++n) {
    if (n >= MAX_CHAIN || n > head[1]) return damaged(im, "a chain of its hash table never ends");
    MP_RETURN_IF_ERROR(consider(im, t, index, name, strlen(name), walk, out));
    if (walk->done) return MP_OK;
    if (!read_at_index(im, chain, index, sizeof index, &index, sizeof index))
      return damaged(im, "its hash table's chains");
  }
  return MP_OK;
}

mp_status_t mp_elf_dynamic_symbol(int fd, uint64_t file_size, const char* path, const char* name,
                                  mp_elf_symbol_t* out) {
  memset(out, 0, sizeof *out);
  if (strlen(name) >= MAX_NAME)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "symbol name '%s' is too long", name);
  ElfW(Ehdr) eh;
  if (file_size < sizeof eh || !mp_file_read_at(fd, &eh, sizeof eh, 0) ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return mp_errorf(MP_ERR_FORMAT, "'%s' is not a 64-bit ELF library", path);
  image_t im = {fd, file_size, path, NULL, eh.e_phnum};
  if (eh.e_phentsize != sizeof(ElfW(Phdr)) ||
      !mp_in_bounds(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr)), file_size))
    return damaged(&im, "its program headers");
  ElfW(Phdr)* phdrs = malloc((size_t)eh.e_phnum * sizeof *phdrs + 1);
  if (!phdrs) return mp_out_of_memory("reading program headers");
  mp_status_t status = MP_OK;
  if (!mp_file_read_at(fd, phdrs, (size_t)eh.e_phnum * sizeof *phdrs, eh.e_phoff))
    status = damaged(&im, "its program headers");
  im.phdrs = phdrs;
  tables_t tables;
  bool dynamic = false;
  if (status == MP_OK) status = read_tables(&im, &tables, &dynamic);
  walk_t walk = {0};
  if (status == MP_OK && dynamic && tables.has_gnu_hash) /* glibc prefers it */
    status = walk_gnu(&im, &tables, name, &walk, out);
  else if (status == MP_OK && dynamic && tables.has_hash)
    status = walk_sysv(&im, &tables, name, &walk, out);
  if (status == MP_OK && !walk.done && walk.versions == 1) { /* the one visible version */
    unsigned bind = ELF64_ST_BIND(walk.versioned.st_info);
    if (bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE)
      *out = (mp_elf_symbol_t){true, (uint8_t)ELF64_ST_TYPE(walk.versioned.st_info),
                               walk.versioned.st_value, walk.versioned.st_size};
  }
  free(phdrs);
  if (status != MP_OK) memset(out, 0, sizeof *out);
  return status;
}
