/* Vulkan as a device: loading libvulkan, the instance and its compute-capable devices, memory and
 * copies.
 *
 * The library is found with dlopen on first use ($MODPACK_VULKAN_LIBRARY, else libvulkan.so.1),
 * so a machine without Vulkan loads every deploy.so and fails only when a Vulkan function or
 * array is used — with a message naming what is missing. Each device (VkDevice, one compute
 * queue, one command buffer and fence) is created at its first use. Buffers take one memory
 * type per device: device-local and host-visible when there is one (copies are then memcpy
 * through a persistent mapping), else device-local with copies through a host-visible staging
 * buffer (MODPACK_VULKAN_STAGING=1 forces that path, for tests). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/driver.h"
#include "kinds/vulkan/vulkan_abi.h"
#include "kinds/vulkan/vulkan_features.h"

static mp_vulkan_t state;
static mp_outcome_t outcome;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Per device: made at first use under |open_lock|; |locks| guard each device's queue. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static mp_vulkan_device_t* devices[MP_VULKAN_MAX_DEVICES];
static pthread_mutex_t locks[MP_VULKAN_MAX_DEVICES];

const char* mp_vk_result_name(VkResult result) {
  switch (result) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_UNKNOWN:
      return "VK_ERROR_UNKNOWN";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV:
      return "VK_ERROR_INVALID_SHADER_NV";
    default:
      return "VkResult";
  }
}

mp_status_t mp_vk_fail(const char* what, VkResult result) {
  bool memory = result == VK_ERROR_OUT_OF_HOST_MEMORY || result == VK_ERROR_OUT_OF_DEVICE_MEMORY ||
                result == VK_ERROR_OUT_OF_POOL_MEMORY;
  return mp_errorf(memory ? MP_ERR_RESOURCE_EXHAUSTED : MP_ERR_RUNTIME,
                   "Vulkan %s failed: %s (%d)", what, mp_vk_result_name(result), (int)result);
}

static const char* const INSTALL_HINT =
    "install the Vulkan loader and a driver, e.g. `apt-get install libvulkan1 "
    "mesa-vulkan-drivers` (lavapipe runs Vulkan on the CPU), or check VK_ICD_FILENAMES";

/* ---- the validation layer (MODPACK_VULKAN_VALIDATION=1) ------------------------------------ */

/* The layer reports through this messenger on the thread making the Vulkan call it found wrong:
 * the first error since that thread's last runtime call is kept, and the call fails with it
 * (mp_vulkan_validated); warnings go to stderr. */
static _Thread_local char validation_error[4096];
static _Thread_local bool validation_failed;

static VkBool32 on_validation_message(VkFlags severity, VkFlags types,
                                      const VkDebugUtilsMessengerCallbackDataEXT* data,
                                      void* user) {
  (void)types;
  (void)user;
  const char* text = data && data->pMessage ? data->pMessage : "(no message)";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    if (!validation_failed) snprintf(validation_error, sizeof validation_error, "%s", text);
    validation_failed = true;
  } else {
    fprintf(stderr, "modpack: Vulkan validation warning: %s\n", text);
  }
  return 0; /* VK_FALSE: the call it reports on goes on */
}

mp_status_t mp_vulkan_validated(mp_status_t status, const char* what) {
  if (!validation_failed) return status;
  validation_failed = false;
  if (status != MP_OK) return status;
  return mp_errorf(MP_ERR_RUNTIME,
                   "Vulkan's validation layer (MODPACK_VULKAN_VALIDATION=1) reports invalid use "
                   "in %s: %s",
                   what, validation_error);
}

/* The instance's API version: the loader's (vkEnumerateInstanceVersion, absent from 1.0
 * loaders), lowered by MODPACK_VULKAN_API_VERSION=1.M. False, with the outcome failed, for a
 * value that is no version. */
