/* SPIR-V capabilities and the Vulkan device features they need (vulkan_features.h). */
#include "kinds/vulkan/vulkan_features.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "modpack/kinds/vulkan.h"

/* Where a feature lives: on devices of Vulkan 1.2 and later (CORE: every device), and on a
 * Vulkan 1.1 device (the structs 1.1 promoted; NONE: not there). */
enum { CORE, V11, V12, V13 };
enum { NONE, STORAGE16, VARPTR };

static const struct {
  const char* name;
  uint8_t structure, legacy;
  uint16_t offset, legacy_offset;
} features[MP_VK_FEATURE_COUNT] = {
    [MP_VK_SHADER_FLOAT64] = {"shaderFloat64", CORE, NONE, MP_VK_AT_SHADER_FLOAT64, 0},
    [MP_VK_SHADER_INT64] = {"shaderInt64", CORE, NONE, MP_VK_AT_SHADER_INT64, 0},
    [MP_VK_SHADER_INT16] = {"shaderInt16", CORE, NONE, MP_VK_AT_SHADER_INT16, 0},
    [MP_VK_STORAGE_BUFFER_16BIT_ACCESS] = {"storageBuffer16BitAccess", V11, STORAGE16,
                                           MP_VK_AT_STORAGE_BUFFER_16BIT_ACCESS,
                                           MP_VK_AT_STORAGE_BUFFER_16BIT_ACCESS},
    [MP_VK_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS] =
        {"uniformAndStorageBuffer16BitAccess", V11, STORAGE16,
         MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS,
         MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS},
    [MP_VK_STORAGE_PUSH_CONSTANT16] = {"storagePushConstant16", V11, STORAGE16,
                                       MP_VK_AT_STORAGE_PUSH_CONSTANT16,
                                       MP_VK_AT_STORAGE_PUSH_CONSTANT16},
    [MP_VK_VARIABLE_POINTERS_STORAGE_BUFFER] = {"variablePointersStorageBuffer", V11, VARPTR,
                                                MP_VK_AT_VARIABLE_POINTERS_STORAGE_BUFFER,
                                                MP_VK_AT_VARPTR_VARIABLE_POINTERS_STORAGE_BUFFER},
    [MP_VK_VARIABLE_POINTERS] = {"variablePointers", V11, VARPTR, MP_VK_AT_VARIABLE_POINTERS,
                                 MP_VK_AT_VARPTR_VARIABLE_POINTERS},
    [MP_VK_STORAGE_BUFFER_8BIT_ACCESS] = {"storageBuffer8BitAccess", V12, NONE,
                                          MP_VK_AT_STORAGE_BUFFER_8BIT_ACCESS, 0},
    [MP_VK_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS] =
        {"uniformAndStorageBuffer8BitAccess", V12, NONE,
         MP_VK_AT_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS, 0},
    [MP_VK_STORAGE_PUSH_CONSTANT8] = {"storagePushConstant8", V12, NONE,
                                      MP_VK_AT_STORAGE_PUSH_CONSTANT8, 0},
    [MP_VK_SHADER_BUFFER_INT64_ATOMICS] = {"shaderBufferInt64Atomics", V12, NONE,
                                           MP_VK_AT_SHADER_BUFFER_INT64_ATOMICS, 0},
    [MP_VK_SHADER_SHARED_INT64_ATOMICS] = {"shaderSharedInt64Atomics", V12, NONE,
                                           MP_VK_AT_SHADER_SHARED_INT64_ATOMICS, 0},
    [MP_VK_SHADER_FLOAT16] = {"shaderFloat16", V12, NONE, MP_VK_AT_SHADER_FLOAT16, 0},
    [MP_VK_SHADER_INT8] = {"shaderInt8", V12, NONE, MP_VK_AT_SHADER_INT8, 0},
    [MP_VK_SCALAR_BLOCK_LAYOUT] = {"scalarBlockLayout", V12, NONE, MP_VK_AT_SCALAR_BLOCK_LAYOUT, 0},
    [MP_VK_SHADER_SUBGROUP_EXTENDED_TYPES] = {"shaderSubgroupExtendedTypes", V12, NONE,
                                              MP_VK_AT_SHADER_SUBGROUP_EXTENDED_TYPES, 0},
    [MP_VK_VULKAN_MEMORY_MODEL] = {"vulkanMemoryModel", V12, NONE, MP_VK_AT_VULKAN_MEMORY_MODEL,
                                   0},
    [MP_VK_VULKAN_MEMORY_MODEL_DEVICE_SCOPE] = {"vulkanMemoryModelDeviceScope", V12, NONE,
                                                MP_VK_AT_VULKAN_MEMORY_MODEL_DEVICE_SCOPE, 0},
    [MP_VK_SUBGROUP_BROADCAST_DYNAMIC_ID] = {"subgroupBroadcastDynamicId", V12, NONE,
                                             MP_VK_AT_SUBGROUP_BROADCAST_DYNAMIC_ID, 0},
    [MP_VK_SHADER_ZERO_INITIALIZE_WORKGROUP_MEMORY] =
        {"shaderZeroInitializeWorkgroupMemory", V13, NONE,
         MP_VK_AT_SHADER_ZERO_INITIALIZE_WORKGROUP_MEMORY, 0},
    [MP_VK_SHADER_INTEGER_DOT_PRODUCT] = {"shaderIntegerDotProduct", V13, NONE,
                                          MP_VK_AT_SHADER_INTEGER_DOT_PRODUCT, 0},
    [MP_VK_MAINTENANCE4] = {"maintenance4", V13, NONE, MP_VK_AT_MAINTENANCE4, 0},
};

