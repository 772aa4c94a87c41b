/* The "vulkan" module kind: SPIR-V compute shaders, a function-info record per kernel and its
 * interface (shader and entry point, workgroup size, each argument's binding or push-constant
 * offset); the payload layout is in modpack/kinds/vulkan.h. Loading parses the payload only
 * (vulkan_payload.c, through kinds/common's device loader): no Vulkan call, so a library with
 * Vulkan modules loads on machines without Vulkan.
 *
 * A kernel's pipeline is made per device at its first launch there (its shader module, the
 * descriptor set layouts, the pipeline layout with its push-constant range, the compute
 * pipeline, a descriptor pool and sets) and cached in the module. The compute pipeline goes
 * through the kernel cache (vulkan_pipeline_cache.h): the driver's pipeline cache data an
 * earlier process kept for the same SPIR-V, entry point, specialisation, device and driver
 * seeds it, else what the driver compiled is kept. A launch writes the buffers
 * into the kernel's descriptor sets, records bind, push constants and vkCmdDispatch into the
 * device's command buffer, submits it and waits: launches are synchronous, and each device's
 * launches and copies are serialised by its lock (vulkan_device.c).
 *
 * A kernel function takes its arguments (arrays on a Vulkan device for buffers, numbers for
 * scalars) followed by three integers: the workgroup counts x, y, z. */
#include "kinds/vulkan/vulkan_module.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/registry.h"
#include "kinds/common/kernel_call.h"
#include "kinds/vulkan/vulkan_pipeline_cache.h"

extern const mp_kind_t mp_vulkan_kind; /* this kind's descriptor, at the end */
extern const mp_preflight_api_t mp_vulkan_preflight; /* vulkan_preflight.c */

_Static_assert(offsetof(mp_vulkan_module_t, base) == 0, "the device module base must come first");

static const char* const launch_tags[MP_VULKAN_SLOT_COUNT] = {"workgroups.x", "workgroups.y",
                                                              "workgroups.z"};

/* ---- destruction --------------------------------------------------------------------------- */

static void destroy_pipeline(const mp_vulkan_t* vk, VkDevice device, mp_vulkan_pipeline_t* p) {
  if (p->pool) vk->vk.DestroyDescriptorPool(device, p->pool, NULL);
  if (p->pipeline) vk->vk.DestroyPipeline(device, p->pipeline, NULL);
  if (p->layout) vk->vk.DestroyPipelineLayout(device, p->layout, NULL);
  for (uint32_t s = 0; s < MP_VULKAN_MAX_SETS; ++s)
    if (p->set_layouts[s]) vk->vk.DestroyDescriptorSetLayout(device, p->set_layouts[s], NULL);
  free(p);
}

static void vulkan_destroy(void* impl) {
  mp_vulkan_module_t* m = impl;
  for (int32_t d = 0; d < MP_VULKAN_MAX_DEVICES; ++d) {
    if (!m->modules[d]) continue;
    /* Pipelines exist, so Vulkan and the device were initialised. */
    const mp_vulkan_t* vk = mp_vulkan();
    mp_vulkan_device_t* device = vk ? mp_vulkan_device_open(d) : NULL;
    for (uint32_t k = 0; device && k < m->base.table.count; ++k)
      if (m->pipelines[d][k]) destroy_pipeline(vk, device->device, m->pipelines[d][k]);
    for (uint32_t s = 0; device && s < m->shader_count; ++s)
      if (m->modules[d][s]) vk->vk.DestroyShaderModule(device->device, m->modules[d][s], NULL);
    free(m->modules[d]);
    free(m->pipelines[d]);
    if (mp_vulkan_validated(MP_OK, "releasing a Vulkan module") != MP_OK)
      fprintf(stderr, "modpack: %s\n", mp_error_message());
  }
  mp_vulkan_payload_free(m);
  mp_device_module_free(&m->base);
  free(m);
}

/* ---- pipelines, made per device at a kernel's first launch ---------------------------------- */

/* Shader |s| on |device| (its SPIR-V words copied once when the payload leaves them unaligned).
 * The caller holds the module's lock. */
