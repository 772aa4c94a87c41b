/* A loaded deployable library (library/library.h): its life (open, retain, release, unmap) and
 * the set of libraries alive in the process, so that loading a file whose tree lives returns
 * that tree; and the bookkeeping of the modules loaded from it.
 *
 * One tree per loaded library: loading a file whose tree is still alive returns that tree,
 * because the library's context pointers can only point at one node. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "library/library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/module.h"
#include "files/elf_check.h"
#include "library/dl_names.h"
#include "library/library_state.h"
#include "library/overlays.h"

typedef struct live_library {
  mp_library_t* library;
  struct live_library* next;
} live_library_t;
static live_library_t* live_libraries; /* under the library lock */

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
  mp_host_lookups_clear(&library->lookups);
  mp_device_array_cache_clear(&library->device_arrays);
  mp_overlays_install(&library->overlays, NULL); /* its adapters go (calls keeping them hold them) */
  mp_load_settings_free(&library->settings);
  if (!library->system) mp_dl_unload(library->handle, library->fd, library->dlopen_name);
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

void mp_library_each_symbol(const mp_library_t* library, const char* prefix,
                            void (*visit)(void* context, const char* name), void* context) {
  size_t length = strlen(prefix);
  if (library->system) {
    for (uint64_t i = 0; i < library->system->num_symbols; ++i) {
      const char* name = library->system->symbols[i].name;
      if (strncmp(name, prefix, length) == 0 && name[length]) visit(context, name + length);
    }
    return;
  }
  int fd = library->fd >= 0 ? library->fd : open(library->path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    mp_elf_each_defined_symbol(fd, (uint64_t)st.st_size, prefix, visit, context);
  if (fd >= 0 && fd != library->fd) close(fd);
}

void mp_library_set_settings(mp_library_t* library, mp_load_settings_t* settings) {
  mp_load_settings_free(&library->settings);
  library->settings = *settings;
  memset(settings, 0, sizeof *settings);
}

const mp_load_settings_t* mp_library_settings(const mp_library_t* library) {
  return &library->settings;
}

struct mp_weights_binding** mp_library_weight_bindings(mp_library_t* library) {
  return &library->weight_bindings;
}

mp_overlays_slot_t* mp_library_overlays(mp_library_t* library) {
  return &library->overlays;
}

mp_host_lookups_t* mp_library_lookups(mp_library_t* library) {
  return &library->lookups;
}

mp_status_t mp_library_array_on(mp_library_t* library, const DLTensor* array, DLDevice device,
                                const DLTensor** out_array) {
  return mp_device_array_cache_get(&library->device_arrays, array, device, out_array);
}

/* ---- opening: which file, which version -------------------------------------------------- */

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

bool mp_library_is_live(const mp_file_id_t* id) {
  for (live_library_t* live = live_libraries; live; live = live->next)
    if (!live->library->system && mp_file_same_version(&live->library->id, id) &&
        atomic_load(&live->library->refcount) > 0)
      return true;
  return false;
}

/* A new library, registered as live; NULL when out of memory. */
static mp_library_t* new_library(char* path) {
  mp_library_t* library = calloc(1, sizeof *library);
  live_library_t* live = calloc(1, sizeof *live);
  if (!library || !live || !path) {
    free(library), free(live), free(path);
    return NULL;
  }
  atomic_init(&library->refcount, 1);
  library->fd = -1;
  library->path = path;
  mp_host_lookups_init(&library->lookups);
  mp_device_array_cache_init(&library->device_arrays);
  live->library = library;
  live->next = live_libraries;
  live_libraries = live;
  return library;
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
  char proc_name[MP_DL_NAME_SIZE];
  void* handle = mp_dl_open(&fd, path, proc_name);
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
      mp_dl_close_fd(fd, proc_name);
      *out_library = live->library;
      *out_existing = true;
      return MP_OK;
    }
    if (!same) {
      dlclose(handle);
      mp_dl_close_fd(fd, proc_name);
      return mp_errorf(MP_ERR_IO,
                       "cannot load the new version of '%s' while the old one is loaded (the "
                       "dynamic loader returned the old one; is /proc mounted?): drop every "
                       "module of the old version first",
                       path);
    }
  }
  mp_library_t* library = new_library(strdup(path));
  if (!library) {
    dlclose(handle);
    mp_dl_close_fd(fd, proc_name);
    return mp_out_of_memory("a library");
  }
  library->handle = handle;
  library->fd = fd;
  memcpy(library->dlopen_name, proc_name, sizeof library->dlopen_name);
  library->id = *id;
  *out_library = library;
  return MP_OK;
}

int mp_library_file(const mp_library_t* library) {
  return library->system ? -1 : library->fd;
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
  size_t size = strlen(system->name) + sizeof "system library ''";
  char* path = malloc(size);
  if (path) snprintf(path, size, "system library '%s'", system->name);
  mp_library_t* library = new_library(path);
  if (!library) return mp_out_of_memory("a system library");
  library->system = system;
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
  if (library->lookups.node == module) {
    library->lookups.node = NULL;
    /* The context must not point at a dead node. */
    void** ctx = mp_library_symbol(library, MP_CTX_LIBRARY_SYMBOL);
    if (ctx && *ctx == module) *ctx = NULL;
    /* No host code of this tree can be running (nothing holds a function of the node). */
    mp_host_lookups_forget_node(&library->lookups);
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
