/* modpack preflight for the vulkan kind. SPIR-V is made into pipelines by the device's driver at
 * a kernel's first launch; what a shader needs of the device (payload version 2: its SPIR-V
 * version, Vulkan version and capabilities) is read from the payload's head, the loader's
 * parser (mp_vulkan_payload_parse_head), and checked against a device of this machine by the
 * loader's own test (mp_vulkan_supports). "vulkan" names any device: the answer says what one
 * needs; "vulkan:N", and "host", this machine's device N, and whether the kernel cache holds
 * its pipelines' caches (the key a first launch stores under, vulkan_pipeline_cache.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kinds/common/preflight.h"
#include "kinds/vulkan/vulkan_module.h"
#include "kinds/vulkan/vulkan_pipeline_cache.h"

static mp_status_t parse_device(const char* arch, char* canonical, size_t capacity) {
  char* end = NULL;
  unsigned long id = arch ? strtoul(arch, &end, 10) : 0;
  if (arch && (!*arch || *end || arch[0] == '-' || arch[0] == '+' || id >= MP_VULKAN_MAX_DEVICES))
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a Vulkan device is named 'vulkan' (any: what a device needs to run the "
                     "library), 'vulkan:N' (this machine's device N, from 0 to %d), or found "
                     "with 'host'; 'vulkan:%s' names nothing",
                     MP_VULKAN_MAX_DEVICES - 1, arch);
  snprintf(canonical, capacity, "%s", arch ? arch : "");
  return MP_OK;
}

static mp_status_t host_device(int32_t id, char* canonical, size_t capacity) {
  snprintf(canonical, capacity, "%d", (int)id);
  return MP_OK;
}

static mp_status_t parse(void* state, mp_const_byte_span_t bytes) {
  mp_vulkan_module_t* m = state;
  /* Shader sizes go unchecked, as a code frame's are (the entry's flag is not read here):
   * preflight never reads the code. */
  m->base.code_frames = true;
  mp_reader_t r = {bytes.data, bytes.size, 0, "vulkan payload"};
  return mp_vulkan_payload_parse_head(m, &r);
}

static void reset(void* state) {
  mp_vulkan_module_t* m = state;
  mp_vulkan_payload_free(m);
  free(m->base.name);
  memset(m, 0, sizeof *m);
}

/* What the shaders of |m| need, together: "SPIR-V 1.5, for a Vulkan 1.2 device with ...". */
static void needs(const mp_vulkan_module_t* m, char* out, size_t capacity) {
  uint32_t spirv = 0, vulkan = VK_API_VERSION_1_0, count = 0;
  uint32_t capabilities[MP_VULKAN_MAX_CAPABILITIES];
  for (uint32_t s = 0; s < m->shader_count; ++s) {
    const mp_vulkan_requirements_t* req = &m->shaders[s].requirements;
    uint32_t v = mp_vulkan_required_version(req);
    if (v > vulkan) vulkan = v;
    if (req->spirv_version > spirv) spirv = req->spirv_version;
    for (uint32_t c = 0; c < req->capability_count; ++c) {
      bool seen = false;
      for (uint32_t d = 0; d < count && !seen; ++d) seen = capabilities[d] == req->capabilities[c];
      if (!seen && count < MP_VULKAN_MAX_CAPABILITIES) capabilities[count++] = req->capabilities[c];
    }
  }
  mp_vulkan_requirements_t all = {spirv, vulkan, count, capabilities};
  mp_vulkan_requirements_describe(&all, out, capacity);
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  (void)kind;
  mp_vulkan_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a preflight");
  mp_status_t status = mp_preflight_parse_head(payload, 0, parse, reset, m);
  char why[1024], need[512];
  bool fits = true;
  if (status == MP_OK && m->version >= 2) needs(m, need, sizeof need);
  if (status == MP_OK && arch && arch[0]) {
    /* This machine's device |arch|, as the loader checks it at a kernel's first launch. */
    int32_t id = (int32_t)strtol(arch, NULL, 10);
    const mp_vulkan_t* vk = mp_vulkan();
    if (!vk) {
      status = mp_error_code();
    } else if ((uint32_t)id >= vk->device_count) {
      status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "Vulkan device %d does not exist (%u here)",
                         (int)id, vk->device_count);
    } else {
      char lacks[512] = "";
      for (uint32_t s = 0; s < m->shader_count && fits && m->version >= 2; ++s)
        fits = mp_vulkan_supports(&vk->support[id], &m->shaders[s].requirements, lacks,
                                  sizeof lacks);
      if (fits)
        snprintf(why, sizeof why, "SPIR-V (%u shader%s)%s%s, which %s offers: made into "
                 "pipelines by its driver at the first launch", m->shader_count,
                 m->shader_count == 1 ? "" : "s", m->version >= 2 ? ": " : "",
                 m->version >= 2 ? need : "", vk->names[id]);
      else
        snprintf(why, sizeof why, "%s cannot run a shader of this module: %s", vk->names[id],
                 lacks);
    }
  } else if (status == MP_OK) {
    snprintf(why, sizeof why,
             "SPIR-V (%u shader%s), made into pipelines by the device's Vulkan driver at the "
             "first launch%s%s%s",
             m->shader_count, m->shader_count == 1 ? "" : "s",
             m->version >= 2 ? "; it is " : "", m->version >= 2 ? need : "",
             m->version >= 2 ? " (a device without that is refused at the first launch)" : "");
  }
  if (status == MP_OK) {
    *out_fits = fits;
    mp_json_printf(out, "\"fits\": %s, \"variant\": \"spirv\", \"kind\": \"spirv\", \"reason\": ",
                   fits ? "true" : "false");
    mp_json_string(out, why);
  }
  reset(m);
  free(m);
  return status;
}

