/* The slice of the Vulkan 1.0 C API modpack uses for compute, declared from the specification so
 * that the runtime builds without Vulkan headers and loads libvulkan with dlopen on first use
 * (no link-time dependency: a machine without Vulkan still loads every library). Sizes and
 * offsets are checked against the real header where it is installed (tests/test_vulkan.py
 * compiles csrc/tests/vulkan_abi_check.c). */
#ifndef MODPACK_VULKAN_ABI_H_
#define MODPACK_VULKAN_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/registry.h"

/* Dispatchable handles are pointers; non-dispatchable ones are 64-bit on every platform. */
typedef struct VkInstance_T* VkInstance;
typedef struct VkPhysicalDevice_T* VkPhysicalDevice;
typedef struct VkDevice_T* VkDevice;
typedef struct VkQueue_T* VkQueue;
typedef struct VkCommandBuffer_T* VkCommandBuffer;
typedef uint64_t VkBuffer, VkDeviceMemory, VkShaderModule, VkDescriptorSetLayout,
    VkPipelineLayout, VkPipeline, VkDescriptorPool, VkDescriptorSet, VkCommandPool, VkFence,
    VkPipelineCache, VkDebugUtilsMessengerEXT;
typedef uint32_t VkFlags, VkBool32;
typedef uint64_t VkDeviceSize;
typedef int32_t VkResult;
typedef int32_t VkStructureType;
typedef void (*PFN_vkVoidFunction)(void);

enum {
  VK_SUCCESS = 0,
  VK_NOT_READY = 1,
  VK_TIMEOUT = 2,
  VK_INCOMPLETE = 5,
  VK_ERROR_OUT_OF_HOST_MEMORY = -1,
  VK_ERROR_OUT_OF_DEVICE_MEMORY = -2,
  VK_ERROR_INITIALIZATION_FAILED = -3,
  VK_ERROR_DEVICE_LOST = -4,
  VK_ERROR_MEMORY_MAP_FAILED = -5,
  VK_ERROR_LAYER_NOT_PRESENT = -6,
  VK_ERROR_EXTENSION_NOT_PRESENT = -7,
  VK_ERROR_FEATURE_NOT_PRESENT = -8,
  VK_ERROR_INCOMPATIBLE_DRIVER = -9,
  VK_ERROR_TOO_MANY_OBJECTS = -10,
  VK_ERROR_FORMAT_NOT_SUPPORTED = -11,
  VK_ERROR_UNKNOWN = -13,
  VK_ERROR_OUT_OF_POOL_MEMORY = -1000069000,
  VK_ERROR_INVALID_SHADER_NV = -1000012000,
};

enum {
  VK_STRUCTURE_TYPE_APPLICATION_INFO = 0,
  VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1,
  VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO = 2,
  VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO = 3,
  VK_STRUCTURE_TYPE_SUBMIT_INFO = 4,
  VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO = 5,
  VK_STRUCTURE_TYPE_FENCE_CREATE_INFO = 8,
  VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO = 12,
  VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO = 16,
  VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO = 17,
  VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO = 18,
  VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO = 29,
  VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO = 30,
  VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO = 32,
  VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO = 33,
  VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO = 34,
  VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET = 35,
  VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO = 39,
  VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO = 40,
  VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO = 42,
  VK_STRUCTURE_TYPE_MEMORY_BARRIER = 46,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES = 49,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES = 51,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES = 53,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2 = 1000059000,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES = 1000083000,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES = 1000094000,
  VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VARIABLE_POINTERS_FEATURES = 1000120000,
  VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT = 1000128004,
};

