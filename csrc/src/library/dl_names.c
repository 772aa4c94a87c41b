/* The names the dynamic loader knows library files by (library/dl_names.h).
 *
 * glibc knows an object by every name it was opened by, but dl_iterate_phdr shows only the
 * first. If an object outlives our dlclose (a dying and a new library of the same file sharing
 * it, or a program that dlopened the file itself) under a name of ours that is not its first,
 * closing the descriptor would let the next file opened get that number, and dlopen of
 * "/proc/self/fd/N" would then return this object for that file. Such descriptors linger,
 * open, until the name is gone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlinfo, dl_iterate_phdr */
#endif
#include "library/dl_names.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Descriptors kept open while the dynamic loader may still know their /proc name. */
typedef struct lingering_name {
  int fd;
  char name[64];
  struct lingering_name* next;
} lingering_name_t;
static lingering_name_t* lingering_names; /* under the library lock */

static int name_in_use(struct dl_phdr_info* info, size_t size, void* name) {
  (void)size;
  return info->dlpi_name && strcmp(info->dlpi_name, name) == 0;
}

/* "/proc/self/fd/N" into |buffer| (MP_DL_NAME_SIZE bytes), without printf: a process's
 * first load would pay for libc's first formatted print otherwise. */
static void proc_fd_name(int fd, char* buffer) {
  static const char prefix[] = "/proc/self/fd/";
  char digits[16];
  int count = 0;
  unsigned value = (unsigned)fd;
  do digits[count++] = (char)('0' + value % 10);
  while ((value /= 10) != 0);
  memcpy(buffer, prefix, sizeof prefix - 1);
  char* p = buffer + sizeof prefix - 1;
  while (count) *p++ = digits[--count];
  *p = '\0';
}

/* A /proc name for the file open as *fd that the dynamic loader does not know yet (*fd may
 * move to another number); false when none was found. */
static bool free_proc_name(int* fd, char* name) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    proc_fd_name(*fd, name);
    if (!dl_iterate_phdr(name_in_use, name)) return true;
    int moved = fcntl(*fd, F_DUPFD_CLOEXEC, *fd + 1);
    if (moved < 0) return false;
    close(*fd);
    *fd = moved;
  }
  return false;
}

/* Whether /proc/self/fd names this process's descriptors: asked only when a dlopen by such a
 * name failed (the question costs a procfs lookup), then remembered. Under the library lock. */
static enum { PROC_UNKNOWN, PROC_MOUNTED, PROC_MISSING } proc_fd_names = PROC_UNKNOWN;

void* mp_dl_open(int* fd, const char* path, char name[MP_DL_NAME_SIZE]) {
  name[0] = '\0';
  if (proc_fd_names != PROC_MISSING && free_proc_name(fd, name)) {
    dlerror();
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle || proc_fd_names == PROC_MOUNTED) return handle;
    proc_fd_names = access("/proc/self/fd", X_OK) == 0 ? PROC_MOUNTED : PROC_MISSING;
    if (proc_fd_names == PROC_MOUNTED) return NULL; /* the file's own fault: dlerror says */
  }
  name[0] = '\0';
  dlerror();
  return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* Whether the dynamic loader still knows an object by |name|. */
static bool name_still_known(const char* name) {
  void* handle = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return false;
  dlclose(handle);
  return true;
}

static void close_lingering_names_gone(void) {
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

/* Close |fd| unless an object still known by |name| knows it under another first name. */
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

void mp_dl_close_fd(int fd, const char* name) {
  close_or_linger(fd, name);
  close_lingering_names_gone();
}

static int at_base(struct dl_phdr_info* info, size_t size, void* base) {
  (void)size;
  return info->dlpi_addr == *(ElfW(Addr)*)base;
}

void mp_dl_unload(void* handle, int fd, const char* name) {
  struct link_map* map = NULL;
  ElfW(Addr) base = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_addr : 0;
  dlclose(handle);
  if (fd >= 0) {
    /* Usually the object is gone with our dlclose, and its names with it: no object at its
     * base any more. Only one that lives on needs the closer look of close_or_linger. */
    if (base && !dl_iterate_phdr(at_base, &base))
      close(fd);
    else
      close_or_linger(fd, name);
  }
  close_lingering_names_gone();
}