static mp_status_t shader_module_locked(mp_vulkan_module_t* m, const mp_vulkan_t* vk,
                                        const mp_vulkan_device_t* d, int32_t device, uint32_t s,
                                        VkShaderModule* out) {
  if (m->modules[device][s]) {
    *out = m->modules[device][s];
    return MP_OK;
  }
  const mp_vulkan_shader_t* shader = &m->shaders[s];
  const uint8_t* raw;
  MP_RETURN_IF_ERROR(mp_vulkan_shader_words(m, s, &raw));
  uint64_t size = shader->code.raw_size;
  uint32_t* copy = NULL;
  const uint32_t* words = (const uint32_t*)(const void*)raw;
  if ((uintptr_t)raw % sizeof(uint32_t)) {
    copy = malloc(size);
    if (!copy) return mp_out_of_memory("a SPIR-V shader");
    memcpy(copy, raw, size);
    words = copy;
  }
  VkShaderModuleCreateInfo info = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0,
                                   (size_t)size, words};
  VkResult result = vk->vk.CreateShaderModule(d->device, &info, NULL, &m->modules[device][s]);
  free(copy);
  if (result != VK_SUCCESS) {
    m->modules[device][s] = 0;
    char what[96];
    snprintf(what, sizeof what, "shader %u (vkCreateShaderModule)", s);
    return mp_vk_fail(what, result);
  }
  *out = m->modules[device][s];
  return MP_OK;
}

/* The first argument of kernel |info| at argument |a|'s set and binding (|a| itself, unless
 * several arguments share one descriptor). */
static uint32_t first_at_slot(const mp_kernel_info_t* info, const mp_vulkan_interface_t* in,
                              uint32_t a) {
  for (uint32_t b = 0; b < a; ++b)
    if (info->args[b].kind == MP_KERNEL_ARG_BUFFER && in->slots[b].set == in->slots[a].set &&
        in->slots[b].binding == in->slots[a].binding)
      return b;
  return a;
}