enum {
  VK_QUEUE_COMPUTE_BIT = 0x2,
  VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT = 0x1,
  VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT = 0x2,
  VK_MEMORY_PROPERTY_HOST_COHERENT_BIT = 0x4,
  VK_BUFFER_USAGE_TRANSFER_SRC_BIT = 0x1,
  VK_BUFFER_USAGE_TRANSFER_DST_BIT = 0x2,
  VK_BUFFER_USAGE_STORAGE_BUFFER_BIT = 0x20,
  VK_SHARING_MODE_EXCLUSIVE = 0,
  VK_DESCRIPTOR_TYPE_STORAGE_BUFFER = 7,
  VK_SHADER_STAGE_COMPUTE_BIT = 0x20,
  VK_PIPELINE_BIND_POINT_COMPUTE = 1,
  VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT = 0x2,
  VK_COMMAND_BUFFER_LEVEL_PRIMARY = 0,
  VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT = 0x1,
  VK_PIPELINE_STAGE_TRANSFER_BIT = 0x1000,
  VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT = 0x800,
  VK_PIPELINE_STAGE_HOST_BIT = 0x4000,
  VK_PIPELINE_STAGE_ALL_COMMANDS_BIT = 0x10000,
  VK_ACCESS_SHADER_READ_BIT = 0x20,
  VK_ACCESS_SHADER_WRITE_BIT = 0x40,
  VK_ACCESS_TRANSFER_READ_BIT = 0x800,
  VK_ACCESS_TRANSFER_WRITE_BIT = 0x1000,
  VK_ACCESS_HOST_READ_BIT = 0x2000,
  VK_ACCESS_HOST_WRITE_BIT = 0x4000,
  VK_ACCESS_MEMORY_READ_BIT = 0x8000,
  VK_ACCESS_MEMORY_WRITE_BIT = 0x10000,
  VK_SUBGROUP_FEATURE_BASIC_BIT = 0x1, /* GroupNonUniform; the other operations follow */
  VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT = 0x100,
  VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT = 0x1000,
  VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT = 0x1,
  VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT = 0x2,
  VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT = 0x4,
};
/* Versions: variant (3 bits), major (7), minor (10), patch (12). */
#define VK_MAKE_API_VERSION(variant, major, minor, patch) \
  ((((uint32_t)(variant)) << 29U) | (((uint32_t)(major)) << 22U) | \
   (((uint32_t)(minor)) << 12U) | ((uint32_t)(patch)))
#define VK_API_VERSION_MAJOR(version) (((uint32_t)(version) >> 22U) & 0x7FU)
#define VK_API_VERSION_MINOR(version) (((uint32_t)(version) >> 12U) & 0x3FFU)
#define VK_API_VERSION_1_0 VK_MAKE_API_VERSION(0, 1, 0, 0)
#define VK_API_VERSION_1_1 VK_MAKE_API_VERSION(0, 1, 1, 0)
#define VK_API_VERSION_1_2 VK_MAKE_API_VERSION(0, 1, 2, 0)
#define VK_API_VERSION_1_3 VK_MAKE_API_VERSION(0, 1, 3, 0)
#define VK_WHOLE_SIZE (~0ull)
#define VK_MAX_PHYSICAL_DEVICE_NAME_SIZE 256

typedef struct {
  VkStructureType sType;
  const void* pNext;
  const char* pApplicationName;
  uint32_t applicationVersion;
  const char* pEngineName;
  uint32_t engineVersion;
  uint32_t apiVersion;
} VkApplicationInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  const VkApplicationInfo* pApplicationInfo;
  uint32_t enabledLayerCount;
  const char* const* ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char* const* ppEnabledExtensionNames;
} VkInstanceCreateInfo;

