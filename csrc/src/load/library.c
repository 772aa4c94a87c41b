/* A loaded deployable library (load/library.h): the dlopen'd file and the set of live ones,
 * its "library" node (host functions found with dlsym), the blob's place in its mapping, and
 * the functions its host code looked up.
 *
 * One tree per loaded library: loading a file whose tree is still alive returns that tree,
 * because the library's context pointers can only point at one node. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr1, dlinfo */
#endif
#include "load/library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/module.h"

struct mp_context_entry {
  char* name;
  mp_function_t* function; /* NULL until resolved, and after the "library" node dies */
  mp_library_t* library;
  struct mp_context_entry* next;
};

/* A constant array copied to a device, kept for the life of the library. */
typedef struct device_array {
  const void* source; /* the view's data, in the library mapping: the key, with the device */
  DLDevice device;
  DLTensor* array; /* from mp_array_empty */
  struct device_array* next;
} device_array_t;

struct mp_library {
  atomic_long refcount;
  const mp_system_lib_t* system; /* a system library (no handle, no file), or NULL */
  void* handle;                  /* from dlopen */
  int fd; /* the file, open while loaded: dlopen knows the library by its /proc name */
  char dlopen_name[64]; /* that name ("" when dlopen had the path: no /proc) */
  mp_file_id_t id;
  char* path;
  mp_module_t* root;       /* the root of its live tree (not owned), under the library lock */
  mp_module_t* lib_module; /* the "library" node (not owned) while it lives, same lock */
  mp_context_entry_t* context_entries; /* under entry_lock */
  device_array_t* device_arrays;       /* under entry_lock */
};

/* ---- the library lock and the live libraries ------------------------------------------- */

/* Loads are serialised (loaders may load recursively, hence recursive). */
static pthread_mutex_t library_lock;
static pthread_once_t library_lock_once = PTHREAD_ONCE_INIT;
/* Guards the libraries' context entries (library_lock, if both, is taken first). */
static pthread_mutex_t entry_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct live_library {
  mp_library_t* library;
  struct live_library* next;
} live_library_t;
static live_library_t* live_libraries; /* under library_lock */

/* Descriptors whose /proc name the dynamic loader may still know after modpack let go of the
 * object (see unmap): kept open, so no other file gets the number, and closed once the name
 * is gone. Under library_lock. */
typedef struct lingering_name {
  int fd;
  char name[64];
  struct lingering_name* next;
} lingering_name_t;
static lingering_name_t* lingering_names;