/* Kernel |k|'s entry on device |id|, probed: its state ("hit", "miss", "off") and detail. */
static mp_status_t probe_kernel(const mp_vulkan_t* vk, mp_vulkan_module_t* m, uint32_t k,
                                int32_t id, const char** out_state, char* detail,
                                size_t capacity) {
  const mp_vulkan_interface_t* in = &m->interfaces[k];
  const uint8_t* words;
  MP_RETURN_IF_ERROR(mp_vulkan_shader_words(m, in->shader, &words));
  mp_vulkan_specialization_t specialization;
  mp_vulkan_specialization_of(in, &specialization);
  mp_vulkan_pipeline_key_t key = {words, m->shaders[in->shader].code.raw_size,
                                  mp_kernel_symbol(&m->base.table.kernels[k]),
                                  in->constant_count ? &specialization.info : NULL};
  char* options;
  char device[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE + 64], driver[16];
  mp_kernel_cache_input_t input;
  mp_vulkan_cache_input(vk, id, &key, &options, device, sizeof device, driver, sizeof driver,
                        &input);
  mp_kernel_cache_probe(&input, out_state, detail, capacity);
  free(options);
  return MP_OK;
}

/* The kernel cache for this machine's device |id|: whether the pipeline cache of each kernel
 * is kept ("hit" only when all are; else the first kernel whose is not). The whole payload is
 * parsed by the loader's parser, and compressed shaders decoded, to hash them as a launch
 * does. */
static mp_status_t kernel_cache(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                                int32_t id, mp_json_t* out) {
  const mp_vulkan_t* vk = mp_vulkan();
  if (!vk) return mp_error_code();
  if ((uint32_t)id >= vk->device_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "Vulkan device %d does not exist (%u here)",
                     (int)id, vk->device_count);
  const uint8_t* bytes;
  MP_RETURN_IF_ERROR(payload->read(payload->context, 0, payload->size, &bytes));
  mp_vulkan_module_t* m = calloc(1, sizeof *m);
  if (!m) return mp_out_of_memory("a preflight");
  pthread_mutex_init(&m->base.lock, NULL);
  m->base.payload = bytes;
  m->base.code_frames = (payload->entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) != 0;
  mp_status_t status =
      mp_vulkan_payload_parse(m, kind, (mp_const_byte_span_t){bytes, payload->size});
  mp_preflight_cache_tally_t tally;
  mp_preflight_cache_tally_init(&tally, "the module has no kernel: nothing to compile");
  uint32_t count = m->base.table.count;
  for (uint32_t k = 0; status == MP_OK && k < count; ++k) {
    const char* one;
    char found[900];
    status = probe_kernel(vk, m, k, id, &one, found, sizeof found);
    if (status == MP_OK)
      mp_preflight_cache_tally_add(&tally, m->base.table.kernels[k].name, one, found);
  }
  if (status == MP_OK && count > 1 && tally.hits == count)
    snprintf(tally.detail, sizeof tally.detail, "the pipeline caches of all %u kernels", count);
  if (status == MP_OK) mp_preflight_cache_answer(out, tally.state, tally.detail);
  mp_vulkan_payload_free(m);
  mp_device_module_free(&m->base);
  free(m);
  return status;
}

const mp_preflight_api_t mp_vulkan_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
    .kernel_cache = kernel_cache,
};
