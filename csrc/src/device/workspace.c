/* The workspace pool (device/workspace.h): per device, blocks handed out are remembered with
 * their size, and blocks given back are kept for reuse (best fit, at most twice the size asked
 * for) up to a cap per device, above which they go back to the driver. One lock: workspaces
 * are taken a few times per call, not per element. */
#include "device/workspace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/error.h"

enum { MAX_POOLS = 64, GRANULE = 4096 };
/* Free blocks kept per device beyond which a given-back block is released. */
static const uint64_t CACHE_LIMIT = (uint64_t)1 << 30;

typedef struct block {
  void* data;
  uint64_t size;
  struct block* next;
} block_t;

typedef struct {
  DLDevice device;
  block_t* used;
  block_t* free; /* sorted by size, smallest first */
  uint64_t free_bytes;
} pool_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pool_t pools[MAX_POOLS];
static int pool_count;

static pool_t* pool_of(DLDevice device) {
  for (int i = 0; i < pool_count; ++i)
    if (pools[i].device.device_type == device.device_type &&
        pools[i].device.device_id == device.device_id)
      return &pools[i];
  if (pool_count == MAX_POOLS) return NULL;
  pools[pool_count].device = device;
  return &pools[pool_count++];
}

mp_status_t mp_workspace_alloc(DLDevice device, uint64_t nbytes, void** out_data) {
  *out_data = NULL;
  if (nbytes > UINT64_MAX - GRANULE)
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "a workspace of %" PRIu64 " bytes", nbytes);
  uint64_t size = (nbytes ? nbytes + GRANULE - 1 : GRANULE) / GRANULE * GRANULE;
  block_t* block = NULL;
  pthread_mutex_lock(&lock);
  pool_t* pool = pool_of(device);
  if (!pool) {
    pthread_mutex_unlock(&lock);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "workspaces on more than %d devices", MAX_POOLS);
  }
  for (block_t** p = &pool->free; *p; p = &(*p)->next) {
    if ((*p)->size < size) continue;
    if ((*p)->size / 2 <= size) { /* the smallest that fits, if not twice too large */
      block = *p;
      *p = block->next;
      pool->free_bytes -= block->size;
    }
    break;
  }
  pthread_mutex_unlock(&lock);
  if (!block) {
    block = calloc(1, sizeof *block);
    if (!block) return mp_out_of_memory("a workspace record");
    mp_status_t status = mp_device_alloc(device, size, &block->data);
    if (status != MP_OK) {
      free(block);
      return mp_error_prefix(status, "allocating a workspace of %" PRIu64 " bytes", nbytes);
    }
    block->size = size;
  }
  pthread_mutex_lock(&lock);
  block->next = pool->used;
  pool->used = block;
  pthread_mutex_unlock(&lock);
  *out_data = block->data;
  return MP_OK;
}

mp_status_t mp_workspace_free(DLDevice device, void* data) {
  if (!data) return MP_OK;
  block_t* block = NULL;
  block_t* release = NULL;
  pthread_mutex_lock(&lock);
  pool_t* pool = pool_of(device);
  for (block_t** p = pool ? &pool->used : NULL; p && *p; p = &(*p)->next) {
    if ((*p)->data != data) continue;
    block = *p;
    *p = block->next;
    break;
  }
  if (block && pool->free_bytes + block->size > CACHE_LIMIT) {
    release = block;
  } else if (block) {
    block_t** p = &pool->free;
    while (*p && (*p)->size < block->size) p = &(*p)->next;
    block->next = *p;
    *p = block;
    pool->free_bytes += block->size;
  }
  pthread_mutex_unlock(&lock);
  if (!block)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "mp_backend_free_workspace: %p is not a workspace of device %d:%d (freed "
                     "twice, or taken on another device?)",
                     data, (int)device.device_type, (int)device.device_id);
  if (release) {
    mp_status_t status = mp_device_free(device, release->data);
    free(release);
    return status;
  }
  return MP_OK;
}