static void init_library_lock(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&library_lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

void mp_library_lock(void) {
  pthread_once(&library_lock_once, init_library_lock);
  pthread_mutex_lock(&library_lock);
}

void mp_library_unlock(void) {
  pthread_mutex_unlock(&library_lock);
}

/* Take a reference only if the library is still alive (count > 0). */
static bool try_retain(mp_library_t* library) {
  long count = atomic_load(&library->refcount);
  while (count > 0)
    if (atomic_compare_exchange_weak(&library->refcount, &count, count + 1)) return true;
  return false;
}

void mp_library_retain(mp_library_t* library) {
  if (library) atomic_fetch_add_explicit(&library->refcount, 1, memory_order_relaxed);
}

/* Whether the dynamic loader still knows an object by |name| (another holder of the same
 * object keeps it, and the names it was opened by, alive). */
static bool name_still_known(const char* name) {
  void* handle = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return false;
  dlclose(handle);
  return true;
}

/* dlclose |library|'s object and close its descriptor; under the library lock. glibc knows an
 * object by every name it was opened by, but dl_iterate_phdr (which dlopen_name asks) shows
 * only the first. If the object outlives this dlclose (a dying and a new library of the same
 * file sharing it, or a program that dlopened the file itself) under a name of ours that is
 * not its first, closing the descriptor would let the next file opened get that number, and
 * dlopen of "/proc/self/fd/N" would then return this object for that file. Such descriptors
 * linger until the name is gone. */
static void close_or_linger(int fd, const char* name) {
  void* handle = name[0] ? dlopen(name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  struct link_map* map = NULL;
  bool alias = handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
               strcmp(map->l_name, name) != 0;
  if (handle) dlclose(handle);
  lingering_name_t* lingering = alias ? calloc(1, sizeof *lingering) : NULL;
  if (!lingering) {
    close(fd); /* the name is gone, or dl_iterate_phdr shows it (or no memory: best effort) */
    return;
  }
  lingering->fd = fd;
  snprintf(lingering->name, sizeof lingering->name, "%s", name);
  lingering->next = lingering_names;
  lingering_names = lingering;
}

static int at_base(struct dl_phdr_info* info, size_t size, void* base) {
  (void)size;
  return info->dlpi_addr == *(ElfW(Addr)*)base;
}

static void unmap(mp_library_t* library) {
  if (library->system) return; /* linked into the program: nothing to unmap */
  struct link_map* map = NULL;
  ElfW(Addr) base = dlinfo(library->handle, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_addr : 0;
  dlclose(library->handle);
  if (library->fd >= 0) {
    /* Usually the object is gone with our dlclose, and its names with it: no object at its
     * base any more. Only one that lives on needs the closer look of close_or_linger. */
    if (base && !dl_iterate_phdr(at_base, &base))
      close(library->fd);
    else
      close_or_linger(library->fd, library->dlopen_name);
  }
  for (lingering_name_t** p = &lingering_names; *p;) {
    lingering_name_t* l = *p;
    if (name_still_known(l->name)) {
      p = &l->next;
      continue;
    }
    close(l->fd);
    *p = l->next;
    free(l);
  }
}

void mp_library_release(mp_library_t* library) {
  if (!library) return;
  if (atomic_fetch_sub_explicit(&library->refcount, 1, memory_order_acq_rel) != 1) return;
  /* Unlinked, torn down and unmapped under the library lock, so a load never meets an object
   * the dynamic loader still holds for a library modpack has let go of. */
  mp_library_lock();
  for (live_library_t** p = &live_libraries; *p; p = &(*p)->next) {
    if ((*p)->library == library) {
      live_library_t* dead = *p;
      *p = dead->next;
      free(dead);
      break;
    }
  }
  /* Every entry's function went with the "library" node (see forget_module). */
  for (mp_context_entry_t* e = library->context_entries; e;) {
    mp_context_entry_t* next = e->next;
    mp_function_release(e->function);
    free(e->name);
    free(e);
    e = next;
  }
  for (device_array_t* a = library->device_arrays; a;) {
    device_array_t* next = a->next;
    mp_array_release(a->array);
    free(a);
    a = next;
  }
  unmap(library);
  mp_library_unlock();
  free(library->path);
  free(library);
}

const char* mp_library_path(const mp_library_t* library) {
  return library->path;
}

void* mp_library_symbol(const mp_library_t* library, const char* symbol) {
  if (!library->system) return dlsym(library->handle, symbol);
  for (uint64_t i = 0; i < library->system->num_symbols; ++i)
    if (strcmp(library->system->symbols[i].name, symbol) == 0)
      return library->system->symbols[i].address;
  return NULL;
}

/* ---- opening: which file, which version, and the name dlopen knows it by ---------------- */

static int name_in_use(struct dl_phdr_info* info, size_t size, void* name) {
  (void)size;
  return info->dlpi_name && strcmp(info->dlpi_name, name) == 0;
}

/* The name to dlopen the file open as *fd by: /proc/self/fd/N, so that the bytes mapped are
 * those of the file checked (not whatever the path names by then), and so that a new version
 * of a file whose old version is loaded gets a name of its own (the dynamic loader returns
 * the object already loaded under a name without looking at the file). The name must not be
 * one the dynamic loader still knows (an object it kept after dlclose): *fd moves to another
 * number until it is free. Falls back to |path| where /proc is not mounted. */
static const char* dlopen_name(int* fd, const char* path, char* buffer, size_t size) {
  if (access("/proc/self/fd", X_OK) != 0) return path;
  for (int attempt = 0; attempt < 64; ++attempt) {
    snprintf(buffer, size, "/proc/self/fd/%d", *fd);
    if (!dl_iterate_phdr(name_in_use, buffer)) return buffer;
    int moved = fcntl(*fd, F_DUPFD_CLOEXEC, *fd + 1);
    if (moved < 0) break;
    close(*fd);
    *fd = moved;
  }
  return path;
}

/* The live library of this version of the file, retained; or an error when the file was
 * rewritten in place under a loaded version. NULL when there is none. */
static mp_status_t find_live(const char* path, const mp_file_id_t* id, mp_library_t** out) {
  *out = NULL;
  for (live_library_t* live = live_libraries; live; live = live->next) {
    mp_library_t* library = live->library;
    if (library->system || !mp_file_same_file(&library->id, id)) continue; /* not a file */
    if (!mp_file_same_version(&library->id, id))
      return mp_errorf(MP_ERR_IO,
                       "'%s' was rewritten in place while an earlier version of it is loaded "
                       "(same file, now %" PRIu64 " bytes, was %" PRIu64
                       "): the loaded code no longer matches the file. Replace library files "
                       "by writing a new file and renaming it over the old (export_library "
                       "does), or drop every module of the old version before loading again",
                       path, id->size, library->id.size);
    if (try_retain(library)) {
      *out = library;
      return MP_OK;
    }
  }
  return MP_OK;
}

mp_status_t mp_library_open(const char* path, int fd, const mp_file_id_t* id,
                            mp_library_t** out_library, bool* out_existing) {
  *out_library = NULL;
  *out_existing = false;
  mp_library_t* found;
  mp_status_t status = find_live(path, id, &found);
  if (status != MP_OK || found) {
    close(fd);
    *out_library = found;
    *out_existing = found != NULL;
    return status;
  }
  char name_buffer[64];
  const char* name = dlopen_name(&fd, path, name_buffer, sizeof name_buffer);
  dlerror();
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    close(fd);
    return mp_errorf(MP_ERR_IO, "cannot load '%s': %s", path, dlerror());
  }
  for (live_library_t* live = live_libraries; live; live = live->next) {
    if (live->library->handle != handle) continue;
    /* The dynamic loader had this object already (a library dying on another thread, or the
     * same file under another path): share it if it is this version, else refuse. */
    bool same = mp_file_same_version(&live->library->id, id);
    if (same && try_retain(live->library)) {
      dlclose(handle); /* the live library holds its own */
      close_or_linger(fd, name == path ? "" : name);
      *out_library = live->library;
      *out_existing = true;
      return MP_OK;
    }
    if (!same) {
      dlclose(handle);
      close_or_linger(fd, name == path ? "" : name);
      return mp_errorf(MP_ERR_IO,
                       "cannot load the new version of '%s' while the old one is loaded (the "
                       "dynamic loader returned the old one; is /proc mounted?): drop every "
                       "module of the old version first",
                       path);
    }
  }
  mp_library_t* library = calloc(1, sizeof *library);
  live_library_t* live = calloc(1, sizeof *live);
  char* path_copy = strdup(path);
  if (!library || !live || !path_copy) {
    free(library), free(live), free(path_copy);
    dlclose(handle);
    close_or_linger(fd, name == path ? "" : name);
    return mp_out_of_memory("a library");
  }
  atomic_init(&library->refcount, 1);
  library->handle = handle;
  library->fd = fd;
  if (name != path) snprintf(library->dlopen_name, sizeof library->dlopen_name, "%s", name);
  library->id = *id;
  library->path = path_copy;
  live->library = library;
  live->next = live_libraries;
  live_libraries = live;
  *out_library = library;
  return MP_OK;
}

mp_status_t mp_library_open_system(const mp_system_lib_t* system, mp_library_t** out_library,
                                   bool* out_existing) {
  *out_library = NULL;
  *out_existing = false;
  for (live_library_t* live = live_libraries; live; live = live->next) {
    if (live->library->system == system && try_retain(live->library)) {
      *out_library = live->library;
      *out_existing = true;
      return MP_OK;
    }
  }
  mp_library_t* library = calloc(1, sizeof *library);
  live_library_t* live = calloc(1, sizeof *live);
  size_t size = strlen(system->name) + sizeof "system library ''";
  char* path = malloc(size);
  if (!library || !live || !path) {
    free(library), free(live), free(path);
    return mp_out_of_memory("a system library");
  }
  snprintf(path, size, "system library '%s'", system->name);
  atomic_init(&library->refcount, 1);
  library->system = system;
  library->fd = -1;
  library->path = path;
  live->library = library;
  live->next = live_libraries;
  live_libraries = live;
  *out_library = library;
  return MP_OK;
}

mp_module_t* mp_library_live_root(mp_library_t* library) {
  return library->root && mp_module_try_retain(library->root) ? library->root : NULL;
}

void mp_library_set_root(mp_library_t* library, mp_module_t* root) {
  library->root = root;
}

/* ---- modules loaded from a library ----------------------------------------------------- */

/* The last reference to |module| went: unlink it under the library lock, so no load can
 * revive it, before its memory goes. */
static void forget_module(mp_library_t* library, mp_module_t* module) {
  mp_library_lock();
  if (library->root == module) library->root = NULL;
  if (library->lib_module == module) {
    library->lib_module = NULL;
    /* The context must not point at a dead node. */
    void** ctx = mp_library_symbol(library, MP_CTX_LIBRARY_SYMBOL);
    if (ctx && *ctx == module) *ctx = NULL;
    /* No host code of this tree can be running (nothing holds a function of the node), so
     * the entries host code keeps drop their functions, to be resolved again against the
     * next node. Holding them would keep the device modules, and so the library, alive. */
    pthread_mutex_lock(&entry_lock);
    for (mp_context_entry_t* e = library->context_entries; e; e = e->next) {
      if (!e->function) continue;
      mp_function_t* f = e->function;
      e->function = NULL;
      pthread_mutex_unlock(&entry_lock);
      mp_library_unlock();
      mp_function_release(f);
      mp_library_lock();
      pthread_mutex_lock(&entry_lock);
    }
    pthread_mutex_unlock(&entry_lock);
  }
  mp_library_unlock();
}

static const mp_module_owner_ops_t library_owner_ops = {
    .forget = forget_module,
    .release = mp_library_release,
};

void mp_library_adopt_module(mp_library_t* library, mp_module_t* module) {
  mp_library_retain(library);
  mp_module_set_library(module, library, &library_owner_ops);
}

/* ---- the "library" module kind: host functions found with dlsym ----------------------- */

static mp_status_t library_get_function(mp_module_t* self, const char* name,
                                        mp_function_t** out_function) {
  mp_library_t* library = mp_module_impl(self);
  char symbol[512];
  int n = snprintf(symbol, sizeof symbol, "%s%s", MP_FUNC_SYMBOL_PREFIX, name);
  if (n < 0 || (size_t)n >= sizeof symbol) return MP_OK; /* no such long name */
  void* address = mp_library_symbol(library, symbol);
  if (!address) return MP_OK;
  mp_packed_cfunc_t fn;
  memcpy(&fn, &address, sizeof fn);
  return mp_function_create(fn, NULL, NULL, self, out_function);
}

static const mp_module_vtable_t library_vtable = {
    .get_function = library_get_function,
};

mp_status_t mp_library_node(mp_library_t* library, mp_module_t** out_node, bool* out_reused) {
  *out_reused = false;
  if (library->lib_module && mp_module_try_retain(library->lib_module)) {
    *out_node = library->lib_module; /* it survived its tree: reuse it, imports and all */
    *out_reused = true;
    return MP_OK;
  }
  MP_RETURN_IF_ERROR(mp_module_create(MP_LIBRARY_TYPE_KEY, &library_vtable, library, out_node));
  mp_library_adopt_module(library, *out_node);
  library->lib_module = *out_node;
  /* A lookup of a name no library defines pages in the symbol tables now, while loading,
   * rather than during the user's first call (measured: first lookup 7 us -> 2 us). */
  mp_function_t* none = NULL;
  library_get_function(*out_node, "", &none);
  mp_function_release(none); /* NULL unless a library defines "__mp_func_" itself */
  return MP_OK;
}

/* ---- the blob's place in the mapping --------------------------------------------------- */

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
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its seal says it %s a blob, but %s is %s",
                     library->path, seal->blob_size ? "has" : "has no", MP_BLOB_SYMBOL,
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

/* ---- the functions host code looked up ------------------------------------------------- */

mp_status_t mp_library_entry(mp_library_t* library, const char* name,
                             mp_context_entry_t** out_entry) {
  *out_entry = NULL;
  pthread_mutex_lock(&entry_lock);
  mp_context_entry_t* entry = library->context_entries;
  while (entry && strcmp(entry->name, name) != 0) entry = entry->next;
  if (!entry) {
    entry = calloc(1, sizeof *entry);
    char* copy = entry ? strdup(name) : NULL;
    if (!copy) {
      free(entry);
      pthread_mutex_unlock(&entry_lock);
      return mp_out_of_memory("a context entry");
    }
    entry->name = copy;
    entry->library = library;
    entry->next = library->context_entries;
    library->context_entries = entry;
  }
  pthread_mutex_unlock(&entry_lock);
  *out_entry = entry;
  return MP_OK;
}

mp_status_t mp_library_entry_resolve(mp_context_entry_t* entry, mp_function_t** out_function) {
  *out_function = NULL;
  pthread_mutex_lock(&entry_lock);
  mp_function_t* cached = entry->function;
  if (cached) mp_function_retain(cached);
  pthread_mutex_unlock(&entry_lock);
  if (cached) {
    *out_function = cached;
    return MP_OK;
  }
  mp_library_lock();
  mp_module_t* node = entry->library->lib_module;
  if (node && !mp_module_try_retain(node)) node = NULL;
  mp_library_unlock();
  if (!node)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code called '%s' after its library was unloaded",
                     entry->name);
  mp_function_t* found = NULL;
  mp_status_t status = MP_OK;
  /* Imports only: the library's own functions are plain C calls for its code. */
  for (uint64_t i = 0; i < mp_module_import_count(node) && !found && status == MP_OK; ++i)
    status = mp_module_find_function(mp_module_import_at(node, i), entry->name, 1, &found);
  mp_module_release(node);
  MP_RETURN_IF_ERROR(status);
  if (!found)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "host code asked for function '%s', which no module imported by the library "
                     "provides",
                     entry->name);
  pthread_mutex_lock(&entry_lock);
  if (!entry->function) { /* keep the first of racing resolutions */
    entry->function = found;
    mp_function_retain(found);
  }
  pthread_mutex_unlock(&entry_lock);
  *out_function = found;
  return MP_OK;
}