static bool instance_version(mp_vk_api_t* vk, uint32_t* out, bool* out_capped) {
  uint32_t version = VK_API_VERSION_1_0;
  PFN_vkEnumerateInstanceVersion enumerate =
      (PFN_vkEnumerateInstanceVersion)vk->GetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
  if (enumerate && enumerate(&version) != VK_SUCCESS) version = VK_API_VERSION_1_0;
  version = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version), 0);
  *out_capped = false;
  const char* cap = getenv("MODPACK_VULKAN_API_VERSION");
  if (cap && *cap) {
    unsigned major = 0, minor = 0;
    char tail = 0;
    if (sscanf(cap, "%u.%u%c", &major, &minor, &tail) != 2 || major != 1 || minor > 1023) {
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                      "MODPACK_VULKAN_API_VERSION='%s' is not a Vulkan API version such as 1.2",
                      cap);
      return false;
    }
    uint32_t capped = VK_MAKE_API_VERSION(0, major, minor, 0);
    if (capped < version) {
      version = capped;
      *out_capped = true;
    }
  }
  *out = version;
  return true;
}

static void initialise(void) {
  for (int d = 0; d < MP_VULKAN_MAX_DEVICES; ++d) pthread_mutex_init(&locks[d], NULL);
  const char* path = getenv("MODPACK_VULKAN_LIBRARY");
  if (!path || !*path) path = "libvulkan.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "Vulkan is not available: cannot load %s (%s); %s",
                    path, dlerror(), INSTALL_HINT);
    return;
  }
  mp_vk_api_t* vk = &state.vk;
  const mp_symbol_slot_t entries[] = {
#define MP__VK_SLOT(name, ret, params) {"vk" #name, &vk->name},
      MP_VULKAN_ENTRY_POINTS(MP__VK_SLOT)
#undef MP__VK_SLOT
  };
  const char* missing = mp_resolve_symbols(lib, entries, sizeof entries / sizeof entries[0]);
  if (missing) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "Vulkan library %s lacks %s (a Vulkan 1.0 loader is required)", path, missing);
    return;
  }
  if (!instance_version(vk, &state.instance_version, &state.capped)) return;
  const char* validate = getenv("MODPACK_VULKAN_VALIDATION");
  state.validation = validate && strcmp(validate, "1") == 0;
  static const char* const layers[] = {"VK_LAYER_KHRONOS_validation"};
  static const char* const extensions[] = {"VK_EXT_debug_utils"};
  VkDebugUtilsMessengerCreateInfoEXT messenger = {
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      NULL,
      0,
      VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      on_validation_message,
      NULL};
  /* The instance asks for the highest version the loader offers: a device then runs the SPIR-V
   * versions of its own API version (the lower of the two), which 1.0 would forbid. */
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "modpack", 1, "modpack", 1,
                           state.instance_version};
  VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               state.validation ? &messenger : NULL,
                               0,
                               &app,
                               state.validation ? 1u : 0u,
                               layers,
                               state.validation ? 1u : 0u,
                               extensions};
  VkResult result = vk->CreateInstance(&info, NULL, &state.instance);
  if (result != VK_SUCCESS && state.validation &&
      (result == VK_ERROR_LAYER_NOT_PRESENT || result == VK_ERROR_EXTENSION_NOT_PRESENT)) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "MODPACK_VULKAN_VALIDATION=1 asks for Khronos' validation layer "
                    "(VK_LAYER_KHRONOS_validation with VK_EXT_debug_utils), which this machine "
                    "lacks (%s): `apt-get install vulkan-validationlayers`, or unset it",
                    mp_vk_result_name(result));
    return;
  }
  if (result != VK_SUCCESS) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "no Vulkan driver found: vkCreateInstance failed with %s (%d); %s",
                    mp_vk_result_name(result), (int)result, INSTALL_HINT);
    return;
  }
  if (state.validation) {
    PFN_vkCreateDebugUtilsMessengerEXT create = (PFN_vkCreateDebugUtilsMessengerEXT)
        vk->GetInstanceProcAddr(state.instance, "vkCreateDebugUtilsMessengerEXT");
    VkDebugUtilsMessengerEXT handle = 0;
    result = create ? create(state.instance, &messenger, NULL, &handle)
                    : VK_ERROR_EXTENSION_NOT_PRESENT;
    if (result != VK_SUCCESS) {
      mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                      "MODPACK_VULKAN_VALIDATION=1: the validation layer's messenger "
                      "(vkCreateDebugUtilsMessengerEXT) failed with %s",
                      mp_vk_result_name(result));
      return;
    }
  }
  if (state.instance_version >= VK_API_VERSION_1_1) {
    state.GetPhysicalDeviceFeatures2 = (PFN_vkGetPhysicalDeviceFeatures2)vk->GetInstanceProcAddr(
        state.instance, "vkGetPhysicalDeviceFeatures2");
    state.GetPhysicalDeviceProperties2 =
        (PFN_vkGetPhysicalDeviceProperties2)vk->GetInstanceProcAddr(
            state.instance, "vkGetPhysicalDeviceProperties2");
  }
  VkPhysicalDevice physical[64];
  uint32_t count = 64;
  result = vk->EnumeratePhysicalDevices(state.instance, &count, physical);
  if ((result != VK_SUCCESS && result != VK_INCOMPLETE) || count == 0) {
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "Vulkan found no device (%s, %u devices); %s", mp_vk_result_name(result),
                    count, INSTALL_HINT);
    return;
  }
  for (uint32_t p = 0; p < count && state.device_count < MP_VULKAN_MAX_DEVICES; ++p) {
    VkQueueFamilyProperties families[32];
    uint32_t family_count = 32;
    vk->GetPhysicalDeviceQueueFamilyProperties(physical[p], &family_count, families);
    bool compute = false;
    for (uint32_t f = 0; f < family_count && !compute; ++f)
      compute = (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) && families[f].queueCount > 0;
    if (!compute) continue;
    VkPhysicalDeviceProperties properties;
    memset(&properties, 0, sizeof properties);
    vk->GetPhysicalDeviceProperties(physical[p], &properties);
    properties.deviceName[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE - 1] = '\0';
    uint32_t v = properties.apiVersion;
    snprintf(state.names[state.device_count], sizeof state.names[0], "%s (Vulkan %u.%u.%u)",
             properties.deviceName, v >> 22, (v >> 12) & 0x3ffu, v & 0xfffu);
    mp_vulkan_identity_t* identity = &state.identity[state.device_count];
    identity->vendor_id = properties.vendorID;
    identity->device_id = properties.deviceID;
    identity->driver_version = properties.driverVersion;
    memcpy(identity->cache_uuid, properties.pipelineCacheUUID, sizeof identity->cache_uuid);
    memcpy(identity->name, properties.deviceName, sizeof identity->name);
    mp_vulkan_support_t* support = &state.support[state.device_count];
    uint32_t own = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), 0);
    support->api_version = own < state.instance_version ? own : state.instance_version;
    mp_vulkan_support_query(&state, physical[p], support);
    state.physical[state.device_count++] = physical[p];
  }
  if (state.device_count == 0)
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE,
                    "Vulkan found %u device(s) but none with a compute queue", count);
  else if (mp_vulkan_validated(MP_OK, "Vulkan's initialisation") != MP_OK)
    mp_outcome_fail(&outcome, MP_ERR_UNAVAILABLE, "%s", mp_error_message());
}

