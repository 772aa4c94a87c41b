/* What a Vulkan shader needs of a device, and what a device offers: the SPIR-V capabilities
 * this runtime knows (each with the API version and the feature or subgroup operation it
 * needs, public as mp_vulkan_capability_info), each device's support read once, the feature
 * chain a device is made with, and the check a kernel's first call and preflight make.
 *
 * Rationale: a VkDevice is made once per process, before any kernel is known, and shared by
 * every module; so it is made with every feature modpack knows that the device offers, and each
 * kernel is checked against that set at its first call. The table follows the "SPIR-V
 * Environment" appendix of the Vulkan specification (vk.xml's <spirvcapabilities>, which
 * tests/test_vulkan.py checks it against); a capability core in Vulkan 1.M is enabled on
 * devices of 1.M and later only, never through the extension that preceded it. */
#ifndef MODPACK_KINDS_VULKAN_FEATURES_H_
#define MODPACK_KINDS_VULKAN_FEATURES_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kinds/vulkan/vulkan_abi.h"

/* A shader's requirements, as payload version 2 records them (modpack/kinds/vulkan.h). */
typedef struct {
  uint32_t spirv_version;  /* the SPIR-V header's version word */
  uint32_t vulkan_version; /* VK_MAKE_API_VERSION(0, 1, m, 0) */
  uint32_t capability_count;
  uint32_t* capabilities;
} mp_vulkan_requirements_t;

/* Fill |out| (its api_version already set) with what |physical| offers: its features through
 * vkGetPhysicalDeviceFeatures2 (vkGetPhysicalDeviceFeatures on a 1.0 instance), its subgroup
 * operations in compute shaders through vkGetPhysicalDeviceProperties2. */
void mp_vulkan_support_query(const mp_vulkan_t* vk, VkPhysicalDevice physical,
                             mp_vulkan_support_t* out);

/* The feature structs a device is made with, linked from |features2| for its API version. */
typedef struct {
  VkPhysicalDeviceFeatures2 features2;
  VkPhysicalDeviceVulkan11Features v11;
  VkPhysicalDeviceVulkan12Features v12;
  VkPhysicalDeviceVulkan13Features v13;
  VkPhysicalDevice16BitStorageFeatures storage16; /* Vulkan 1.1 devices */
  VkPhysicalDeviceVariablePointersFeatures varptr; /* Vulkan 1.1 devices */
} mp_vulkan_feature_chain_t;

/* |chain| for a device of |api_version|, every feature false, or (|support| not NULL) each
 * feature |support| offers true. */
void mp_vulkan_feature_chain_init(mp_vulkan_feature_chain_t* chain, uint32_t api_version,
                                  const mp_vulkan_support_t* support);

/* Whether a device offering |support| runs a shader with |req|; when not, why into |why| ("it
 * uses the SPIR-V capability Float16, which needs the feature shaderFloat16"). A capability this
 * runtime does not know is never supported. */
bool mp_vulkan_supports(const mp_vulkan_support_t* support, const mp_vulkan_requirements_t* req,
                        char* why, size_t capacity);

/* The least API version |req| needs: its record's, and its SPIR-V version's. */
uint32_t mp_vulkan_required_version(const mp_vulkan_requirements_t* req);

/* |req| in words: "SPIR-V 1.5, for a Vulkan 1.2 device with Float16, StorageBuffer16BitAccess". */
void mp_vulkan_requirements_describe(const mp_vulkan_requirements_t* req, char* out,
                                     size_t capacity);

#endif /* MODPACK_KINDS_VULKAN_FEATURES_H_ */
