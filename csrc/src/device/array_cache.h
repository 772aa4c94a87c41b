/* Copies of constant CPU arrays (a const module's weights, a weight file's arrays) on devices:
 * made the first time host code asks for an array on a device (mp_backend_get_array_on) and
 * kept by the cache's owner, so each array is uploaded once per device. Thread-safe. */
#ifndef MODPACK_DEVICE_ARRAY_CACHE_H_
#define MODPACK_DEVICE_ARRAY_CACHE_H_

#include <pthread.h>

#include "modpack/modpack.h"

typedef struct mp_device_array mp_device_array_t;

typedef struct {
  pthread_mutex_t lock;
  mp_device_array_t* arrays;
} mp_device_array_cache_t;

void mp_device_array_cache_init(mp_device_array_cache_t* cache);
/* Release every copy (no caller may still use one). */
void mp_device_array_cache_clear(mp_device_array_cache_t* cache);

/* |array| (a CPU array that does not change while the cache lives) on |device|: the copy made
 * on the first request, or |array| itself when |device| is the CPU. The copy lives as long as
 * the cache. */
mp_status_t mp_device_array_cache_get(mp_device_array_cache_t* cache, const DLTensor* array,
                                      DLDevice device, const DLTensor** out_array);

#endif /* MODPACK_DEVICE_ARRAY_CACHE_H_ */
