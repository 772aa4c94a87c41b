/* Loading a deployable library: validate, dlopen, read `__dev_mblob`, run each entry's loader,
 * rebuild the import tree and patch the library's module context.
 *
 * One tree per loaded library: loading a file whose tree is still alive returns that tree,
 * because the library's context pointers can only point at one module. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr1, dlinfo, pread */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* ---- MODPACK_LOG_LOADING: one line per load phase on stderr ------------------------------- */

static bool log_enabled(void) {
  static int enabled = -1; /* benign race: every thread computes the same value */
  if (enabled < 0) {
    const char* v = getenv("MODPACK_LOG_LOADING");
    enabled = v && *v && strcmp(v, "0") != 0;
  }
  return enabled;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Logs the phase that started at *|since| and restarts the clock. */
static void log_phase(const char* path, const char* phase, double* since, const char* detail) {
  if (!log_enabled()) return;
  double t = now_ms();
  fprintf(stderr, "modpack: load %s: %-16s %9.3f ms%s%s\n", path, phase, t - *since,
          detail[0] ? "  " : "", detail);
  *since = t;
}

/* Guards the libraries' context entries (library_lock, if both, is taken first). */
static pthread_mutex_t context_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads are serialised (loaders may load recursively, hence recursive). */
static pthread_mutex_t library_lock;
static pthread_once_t library_lock_once = PTHREAD_ONCE_INIT;

/* Live libraries, for returning the existing tree on a second load. */
typedef struct live_library {
  mp_library_t* library;
  mp_module_t* root; /* not retained */
  struct live_library* next;
} live_library_t;
static live_library_t* live_libraries;

static void init_library_lock(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&library_lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

static void lock_libraries(void) {
  pthread_once(&library_lock_once, init_library_lock);
  pthread_mutex_lock(&library_lock);
}

/* Take a reference only if the object is still alive (count > 0). */
static bool try_retain(atomic_long* refcount) {
  long count = atomic_load(refcount);
  while (count > 0)
    if (atomic_compare_exchange_weak(refcount, &count, count + 1)) return true;
  return false;
}

void mp_library_retain(mp_library_t* library) {
  if (library) atomic_fetch_add_explicit(&library->refcount, 1, memory_order_relaxed);
}

void mp_library_release(mp_library_t* library) {
  if (!library) return;
  if (atomic_fetch_sub_explicit(&library->refcount, 1, memory_order_acq_rel) != 1) return;
  lock_libraries();
  for (live_library_t** p = &live_libraries; *p; p = &(*p)->next) {
    if ((*p)->library == library) {
      live_library_t* dead = *p;
      *p = dead->next;
      free(dead);
      break;
    }
  }
  pthread_mutex_unlock(&library_lock);
  /* Every entry's function went with the "library" node (see forget below). */
  for (mp_context_entry_t* e = library->context_entries; e;) {
    mp_context_entry_t* next = e->next;
    mp_function_release(e->function);
    free(e->name);
    free(e);
    e = next;
  }
  dlclose(library->handle);
  free(library->path);
  free(library);
}

const char* mp_library_path(const mp_library_t* library) {
  return library->path;
}

void mp_library_forget_module(mp_library_t* library, mp_module_t* module) {
  lock_libraries();
  for (live_library_t* live = live_libraries; live; live = live->next)
    if (live->library == library && live->root == module) live->root = NULL;
  if (library->lib_module == module) {
    library->lib_module = NULL;
    /* The context must not point at a dead module. */
    void** ctx = dlsym(library->handle, MP_CTX_LIBRARY_SYMBOL);
    if (ctx && *ctx == module) *ctx = NULL;
    /* No host code of this tree can be running (nothing holds a function of the node), so
     * the entries host code keeps drop their functions, to be resolved again against the
     * next node. Holding them would keep the device modules, and so the library, alive. */
    pthread_mutex_lock(&context_lock);
    for (mp_context_entry_t* e = library->context_entries; e; e = e->next) {
      if (!e->function) continue;
      mp_function_t* f = e->function;
      e->function = NULL;
      pthread_mutex_unlock(&context_lock);
      pthread_mutex_unlock(&library_lock);
      mp_function_release(f);
      lock_libraries();
      pthread_mutex_lock(&context_lock);
    }
    pthread_mutex_unlock(&context_lock);
  }
  pthread_mutex_unlock(&library_lock);
}

/* ---- the context functions patched into libraries ------------------------------------------ */

/* Resolves |entry| against the library's current "library" node: its imports, depth-first.
 * Returns a new reference in *out_function. */
static mp_status_t resolve_entry(mp_context_entry_t* entry, mp_function_t** out_function) {
  *out_function = NULL;
  lock_libraries();
  mp_module_t* node = entry->library->lib_module;
  if (node && !try_retain(&node->refcount)) node = NULL;
  pthread_mutex_unlock(&library_lock);
  if (!node)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code called '%s' after its library was unloaded",
                     entry->name);
  mp_function_t* found = NULL;
  mp_status_t status = MP_OK;
  /* Imports only: the library's own functions are plain C calls for its code. */
  for (uint64_t i = 0; i < mp_module_import_count(node) && !found && status == MP_OK; ++i)
    status = mp_module_find_function(mp_module_import_at(node, i), entry->name, 1, &found);
  mp_module_release(node);
  if (status != MP_OK) return status;
  if (!found)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "host code asked for function '%s', which no module imported by the library "
                     "provides",
                     entry->name);
  pthread_mutex_lock(&context_lock);
  if (!entry->function) { /* keep the first of racing resolutions */
    entry->function = found;
    mp_function_retain(found);
  }
  pthread_mutex_unlock(&context_lock);
  *out_function = found;
  return MP_OK;
}