const mp_vulkan_t* mp_vulkan(void) {
  pthread_once(&init_once, initialise);
  if (mp_outcome_raise(&outcome) != MP_OK) return NULL;
  return &state;
}

/* ---- a device, made at its first use ------------------------------------------------------- */

static int32_t find_memory_type(const VkPhysicalDeviceMemoryProperties* memory, VkFlags wanted) {
  for (uint32_t t = 0; t < memory->memoryTypeCount && t < 32; ++t)
    if ((memory->memoryTypes[t].propertyFlags & wanted) == wanted) return (int32_t)t;
  return -1;
}

static uint32_t limit_u32(const VkPhysicalDeviceProperties* properties, size_t offset) {
  uint32_t value;
  memcpy(&value, (const uint8_t*)properties + MP_VK_LIMITS_OFFSET + offset, sizeof value);
  return value;
}

static mp_status_t create_device(const mp_vulkan_t* vk, int32_t id, mp_vulkan_device_t* d) {
  VkPhysicalDevice physical = vk->physical[id];
  VkQueueFamilyProperties families[32];
  uint32_t family_count = 32;
  vk->vk.GetPhysicalDeviceQueueFamilyProperties(physical, &family_count, families);
  d->queue_family = UINT32_MAX;
  for (uint32_t f = 0; f < family_count && d->queue_family == UINT32_MAX; ++f)
    if ((families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) && families[f].queueCount > 0)
      d->queue_family = f;
  VkPhysicalDeviceProperties properties;
  memset(&properties, 0, sizeof properties);
  vk->vk.GetPhysicalDeviceProperties(physical, &properties);
  for (int i = 0; i < 3; ++i)
    d->max_group_count[i] =
        limit_u32(&properties, MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT + 4 * (size_t)i);
  for (int i = 0; i < 3; ++i)
    d->max_group_size[i] =
        limit_u32(&properties, MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_SIZE + 4 * (size_t)i);
  d->max_group_invocations = limit_u32(&properties, MP_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_INVOCATIONS);
  d->max_push_constants = limit_u32(&properties, MP_VK_LIMIT_MAX_PUSH_CONSTANTS_SIZE);
  d->max_bound_sets = limit_u32(&properties, MP_VK_LIMIT_MAX_BOUND_DESCRIPTOR_SETS);
  VkPhysicalDeviceMemoryProperties memory;
  memset(&memory, 0, sizeof memory);
  vk->vk.GetPhysicalDeviceMemoryProperties(physical, &memory);
  const VkFlags coherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                           VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const char* staging = getenv("MODPACK_VULKAN_STAGING");
  bool force_staging = staging && strcmp(staging, "1") == 0;
  d->staging_type = find_memory_type(&memory, coherent);
  d->memory_type = force_staging ? -1 : find_memory_type(&memory, coherent |
                                                          VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  d->mapped = d->memory_type >= 0;
  if (d->memory_type < 0) d->memory_type = find_memory_type(&memory, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (d->memory_type < 0 || (!d->mapped && d->staging_type < 0))
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "Vulkan device %d (%s) has no usable memory type (device-local, and "
                     "host-visible coherent for copies)",
                     (int)id, vk->names[id]);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0,
                                   d->queue_family, 1, &priority};
  /* Every feature a known capability needs that the device offers (vulkan_features.h): the
   * device is shared by every kernel, and each kernel is checked against it at its first call. */
  const mp_vulkan_support_t* support = &vk->support[id];
  mp_vulkan_feature_chain_t chain;
  mp_vulkan_feature_chain_init(&chain, support->api_version, support);
  bool chained = support->api_version >= VK_API_VERSION_1_1 && vk->GetPhysicalDeviceFeatures2;
  VkDeviceCreateInfo info = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             chained ? &chain.features2 : NULL,
                             0,
                             1,
                             &queue,
                             0,
                             NULL,
                             0,
                             NULL,
                             chained ? NULL : &chain.features2.features};
  VkResult result = vk->vk.CreateDevice(physical, &info, NULL, &d->device);
  if (result != VK_SUCCESS) return mp_vk_fail("device creation (vkCreateDevice)", result);
  vk->vk.GetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
  VkCommandPoolCreateInfo pool = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                  VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  d->queue_family};
  result = vk->vk.CreateCommandPool(d->device, &pool, NULL, &d->command_pool);
  if (result != VK_SUCCESS) return mp_vk_fail("command pool creation", result);
  VkCommandBufferAllocateInfo buffers = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL,
                                         d->command_pool, VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  result = vk->vk.AllocateCommandBuffers(d->device, &buffers, &d->commands);
  if (result != VK_SUCCESS) return mp_vk_fail("command buffer allocation", result);
  VkFenceCreateInfo fence = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
  result = vk->vk.CreateFence(d->device, &fence, NULL, &d->fence);
  if (result != VK_SUCCESS) return mp_vk_fail("fence creation", result);
  return MP_OK;
}