/* The limits are read by offset (VkPhysicalDeviceLimits has over a hundred fields). */
enum {
  MP_VK_LIMITS_OFFSET = 296, /* of VkPhysicalDeviceProperties.limits */
  MP_VK_LIMIT_MAX_STORAGE_BUFFER_RANGE = 28,
  MP_VK_LIMIT_MAX_PUSH_CONSTANTS_SIZE = 32,
  MP_VK_LIMIT_MAX_BOUND_DESCRIPTOR_SETS = 64,
  MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT = 220, /* uint32_t[3] */
  MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_INVOCATIONS = 232,
  MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_SIZE = 236, /* uint32_t[3] */
};
typedef struct {
  uint32_t apiVersion;
  uint32_t driverVersion;
  uint32_t vendorID;
  uint32_t deviceID;
  int32_t deviceType;
  char deviceName[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
  uint8_t pipelineCacheUUID[16];
  uint64_t limits_and_sparse[66]; /* VkPhysicalDeviceLimits (504 bytes), sparse properties */
} VkPhysicalDeviceProperties;

/* The features a shader's capabilities may need (vulkan_features.c), read and enabled through
 * these structs. Each declares its VkBool32s as an array: the byte offsets of those modpack
 * uses are in vulkan_features.c's table and checked against the real header. */
enum {
  MP_VK_FEATURES_CORE = 55,  /* VkBool32s of VkPhysicalDeviceFeatures */
  MP_VK_FEATURES_11 = 12,    /* of VkPhysicalDeviceVulkan11Features (Vulkan 1.2's) */
  MP_VK_FEATURES_12 = 47,    /* of VkPhysicalDeviceVulkan12Features */
  MP_VK_FEATURES_13 = 15,    /* of VkPhysicalDeviceVulkan13Features */
  MP_VK_FEATURES_16BIT = 4,  /* of VkPhysicalDevice16BitStorageFeatures (Vulkan 1.1's) */
  MP_VK_FEATURES_VARPTR = 2, /* of VkPhysicalDeviceVariablePointersFeatures (Vulkan 1.1's) */
};
/* Byte offsets of the features modpack reads and enables, each in its struct (checked against
 * the real header by csrc/tests/vulkan_abi_check.c). */
enum {
  /* VkPhysicalDeviceFeatures */
  MP_VK_AT_SHADER_FLOAT64 = 156,
  MP_VK_AT_SHADER_INT64 = 160,
  MP_VK_AT_SHADER_INT16 = 164,
  /* VkPhysicalDeviceVulkan11Features; the first three also in Vulkan 1.1's
   * VkPhysicalDevice16BitStorageFeatures */
  MP_VK_AT_STORAGE_BUFFER_16BIT_ACCESS = 16,
  MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS = 20,
  MP_VK_AT_STORAGE_PUSH_CONSTANT16 = 24,
  MP_VK_AT_VARIABLE_POINTERS_STORAGE_BUFFER = 44,
  MP_VK_AT_VARIABLE_POINTERS = 48,
  /* Vulkan 1.1's VkPhysicalDeviceVariablePointersFeatures */
  MP_VK_AT_VARPTR_VARIABLE_POINTERS_STORAGE_BUFFER = 16,
  MP_VK_AT_VARPTR_VARIABLE_POINTERS = 20,
  /* VkPhysicalDeviceVulkan12Features */
  MP_VK_AT_STORAGE_BUFFER_8BIT_ACCESS = 24,
  MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS = 28,
  MP_VK_AT_STORAGE_PUSH_CONSTANT8 = 32,
  MP_VK_AT_SHADER_BUFFER_INT64_ATOMICS = 36,
  MP_VK_AT_SHADER_SHARED_INT64_ATOMICS = 40,
  MP_VK_AT_SHADER_FLOAT16 = 44,
  MP_VK_AT_SHADER_INT8 = 48,
  MP_VK_AT_SCALAR_BLOCK_LAYOUT = 140,
  MP_VK_AT_SHADER_SUBGROUP_EXTENDED_TYPES = 152,
  MP_VK_AT_VULKAN_MEMORY_MODEL = 180,
  MP_VK_AT_VULKAN_MEMORY_MODEL_DEVICE_SCOPE = 184,
  MP_VK_AT_SUBGROUP_BROADCAST_DYNAMIC_ID = 200,
  /* VkPhysicalDeviceVulkan13Features */
  MP_VK_AT_SHADER_ZERO_INITIALIZE_WORKGROUP_MEMORY = 60,
  MP_VK_AT_SHADER_INTEGER_DOT_PRODUCT = 68,
  MP_VK_AT_MAINTENANCE4 = 72,
};
typedef struct {
  VkBool32 features[MP_VK_FEATURES_CORE];
} VkPhysicalDeviceFeatures;
typedef struct {
  VkStructureType sType;
  void* pNext;
  VkPhysicalDeviceFeatures features;
} VkPhysicalDeviceFeatures2;
/* The sType and pNext every extensible feature struct starts with, then its VkBool32s. */
#define MP_VK_FEATURE_STRUCT(name, count) \
  typedef struct {                        \
    VkStructureType sType;                \
    void* pNext;                          \
    VkBool32 features[count];             \
  } name
MP_VK_FEATURE_STRUCT(VkPhysicalDeviceVulkan11Features, MP_VK_FEATURES_11);
MP_VK_FEATURE_STRUCT(VkPhysicalDeviceVulkan12Features, MP_VK_FEATURES_12);
MP_VK_FEATURE_STRUCT(VkPhysicalDeviceVulkan13Features, MP_VK_FEATURES_13);
MP_VK_FEATURE_STRUCT(VkPhysicalDevice16BitStorageFeatures, MP_VK_FEATURES_16BIT);
MP_VK_FEATURE_STRUCT(VkPhysicalDeviceVariablePointersFeatures, MP_VK_FEATURES_VARPTR);
#undef MP_VK_FEATURE_STRUCT

typedef struct {
  VkStructureType sType;
  void* pNext;
  VkPhysicalDeviceProperties properties;
} VkPhysicalDeviceProperties2;
typedef struct {
  VkStructureType sType;
  void* pNext;
  uint32_t subgroupSize;
  VkFlags supportedStages;
  VkFlags supportedOperations; /* VK_SUBGROUP_FEATURE_*_BIT */
  VkBool32 quadOperationsInAllStages;
} VkPhysicalDeviceSubgroupProperties;

/* VK_EXT_debug_utils, for the validation layer's messages (MODPACK_VULKAN_VALIDATION). */
typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  const char* pMessageIdName;
  int32_t messageIdNumber;
  const char* pMessage;
  uint32_t queueLabelCount;
  const void* pQueueLabels;
  uint32_t cmdBufLabelCount;
  const void* pCmdBufLabels;
  uint32_t objectCount;
  const void* pObjects;
} VkDebugUtilsMessengerCallbackDataEXT;
typedef VkBool32 (*PFN_vkDebugUtilsMessengerCallbackEXT)(
    VkFlags severity, VkFlags types, const VkDebugUtilsMessengerCallbackDataEXT* data, void* user);
typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  VkFlags messageSeverity;
  VkFlags messageType;
  PFN_vkDebugUtilsMessengerCallbackEXT pfnUserCallback;
  void* pUserData;
} VkDebugUtilsMessengerCreateInfoEXT;

/* Entry points that Vulkan 1.0 loaders lack or that extensions add, found with
 * vkGetInstanceProcAddr (NULL where absent). */
typedef VkResult (*PFN_vkEnumerateInstanceVersion)(uint32_t*);
typedef void (*PFN_vkGetPhysicalDeviceFeatures2)(VkPhysicalDevice, VkPhysicalDeviceFeatures2*);
typedef void (*PFN_vkGetPhysicalDeviceProperties2)(VkPhysicalDevice, VkPhysicalDeviceProperties2*);
typedef VkResult (*PFN_vkCreateDebugUtilsMessengerEXT)(VkInstance,
                                                       const VkDebugUtilsMessengerCreateInfoEXT*,
                                                       const void*, VkDebugUtilsMessengerEXT*);

typedef struct {
  VkFlags propertyFlags;
  uint32_t heapIndex;
} VkMemoryType;
typedef struct {
  VkDeviceSize size;
  VkFlags flags;
} VkMemoryHeap;
typedef struct {
  uint32_t memoryTypeCount;
  VkMemoryType memoryTypes[32];
  uint32_t memoryHeapCount;
  VkMemoryHeap memoryHeaps[16];
} VkPhysicalDeviceMemoryProperties;

typedef struct {
  VkFlags queueFlags;
  uint32_t queueCount;
  uint32_t timestampValidBits;
  uint32_t minImageTransferGranularity[3];
} VkQueueFamilyProperties;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
  uint32_t queueCount;
  const float* pQueuePriorities;
} VkDeviceQueueCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t queueCreateInfoCount;
  const VkDeviceQueueCreateInfo* pQueueCreateInfos;
  uint32_t enabledLayerCount;
  const char* const* ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char* const* ppEnabledExtensionNames;
  const void* pEnabledFeatures;
} VkDeviceCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  VkDeviceSize size;
  VkFlags usage;
  int32_t sharingMode;
  uint32_t queueFamilyIndexCount;
  const uint32_t* pQueueFamilyIndices;
} VkBufferCreateInfo;

typedef struct {
  VkDeviceSize size;
  VkDeviceSize alignment;
  uint32_t memoryTypeBits;
} VkMemoryRequirements;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkDeviceSize allocationSize;
  uint32_t memoryTypeIndex;
} VkMemoryAllocateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  size_t codeSize;
  const uint32_t* pCode;
} VkShaderModuleCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  size_t initialDataSize;
  const void* pInitialData;
} VkPipelineCacheCreateInfo;