/* Hands host code a pointer it may keep while the library is loaded (an entry owned by the
 * library); a second lookup of the same name returns the same pointer. */
mp_status_t mp_context_get_function(void* ctx, const char* name, void** out_function) {
  *out_function = NULL;
  mp_module_t* node = ctx;
  if (!node || !node->library)
    return mp_errorf(MP_ERR_UNAVAILABLE, "host code looked up '%s' before load", name);
  mp_library_t* library = node->library;
  pthread_mutex_lock(&context_lock);
  mp_context_entry_t* entry = library->context_entries;
  while (entry && strcmp(entry->name, name) != 0) entry = entry->next;
  if (!entry) {
    entry = calloc(1, sizeof *entry);
    char* copy = entry ? strdup(name) : NULL;
    if (!copy) {
      free(entry);
      pthread_mutex_unlock(&context_lock);
      return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
    }
    entry->name = copy;
    entry->library = library;
    entry->next = library->context_entries;
    library->context_entries = entry;
  }
  bool resolved = entry->function != NULL;
  pthread_mutex_unlock(&context_lock);
  if (!resolved) { /* fail now, not at the first call, when the function does not exist */
    mp_function_t* function;
    mp_status_t status = resolve_entry(entry, &function);
    if (status != MP_OK) return status;
    mp_function_release(function);
  }
  *out_function = entry;
  return MP_OK;
}

mp_status_t mp_context_call(void* function, const mp_value_t* args, int32_t num_args,
                            mp_value_t* out_ret) {
  mp_context_entry_t* entry = function;
  if (!entry) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "host code called a NULL function");
  pthread_mutex_lock(&context_lock);
  mp_function_t* f = entry->function;
  if (f) mp_function_retain(f);
  pthread_mutex_unlock(&context_lock);
  if (!f) {
    mp_status_t status = resolve_entry(entry, &f);
    if (status != MP_OK) return status;
  }
  mp_status_t status = mp_function_call(f, args, num_args, out_ret);
  mp_function_release(f);
  return status;
}

/* ---- the "library" module kind ------------------------------------------------------------ */

static mp_status_t library_get_function(mp_module_t* self, const char* name,
                                        mp_function_t** out_function) {
  mp_library_t* library = mp_module_impl(self);
  char symbol[512];
  int n = snprintf(symbol, sizeof symbol, "%s%s", MP_FUNC_SYMBOL_PREFIX, name);
  if (n < 0 || (size_t)n >= sizeof symbol) return MP_OK; /* no such long name */
  void* address = dlsym(library->handle, symbol);
  if (!address) return MP_OK;
  mp_packed_cfunc_t fn;
  memcpy(&fn, &address, sizeof fn);
  return mp_function_create(fn, NULL, NULL, self, out_function);
}

static const mp_module_vtable_t library_vtable = {
    .get_function = library_get_function,
};

/* Write a function pointer into a context slot, if the library has that slot. */
static void patch_slot(mp_library_t* library, const char* symbol, const void* value, size_t size) {
  void* slot = dlsym(library->handle, symbol);
  if (slot) memcpy(slot, value, size);
}