mp_vulkan_device_t* mp_vulkan_device_open(int32_t device_id) {
  const mp_vulkan_t* vk = mp_vulkan();
  if (!vk) return NULL;
  if (device_id < 0 || (uint32_t)device_id >= vk->device_count) {
    mp_errorf(MP_ERR_INVALID_ARGUMENT, "Vulkan device %d does not exist (%u available)",
              (int)device_id, vk->device_count);
    return NULL;
  }
  pthread_mutex_lock(&open_lock);
  mp_vulkan_device_t* d = devices[device_id];
  if (!d) {
    d = calloc(1, sizeof *d);
    if (!d) {
      mp_out_of_memory("a Vulkan device");
    } else if (create_device(vk, device_id, d) != MP_OK) {
      free(d); /* a half-made device is kept by the driver until exit; it is not retried */
      d = NULL;
    } else {
      devices[device_id] = d;
    }
  }
  pthread_mutex_unlock(&open_lock);
  return d;
}

void mp_vulkan_lock(int32_t device_id) {
  pthread_mutex_lock(&locks[device_id]);
}

void mp_vulkan_unlock(int32_t device_id) {
  pthread_mutex_unlock(&locks[device_id]);
}

static void barrier(const mp_vulkan_t* vk, mp_vulkan_device_t* d) {
  VkMemoryBarrier all = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL,
                         VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                             VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_MEMORY_WRITE_BIT,
                         VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                             VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                             VK_ACCESS_HOST_READ_BIT | VK_ACCESS_MEMORY_READ_BIT};
  vk->vk.CmdPipelineBarrier(d->commands, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                            VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                            &all, 0, NULL, 0, NULL);
}

