/* The vulkan kind's module state, shared by its payload parser (vulkan_payload.c) and its
 * per-device pipelines and launches (vulkan_module.c). */
#ifndef MODPACK_KINDS_VULKAN_MODULE_H_
#define MODPACK_KINDS_VULKAN_MODULE_H_

#include <stdint.h>

#include "kinds/common/code.h"
#include "kinds/common/device_module.h"
#include "kinds/vulkan/vulkan_abi.h"
#include "kinds/vulkan/vulkan_features.h"
#include "modpack/kinds/vulkan.h"

/* The launch slots, in the order of the kind's launch tags: workgroups x, y, z. */
enum { MP_VULKAN_SLOT_COUNT = 3 };

typedef struct {
  const uint8_t* data; /* SPIR-V words in the library mapping, as stored (maybe a code frame) */
  uint64_t size;       /* stored */
  mp_code_t code;      /* the words: in place, or decoded when a device first needs them */
  mp_vulkan_requirements_t requirements; /* payload version 2; zero in version 1 */
} mp_vulkan_shader_t;

/* Where argument |i| of a kernel goes: a buffer's set and binding, a scalar's push-constant
 * offset (|binding| unused). */
typedef struct {
  uint32_t set;
  uint32_t binding;
} mp_vulkan_slot_t;

/* A specialization constant of a kernel's pipeline (payload version 2). */
typedef struct {
  uint32_t id;   /* SpecId */
  uint8_t type;  /* kDLInt, kDLUInt, kDLFloat, kDLBool */
  uint8_t bits;  /* 8..64; a bool's 32 (VkBool32) */
  uint8_t flags; /* MP_VULKAN_CONSTANT_DEFAULT */
  uint64_t value; /* its bits, little-endian in the low bytes */
  char* name;     /* NULL: unnamed */
} mp_vulkan_constant_t;

typedef struct {
  uint32_t shader;
  uint32_t workgroup_size[3]; /* version 1: informative; version 2: specialised */
  uint32_t push_constant_size;
  uint32_t set_count; /* 1 + the highest set a buffer uses (0: no buffer) */
  mp_vulkan_slot_t* slots; /* per argument of the record */
  uint32_t constant_count;
  mp_vulkan_constant_t* constants;
} mp_vulkan_interface_t;

/* A kernel's specialization as the driver is given it: each constant's bytes packed in order
 * (a bool as a VkBool32); |info| points into the rest. */
typedef struct {
  VkSpecializationMapEntry entries[MP_VULKAN_MAX_CONSTANTS];
  uint8_t data[MP_VULKAN_MAX_CONSTANTS * 8];
  VkSpecializationInfo info;
} mp_vulkan_specialization_t;

/* |in|'s specialization into |out|, for its pipeline and for the pipeline's kernel-cache key
 * (one packing, so that preflight asks the cache for the key a launch stores under;
 * vulkan_payload.c). */
void mp_vulkan_specialization_of(const mp_vulkan_interface_t* in,
                                 mp_vulkan_specialization_t* out);

/* A kernel's pipeline on one device, made at its first launch there. */
typedef struct {
  VkDescriptorSetLayout set_layouts[MP_VULKAN_MAX_SETS];
  VkPipelineLayout layout;
  VkPipeline pipeline;
  VkDescriptorPool pool;
  VkDescriptorSet sets[MP_VULKAN_MAX_SETS]; /* rewritten at each launch, under the device lock */
} mp_vulkan_pipeline_t;

typedef struct {
  mp_device_module_t base; /* first: kernels, name, payload, lock (kinds/common) */
  uint32_t version;        /* the payload's */
  uint32_t shader_count;
  mp_vulkan_shader_t* shaders;
  mp_vulkan_interface_t* interfaces; /* per kernel */
  /* Per device, made at first launch (guarded by base.lock): shader modules by shader, and
   * pipelines by kernel (NULL before). */
  VkShaderModule* modules[MP_VULKAN_MAX_DEVICES];
  mp_vulkan_pipeline_t** pipelines[MP_VULKAN_MAX_DEVICES];
} mp_vulkan_module_t;

/* Parse and validate |payload| into |m| (a zeroed state; kernels' launch tags must be |kind|'s;
 * the shaders' words stay in place). No Vulkan call. On failure |m| holds what was read, for
 * mp_vulkan_payload_free. */
mp_status_t mp_vulkan_payload_parse(void* m, const mp_kind_t* kind, mp_const_byte_span_t payload);
/* The head of a payload: header, name, shader sizes and (version 2) the shaders' requirements,
 * into |m| (zeroed) from |r|; what preflight reads. */
mp_status_t mp_vulkan_payload_parse_head(mp_vulkan_module_t* m, mp_reader_t* r);
/* Frees what the parser made (not the base: mp_device_module_free). */
void mp_vulkan_payload_free(mp_vulkan_module_t* m);
/* Shader |s|'s SPIR-V, decoded (and checked) the first time when compressed. */
mp_status_t mp_vulkan_shader_words(mp_vulkan_module_t* m, uint32_t s, const uint8_t** out_words);

#endif /* MODPACK_KINDS_VULKAN_MODULE_H_ */
