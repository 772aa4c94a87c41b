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
#define FEATURE(T, field, ours) printf("%s.%s %zu\n", #T, #field, offsetof(T, field))
#else
#include "kinds/vulkan/vulkan_abi.h"
#define LIMIT_maxStorageBufferRange MP_VK_LIMIT_MAX_STORAGE_BUFFER_RANGE
#define LIMIT_maxPushConstantsSize MP_VK_LIMIT_MAX_PUSH_CONSTANTS_SIZE
#define LIMIT_maxBoundDescriptorSets MP_VK_LIMIT_MAX_BOUND_DESCRIPTOR_SETS
#define LIMIT_maxComputeWorkGroupCount MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT
#define LIMIT_maxComputeWorkGroupInvocations MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_INVOCATIONS
#define LIMIT_maxComputeWorkGroupSize MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_SIZE
#define LIMIT(field) ((size_t)MP_VK_LIMITS_OFFSET + LIMIT_##field)
#define FEATURE(T, field, ours) printf("%s.%s %zu\n", #T, #field, (size_t)(ours))
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
  SIZE(VkPipelineCacheCreateInfo);
  AT(VkPipelineCacheCreateInfo, initialDataSize);
  AT(VkPipelineCacheCreateInfo, pInitialData);
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
  VALUE(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
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
  VALUE(VK_API_VERSION_1_1);
  VALUE(VK_API_VERSION_1_2);
  VALUE(VK_API_VERSION_1_3);
  VALUE(VK_MAKE_API_VERSION(0, 1, 3, 239));
  VALUE(VK_API_VERSION_MINOR(VK_MAKE_API_VERSION(0, 1, 3, 239)));
  /* Features and properties (payload version 2's requirements, vulkan_features.c). */
  SIZE(VkPhysicalDeviceFeatures);
  SIZE(VkPhysicalDeviceFeatures2);
  AT(VkPhysicalDeviceFeatures2, features);
  SIZE(VkPhysicalDeviceVulkan11Features);
  SIZE(VkPhysicalDeviceVulkan12Features);
  SIZE(VkPhysicalDeviceVulkan13Features);
  SIZE(VkPhysicalDevice16BitStorageFeatures);
  SIZE(VkPhysicalDeviceVariablePointersFeatures);
  SIZE(VkPhysicalDeviceProperties2);
  AT(VkPhysicalDeviceProperties2, properties);
  SIZE(VkPhysicalDeviceSubgroupProperties);
  AT(VkPhysicalDeviceSubgroupProperties, supportedStages);
  AT(VkPhysicalDeviceSubgroupProperties, supportedOperations);
  FEATURE(VkPhysicalDeviceFeatures, shaderFloat64, MP_VK_AT_SHADER_FLOAT64);
  FEATURE(VkPhysicalDeviceFeatures, shaderInt64, MP_VK_AT_SHADER_INT64);
  FEATURE(VkPhysicalDeviceFeatures, shaderInt16, MP_VK_AT_SHADER_INT16);
  FEATURE(VkPhysicalDeviceVulkan11Features, storageBuffer16BitAccess,
          MP_VK_AT_STORAGE_BUFFER_16BIT_ACCESS);
  FEATURE(VkPhysicalDeviceVulkan11Features, uniformAndStorageBuffer16BitAccess,
          MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS);
  FEATURE(VkPhysicalDeviceVulkan11Features, storagePushConstant16,
          MP_VK_AT_STORAGE_PUSH_CONSTANT16);
  FEATURE(VkPhysicalDeviceVulkan11Features, variablePointersStorageBuffer,
          MP_VK_AT_VARIABLE_POINTERS_STORAGE_BUFFER);
  FEATURE(VkPhysicalDeviceVulkan11Features, variablePointers, MP_VK_AT_VARIABLE_POINTERS);
  FEATURE(VkPhysicalDevice16BitStorageFeatures, storageBuffer16BitAccess,
          MP_VK_AT_STORAGE_BUFFER_16BIT_ACCESS);
  FEATURE(VkPhysicalDevice16BitStorageFeatures, uniformAndStorageBuffer16BitAccess,
          MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS);
  FEATURE(VkPhysicalDevice16BitStorageFeatures, storagePushConstant16,
          MP_VK_AT_STORAGE_PUSH_CONSTANT16);
  FEATURE(VkPhysicalDeviceVariablePointersFeatures, variablePointersStorageBuffer,
          MP_VK_AT_VARPTR_VARIABLE_POINTERS_STORAGE_BUFFER);
  FEATURE(VkPhysicalDeviceVariablePointersFeatures, variablePointers,
          MP_VK_AT_VARPTR_VARIABLE_POINTERS);
  FEATURE(VkPhysicalDeviceVulkan12Features, storageBuffer8BitAccess,
          MP_VK_AT_STORAGE_BUFFER_8BIT_ACCESS);
  FEATURE(VkPhysicalDeviceVulkan12Features, uniformAndStorageBuffer8BitAccess,
          MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS);
  FEATURE(VkPhysicalDeviceVulkan12Features, storagePushConstant8, MP_VK_AT_STORAGE_PUSH_CONSTANT8);
  FEATURE(VkPhysicalDeviceVulkan12Features, shaderBufferInt64Atomics,
          MP_VK_AT_SHADER_BUFFER_INT64_ATOMICS);
  FEATURE(VkPhysicalDeviceVulkan12Features, shaderSharedInt64Atomics,
          MP_VK_AT_SHADER_SHARED_INT64_ATOMICS);
  FEATURE(VkPhysicalDeviceVulkan12Features, shaderFloat16, MP_VK_AT_SHADER_FLOAT16);
  FEATURE(VkPhysicalDeviceVulkan12Features, shaderInt8, MP_VK_AT_SHADER_INT8);
  FEATURE(VkPhysicalDeviceVulkan12Features, scalarBlockLayout, MP_VK_AT_SCALAR_BLOCK_LAYOUT);
  FEATURE(VkPhysicalDeviceVulkan12Features, shaderSubgroupExtendedTypes,
          MP_VK_AT_SHADER_SUBGROUP_EXTENDED_TYPES);
  FEATURE(VkPhysicalDeviceVulkan12Features, vulkanMemoryModel, MP_VK_AT_VULKAN_MEMORY_MODEL);
  FEATURE(VkPhysicalDeviceVulkan12Features, vulkanMemoryModelDeviceScope,
          MP_VK_AT_VULKAN_MEMORY_MODEL_DEVICE_SCOPE);
  FEATURE(VkPhysicalDeviceVulkan12Features, subgroupBroadcastDynamicId,
          MP_VK_AT_SUBGROUP_BROADCAST_DYNAMIC_ID);
  FEATURE(VkPhysicalDeviceVulkan13Features, shaderZeroInitializeWorkgroupMemory,
          MP_VK_AT_SHADER_ZERO_INITIALIZE_WORKGROUP_MEMORY);
  FEATURE(VkPhysicalDeviceVulkan13Features, shaderIntegerDotProduct,
          MP_VK_AT_SHADER_INTEGER_DOT_PRODUCT);
  FEATURE(VkPhysicalDeviceVulkan13Features, maintenance4, MP_VK_AT_MAINTENANCE4);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  VALUE(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VARIABLE_POINTERS_FEATURES);
  VALUE(VK_SUBGROUP_FEATURE_BASIC_BIT);
  /* The validation layer's messenger (VK_EXT_debug_utils). */
  SIZE(VkDebugUtilsMessengerCreateInfoEXT);
  AT(VkDebugUtilsMessengerCreateInfoEXT, messageSeverity);
  AT(VkDebugUtilsMessengerCreateInfoEXT, pfnUserCallback);
  AT(VkDebugUtilsMessengerCreateInfoEXT, pUserData);
  SIZE(VkDebugUtilsMessengerCallbackDataEXT);
  AT(VkDebugUtilsMessengerCallbackDataEXT, messageIdNumber);
  AT(VkDebugUtilsMessengerCallbackDataEXT, pMessage);
  AT(VkDebugUtilsMessengerCallbackDataEXT, objectCount);
  VALUE(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  VALUE(VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT);
  VALUE(VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT);
  VALUE(VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT);
  VALUE(VK_ERROR_LAYER_NOT_PRESENT);
  VALUE(VK_ERROR_EXTENSION_NOT_PRESENT);
  return 0;
}
