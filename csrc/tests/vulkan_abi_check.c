/* The Vulkan declarations of csrc/src/kinds/vulkan/vulkan_abi.h against the real header: built
 * twice by tests/test_vulkan.py, once with MP_REAL_VULKAN (Khronos' vulkan_core.h, from
 * libvulkan-dev) and once with modpack's own declarations, and the two outputs compared: every
 * struct's size and field offsets, the enum values and the limits read by offset. */
#include <stddef.h>
#include <stdio.h>

#ifdef MP_REAL_VULKAN
#include <vulkan/vulkan_core.h>
#define LIMIT(field) \
  (offsetof(VkPhysicalDeviceProperties, limits) + offsetof(VkPhysicalDeviceLimits, field))
#else
#include "kinds/vulkan/vulkan_abi.h"
#define LIMIT_maxStorageBufferRange MP_VK_LIMIT_MAX_STORAGE_BUFFER_RANGE
#define LIMIT_maxPushConstantsSize MP_VK_LIMIT_MAX_PUSH_CONSTANTS_SIZE
#define LIMIT_maxBoundDescriptorSets MP_VK_LIMIT_MAX_BOUND_DESCRIPTOR_SETS
#define LIMIT_maxComputeWorkGroupCount MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT
#define LIMIT_maxComputeWorkGroupInvocations MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_INVOCATIONS
#define LIMIT_maxComputeWorkGroupSize MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_SIZE
#define LIMIT(field) ((size_t)MP_VK_LIMITS_OFFSET + LIMIT_##field)
#endif

#define SIZE(T) printf("sizeof %s %zu\n", #T, sizeof(T))
#define AT(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))
#define VALUE(v) printf("%s %lld\n", #v, (long long)(v))

int main(void) {
  SIZE(VkApplicationInfo);
  AT(VkApplicationInfo, apiVersion);
  SIZE(VkInstanceCreateInfo);
  AT(VkInstanceCreateInfo, ppEnabledExtensionNames);
  AT(VkPhysicalDeviceProperties, deviceName);
  AT(VkPhysicalDeviceProperties, pipelineCacheUUID);
  printf("sizeof VkPhysicalDeviceProperties fits %d\n",
         sizeof(VkPhysicalDeviceProperties) >= 824);
  printf("limit maxStorageBufferRange %zu\n", LIMIT(maxStorageBufferRange));
  printf("limit maxPushConstantsSize %zu\n", LIMIT(maxPushConstantsSize));
  printf("limit maxBoundDescriptorSets %zu\n", LIMIT(maxBoundDescriptorSets));
  printf("limit maxComputeWorkGroupCount %zu\n", LIMIT(maxComputeWorkGroupCount));
  printf("limit maxComputeWorkGroupInvocations %zu\n", LIMIT(maxComputeWorkGroupInvocations));
  printf("limit maxComputeWorkGroupSize %zu\n", LIMIT(maxComputeWorkGroupSize));
  SIZE(VkMemoryType);
  SIZE(VkMemoryHeap);
  SIZE(VkPhysicalDeviceMemoryProperties);
  AT(VkPhysicalDeviceMemoryProperties, memoryHeapCount);
  AT(VkPhysicalDeviceMemoryProperties, memoryHeaps);
  SIZE(VkQueueFamilyProperties);
  SIZE(VkDeviceQueueCreateInfo);
  AT(VkDeviceQueueCreateInfo, pQueuePriorities);
  SIZE(VkDeviceCreateInfo);
  AT(VkDeviceCreateInfo, pEnabledFeatures);
  SIZE(VkBufferCreateInfo);
  AT(VkBufferCreateInfo, usage);
  AT(VkBufferCreateInfo, pQueueFamilyIndices);
  SIZE(VkMemoryRequirements);
  AT(VkMemoryRequirements, memoryTypeBits);
  SIZE(VkMemoryAllocateInfo);
  SIZE(VkShaderModuleCreateInfo);
  AT(VkShaderModuleCreateInfo, pCode);
  SIZE(VkDescriptorSetLayoutBinding);
  SIZE(VkDescriptorSetLayoutCreateInfo);
  SIZE(VkPushConstantRange);
  SIZE(VkPipelineLayoutCreateInfo);
  AT(VkPipelineLayoutCreateInfo, pPushConstantRanges);
  SIZE(VkSpecializationMapEntry);
  AT(VkSpecializationMapEntry, size);
  SIZE(VkSpecializationInfo);
  AT(VkSpecializationInfo, pData);
  SIZE(VkPipelineShaderStageCreateInfo);
  AT(VkPipelineShaderStageCreateInfo, pName);
  SIZE(VkComputePipelineCreateInfo);
  AT(VkComputePipelineCreateInfo, layout);
  AT(VkComputePipelineCreateInfo, basePipelineIndex);
  SIZE(VkDescriptorPoolSize);
  SIZE(VkDescriptorPoolCreateInfo);
  SIZE(VkDescriptorSetAllocateInfo);
  SIZE(VkDescriptorBufferInfo);
  SIZE(VkWriteDescriptorSet);
  AT(VkWriteDescriptorSet, pBufferInfo);
  SIZE(VkCommandPoolCreateInfo);
  SIZE(VkCommandBufferAllocateInfo);
  SIZE(VkCommandBufferBeginInfo);
  SIZE(VkBufferCopy);
  SIZE(VkSubmitInfo);
  AT(VkSubmitInfo, pCommandBuffers);
  SIZE(VkFenceCreateInfo);
  SIZE(VkMemoryBarrier);
  VALUE(VK_ERROR_INCOMPATIBLE_DRIVER);
  VALUE(VK_ERROR_OUT_OF_POOL_MEMORY);
  VALUE(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
  VALUE(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  VALUE(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  VALUE(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  VALUE(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  VALUE(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  VALUE(VK_QUEUE_COMPUTE_BIT);
  VALUE(VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  VALUE(VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
  VALUE(VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
  VALUE(VK_SHADER_STAGE_COMPUTE_BIT);
  VALUE(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  VALUE(VK_PIPELINE_STAGE_HOST_BIT);
  VALUE(VK_ACCESS_HOST_READ_BIT);
  VALUE(VK_ACCESS_MEMORY_WRITE_BIT);
  VALUE(VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT);
  VALUE(VK_API_VERSION_1_0);
  return 0;
}
