/*
 * modpack/kinds/vulkan.h — the "vulkan" kind: SPIR-V compute shaders, a function-info record per
 * kernel (modpack/kinds/kernel.h) and each kernel's interface: which shader and entry point, its
 * workgroup size, where each argument goes (a storage buffer's descriptor set and binding, a
 * scalar's offset in the push-constant block).
 *
 * Payload (little-endian; version 2 adds the parts marked [v2], version 1 is read as before):
 *   header (mp_vulkan_header_v1_t: u32 version, u32 reserved, u32 shader_count >= 1)
 *   u32 name_size (<= MP_MODULE_MAX_NAME; 0: unnamed), the module's name
 *   shader_count x u64 shader size (bytes: a multiple of 4, at least 20, the SPIR-V header)
 *   [v2] shader_count requirements, in the shaders' order, each: u32 spirv_version (its SPIR-V
 *       header's version word, 0x00010m00 for 1.m), u32 vulkan_version (the least Vulkan API
 *       version it needs, VK_MAKE_API_VERSION(0, 1, minor, 0)), u32 capability_count (<=
 *       MP_VULKAN_MAX_CAPABILITIES) and that many SPIR-V capability numbers (its OpCapability
 *       list, which the runtime checks against each device without reading the SPIR-V)
 *   u32 kernel_count, kernel_count function-info records (record version 2: the symbol is the
 *       shader's entry point when it is not the kernel's name; arguments are buffers, then
 *       scalars; no local memory, no NULL pointers)
 *   kernel_count interfaces, in the records' order, each:
 *       u32 shader index, u32 workgroup size x, y, z (version 1: informative; [v2] the size
 *       the pipeline runs with, specialization applied, each at least 1),
 *       u32 push_constant_size (bytes, a multiple of 4, <= MP_VULKAN_MAX_PUSH_CONSTANTS),
 *       per argument of the record: u32 a, u32 b: a buffer's descriptor set (<
 *       MP_VULKAN_MAX_SETS) and binding (< MP_VULKAN_MAX_BINDING); a scalar's byte offset in
 *       the push-constant block (its bytes inside the block) and 0. Buffers sharing a set and
 *       binding are one descriptor, and a call must pass one array for all of them (writers
 *       since payload version 2 make them one argument; version 1 writers made one argument
 *       per block declared on the binding, which this runtime loads and runs),
 *       [v2] u32 constant_count (<= MP_VULKAN_MAX_CONSTANTS): the specialization constants of
 *       its pipeline (VkSpecializationInfo), each: u32 SpecId (each once per kernel), u8 type
 *       (DLPack's code: kDLInt, kDLUInt, kDLFloat, kDLBool), u8 bits (8, 16, 32 or 64 for an
 *       int or uint, 16, 32 or 64 for a float, 32 for a bool: a VkBool32), u8 flags
 *       (MP_VULKAN_CONSTANT_DEFAULT: the shader's default, no value was given; no other bit),
 *       u8 reserved (0), u64 value (its bits bytes, little-endian, the bytes above them 0; a
 *       bool is 0 or 1), u32 name_size (<= MP_VULKAN_MAX_CONSTANT_NAME; 0: unnamed) and the
 *       name (its name in the shader, for tools and messages)
 *   then each shader's SPIR-V words in order, each starting at the next multiple of
 *   MP_VULKAN_SHADER_ALIGNMENT from the start of the payload (zero padding between), and
 *   nothing after the last; each starts with the SPIR-V magic number 0x07230203.
 *
 * Kernels take their arguments (arrays on a Vulkan device for buffers, numbers for scalars, in
 * the record's order) followed by the three launch tags "workgroups.x|y|z": how many workgroups
 * to dispatch (vkCmdDispatch). Pipelines are made per device at a kernel's first launch, with
 * its specialization constants.
 *
 * Devices: the instance is made with the highest Vulkan API version the loader offers
 * (vkEnumerateInstanceVersion; MODPACK_VULKAN_API_VERSION=1.M lowers it), and each device with
 * every feature a SPIR-V capability of mp_vulkan_capability_info needs, where the device offers
 * it. A kernel whose shader needs a higher API version than the device's, or a capability the
 * device does not offer (or one this runtime does not know), is refused at its first call with
 * a message naming it; modpack preflight --device vulkan:N says the same of a library.
 */
#ifndef MODPACK_KINDS_VULKAN_H_
#define MODPACK_KINDS_VULKAN_H_

#include <stdint.h>

#include "modpack/modpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MP_API_BEGIN */
enum {
  MP_VULKAN_PAYLOAD_VERSION = 2,
  MP_VULKAN_MAX_SHADERS = 1024,
  MP_VULKAN_SHADER_ALIGNMENT = 64,
  MP_VULKAN_MAX_PUSH_CONSTANTS = 256, /* bytes; devices guarantee 128 */
  MP_VULKAN_MAX_SETS = 8,
  MP_VULKAN_MAX_BINDING = 1024,
  MP_VULKAN_SPIRV_MAGIC = 0x07230203,
  MP_VULKAN_MAX_CONSTANTS = 256,      /* specialization constants per kernel */
  MP_VULKAN_MAX_CONSTANT_NAME = 255,  /* bytes */
  MP_VULKAN_CONSTANT_DEFAULT = 1,     /* a constant's flag: its value is the shader's default */
  MP_VULKAN_CONSTANT_SIZE = 20,       /* bytes of a constant before its name */
  MP_VULKAN_MAX_CAPABILITIES = 128,   /* per shader */
};

typedef struct {
  uint32_t version;      /* MP_VULKAN_PAYLOAD_VERSION */
  uint32_t reserved;     /* must be 0 */
  uint32_t shader_count; /* 1..MP_VULKAN_MAX_SHADERS */
} mp_vulkan_header_v1_t;

/* What a SPIR-V capability needs of a Vulkan device, as this runtime checks and enables it. */
typedef struct {
  const char* name;        /* SPIR-V's: "StorageBuffer16BitAccess" */
  const char* requirement; /* "the feature storageBuffer16BitAccess"; "" when every device of
                              |vulkan_version| has it */
  uint32_t vulkan_version; /* the least API version offering it: VK_MAKE_API_VERSION(0, 1, m, 0) */
} mp_vulkan_capability_t;

/* Capability |capability| (a SPIR-V OpCapability operand) into |*out| (static strings).
 * MP_ERR_NOT_FOUND for one this runtime does not check and enable: a shader that declares it
 * is refused (writers refuse it when the module is made). */
MP_API mp_status_t mp_vulkan_capability_info(uint32_t capability, mp_vulkan_capability_t* out);
/* MP_API_END */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(mp_vulkan_header_v1_t) == 12, "vulkan payload header must be 12 bytes");
#endif

#ifdef __cplusplus
}
#endif
#endif /* MODPACK_KINDS_VULKAN_H_ */