static mp_status_t make_pipeline(mp_vulkan_module_t* m, const mp_vulkan_t* vk,
                                 const mp_vulkan_device_t* d, int32_t device, uint32_t k,
                                 VkShaderModule shader, mp_vulkan_pipeline_t* p) {
  const mp_kernel_info_t* info = &m->base.table.kernels[k];
  const mp_vulkan_interface_t* in = &m->interfaces[k];
  VkDescriptorSetLayoutBinding bindings[MP_KERNEL_MAX_ARGS];
  uint32_t buffers = 0;
  VkResult result = VK_SUCCESS;
  for (uint32_t s = 0; s < in->set_count && result == VK_SUCCESS; ++s) {
    uint32_t n = 0;
    for (uint32_t a = 0; a < info->arg_count; ++a)
      if (info->args[a].kind == MP_KERNEL_ARG_BUFFER && in->slots[a].set == s &&
          first_at_slot(info, in, a) == a)
        bindings[n++] = (VkDescriptorSetLayoutBinding){
            in->slots[a].binding, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
            VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    buffers += n;
    VkDescriptorSetLayoutCreateInfo layout = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                              NULL, 0, n, bindings};
    result = vk->vk.CreateDescriptorSetLayout(d->device, &layout, NULL, &p->set_layouts[s]);
  }
  if (result != VK_SUCCESS) return mp_vk_fail("descriptor set layout creation", result);
  VkPushConstantRange range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, in->push_constant_size};
  VkPipelineLayoutCreateInfo layout = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       NULL,
                                       0,
                                       in->set_count,
                                       p->set_layouts,
                                       in->push_constant_size ? 1u : 0u,
                                       &range};
  result = vk->vk.CreatePipelineLayout(d->device, &layout, NULL, &p->layout);
  if (result != VK_SUCCESS) return mp_vk_fail("pipeline layout creation", result);
  mp_vulkan_specialization_t specialization;
  mp_vulkan_specialization_of(in, &specialization);
  VkComputePipelineCreateInfo create = {
      VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      NULL,
      0,
      {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0, VK_SHADER_STAGE_COMPUTE_BIT,
       shader, mp_kernel_symbol(info), in->constant_count ? &specialization.info : NULL},
      p->layout,
      0,
      -1};
  /* Through the kernel cache: the driver's pipeline cache from an earlier process, if kept. */
  const uint8_t* spirv;
  MP_RETURN_IF_ERROR(mp_vulkan_shader_words(m, in->shader, &spirv));
  mp_vulkan_pipeline_key_t key = {spirv, m->shaders[in->shader].code.raw_size,
                                  mp_kernel_symbol(info),
                                  in->constant_count ? &specialization.info : NULL};
  mp_vulkan_pipeline_cache_t cache;
  mp_vulkan_pipeline_cache_open(&cache, vk, d, device, &key, m->base.load_flags,
                                m->base.library_path);
  result = vk->vk.CreateComputePipelines(d->device, cache.cache, 1, &create, NULL, &p->pipeline);
  mp_vulkan_pipeline_cache_close(&cache, vk, d, result == VK_SUCCESS);
  if (result != VK_SUCCESS) {
    p->pipeline = 0;
    return mp_errorf(MP_ERR_RUNTIME,
                     "%s: making its compute pipeline (entry point '%s' of shader %u) on Vulkan "
                     "device %d (%s) failed: %s (%d); the driver refused the SPIR-V",
                     info->name, mp_kernel_symbol(info), in->shader, (int)device,
                     vk->names[device], mp_vk_result_name(result), (int)result);
  }
  if (in->set_count == 0) return MP_OK;
  VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, buffers ? buffers : 1};
  VkDescriptorPoolCreateInfo pool = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     NULL,
                                     0,
                                     in->set_count,
                                     1,
                                     &size};
  result = vk->vk.CreateDescriptorPool(d->device, &pool, NULL, &p->pool);
  if (result != VK_SUCCESS) return mp_vk_fail("descriptor pool creation", result);
  VkDescriptorSetAllocateInfo sets = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL,
                                      p->pool, in->set_count, p->set_layouts};
  result = vk->vk.AllocateDescriptorSets(d->device, &sets, p->sets);
  return result == VK_SUCCESS ? MP_OK : mp_vk_fail("descriptor set allocation", result);
}

/* Kernel |k|'s pipeline on |device|, made at its first launch. */
static mp_status_t pipeline_of(mp_vulkan_module_t* m, const mp_vulkan_t* vk,
                               const mp_vulkan_device_t* d, int32_t device, uint32_t k,
                               mp_vulkan_pipeline_t** out) {
  pthread_mutex_lock(&m->base.lock);
  mp_status_t status = MP_OK;
  if (!m->modules[device]) {
    m->modules[device] = calloc(m->shader_count, sizeof *m->modules[device]);
    m->pipelines[device] = calloc(m->base.table.count ? m->base.table.count : 1,
                                  sizeof *m->pipelines[device]);
    if (!m->modules[device] || !m->pipelines[device]) {
      free(m->modules[device]);
      free(m->pipelines[device]);
      m->modules[device] = NULL;
      m->pipelines[device] = NULL;
      status = mp_out_of_memory("Vulkan pipelines");
    }
  }
  mp_vulkan_pipeline_t* p = status == MP_OK ? m->pipelines[device][k] : NULL;
  if (status == MP_OK && !p && m->version >= 2) {
    /* What the shader needs of the device, recorded when it was written: checked before the
     * driver sees it, which may run what the device does not offer, or refuse it vaguely. */
    char why[512];
    const mp_kernel_info_t* info = &m->base.table.kernels[k];
    if (!mp_vulkan_supports(&vk->support[device], &m->shaders[m->interfaces[k].shader].requirements,
                            why, sizeof why))
      status = mp_errorf(MP_ERR_UNAVAILABLE, "%s cannot run on Vulkan device %d (%s): %s%s",
                         info->name, (int)device, vk->names[device], why,
                         vk->capped ? " (MODPACK_VULKAN_API_VERSION lowers the API version "
                                      "modpack asks of Vulkan)"
                                    : "");
  }
  if (status == MP_OK && !p) {
    VkShaderModule shader = 0;
    status = shader_module_locked(m, vk, d, device, m->interfaces[k].shader, &shader);
    p = status == MP_OK ? calloc(1, sizeof *p) : NULL;
    if (status == MP_OK && !p) status = mp_out_of_memory("a Vulkan pipeline");
    if (status == MP_OK) status = make_pipeline(m, vk, d, device, k, shader, p);
    if (status == MP_OK) {
      m->pipelines[device][k] = p;
    } else if (p) {
      destroy_pipeline(vk, d->device, p);
      p = NULL;
    }
  }
  pthread_mutex_unlock(&m->base.lock);
  *out = p;
  return status;
}