mp_status_t mp_vulkan_begin(const mp_vulkan_t* vk, mp_vulkan_device_t* d) {
  VkResult result = vk->vk.ResetCommandBuffer(d->commands, 0);
  VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                    VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
  if (result == VK_SUCCESS) result = vk->vk.BeginCommandBuffer(d->commands, &begin);
  if (result != VK_SUCCESS) return mp_vk_fail("command recording (vkBeginCommandBuffer)", result);
  barrier(vk, d);
  return MP_OK;
}

mp_status_t mp_vulkan_submit_and_wait(const mp_vulkan_t* vk, mp_vulkan_device_t* d,
                                      const char* what) {
  barrier(vk, d);
  VkResult result = vk->vk.EndCommandBuffer(d->commands);
  if (result != VK_SUCCESS) return mp_vk_fail(what, result);
  VkSubmitInfo submit = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &d->commands, 0,
                         NULL};
  result = vk->vk.QueueSubmit(d->queue, 1, &submit, d->fence);
  if (result != VK_SUCCESS) return mp_vk_fail(what, result);
  result = vk->vk.WaitForFences(d->device, 1, &d->fence, 1, UINT64_MAX);
  VkResult reset = vk->vk.ResetFences(d->device, 1, &d->fence);
  if (result != VK_SUCCESS) return mp_vk_fail(what, result);
  return reset == VK_SUCCESS ? MP_OK : mp_vk_fail("fence reset", reset);
}

/* ---- the device API ------------------------------------------------------------------------ */

static mp_status_t vulkan_count(int32_t* out_count) {
  const mp_vulkan_t* vk = mp_vulkan();
  if (!vk) return mp_error_code();
  *out_count = (int32_t)vk->device_count;
  return MP_OK;
}

static mp_status_t vulkan_describe(int32_t device_id, char* buffer, uint64_t capacity) {
  const mp_vulkan_t* vk = mp_vulkan();
  if (!vk) return mp_error_code();
  if (device_id < 0 || (uint32_t)device_id >= vk->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "Vulkan device %d does not exist", (int)device_id);
  snprintf(buffer, capacity, "%s", vk->names[device_id]);
  return MP_OK;
}

/* A buffer of |nbytes| (at least 4: Vulkan has no empty buffers) in |memory_type|. */
static mp_status_t make_buffer(const mp_vulkan_t* vk, mp_vulkan_device_t* d, uint64_t nbytes,
                               int32_t memory_type, bool map, mp_vulkan_buffer_t* out) {
  memset(out, 0, sizeof *out);
  out->size = nbytes;
  VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             NULL,
                             0,
                             nbytes < 4 ? 4 : nbytes,
                             VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             VK_SHARING_MODE_EXCLUSIVE,
                             0,
                             NULL};
  VkResult result = vk->vk.CreateBuffer(d->device, &info, NULL, &out->buffer);
  if (result != VK_SUCCESS) return mp_vk_fail("buffer creation", result);
  VkMemoryRequirements needs;
  vk->vk.GetBufferMemoryRequirements(d->device, out->buffer, &needs);
  if (!(needs.memoryTypeBits & (1u << memory_type))) {
    vk->vk.DestroyBuffer(d->device, out->buffer, NULL);
    return mp_errorf(MP_ERR_UNAVAILABLE, "Vulkan buffers cannot use memory type %d on this device",
                     (int)memory_type);
  }
  VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, needs.size,
                                (uint32_t)memory_type};
  result = vk->vk.AllocateMemory(d->device, &alloc, NULL, &out->memory);
  if (result == VK_SUCCESS) result = vk->vk.BindBufferMemory(d->device, out->buffer, out->memory, 0);
  if (result == VK_SUCCESS && map)
    result = vk->vk.MapMemory(d->device, out->memory, 0, VK_WHOLE_SIZE, 0, &out->mapped);
  if (result != VK_SUCCESS) {
    vk->vk.DestroyBuffer(d->device, out->buffer, NULL);
    if (out->memory) vk->vk.FreeMemory(d->device, out->memory, NULL);
    char what[96];
    snprintf(what, sizeof what, "allocation of %" PRIu64 " bytes", nbytes);
    return mp_vk_fail(what, result);
  }
  return MP_OK;
}