mp_status_t mp_library_module_create(mp_library_t* library, mp_module_t** out_module,
                                     bool* out_reused) {
  *out_reused = false;
  if (library->lib_module && try_retain(&library->lib_module->refcount)) {
    *out_module = library->lib_module; /* it survived its tree: reuse it, imports and all */
    *out_reused = true;
    return MP_OK;
  }
  mp_status_t status = mp_module_create("library", &library_vtable, library, out_module);
  if (status != MP_OK) return status;
  (*out_module)->library = library;
  mp_library_retain(library);
  library->lib_module = *out_module;

  /* Patch the context: host code finds device functions through these. */
  void** ctx = dlsym(library->handle, MP_CTX_LIBRARY_SYMBOL);
  if (ctx) *ctx = *out_module;
  mp_status_t (*get_function)(void*, const char*, void**) = mp_context_get_function;
  mp_status_t (*call)(void*, const mp_value_t*, int32_t, mp_value_t*) = mp_context_call;
  void (*set_error)(mp_status_t, const char*) = mp_context_set_error;
  mp_status_t (*get_array)(void*, const char*, const DLTensor**) = mp_context_get_array;
  patch_slot(library, "__mp_ctx_get_function", &get_function, sizeof get_function);
  patch_slot(library, "__mp_ctx_call", &call, sizeof call);
  patch_slot(library, "__mp_ctx_set_error", &set_error, sizeof set_error);
  patch_slot(library, "__mp_ctx_get_array", &get_array, sizeof get_array);
  /* A lookup of a name no library defines pages in the symbol tables now, while loading,
   * rather than during the user's first call (measured: first lookup 7 us -> 2 us). */
  mp_function_t* none = NULL;
  library_get_function(*out_module, "", &none);
  mp_function_release(none); /* NULL unless a library defines "__mp_func_" itself */
  return MP_OK;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* The blob's bytes: from the symbol to its ELF st_size, which must lie inside a file-backed
 * part of a loaded segment (so no read can run past the file). */
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

static mp_status_t locate_blob(mp_library_t* library, const uint8_t* blob,
                               mp_const_byte_span_t* out_span) {
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
  *out_span = (mp_const_byte_span_t){blob, size};
  return MP_OK;
}

static mp_status_t build_tree(mp_library_t* library, mp_const_byte_span_t bytes, uint32_t flags,
                              mp_module_t** out_root) {
  double clock = now_ms();
  char detail[128];
  mp_blob_t* blob = NULL;
  mp_status_t status = mp_blob_parse(bytes, flags | MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, &blob);
  if (status != MP_OK) return mp_error_prefix(status, "'%s': %s", library->path, MP_BLOB_SYMBOL);
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  snprintf(detail, sizeof detail, "%" PRIu64 " modules, %" PRIu64 " bytes", info.module_count,
           info.blob_size);
  log_phase(library->path, "index", &clock, detail);
  if (!(flags & MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)) {
    status = mp_blob_verify_payloads(blob);
    if (status != MP_OK) {
      mp_blob_free(blob);
      return mp_error_prefix(status, "'%s': %s", library->path, MP_BLOB_SYMBOL);
    }
    if (log_enabled()) {
      uint64_t hashed = info.blob_size - info.index_size; /* payloads and their padding */
      double seconds = (now_ms() - clock) / 1e3;
      snprintf(detail, sizeof detail, "XXH3 over %" PRIu64 " bytes, %.2f GB/s", hashed,
               seconds > 0 ? (double)hashed / seconds / 1e9 : 0.0);
      log_phase(library->path, "checksums", &clock, detail);
    }
  } else {
    log_phase(library->path, "checksums", &clock, "skipped (MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)");
  }
  mp_module_t** modules = calloc(info.module_count, sizeof *modules);
  bool* reused = calloc(info.module_count, sizeof *reused);
  if (!modules || !reused) {
    free(modules), free(reused);
    mp_blob_free(blob);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory loading %" PRIu64 " modules",
                     info.module_count);
  }
  for (uint64_t i = 0; i < info.module_count && status == MP_OK; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (strcmp(entry.type_key, MP_LIB_TYPE_KEY) == 0) {
      status = mp_library_module_create(library, &modules[i], &reused[i]);
      continue;
    }
    mp_loader_fn_t loader;
    void* user_data;
    status = mp_loader_find(entry.type_key, &loader, &user_data);
    if (status != MP_OK) {
      mp_error_prefix(status, "'%s': module[%" PRIu64 "]", library->path, i);
      break;
    }
    mp_loader_args_t args = {
        .type_key = entry.type_key,
        .payload = {bytes.data + entry.payload_offset, entry.payload_size},
        .library = library,
    };
    mp_error_clear();
    status = loader(user_data, &args, &modules[i]);
    if (status == MP_OK && !modules[i])
      status = mp_errorf(MP_ERR_INTERNAL, "loader returned no module");
    if (status != MP_OK) {
      if (mp_error_message()[0] == '\0')
        mp_errorf(status, "loader failed with status %d", (int)status);
      mp_error_prefix(status, "'%s': loading module[%" PRIu64 "] (%s)", library->path, i,
                      entry.type_key);
      break;
    }
    if (!modules[i]->library) {
      modules[i]->library = library;
      mp_library_retain(library);
    }
  }
  for (uint64_t i = 0; i < info.module_count && status == MP_OK; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (reused[i]) continue; /* a surviving "library" node keeps the imports it has */
    for (uint64_t k = 0; k < entry.child_count && status == MP_OK; ++k)
      status =
          mp_module_append_import(modules[i], modules[mp_blob_child(blob, entry.first_edge + k)]);
  }
  log_phase(library->path, "loaders + tree", &clock, "");
  /* The tree now holds its own references; keep the root's. */
  for (uint64_t i = 1; i < info.module_count; ++i) mp_module_release(modules[i]);
  if (status == MP_OK) {
    *out_root = modules[0];
  } else {
    mp_module_release(modules[0]);
  }
  free(modules);
  free(reused);
  mp_blob_free(blob);
  return status;
}

