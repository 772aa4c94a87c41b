/* Vulkan pipelines through the kernel cache (vulkan_pipeline_cache.h): the key's text, the
 * pipeline cache header check, and the VkPipelineCache seeded from an entry or stored after a
 * miss. */
#include "kinds/vulkan/vulkan_pipeline_cache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"

enum { VK_PIPELINE_CACHE_HEADER_VERSION_ONE = 1 };

static void hex(const uint8_t* bytes, size_t count, char* out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < count; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * count] = '\0';
}

/* "entry NAME; constants ID@OFFSET+SIZE,...; data HEX": what the driver is given besides the
 * SPIR-V, written the same way each time (the map entries in their order, the data in hex).
 * NULL when out of memory. */
static char* options_text(const mp_vulkan_pipeline_key_t* key) {
  const VkSpecializationInfo* s = key->specialization;
  uint32_t entries = s ? s->mapEntryCount : 0;
  size_t data = s ? s->dataSize : 0;
  size_t capacity = strlen(key->entry_point) + 64 + (size_t)entries * 48 + 2 * data;
  char* text = malloc(capacity);
  if (!text) return NULL;
  size_t at = (size_t)snprintf(text, capacity, "entry %s; constants ", key->entry_point);
  for (uint32_t e = 0; e < entries; ++e)
    at += (size_t)snprintf(text + at, capacity - at, "%s%" PRIu32 "@%" PRIu32 "+%zu",
                           e ? "," : "", s->pMapEntries[e].constantID, s->pMapEntries[e].offset,
                           s->pMapEntries[e].size);
  at += (size_t)snprintf(text + at, capacity - at, "; data ");
  hex(data ? s->pData : (const void*)"", data, text + at);
  return text;
}

void mp_vulkan_cache_input(const mp_vulkan_t* vk, int32_t device,
                           const mp_vulkan_pipeline_key_t* key, char** options,
                           char* device_text, size_t device_capacity, char* driver,
                           size_t driver_capacity, mp_kernel_cache_input_t* out_input) {
  const mp_vulkan_identity_t* id = &vk->identity[device];
  char uuid[2 * sizeof id->cache_uuid + 1];
  hex(id->cache_uuid, sizeof id->cache_uuid, uuid);
  snprintf(device_text, device_capacity, "%s/%04" PRIx32 ":%04" PRIx32 "/%s", id->name,
           id->vendor_id, id->device_id, uuid);
  snprintf(driver, driver_capacity, "%" PRIu32, id->driver_version);
  *options = options_text(key);
  *out_input = (mp_kernel_cache_input_t){
      .kind = "vulkan",
      .code = key->spirv,
      .code_size = key->spirv_size,
      .options = *options ? *options : "",
      .device = device_text,
      .driver = driver,
      .what = "pipeline cache",
      .accept = mp_vulkan_pipeline_cache_header_ok,
      .accept_context = id,
  };
}

bool mp_vulkan_pipeline_cache_header_ok(const void* identity, const uint8_t* data, uint64_t size,
                                        char* why, size_t capacity) {
  const mp_vulkan_identity_t* id = identity;
  if (size < MP_VK_PIPELINE_CACHE_HEADER_SIZE) {
    snprintf(why, capacity, "its pipeline cache is %" PRIu64 " bytes, shorter than the %d-byte "
             "VkPipelineCacheHeaderVersionOne", size, MP_VK_PIPELINE_CACHE_HEADER_SIZE);
    return false;
  }
  uint32_t header_size = mp_load_le32(data), version = mp_load_le32(data + 4);
  uint32_t vendor = mp_load_le32(data + 8), device = mp_load_le32(data + 12);
  if (header_size < MP_VK_PIPELINE_CACHE_HEADER_SIZE || header_size > size) {
    snprintf(why, capacity, "its pipeline cache header says %" PRIu32 " bytes (at least %d, "
             "within its %" PRIu64 ")", header_size, MP_VK_PIPELINE_CACHE_HEADER_SIZE, size);
    return false;
  }
  if (version != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) {
    snprintf(why, capacity, "its pipeline cache header is version %" PRIu32 ", not 1", version);
    return false;
  }
  if (vendor != id->vendor_id || device != id->device_id ||
      memcmp(data + 16, id->cache_uuid, sizeof id->cache_uuid) != 0) {
    char held[33], own[33];
    hex(data + 16, 16, held);
    hex(id->cache_uuid, 16, own);
    snprintf(why, capacity, "its pipeline cache is another device's or driver's (vendor %04" PRIx32
             ", device %04" PRIx32 ", cache UUID %s; this one is %04" PRIx32 ", %04" PRIx32
             ", %s)", vendor, device, held, id->vendor_id, id->device_id, own);
    return false;
  }
  return true;
}

/* A VkPipelineCache holding |size| bytes of |data| (none: empty); 0 when the driver makes none. */
static VkPipelineCache create_cache(const mp_vulkan_t* vk, const mp_vulkan_device_t* d,
                                    const void* data, uint64_t size, VkResult* out_result) {
  VkPipelineCacheCreateInfo info = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, NULL, 0,
                                    (size_t)size, size ? data : NULL};
  VkPipelineCache cache = 0;
  *out_result = vk->vk.CreatePipelineCache(d->device, &info, NULL, &cache);
  return *out_result == VK_SUCCESS ? cache : 0;
}

void mp_vulkan_pipeline_cache_open(mp_vulkan_pipeline_cache_t* pc, const mp_vulkan_t* vk,
                                   const mp_vulkan_device_t* d, int32_t device,
                                   const mp_vulkan_pipeline_key_t* key, uint32_t load_flags,
                                   const char* subject) {
  memset(pc, 0, sizeof *pc);
  mp_kernel_cache_input_t input;
  mp_vulkan_cache_input(vk, device, key, &pc->options, pc->device, sizeof pc->device, pc->driver,
                        sizeof pc->driver, &input);
  if (!pc->options) load_flags |= MP_LOAD_NO_KERNEL_CACHE; /* no key without its options */
  mp_kernel_cache_open(&pc->slot, &input, load_flags, subject);
  if (!pc->slot.enabled) return; /* built as without a cache */
  uint8_t* data;
  uint64_t size;
  VkResult result;
  if (mp_kernel_cache_get(&pc->slot, &data, &size)) {
    pc->cache = create_cache(vk, d, data, size, &result); /* its header checked by get */
    free(data);
    pc->hit = pc->cache != 0;
    if (!pc->hit) mp_kernel_cache_refused(&pc->slot, mp_vk_result_name(result));
  }
  if (!pc->cache) pc->cache = create_cache(vk, d, NULL, 0, &result);
}

void mp_vulkan_pipeline_cache_close(mp_vulkan_pipeline_cache_t* pc, const mp_vulkan_t* vk,
                                    const mp_vulkan_device_t* d, bool made) {
  if (pc->cache && made && !pc->hit) {
    size_t size = 0;
    void* data = NULL;
    if (vk->vk.GetPipelineCacheData(d->device, pc->cache, &size, NULL) == VK_SUCCESS && size)
      data = malloc(size);
    /* VK_INCOMPLETE (the cache grew between the calls) stores nothing rather than a part. */
    if (data && vk->vk.GetPipelineCacheData(d->device, pc->cache, &size, data) == VK_SUCCESS)
      mp_kernel_cache_put(&pc->slot, data, size);
    free(data);
  }
  if (pc->cache) vk->vk.DestroyPipelineCache(d->device, pc->cache, NULL);
  pc->cache = 0;
  mp_kernel_cache_close(&pc->slot);
  free(pc->options);
  pc->options = NULL;
}