static void drop_buffer(const mp_vulkan_t* vk, mp_vulkan_device_t* d, mp_vulkan_buffer_t* b) {
  vk->vk.DestroyBuffer(d->device, b->buffer, NULL); /* nothing is in flight between calls */
  vk->vk.FreeMemory(d->device, b->memory, NULL);    /* (unmaps it too) */
}

static mp_status_t vulkan_alloc_unchecked(int32_t device_id, uint64_t nbytes,
                                          void** out_data) {
  mp_vulkan_device_t* d = mp_vulkan_device_open(device_id);
  if (!d) return mp_error_code();
  mp_vulkan_buffer_t* b = malloc(sizeof *b);
  if (!b) return mp_out_of_memory("a Vulkan buffer");
  mp_status_t status = make_buffer(mp_vulkan(), d, nbytes, d->memory_type, d->mapped, b);
  if (status != MP_OK) {
    free(b);
    return status;
  }
  b->device = device_id;
  *out_data = b;
  return MP_OK;
}

static mp_status_t vulkan_free_unchecked(int32_t device_id, void* data) {
  mp_vulkan_device_t* d = mp_vulkan_device_open(device_id);
  if (!d) return mp_error_code();
  mp_vulkan_lock(device_id);
  drop_buffer(mp_vulkan(), d, data);
  mp_vulkan_unlock(device_id);
  free(data);
  return MP_OK;
}

/* A copy recorded and run on the device: within a buffer or between two. */
static mp_status_t device_copy(const mp_vulkan_t* vk, mp_vulkan_device_t* d, VkBuffer from,
                               uint64_t from_offset, VkBuffer to, uint64_t to_offset,
                               uint64_t nbytes) {
  MP_RETURN_IF_ERROR(mp_vulkan_begin(vk, d));
  VkBufferCopy region = {from_offset, to_offset, nbytes};
  vk->vk.CmdCopyBuffer(d->commands, from, to, 1, &region);
  return mp_vulkan_submit_and_wait(vk, d, "copy (vkCmdCopyBuffer)");
}

static mp_status_t check_range(const mp_vulkan_buffer_t* b, uint64_t offset, uint64_t nbytes) {
  if (offset > b->size || nbytes > b->size - offset)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a copy of %" PRIu64 " bytes at offset %" PRIu64
                     " leaves a Vulkan buffer of %" PRIu64 " bytes",
                     nbytes, offset, b->size);
  return MP_OK;
}

/* Host <-> device: memcpy through the mapping, else through a staging buffer. */
static mp_status_t host_copy(int32_t device_id, mp_vulkan_buffer_t* b, uint64_t offset, void* host,
                             uint64_t nbytes, bool to_device) {
  mp_vulkan_device_t* d = mp_vulkan_device_open(device_id);
  if (!d) return mp_error_code();
  MP_RETURN_IF_ERROR(check_range(b, offset, nbytes));
  const mp_vulkan_t* vk = mp_vulkan();
  mp_vulkan_lock(device_id);
  mp_status_t status = MP_OK;
  if (b->mapped) {
    if (to_device)
      memcpy((uint8_t*)b->mapped + offset, host, nbytes);
    else
      memcpy(host, (const uint8_t*)b->mapped + offset, nbytes);
  } else {
    mp_vulkan_buffer_t staging;
    status = make_buffer(vk, d, nbytes, d->staging_type, true, &staging);
    if (status == MP_OK) {
      if (to_device) memcpy(staging.mapped, host, nbytes);
      status = to_device ? device_copy(vk, d, staging.buffer, 0, b->buffer, offset, nbytes)
                         : device_copy(vk, d, b->buffer, offset, staging.buffer, 0, nbytes);
      if (status == MP_OK && !to_device) memcpy(host, staging.mapped, nbytes);
      drop_buffer(vk, d, &staging);
    }
  }
  mp_vulkan_unlock(device_id);
  return status;
}

