/* Run-once for the runtime's lazy set-up (the kinds' registration, the library lock).
 *
 * pthread_once would do, but glibc's ends every first run with a futex wake, a system call,
 * whether or not a thread waits; each lazy set-up on a process's first load paid one. This
 * is an atomic flag, read once set, and a mutex taken only while it is unset, whose unlock
 * makes no call when no thread waits. Like pthread_once, |fn| must not run it again. */
#ifndef MODPACK_CORE_ONCE_H_
#define MODPACK_CORE_ONCE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
  atomic_bool done;
  pthread_mutex_t lock;
} mp_once_t;

#define MP_ONCE_INIT {false, PTHREAD_MUTEX_INITIALIZER}

static inline void mp_once(mp_once_t* once, void (*fn)(void)) {
  if (atomic_load_explicit(&once->done, memory_order_acquire)) return;
  pthread_mutex_lock(&once->lock);
  if (!atomic_load_explicit(&once->done, memory_order_relaxed)) {
    fn();
    atomic_store_explicit(&once->done, true, memory_order_release);
  }
  pthread_mutex_unlock(&once->lock);
}

#endif /* MODPACK_CORE_ONCE_H_ */
