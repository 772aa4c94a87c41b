/* The names the dynamic loader knows a library file by. A file is dlopen'd through the
 * descriptor it was checked on, as "/proc/self/fd/N", so that the bytes mapped are those of
 * the file checked and a new version of a file gets a name of its own (the dynamic loader
 * returns an object already loaded under a name without looking at the file). That makes a
 * descriptor number part of a name, and the number must not be reused while the dynamic loader
 * may still know the name: these functions hand out free names and close descriptors only once
 * their name is gone. Callers hold the library lock. */
#ifndef MODPACK_LIBRARY_DL_NAMES_H_
#define MODPACK_LIBRARY_DL_NAMES_H_

#include <stddef.h>

enum { MP_DL_NAME_SIZE = 64 };

/* dlopen (RTLD_NOW | RTLD_LOCAL) the file open as *fd, by a /proc name the dynamic loader
 * does not know yet, written into |name| (*fd may move to another number to find one); by
 * |path| where /proc is not mounted, |name| then "". NULL when dlopen failed: dlerror says
 * why. */
void* mp_dl_open(int* fd, const char* path, char name[MP_DL_NAME_SIZE]);

/* Close |fd|, which the dynamic loader knew as |name| ("" when it had the path: no /proc),
 * after the dlclose of its object: at once if no object of that name is left, else once the
 * name is gone (see dl_names.c). Also closes the descriptors whose names have gone since. */
void mp_dl_close_fd(int fd, const char* name);

/* dlclose |handle|, then close |fd| (its /proc name |name|) as mp_dl_close_fd does. */
void mp_dl_unload(void* handle, int fd, const char* name);

#endif /* MODPACK_LIBRARY_DL_NAMES_H_ */