static mp_status_t load_locked(const char* path, uint32_t flags, mp_module_t** out_module) {
  double clock = now_ms();
  mp_status_t status = mp_elf_check_file(path);
  if (status != MP_OK) return status;
  log_phase(path, "file check", &clock, "");
  dlerror();
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) return mp_errorf(MP_ERR_IO, "cannot load '%s': %s", path, dlerror());
  log_phase(path, "dlopen", &clock, "");

  for (live_library_t* live = live_libraries; live; live = live->next) {
    if (live->library->handle != handle || !try_retain(&live->library->refcount)) continue;
    mp_library_t* library = live->library;
    dlclose(handle); /* the live library holds its own */
    if (live->root && try_retain(&live->root->refcount)) {
      *out_module = live->root;
      mp_library_release(library);
      return MP_OK;
    }
    /* Parts of the old tree live on but its root is gone: build a new tree over the same
     * library (the "library" node is reused if it survives). */
    mp_const_byte_span_t bytes;
    bool reused;
    const uint8_t* blob = dlsym(library->handle, MP_BLOB_SYMBOL);
    if (!blob) {
      status = mp_library_module_create(library, out_module, &reused);
    } else if ((status = locate_blob(library, blob, &bytes)) == MP_OK) {
      status = build_tree(library, bytes, flags, out_module);
    }
    if (status == MP_OK) live->root = *out_module;
    mp_library_release(library);
    return status;
  }

  mp_library_t* library = calloc(1, sizeof *library);
  live_library_t* live = calloc(1, sizeof *live);
  char* path_copy = strdup(path);
  if (!library || !live || !path_copy) {
    free(library), free(live), free(path_copy);
    dlclose(handle);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  atomic_init(&library->refcount, 1);
  library->handle = handle;
  library->path = path_copy;
  live->library = library;
  live->next = live_libraries;
  live_libraries = live;

  const uint8_t* blob = dlsym(handle, MP_BLOB_SYMBOL);
  bool reused;
  if (!blob) {
    status = mp_library_module_create(library, out_module, &reused);
  } else {
    mp_const_byte_span_t bytes;
    status = locate_blob(library, blob, &bytes);
    if (status == MP_OK) status = build_tree(library, bytes, flags, out_module);
  }
  if (status == MP_OK) live->root = *out_module;
  mp_library_release(library); /* the modules hold it now (or it goes, on failure) */
  return status;
}

mp_status_t mp_module_load_from_file(const char* path, uint32_t flags, mp_module_t** out_module) {
  *out_module = NULL;
  if (!path) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_module_load_from_file: NULL path");
  /* A path, never a library name: dlopen would search the library path for "deploy.so". */
  char resolved[PATH_MAX];
  if (!realpath(path, resolved))
    return mp_errorf(errno == ENOENT ? MP_ERR_NOT_FOUND : MP_ERR_IO, "cannot open '%s': %s", path,
                     strerror(errno));
  path = resolved;
  mp_builtin_loaders_init();
  lock_libraries();
  mp_status_t status = load_locked(path, flags, out_module);
  pthread_mutex_unlock(&library_lock);
  return status;
}