typedef struct {
  uint32_t binding;
  int32_t descriptorType;
  uint32_t descriptorCount;
  VkFlags stageFlags;
  const void* pImmutableSamplers;
} VkDescriptorSetLayoutBinding;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t bindingCount;
  const VkDescriptorSetLayoutBinding* pBindings;
} VkDescriptorSetLayoutCreateInfo;

typedef struct {
  VkFlags stageFlags;
  uint32_t offset;
  uint32_t size;
} VkPushConstantRange;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t setLayoutCount;
  const VkDescriptorSetLayout* pSetLayouts;
  uint32_t pushConstantRangeCount;
  const VkPushConstantRange* pPushConstantRanges;
} VkPipelineLayoutCreateInfo;

typedef struct {
  uint32_t constantID;
  uint32_t offset;
  size_t size;
} VkSpecializationMapEntry;

typedef struct {
  uint32_t mapEntryCount;
  const VkSpecializationMapEntry* pMapEntries;
  size_t dataSize;
  const void* pData;
} VkSpecializationInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  VkFlags stage;
  VkShaderModule module;
  const char* pName;
  const VkSpecializationInfo* pSpecializationInfo;
} VkPipelineShaderStageCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  VkPipelineShaderStageCreateInfo stage;
  VkPipelineLayout layout;
  VkPipeline basePipelineHandle;
  int32_t basePipelineIndex;
} VkComputePipelineCreateInfo;

typedef struct {
  int32_t type;
  uint32_t descriptorCount;
} VkDescriptorPoolSize;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t maxSets;
  uint32_t poolSizeCount;
  const VkDescriptorPoolSize* pPoolSizes;
} VkDescriptorPoolCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkDescriptorPool descriptorPool;
  uint32_t descriptorSetCount;
  const VkDescriptorSetLayout* pSetLayouts;
} VkDescriptorSetAllocateInfo;

typedef struct {
  VkBuffer buffer;
  VkDeviceSize offset;
  VkDeviceSize range;
} VkDescriptorBufferInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkDescriptorSet dstSet;
  uint32_t dstBinding;
  uint32_t dstArrayElement;
  uint32_t descriptorCount;
  int32_t descriptorType;
  const void* pImageInfo;
  const VkDescriptorBufferInfo* pBufferInfo;
  const void* pTexelBufferView;
} VkWriteDescriptorSet;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  uint32_t queueFamilyIndex;
} VkCommandPoolCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkCommandPool commandPool;
  int32_t level;
  uint32_t commandBufferCount;
} VkCommandBufferAllocateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
  const void* pInheritanceInfo;
} VkCommandBufferBeginInfo;

typedef struct {
  VkDeviceSize srcOffset;
  VkDeviceSize dstOffset;
  VkDeviceSize size;
} VkBufferCopy;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  uint32_t waitSemaphoreCount;
  const void* pWaitSemaphores;
  const VkFlags* pWaitDstStageMask;
  uint32_t commandBufferCount;
  const VkCommandBuffer* pCommandBuffers;
  uint32_t signalSemaphoreCount;
  const void* pSignalSemaphores;
} VkSubmitInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags flags;
} VkFenceCreateInfo;

typedef struct {
  VkStructureType sType;
  const void* pNext;
  VkFlags srcAccessMask;
  VkFlags dstAccessMask;
} VkMemoryBarrier;

/* The entry points modpack uses, listed once: X(name, return type, parameter list). The struct
 * of function pointers below and the dlsym table in vulkan_device.c ("vk" name) are both
 * generated from this list. libvulkan (the loader) exports every Vulkan 1.0 command and
 * dispatches each to the device's driver. */
