/* The library lock (library/library_lock.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_MUTEX_RECURSIVE */
#endif
#include "library/library_lock.h"

#include <pthread.h>

#include "core/once.h"

static pthread_mutex_t library_lock;
static mp_once_t library_lock_once = MP_ONCE_INIT;

static void init_library_lock(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&library_lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

void mp_library_lock(void) {
  mp_once(&library_lock_once, init_library_lock);
  pthread_mutex_lock(&library_lock);
}

void mp_library_unlock(void) {
  pthread_mutex_unlock(&library_lock);
}