/* ---- calling ------------------------------------------------------------------------------- */

/* A storage buffer argument beyond the shared checks: an array (Vulkan has no NULL buffers),
 * whole, and the same array for arguments that share one descriptor. */
static mp_status_t check_array(const mp_kernel_call_t* call, uint32_t i) {
  const mp_vulkan_module_t* m = call->ref->module;
  const mp_kernel_info_t* info = call->info;
  const mp_vulkan_interface_t* in = &m->interfaces[call->ref->kernel];
  const mp_value_t* const* params = call->params;
  if (params[i]->type_code != MP_TYPE_DLTENSOR)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u is a storage buffer (set %u, binding %u): pass an array, "
                     "not None (Vulkan has no NULL buffers)",
                     info->name, i, in->slots[i].set, in->slots[i].binding);
  if (params[i]->v_tensor->byte_offset != 0)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: argument %u has a byte offset; Vulkan kernels take whole buffers",
                     info->name, i);
  uint32_t first = first_at_slot(info, in, i);
  if (first != i && params[first]->v_tensor->data != params[i]->v_tensor->data)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "%s: arguments %u and %u are one storage buffer (set %u, binding %u): pass "
                     "the same array for both",
                     info->name, first, i, in->slots[i].set, in->slots[i].binding);
  return MP_OK;
}

static const uint64_t launch_defaults[MP_VULKAN_SLOT_COUNT] = {1, 1, 1};
static const uint64_t launch_limits[MP_VULKAN_SLOT_COUNT] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
static const mp_kernel_call_rule_t call_rule = {
    .slot_count = MP_VULKAN_SLOT_COUNT,
    .defaults = launch_defaults,
    .limits = launch_limits,
    .device = &mp_vulkan_device,
    .how_to_create = "modpack.array(x, device=\"vulkan:0\")",
    .check_array = check_array,
};