#define MP_VULKAN_ENTRY_POINTS(X)                                                                 \
  X(GetInstanceProcAddr, PFN_vkVoidFunction, (VkInstance, const char*))                           \
  X(CreateInstance, VkResult, (const VkInstanceCreateInfo*, const void*, VkInstance*))            \
  X(DestroyInstance, void, (VkInstance, const void*))                                             \
  X(EnumeratePhysicalDevices, VkResult, (VkInstance, uint32_t*, VkPhysicalDevice*))               \
  X(GetPhysicalDeviceProperties, void, (VkPhysicalDevice, VkPhysicalDeviceProperties*))           \
  X(GetPhysicalDeviceFeatures, void, (VkPhysicalDevice, VkPhysicalDeviceFeatures*))               \
  X(GetPhysicalDeviceMemoryProperties, void,                                                      \
    (VkPhysicalDevice, VkPhysicalDeviceMemoryProperties*))                                        \
  X(GetPhysicalDeviceQueueFamilyProperties, void,                                                 \
    (VkPhysicalDevice, uint32_t*, VkQueueFamilyProperties*))                                      \
  X(CreateDevice, VkResult,                                                                       \
    (VkPhysicalDevice, const VkDeviceCreateInfo*, const void*, VkDevice*))                        \
  X(GetDeviceQueue, void, (VkDevice, uint32_t, uint32_t, VkQueue*))                               \
  X(CreateBuffer, VkResult, (VkDevice, const VkBufferCreateInfo*, const void*, VkBuffer*))        \
  X(DestroyBuffer, void, (VkDevice, VkBuffer, const void*))                                       \
  X(GetBufferMemoryRequirements, void, (VkDevice, VkBuffer, VkMemoryRequirements*))               \
  X(AllocateMemory, VkResult,                                                                     \
    (VkDevice, const VkMemoryAllocateInfo*, const void*, VkDeviceMemory*))                        \
  X(FreeMemory, void, (VkDevice, VkDeviceMemory, const void*))                                    \
  X(BindBufferMemory, VkResult, (VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize))               \
  X(MapMemory, VkResult, (VkDevice, VkDeviceMemory, VkDeviceSize, VkDeviceSize, VkFlags, void**)) \
  X(CreateShaderModule, VkResult,                                                                 \
    (VkDevice, const VkShaderModuleCreateInfo*, const void*, VkShaderModule*))                    \
  X(DestroyShaderModule, void, (VkDevice, VkShaderModule, const void*))                           \
  X(CreateDescriptorSetLayout, VkResult,                                                          \
    (VkDevice, const VkDescriptorSetLayoutCreateInfo*, const void*, VkDescriptorSetLayout*))      \
  X(DestroyDescriptorSetLayout, void, (VkDevice, VkDescriptorSetLayout, const void*))             \
  X(CreatePipelineLayout, VkResult,                                                               \
    (VkDevice, const VkPipelineLayoutCreateInfo*, const void*, VkPipelineLayout*))                \
  X(DestroyPipelineLayout, void, (VkDevice, VkPipelineLayout, const void*))                       \
  X(CreateComputePipelines, VkResult,                                                             \
    (VkDevice, VkPipelineCache, uint32_t, const VkComputePipelineCreateInfo*, const void*,        \
     VkPipeline*))                                                                                \
  X(DestroyPipeline, void, (VkDevice, VkPipeline, const void*))                                   \
  X(CreatePipelineCache, VkResult,                                                                \
    (VkDevice, const VkPipelineCacheCreateInfo*, const void*, VkPipelineCache*))                  \
  X(DestroyPipelineCache, void, (VkDevice, VkPipelineCache, const void*))                         \
  X(GetPipelineCacheData, VkResult, (VkDevice, VkPipelineCache, size_t*, void*))                  \
  X(CreateDescriptorPool, VkResult,                                                               \
    (VkDevice, const VkDescriptorPoolCreateInfo*, const void*, VkDescriptorPool*))                \
  X(DestroyDescriptorPool, void, (VkDevice, VkDescriptorPool, const void*))                       \
  X(AllocateDescriptorSets, VkResult,                                                             \
    (VkDevice, const VkDescriptorSetAllocateInfo*, VkDescriptorSet*))                             \
  X(UpdateDescriptorSets, void,                                                                   \
    (VkDevice, uint32_t, const VkWriteDescriptorSet*, uint32_t, const void*))                     \
  X(CreateCommandPool, VkResult,                                                                  \
    (VkDevice, const VkCommandPoolCreateInfo*, const void*, VkCommandPool*))                      \
  X(AllocateCommandBuffers, VkResult,                                                             \
    (VkDevice, const VkCommandBufferAllocateInfo*, VkCommandBuffer*))                             \
  X(BeginCommandBuffer, VkResult, (VkCommandBuffer, const VkCommandBufferBeginInfo*))             \
  X(EndCommandBuffer, VkResult, (VkCommandBuffer))                                                \
  X(ResetCommandBuffer, VkResult, (VkCommandBuffer, VkFlags))                                     \
  X(CmdBindPipeline, void, (VkCommandBuffer, int32_t, VkPipeline))                                \
  X(CmdBindDescriptorSets, void,                                                                  \
    (VkCommandBuffer, int32_t, VkPipelineLayout, uint32_t, uint32_t, const VkDescriptorSet*,      \
     uint32_t, const uint32_t*))                                                                  \
  X(CmdPushConstants, void,                                                                       \
    (VkCommandBuffer, VkPipelineLayout, VkFlags, uint32_t, uint32_t, const void*))                \
  X(CmdDispatch, void, (VkCommandBuffer, uint32_t, uint32_t, uint32_t))                           \
  X(CmdCopyBuffer, void, (VkCommandBuffer, VkBuffer, VkBuffer, uint32_t, const VkBufferCopy*))    \
  X(CmdPipelineBarrier, void,                                                                     \
    (VkCommandBuffer, VkFlags, VkFlags, VkFlags, uint32_t, const VkMemoryBarrier*, uint32_t,      \
     const void*, uint32_t, const void*))                                                         \
  X(CreateFence, VkResult, (VkDevice, const VkFenceCreateInfo*, const void*, VkFence*))           \
  X(WaitForFences, VkResult, (VkDevice, uint32_t, const VkFence*, VkBool32, uint64_t))            \
  X(ResetFences, VkResult, (VkDevice, uint32_t, const VkFence*))                                  \
  X(QueueSubmit, VkResult, (VkQueue, uint32_t, const VkSubmitInfo*, VkFence))

