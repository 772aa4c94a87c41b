/* The library lock: loads, unloads and the bookkeeping of loaded libraries are serialised by
 * one recursive lock (a loader may load a library in turn). It guards the set of live
 * libraries and each library's root and "library" node; it is taken before any other lock of
 * the library and load layers. */
#ifndef MODPACK_LIBRARY_LIBRARY_LOCK_H_
#define MODPACK_LIBRARY_LIBRARY_LOCK_H_

void mp_library_lock(void);
void mp_library_unlock(void);

#endif /* MODPACK_LIBRARY_LIBRARY_LOCK_H_ */