static mp_status_t launch(const mp_kernel_ref_t* ref, const mp_value_t* args, int32_t num_args) {
  mp_vulkan_module_t* m = ref->module;
  const mp_vulkan_interface_t* in = &m->interfaces[ref->kernel];
  /* Checks that need no driver first: kinds, dtypes, devices, workgroup counts. */
  mp_kernel_call_t call;
  MP_RETURN_IF_ERROR(mp_kernel_call_check(ref, args, num_args, &call_rule, &call));
  const mp_kernel_info_t* info = call.info;
  const mp_value_t* const* params = call.params;
  int32_t device = call.device;
  const uint64_t* groups = call.launch;
  uint8_t push[MP_VULKAN_MAX_PUSH_CONSTANTS];
  memset(push, 0, sizeof push);
  for (uint32_t i = 0; i < info->arg_count; ++i)
    if (info->args[i].kind == MP_KERNEL_ARG_SCALAR)
      memcpy(push + in->slots[i].set, &call.scalars[i], call.sizes[i]);
  if (!groups[0] || !groups[1] || !groups[2]) return MP_OK; /* nothing to run */

  const mp_vulkan_t* vk = mp_vulkan();
  if (!vk) return mp_error_code();
  if (device < 0) device = 0;
  mp_vulkan_device_t* d = mp_vulkan_device_open(device);
  if (!d) return mp_error_code();
  for (int i = 0; i < 3; ++i)
    if (groups[i] > d->max_group_count[i])
      return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "%s: %" PRIu64 " workgroups along %c, but Vulkan device %d dispatches at "
                       "most %u (maxComputeWorkGroupCount)",
                       info->name, groups[i], "xyz"[i], (int)device, d->max_group_count[i]);
  /* A version 2 interface holds the size the pipeline runs with (specialization applied). */
  uint64_t invocations = (uint64_t)in->workgroup_size[0] * in->workgroup_size[1] *
                         in->workgroup_size[2];
  if (m->version >= 2 &&
      (in->workgroup_size[0] > d->max_group_size[0] ||
       in->workgroup_size[1] > d->max_group_size[1] ||
       in->workgroup_size[2] > d->max_group_size[2] || invocations > d->max_group_invocations))
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "%s runs workgroups of %ux%ux%u invocations; Vulkan device %d (%s) allows "
                     "at most %ux%ux%u and %u in all (maxComputeWorkGroupSize, "
                     "maxComputeWorkGroupInvocations): specialise it smaller",
                     info->name, in->workgroup_size[0], in->workgroup_size[1],
                     in->workgroup_size[2], (int)device, vk->names[device], d->max_group_size[0],
                     d->max_group_size[1], d->max_group_size[2], d->max_group_invocations);
  if (in->push_constant_size > d->max_push_constants || in->set_count > d->max_bound_sets)
    return mp_errorf(MP_ERR_UNAVAILABLE,
                     "%s needs %u bytes of push constants and %u descriptor sets; Vulkan device "
                     "%d (%s) allows %u and %u",
                     info->name, in->push_constant_size, in->set_count, (int)device,
                     vk->names[device], d->max_push_constants, d->max_bound_sets);
  mp_vulkan_pipeline_t* p;
  MP_RETURN_IF_ERROR(pipeline_of(m, vk, d, device, ref->kernel, &p));

  VkDescriptorBufferInfo buffers[MP_KERNEL_MAX_ARGS];
  VkWriteDescriptorSet writes[MP_KERNEL_MAX_ARGS];
  uint32_t n = 0;
  for (uint32_t i = 0; i < info->arg_count; ++i) {
    if (info->args[i].kind != MP_KERNEL_ARG_BUFFER || first_at_slot(info, in, i) != i) continue;
    const mp_vulkan_buffer_t* b = params[i]->v_tensor->data;
    buffers[n] = (VkDescriptorBufferInfo){b->buffer, 0, VK_WHOLE_SIZE};
    writes[n] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       NULL,
                                       p->sets[in->slots[i].set],
                                       in->slots[i].binding,
                                       0,
                                       1,
                                       VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       NULL,
                                       &buffers[n],
                                       NULL};
    ++n;
  }
  mp_vulkan_lock(device);
  if (n) vk->vk.UpdateDescriptorSets(d->device, n, writes, 0, NULL);
  mp_status_t status = mp_vulkan_begin(vk, d);
  if (status == MP_OK) {
    vk->vk.CmdBindPipeline(d->commands, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    if (in->set_count)
      vk->vk.CmdBindDescriptorSets(d->commands, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0,
                                   in->set_count, p->sets, 0, NULL);
    if (in->push_constant_size)
      vk->vk.CmdPushConstants(d->commands, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                              in->push_constant_size, push);
    vk->vk.CmdDispatch(d->commands, (uint32_t)groups[0], (uint32_t)groups[1],
                       (uint32_t)groups[2]);
    char what[MP_KERNEL_MAX_NAME + 96];
    snprintf(what, sizeof what,
             "%s: launch (vkCmdDispatch of %" PRIu64 " x %" PRIu64 " x %" PRIu64 " workgroups)",
             info->name, groups[0], groups[1], groups[2]);
    status = mp_vulkan_submit_and_wait(vk, d, what);
  }
  mp_vulkan_unlock(device);
  return status;
}