typedef struct {
#define MP__VK_MEMBER(name, ret, params) ret(*name) params;
  MP_VULKAN_ENTRY_POINTS(MP__VK_MEMBER)
#undef MP__VK_MEMBER
} mp_vk_api_t;

enum { MP_VULKAN_MAX_DEVICES = 16 };

/* A buffer in Vulkan device memory: what a Vulkan DLTensor's |data| points to. |mapped| is the
 * memory mapped for the host when its type is host-visible and coherent (copies are then
 * memcpy), NULL when copies go through a staging buffer. */
typedef struct {
  VkBuffer buffer;
  VkDeviceMemory memory;
  uint64_t size;
  void* mapped;
  int32_t device;
} mp_vulkan_buffer_t;

/* One device: created at its first use (memory or a launch). Submissions to its queue, its
 * command buffer and fence, and the descriptor sets of its kernels are guarded by |lock|; every
 * submission waits for its fence before the lock is released, so nothing is in flight between
 * two calls. */
typedef struct {
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  VkCommandPool command_pool;
  VkCommandBuffer commands;
  VkFence fence;
  int32_t memory_type;  /* for every buffer */
  int32_t staging_type; /* host-visible and coherent, for staging copies (-1: none) */
  bool mapped;          /* |memory_type| is host-visible and coherent */
  uint32_t max_group_count[3];
  uint32_t max_group_size[3];
  uint32_t max_group_invocations;
  uint32_t max_push_constants;
  uint32_t max_bound_sets;
} mp_vulkan_device_t;

/* The device features modpack enables where a device offers them: those SPIR-V capabilities
 * need (vulkan_features.c maps each capability to its feature), and a few that change what a
 * valid shader may do without a capability of its own (scalar block layout, subgroup
 * operations on 8- to 64-bit types, dynamic subgroup broadcast ids, LocalSizeId's maintenance4,
 * zero-initialised workgroup memory). */
typedef enum {
  MP_VK_SHADER_FLOAT64,
  MP_VK_SHADER_INT64,
  MP_VK_SHADER_INT16,
  MP_VK_STORAGE_BUFFER_16BIT_ACCESS,
  MP_VK_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS,
  MP_VK_STORAGE_PUSH_CONSTANT16,
  MP_VK_VARIABLE_POINTERS_STORAGE_BUFFER,
  MP_VK_VARIABLE_POINTERS,
  MP_VK_STORAGE_BUFFER_8BIT_ACCESS,
  MP_VK_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS,
  MP_VK_STORAGE_PUSH_CONSTANT8,
  MP_VK_SHADER_BUFFER_INT64_ATOMICS,
  MP_VK_SHADER_SHARED_INT64_ATOMICS,
  MP_VK_SHADER_FLOAT16,
  MP_VK_SHADER_INT8,
  MP_VK_SCALAR_BLOCK_LAYOUT,
  MP_VK_SHADER_SUBGROUP_EXTENDED_TYPES,
  MP_VK_VULKAN_MEMORY_MODEL,
  MP_VK_VULKAN_MEMORY_MODEL_DEVICE_SCOPE,
  MP_VK_SUBGROUP_BROADCAST_DYNAMIC_ID,
  MP_VK_SHADER_ZERO_INITIALIZE_WORKGROUP_MEMORY,
  MP_VK_SHADER_INTEGER_DOT_PRODUCT,
  MP_VK_MAINTENANCE4,
  MP_VK_FEATURE_COUNT
} mp_vk_feature_t;