/* The SPIR-V capabilities this runtime checks and enables: the Vulkan minor version that has
 * them (major 1), and the feature (or either of two) or the subgroup operations they need. */
#define NO_FEATURE (-1)
static const struct {
  uint32_t capability;
  const char* name;
  uint32_t minor;
  int8_t feature, alternative;
  uint32_t subgroup;
  const char* requirement;
} capabilities[] = {
    {0, "Matrix", 0, NO_FEATURE, NO_FEATURE, 0, ""},
    {1, "Shader", 0, NO_FEATURE, NO_FEATURE, 0, ""},
    {9, "Float16", 2, MP_VK_SHADER_FLOAT16, NO_FEATURE, 0, "the feature shaderFloat16"},
    {10, "Float64", 0, MP_VK_SHADER_FLOAT64, NO_FEATURE, 0, "the feature shaderFloat64"},
    {11, "Int64", 0, MP_VK_SHADER_INT64, NO_FEATURE, 0, "the feature shaderInt64"},
    {12, "Int64Atomics", 2, MP_VK_SHADER_BUFFER_INT64_ATOMICS, MP_VK_SHADER_SHARED_INT64_ATOMICS, 0,
     "the feature shaderBufferInt64Atomics or shaderSharedInt64Atomics"},
    {22, "Int16", 0, MP_VK_SHADER_INT16, NO_FEATURE, 0, "the feature shaderInt16"},
    {39, "Int8", 2, MP_VK_SHADER_INT8, NO_FEATURE, 0, "the feature shaderInt8"},
    {61, "GroupNonUniform", 1, NO_FEATURE, NO_FEATURE, 0x1,
     "subgroup basic operations in compute shaders"},
    {62, "GroupNonUniformVote", 1, NO_FEATURE, NO_FEATURE, 0x2,
     "subgroup vote operations in compute shaders"},
    {63, "GroupNonUniformArithmetic", 1, NO_FEATURE, NO_FEATURE, 0x4,
     "subgroup arithmetic operations in compute shaders"},
    {64, "GroupNonUniformBallot", 1, NO_FEATURE, NO_FEATURE, 0x8,
     "subgroup ballot operations in compute shaders"},
    {65, "GroupNonUniformShuffle", 1, NO_FEATURE, NO_FEATURE, 0x10,
     "subgroup shuffle operations in compute shaders"},
    {66, "GroupNonUniformShuffleRelative", 1, NO_FEATURE, NO_FEATURE, 0x20,
     "subgroup relative shuffle operations in compute shaders"},
    {67, "GroupNonUniformClustered", 1, NO_FEATURE, NO_FEATURE, 0x40,
     "subgroup clustered operations in compute shaders"},
    {68, "GroupNonUniformQuad", 1, NO_FEATURE, NO_FEATURE, 0x80,
     "subgroup quad operations in compute shaders"},
    {4433, "StorageBuffer16BitAccess", 1, MP_VK_STORAGE_BUFFER_16BIT_ACCESS, NO_FEATURE, 0,
     "the feature storageBuffer16BitAccess"},
    {4434, "UniformAndStorageBuffer16BitAccess", 1, MP_VK_UNIFORM_AND_STORAGE_BUFFER_16BIT_ACCESS,
     NO_FEATURE, 0, "the feature uniformAndStorageBuffer16BitAccess"},
    {4435, "StoragePushConstant16", 1, MP_VK_STORAGE_PUSH_CONSTANT16, NO_FEATURE, 0,
     "the feature storagePushConstant16"},
    {4441, "VariablePointersStorageBuffer", 1, MP_VK_VARIABLE_POINTERS_STORAGE_BUFFER, NO_FEATURE,
     0, "the feature variablePointersStorageBuffer"},
    {4442, "VariablePointers", 1, MP_VK_VARIABLE_POINTERS, NO_FEATURE, 0,
     "the feature variablePointers"},
    {4448, "StorageBuffer8BitAccess", 2, MP_VK_STORAGE_BUFFER_8BIT_ACCESS, NO_FEATURE, 0,
     "the feature storageBuffer8BitAccess"},
    {4449, "UniformAndStorageBuffer8BitAccess", 2, MP_VK_UNIFORM_AND_STORAGE_BUFFER_8BIT_ACCESS,
     NO_FEATURE, 0, "the feature uniformAndStorageBuffer8BitAccess"},
    {4450, "StoragePushConstant8", 2, MP_VK_STORAGE_PUSH_CONSTANT8, NO_FEATURE, 0,
     "the feature storagePushConstant8"},
    {5345, "VulkanMemoryModel", 2, MP_VK_VULKAN_MEMORY_MODEL, NO_FEATURE, 0,
     "the feature vulkanMemoryModel"},
    {5346, "VulkanMemoryModelDeviceScope", 2, MP_VK_VULKAN_MEMORY_MODEL_DEVICE_SCOPE, NO_FEATURE,
     0, "the feature vulkanMemoryModelDeviceScope"},
    {6016, "DotProductInputAll", 3, MP_VK_SHADER_INTEGER_DOT_PRODUCT, NO_FEATURE, 0,
     "the feature shaderIntegerDotProduct"},
    {6017, "DotProductInput4x8Bit", 3, MP_VK_SHADER_INTEGER_DOT_PRODUCT, NO_FEATURE, 0,
     "the feature shaderIntegerDotProduct"},
    {6018, "DotProductInput4x8BitPacked", 3, MP_VK_SHADER_INTEGER_DOT_PRODUCT, NO_FEATURE, 0,
     "the feature shaderIntegerDotProduct"},
    {6019, "DotProduct", 3, MP_VK_SHADER_INTEGER_DOT_PRODUCT, NO_FEATURE, 0,
     "the feature shaderIntegerDotProduct"},
};
enum { CAPABILITY_COUNT = sizeof capabilities / sizeof capabilities[0] };

