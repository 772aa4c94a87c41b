/* A Vulkan pipeline through the kernel cache (files/kernel_cache.h): the VkPipelineCache a
 * pipeline is made with, seeded from the entry an earlier process stored for the same SPIR-V,
 * entry point, specialisation, device and driver, and stored after a miss.
 *
 *   mp_vulkan_pipeline_cache_t pc;
 *   mp_vulkan_pipeline_cache_open(&pc, vk, d, device, &key, load_flags, library_path);
 *   result = vkCreateComputePipelines(d->device, pc.cache, ...);   // pc.cache may be 0
 *   mp_vulkan_pipeline_cache_close(&pc, vk, d, result == VK_SUCCESS);
 *
 * The entry's bytes are untrusted: before the driver sees them, their
 * VkPipelineCacheHeaderVersionOne must name this device (header size at least 32, version 1,
 * vendorID, deviceID and pipelineCacheUUID equal to its properties'); anything else is ignored
 * as a damaged entry is, and the pipeline is made from the SPIR-V. Nothing here fails: at worst
 * the pipeline is made without a cache, as with the cache off. */
#ifndef MODPACK_KINDS_VULKAN_PIPELINE_CACHE_H_
#define MODPACK_KINDS_VULKAN_PIPELINE_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "files/kernel_cache.h"
#include "kinds/vulkan/vulkan_abi.h"

enum { MP_VK_PIPELINE_CACHE_HEADER_SIZE = 32 }; /* VkPipelineCacheHeaderVersionOne */

/* What a pipeline's build depends on besides the device: its key's code and options. */
typedef struct {
  const uint8_t* spirv; /* the shader's words, decoded */
  uint64_t spirv_size;
  const char* entry_point;
  const VkSpecializationInfo* specialization; /* NULL: none */
} mp_vulkan_pipeline_key_t;

typedef struct {
  VkPipelineCache cache; /* for vkCreateComputePipelines; 0 when the kernel cache is off */
  bool hit;              /* seeded from an entry (the driver may still compile) */
  mp_kernel_cache_slot_t slot;
  char* options; /* the key's options text (owned) */
  char device[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE + 64];
  char driver[16];
} mp_vulkan_pipeline_cache_t;

/* The kernel cache's input for |key| on device |device| (|options|, |device_text| and
 * |driver| receive its text: |*options| is the caller's to free, NULL when out of memory, and
 * then the input's options are ""). */
void mp_vulkan_cache_input(const mp_vulkan_t* vk, int32_t device,
                           const mp_vulkan_pipeline_key_t* key, char** options,
                           char* device_text, size_t device_capacity, char* driver,
                           size_t driver_capacity, mp_kernel_cache_input_t* out_input);

/* Look |key| up on |device| (its VkDevice |d|) and make the VkPipelineCache to build with. */
void mp_vulkan_pipeline_cache_open(mp_vulkan_pipeline_cache_t* pc, const mp_vulkan_t* vk,
                                   const mp_vulkan_device_t* d, int32_t device,
                                   const mp_vulkan_pipeline_key_t* key, uint32_t load_flags,
                                   const char* subject);

/* After the pipeline: on a miss whose pipeline was |made|, store the cache's data
 * (vkGetPipelineCacheData); then destroy the VkPipelineCache and release the slot. */
void mp_vulkan_pipeline_cache_close(mp_vulkan_pipeline_cache_t* pc, const mp_vulkan_t* vk,
                                    const mp_vulkan_device_t* d, bool made);

/* Whether |data| (|size| bytes) begins with a VkPipelineCacheHeaderVersionOne that names
 * |identity|: false with why in |why|. The kernel cache's accept for Vulkan entries. */
bool mp_vulkan_pipeline_cache_header_ok(const void* identity, const uint8_t* data, uint64_t size,
                                        char* why, size_t capacity);

#endif /* MODPACK_KINDS_VULKAN_PIPELINE_CACHE_H_ */