/* What a physical device offers modpack's shaders, read once when Vulkan is initialised. */
typedef struct {
  uint32_t api_version;                 /* its own and the instance's, the lower; patch 0 */
  bool features[MP_VK_FEATURE_COUNT];   /* offered: each is enabled when the device is made */
  uint32_t subgroup_operations;         /* VK_SUBGROUP_FEATURE_*_BIT in compute shaders */
} mp_vulkan_support_t;

/* Which device and driver a physical device is, as its properties say: the kernel cache's key
 * (vulkan_pipeline_cache.c) and what a pipeline cache's header must name. */
typedef struct {
  uint32_t vendor_id;
  uint32_t device_id;
  uint32_t driver_version;
  uint8_t cache_uuid[16]; /* pipelineCacheUUID */
  char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
} mp_vulkan_identity_t;

/* The process-wide Vulkan state: one instance and its physical devices that have a compute
 * queue. Created on first use. */
typedef struct {
  mp_vk_api_t vk;
  PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;     /* NULL: a 1.0 instance */
  PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2; /* NULL: a 1.0 instance */
  VkInstance instance;
  uint32_t instance_version; /* the apiVersion it was made with */
  bool capped;               /* MODPACK_VULKAN_API_VERSION lowered it */
  bool validation;           /* Khronos' validation layer is on (MODPACK_VULKAN_VALIDATION=1) */
  uint32_t device_count;
  VkPhysicalDevice physical[MP_VULKAN_MAX_DEVICES];
  mp_vulkan_support_t support[MP_VULKAN_MAX_DEVICES];
  mp_vulkan_identity_t identity[MP_VULKAN_MAX_DEVICES];
  char names[MP_VULKAN_MAX_DEVICES][320]; /* "device name (Vulkan X.Y.Z, driver ...)" */
} mp_vulkan_t;

/* The state, initialising it on first call; NULL with a clear error (MP_ERR_UNAVAILABLE naming
 * what is missing) when Vulkan is absent. */
const mp_vulkan_t* mp_vulkan(void);
/* Device |device_id|, created on first use; NULL with an error. */
mp_vulkan_device_t* mp_vulkan_device_open(int32_t device_id);
/* Start recording on |d|'s command buffer (the caller holds d's lock); submit it and wait for
 * it to finish. A global barrier before and after the recorded work makes earlier writes
 * visible to it and its writes visible to the host and to later submissions. */
mp_status_t mp_vulkan_begin(const mp_vulkan_t* vk, mp_vulkan_device_t* d);
mp_status_t mp_vulkan_submit_and_wait(const mp_vulkan_t* vk, mp_vulkan_device_t* d,
                                      const char* what);
/* The lock of device |device_id| (valid once the device is open). */
void mp_vulkan_lock(int32_t device_id);
void mp_vulkan_unlock(int32_t device_id);
/* |status|, unless it is MP_OK and the validation layer (MODPACK_VULKAN_VALIDATION=1) reported
 * an error on this thread since the last call: then MP_ERR_RUNTIME with the layer's message,
 * naming |what|. Every runtime call that reaches the driver returns through it. */
mp_status_t mp_vulkan_validated(mp_status_t status, const char* what);
/* "VK_ERROR_OUT_OF_DEVICE_MEMORY" */
const char* mp_vk_result_name(VkResult result);
/* MP_ERR_RUNTIME (MP_ERR_RESOURCE_EXHAUSTED for out-of-memory results): "Vulkan |what| failed:
 * NAME (code)". */
mp_status_t mp_vk_fail(const char* what, VkResult result);
/* The Vulkan device (vulkan_device.c), for the kind's descriptor. */
extern const mp_device_api_t mp_vulkan_device;

#endif /* MODPACK_VULKAN_ABI_H_ */