static int find(uint32_t capability) {
  for (int i = 0; i < CAPABILITY_COUNT; ++i)
    if (capabilities[i].capability == capability) return i;
  return -1;
}

mp_status_t mp_vulkan_capability_info(uint32_t capability, mp_vulkan_capability_t* out) {
  int i = find(capability);
  if (i < 0)
    return mp_errorf(MP_ERR_NOT_FOUND,
                     "SPIR-V capability %u is not one modpack's Vulkan runtime checks and "
                     "enables",
                     capability);
  out->name = capabilities[i].name;
  out->requirement = capabilities[i].requirement;
  out->vulkan_version = VK_MAKE_API_VERSION(0, 1, capabilities[i].minor, 0);
  return MP_OK;
}

/* Where feature |f| is in |chain| on a device of |api|; NULL where that device has no place for
 * it (a feature of a later version). */
static VkBool32* slot(mp_vulkan_feature_chain_t* chain, uint32_t api, mp_vk_feature_t f) {
  uint8_t* base = NULL;
  size_t at = features[f].offset;
  switch (features[f].structure) {
    case CORE:
      return &chain->features2.features.features[at / sizeof(VkBool32)];
    case V11:
      if (api >= VK_API_VERSION_1_2) {
        base = (uint8_t*)&chain->v11;
      } else if (api >= VK_API_VERSION_1_1 && features[f].legacy != NONE) {
        base = features[f].legacy == STORAGE16 ? (uint8_t*)&chain->storage16
                                               : (uint8_t*)&chain->varptr;
        at = features[f].legacy_offset;
      }
      break;
    case V12:
      if (api >= VK_API_VERSION_1_2) base = (uint8_t*)&chain->v12;
      break;
    default:
      if (api >= VK_API_VERSION_1_3) base = (uint8_t*)&chain->v13;
      break;
  }
  return base ? (VkBool32*)(void*)(base + at) : NULL;
}

