/* Copies of constant arrays on devices (device/array_cache.h). */
#include "device/array_cache.h"

#include <stdlib.h>

#include "core/error.h"

struct mp_device_array {
  const void* source; /* the CPU array's data: the key, with the device */
  DLDevice device;
  DLTensor* array; /* from mp_array_empty */
  struct mp_device_array* next;
};

void mp_device_array_cache_init(mp_device_array_cache_t* cache) {
  pthread_mutex_init(&cache->lock, NULL);
  cache->arrays = NULL;
}

void mp_device_array_cache_clear(mp_device_array_cache_t* cache) {
  for (mp_device_array_t* a = cache->arrays; a;) {
    mp_device_array_t* next = a->next;
    mp_array_release(a->array);
    free(a);
    a = next;
  }
  cache->arrays = NULL;
  pthread_mutex_destroy(&cache->lock);
}

static DLTensor* cached(const mp_device_array_cache_t* cache, const void* source,
                        DLDevice device) {
  for (mp_device_array_t* a = cache->arrays; a; a = a->next)
    if (a->source == source && a->device.device_type == device.device_type &&
        a->device.device_id == device.device_id)
      return a->array;
  return NULL;
}

mp_status_t mp_device_array_cache_get(mp_device_array_cache_t* cache, const DLTensor* array,
                                      DLDevice device, const DLTensor** out_array) {
  *out_array = NULL;
  if (device.device_type == kDLCPU) {
    *out_array = array;
    return MP_OK;
  }
  pthread_mutex_lock(&cache->lock);
  DLTensor* found = cached(cache, array->data, device);
  pthread_mutex_unlock(&cache->lock);
  if (found) {
    *out_array = found;
    return MP_OK;
  }
  /* Copy outside the lock; if another thread got there first, its copy wins. */
  DLTensor* copy = NULL;
  MP_RETURN_IF_ERROR(mp_array_empty(array->shape, array->ndim, array->dtype, device, &copy));
  mp_status_t status = mp_array_copy(array, copy);
  mp_device_array_t* entry = status == MP_OK ? calloc(1, sizeof *entry) : NULL;
  if (status == MP_OK && !entry) status = mp_out_of_memory("a device array record");
  if (status != MP_OK) {
    mp_array_release(copy);
    return status;
  }
  pthread_mutex_lock(&cache->lock);
  found = cached(cache, array->data, device);
  if (!found) {
    *entry = (mp_device_array_t){array->data, device, copy, cache->arrays};
    cache->arrays = entry;
    found = copy;
    entry = NULL;
    copy = NULL;
  }
  pthread_mutex_unlock(&cache->lock);
  free(entry);
  mp_array_release(copy);
  *out_array = found;
  return MP_OK;
}