/* ---- constant arrays on devices ---------------------------------------------------------- */

static DLTensor* cached_array(mp_library_t* library, const void* source, DLDevice device) {
  for (device_array_t* a = library->device_arrays; a; a = a->next)
    if (a->source == source && a->device.device_type == device.device_type &&
        a->device.device_id == device.device_id)
      return a->array;
  return NULL;
}

mp_status_t mp_library_array_on(mp_library_t* library, const DLTensor* array, DLDevice device,
                                const DLTensor** out_array) {
  *out_array = NULL;
  if (device.device_type == kDLCPU) {
    *out_array = array;
    return MP_OK;
  }
  pthread_mutex_lock(&entry_lock);
  DLTensor* found = cached_array(library, array->data, device);
  pthread_mutex_unlock(&entry_lock);
  if (found) {
    *out_array = found;
    return MP_OK;
  }
  /* Copy outside the lock; if another thread got there first, its copy wins. */
  DLTensor* copy = NULL;
  MP_RETURN_IF_ERROR(mp_array_empty(array->shape, array->ndim, array->dtype, device, &copy));
  mp_status_t status = mp_array_copy(array, copy);
  device_array_t* entry = status == MP_OK ? calloc(1, sizeof *entry) : NULL;
  if (status == MP_OK && !entry) status = mp_out_of_memory("a device array record");
  if (status != MP_OK) {
    mp_array_release(copy);
    return status;
  }
  pthread_mutex_lock(&entry_lock);
  found = cached_array(library, array->data, device);
  if (!found) {
    *entry = (device_array_t){array->data, device, copy, library->device_arrays};
    library->device_arrays = entry;
    found = copy;
    entry = NULL;
    copy = NULL;
  }
  pthread_mutex_unlock(&entry_lock);
  free(entry);
  mp_array_release(copy);
  *out_array = found;
  return MP_OK;
}