static mp_status_t vulkan_copy_from_host_unchecked(int32_t device_id, const void* host,
                                                   void* data, uint64_t offset, uint64_t nbytes) {
  return host_copy(device_id, data, offset, (void*)host, nbytes, true);
}

static mp_status_t vulkan_copy_to_host_unchecked(int32_t device_id, const void* data,
                                                 uint64_t offset, void* host, uint64_t nbytes) {
  return host_copy(device_id, (mp_vulkan_buffer_t*)data, offset, host, nbytes, false);
}

static mp_status_t vulkan_copy_within_unchecked(int32_t device_id, const void* from,
                                                uint64_t from_offset, void* to, uint64_t to_offset,
                                                uint64_t nbytes) {
  mp_vulkan_device_t* d = mp_vulkan_device_open(device_id);
  if (!d) return mp_error_code();
  const mp_vulkan_buffer_t* source = from;
  mp_vulkan_buffer_t* target = to;
  MP_RETURN_IF_ERROR(check_range(source, from_offset, nbytes));
  MP_RETURN_IF_ERROR(check_range(target, to_offset, nbytes));
  mp_vulkan_lock(device_id);
  mp_status_t status;
  if (source == target && from_offset < to_offset + nbytes && to_offset < from_offset + nbytes) {
    /* Overlapping regions of one buffer: vkCmdCopyBuffer forbids them; go through the host. */
    void* bounce = malloc(nbytes);
    mp_vulkan_unlock(device_id);
    if (!bounce) return mp_out_of_memory("an overlapping Vulkan copy");
    status = host_copy(device_id, (mp_vulkan_buffer_t*)source, from_offset, bounce, nbytes, false);
    if (status == MP_OK) status = host_copy(device_id, target, to_offset, bounce, nbytes, true);
    free(bounce);
    return status;
  }
  status = device_copy(mp_vulkan(), d, source->buffer, from_offset, target->buffer, to_offset,
                       nbytes);
  mp_vulkan_unlock(device_id);
  return status;
}

static mp_status_t vulkan_synchronize_unchecked(int32_t device_id) {
  /* Every submission is waited for before its call returns: nothing is in flight. */
  return mp_vulkan_device_open(device_id) ? MP_OK : mp_error_code();
}

/* The device API, each call failing on what the validation layer reports during it. */
static mp_status_t vulkan_alloc(int32_t device_id, uint64_t nbytes, void** out_data) {
  return mp_vulkan_validated(vulkan_alloc_unchecked(device_id, nbytes, out_data),
                             "a Vulkan allocation");
}

static mp_status_t vulkan_free(int32_t device_id, void* data) {
  return mp_vulkan_validated(vulkan_free_unchecked(device_id, data), "freeing Vulkan memory");
}

static mp_status_t vulkan_copy_from_host(int32_t device_id, const void* host, void* data,
                                         uint64_t offset, uint64_t nbytes) {
  return mp_vulkan_validated(
      vulkan_copy_from_host_unchecked(device_id, host, data, offset, nbytes),
      "a copy to a Vulkan device");
}

static mp_status_t vulkan_copy_to_host(int32_t device_id, const void* data, uint64_t offset,
                                       void* host, uint64_t nbytes) {
  return mp_vulkan_validated(vulkan_copy_to_host_unchecked(device_id, data, offset, host, nbytes),
                             "a copy from a Vulkan device");
}

static mp_status_t vulkan_copy_within(int32_t device_id, const void* from, uint64_t from_offset,
                                      void* to, uint64_t to_offset, uint64_t nbytes) {
  return mp_vulkan_validated(
      vulkan_copy_within_unchecked(device_id, from, from_offset, to, to_offset, nbytes),
      "a copy on a Vulkan device");
}

static mp_status_t vulkan_synchronize(int32_t device_id) {
  return mp_vulkan_validated(vulkan_synchronize_unchecked(device_id), "a Vulkan synchronisation");
}

const mp_device_api_t mp_vulkan_device = {
    .device_type = kDLVulkan,
    .name = "vulkan",
    .display_name = "Vulkan",
    .count = vulkan_count,
    .describe = vulkan_describe,
    .alloc = vulkan_alloc,
    .free = vulkan_free,
    .copy_from_host = vulkan_copy_from_host,
    .copy_to_host = vulkan_copy_to_host,
    .copy_within = vulkan_copy_within,
    .synchronize = vulkan_synchronize,
};