static mp_status_t call_kernel(void* self, const mp_value_t* args, int32_t num_args,
                               mp_value_t* out_ret) {
  (void)out_ret;
  const mp_kernel_ref_t* ref = self;
  const mp_vulkan_module_t* m = ref->module;
  return mp_vulkan_validated(launch(ref, args, num_args), m->base.table.kernels[ref->kernel].name);
}

/* ---- describing and loading ---------------------------------------------------------------- */

/* A float of |bits| bits (IEEE 754 binary16, 32 or 64) from its bits. */
static double float_of(uint64_t raw, uint8_t bits) {
  if (bits == 64) {
    double d;
    memcpy(&d, &raw, sizeof d);
    return d;
  }
  if (bits == 32) {
    uint32_t w = (uint32_t)raw;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
  }
  /* binary16 -> binary32, bit by bit (a subnormal half is a normal float). */
  uint32_t sign = (uint32_t)(raw & 0x8000) << 16, exponent = (raw >> 10) & 0x1f;
  uint32_t mantissa = raw & 0x3ff, w = sign;
  if (exponent == 0x1f) {
    w |= 0x7f800000u | mantissa << 13;
  } else if (exponent) {
    w |= (exponent + 112) << 23 | mantissa << 13;
  } else if (mantissa) {
    uint32_t shifts = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shifts;
    }
    w |= (113 - shifts) << 23 | (mantissa & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}

/* A specialization constant as JSON: its SpecId, name, type, value (a number, or a string for
 * a float that JSON cannot hold) and whether it is the shader's default. */
static void describe_constant(mp_json_t* j, const mp_vulkan_constant_t* c, uint32_t index) {
  mp_json_printf(j, "%s{\"id\": %u, \"name\": ", index ? ", " : "", c->id);
  if (c->name)
    mp_json_string(j, c->name);
  else
    mp_json_printf(j, "null");
  static const char* const types[] = {[kDLInt] = "int", [kDLUInt] = "uint", [kDLFloat] = "float"};
  if (c->type == kDLBool)
    mp_json_printf(j, ", \"type\": \"bool\", \"value\": %s", c->value ? "true" : "false");
  else
    mp_json_printf(j, ", \"type\": \"%s%u\", \"value\": ", types[c->type], (unsigned)c->bits);
  if (c->type == kDLUInt) {
    mp_json_printf(j, "%" PRIu64, c->value);
  } else if (c->type == kDLInt) {
    uint64_t raw = c->value; /* sign-extended to 64 bits */
    if (c->bits < 64 && ((raw >> (c->bits - 1)) & 1)) raw |= ~0ull << c->bits;
    int64_t v;
    memcpy(&v, &raw, sizeof v);
    mp_json_printf(j, "%" PRId64, v);
  } else if (c->type == kDLFloat) {
    double v = float_of(c->value, c->bits);
    if (isfinite(v))
      mp_json_printf(j, "%.17g", v);
    else
      mp_json_printf(j, "\"%s\"", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
  }
  mp_json_printf(j, ", \"default\": %s}",
                 (c->flags & MP_VULKAN_CONSTANT_DEFAULT) ? "true" : "false");
}

/* A shader's requirements as JSON members: its SPIR-V version, the Vulkan version it needs and
 * its capabilities by name (a number where this runtime knows none). */
static void describe_requirements(mp_json_t* j, const mp_vulkan_requirements_t* req) {
  uint32_t need = mp_vulkan_required_version(req);
  mp_json_printf(j, ", \"spirv\": \"%u.%u\", \"vulkan\": \"%u.%u\", \"capabilities\": [",
                 (req->spirv_version >> 16) & 0xff, (req->spirv_version >> 8) & 0xff,
                 VK_API_VERSION_MAJOR(need), VK_API_VERSION_MINOR(need));
  for (uint32_t c = 0; c < req->capability_count; ++c) {
    mp_vulkan_capability_t info;
    if (c) mp_json_printf(j, ", ");
    if (mp_vulkan_capability_info(req->capabilities[c], &info) == MP_OK) {
      mp_json_string(j, info.name);
    } else {
      mp_error_clear();
      mp_json_printf(j, "%u", req->capabilities[c]);
    }
  }
  mp_json_printf(j, "]");
}

/* Each shader's place in the payload (tools write them out as .spv), each kernel's interface,
 * and the kernels' signatures and launch tags. */
static mp_status_t vulkan_describe(mp_module_t* self, char* buffer, uint64_t capacity,
                                   uint64_t* out_length) {
  mp_vulkan_module_t* m = mp_module_impl(self);
  mp_json_t j = {buffer, capacity, 0};
  mp_json_printf(&j, "\"shaders\": [");
  for (uint32_t s = 0; s < m->shader_count; ++s) {
    char code[160];
    mp_code_describe(&m->shaders[s].code, code, sizeof code);
    mp_json_printf(&j, "%s{\"offset\": %" PRIu64 ", \"size\": %" PRIu64 ", %s", s ? ", " : "",
                   (uint64_t)(m->shaders[s].data - m->base.payload), m->shaders[s].size, code);
    if (m->version >= 2) describe_requirements(&j, &m->shaders[s].requirements);
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "], \"interfaces\": [");
  for (uint32_t k = 0; k < m->base.table.count; ++k) {
    const mp_kernel_info_t* info = &m->base.table.kernels[k];
    const mp_vulkan_interface_t* in = &m->interfaces[k];
    mp_json_printf(&j, "%s{\"kernel\": ", k ? ", " : "");
    mp_json_string(&j, info->name);
    mp_json_printf(&j, ", \"shader\": %u, \"entry_point\": ", in->shader);
    mp_json_string(&j, mp_kernel_symbol(info));
    mp_json_printf(&j,
                   ", \"workgroup_size\": [%u, %u, %u], \"push_constant_bytes\": %u, "
                   "\"bindings\": [",
                   in->workgroup_size[0], in->workgroup_size[1], in->workgroup_size[2],
                   in->push_constant_size);
    for (uint32_t a = 0; a < info->arg_count; ++a) {
      const mp_vulkan_slot_t* slot = &in->slots[a];
      if (info->args[a].kind == MP_KERNEL_ARG_BUFFER)
        mp_json_printf(&j, "%s{\"set\": %u, \"binding\": %u}", a ? ", " : "", slot->set,
                       slot->binding);
      else
        mp_json_printf(&j, "%s{\"push_offset\": %u}", a ? ", " : "", slot->set);
    }
    mp_json_printf(&j, "]");
    if (m->version >= 2) {
      mp_json_printf(&j, ", \"specialization\": [");
      for (uint32_t c = 0; c < in->constant_count; ++c)
        describe_constant(&j, &in->constants[c], c);
      mp_json_printf(&j, "]");
    }
    mp_json_printf(&j, "}");
  }
  mp_json_printf(&j, "], ");
  mp_kernel_table_describe(&j, &m->base.table);
  *out_length = j.length;
  return MP_OK;
}

static const mp_module_vtable_t vulkan_vtable = {
    .get_function = mp_kernel_table_get_function,
    .destroy = vulkan_destroy,
    .function_count = mp_kernel_table_function_count,
    .function_name = mp_kernel_table_function_name,
    .describe = vulkan_describe,
};

static const mp_device_loader_t vulkan_loader = {
    .kind = &mp_vulkan_kind,
    .vtable = &vulkan_vtable,
    .call = call_kernel,
    .state_size = sizeof(mp_vulkan_module_t),
    .parse = mp_vulkan_payload_parse,
};

static mp_status_t load_vulkan(void* user_data, const mp_loader_args_t* args,
                               mp_module_t** out_module) {
  (void)user_data;
  return mp_device_module_load(&vulkan_loader, args, out_module);
}

const mp_kind_t mp_vulkan_kind = {
    .type_key = "vulkan",
    .load = load_vulkan,
    .device = &mp_vulkan_device,
    .launch_tags = launch_tags,
    .launch_tag_count = MP_VULKAN_SLOT_COUNT,
    .preflight = &mp_vulkan_preflight,
    .code_frames = true,
};