void mp_vulkan_feature_chain_init(mp_vulkan_feature_chain_t* chain, uint32_t api_version,
                                  const mp_vulkan_support_t* support) {
  memset(chain, 0, sizeof *chain);
  chain->features2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  chain->v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  chain->v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  chain->v13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
  chain->storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
  chain->varptr.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VARIABLE_POINTERS_FEATURES;
  if (api_version >= VK_API_VERSION_1_2) {
    chain->features2.pNext = &chain->v11;
    chain->v11.pNext = &chain->v12;
    if (api_version >= VK_API_VERSION_1_3) chain->v12.pNext = &chain->v13;
  } else if (api_version >= VK_API_VERSION_1_1) {
    chain->features2.pNext = &chain->storage16;
    chain->storage16.pNext = &chain->varptr;
  }
  for (int f = 0; support && f < MP_VK_FEATURE_COUNT; ++f) {
    VkBool32* s = slot(chain, api_version, (mp_vk_feature_t)f);
    if (s) *s = support->features[f] ? 1u : 0u;
  }
}

void mp_vulkan_support_query(const mp_vulkan_t* vk, VkPhysicalDevice physical,
                             mp_vulkan_support_t* out) {
  uint32_t api = out->api_version;
  memset(out->features, 0, sizeof out->features);
  out->subgroup_operations = 0;
  mp_vulkan_feature_chain_t chain;
  mp_vulkan_feature_chain_init(&chain, api, NULL);
  if (api >= VK_API_VERSION_1_1 && vk->GetPhysicalDeviceFeatures2)
    vk->GetPhysicalDeviceFeatures2(physical, &chain.features2);
  else
    vk->vk.GetPhysicalDeviceFeatures(physical, &chain.features2.features);
  for (int f = 0; f < MP_VK_FEATURE_COUNT; ++f) {
    VkBool32* s = slot(&chain, api, (mp_vk_feature_t)f);
    out->features[f] = s && *s;
  }
  if (api >= VK_API_VERSION_1_1 && vk->GetPhysicalDeviceProperties2) {
    VkPhysicalDeviceSubgroupProperties subgroup;
    memset(&subgroup, 0, sizeof subgroup);
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceProperties2 properties;
    memset(&properties, 0, sizeof properties);
    properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    properties.pNext = &subgroup;
    vk->GetPhysicalDeviceProperties2(physical, &properties);
    if (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT)
      out->subgroup_operations = subgroup.supportedOperations;
  }
}

uint32_t mp_vulkan_required_version(const mp_vulkan_requirements_t* req) {
  /* SPIR-V 1.0 needs Vulkan 1.0; 1.1 to 1.3, 1.1; 1.4 and 1.5, 1.2; 1.6, 1.3. */
  uint32_t spirv_minor = (req->spirv_version >> 8) & 0xff;
  uint32_t minor = spirv_minor == 0 ? 0 : spirv_minor <= 3 ? 1 : spirv_minor <= 5 ? 2 : 3;
  uint32_t from_spirv = VK_MAKE_API_VERSION(0, 1, minor, 0);
  return req->vulkan_version > from_spirv ? req->vulkan_version : from_spirv;
}

bool mp_vulkan_supports(const mp_vulkan_support_t* support, const mp_vulkan_requirements_t* req,
                        char* why, size_t capacity) {
  uint32_t api = support->api_version;
  for (uint32_t c = 0; c < req->capability_count; ++c) {
    int i = find(req->capabilities[c]);
    if (i < 0) {
      snprintf(why, capacity,
               "it uses the SPIR-V capability %u, which this modpack runtime does not know "
               "(upgrade modpack)",
               req->capabilities[c]);
      return false;
    }
    bool ok = api >= VK_MAKE_API_VERSION(0, 1, capabilities[i].minor, 0);
    if (ok && capabilities[i].feature != NO_FEATURE)
      ok = support->features[capabilities[i].feature] ||
           (capabilities[i].alternative != NO_FEATURE &&
            support->features[capabilities[i].alternative]);
    if (ok && capabilities[i].subgroup)
      ok = (support->subgroup_operations & capabilities[i].subgroup) == capabilities[i].subgroup;
    if (!ok) {
      snprintf(why, capacity,
               "it uses the SPIR-V capability %s, which needs %s%sVulkan 1.%u, and the device "
               "(Vulkan %u.%u) does not offer it",
               capabilities[i].name, capabilities[i].requirement,
               capabilities[i].requirement[0] ? " of " : "", capabilities[i].minor,
               VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api));
      return false;
    }
  }
  mp_vulkan_requirements_t spirv_only = {req->spirv_version, VK_API_VERSION_1_0, 0, NULL};
  uint32_t for_spirv = mp_vulkan_required_version(&spirv_only);
  uint32_t need = for_spirv > req->vulkan_version ? for_spirv : req->vulkan_version;
  if (api < need) {
    snprintf(why, capacity, "it %s%u.%u, which needs Vulkan %u.%u, and the device offers %u.%u",
             for_spirv == need ? "is SPIR-V " : "declares SPIR-V extensions of Vulkan ",
             for_spirv == need ? (req->spirv_version >> 16) & 0xff : VK_API_VERSION_MAJOR(need),
             for_spirv == need ? (req->spirv_version >> 8) & 0xff : VK_API_VERSION_MINOR(need),
             VK_API_VERSION_MAJOR(need), VK_API_VERSION_MINOR(need), VK_API_VERSION_MAJOR(api),
             VK_API_VERSION_MINOR(api));
    return false;
  }
  return true;
}

void mp_vulkan_requirements_describe(const mp_vulkan_requirements_t* req, char* out,
                                     size_t capacity) {
  uint32_t need = mp_vulkan_required_version(req);
  int n = snprintf(out, capacity, "SPIR-V %u.%u, for a Vulkan %u.%u device",
                   (req->spirv_version >> 16) & 0xff,
                   (req->spirv_version >> 8) & 0xff, VK_API_VERSION_MAJOR(need),
                   VK_API_VERSION_MINOR(need));
  const char* sep = " with ";
  for (uint32_t c = 0; c < req->capability_count && n >= 0 && (size_t)n < capacity; ++c) {
    int i = find(req->capabilities[c]);
    if (i >= 0 && !capabilities[i].requirement[0]) continue; /* Shader, Matrix */
    n += i >= 0 ? snprintf(out + n, capacity - (size_t)n, "%s%s", sep, capabilities[i].name)
                : snprintf(out + n, capacity - (size_t)n, "%scapability %u", sep,
                           req->capabilities[c]);
    sep = ", ";
  }
}
