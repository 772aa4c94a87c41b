/* modpack preflight for the vulkan kind: SPIR-V runs on every Vulkan device (its driver makes
 * the pipelines at the first launch), so the answer reads the payload's header alone. */
#include <stdio.h>

#include "core/bytes.h"
#include "core/error.h"
#include "kinds/common/preflight.h"
#include "modpack/kinds/vulkan.h"

static mp_status_t parse_device(const char* arch, char* canonical, size_t capacity) {
  if (arch)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "a Vulkan device is named 'vulkan' (SPIR-V runs on any), or found with "
                     "'host'; 'vulkan:%s' names nothing more",
                     arch);
  if (capacity) canonical[0] = '\0';
  return MP_OK;
}

static mp_status_t host_device(int32_t id, char* canonical, size_t capacity) {
  (void)id;
  if (capacity) canonical[0] = '\0';
  return MP_OK;
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  (void)kind;
  (void)arch;
  const uint8_t* header;
  MP_RETURN_IF_ERROR(payload->read(payload->context, 0, sizeof(mp_vulkan_header_v1_t), &header));
  uint32_t version = mp_load_le32(header), shaders = mp_load_le32(header + 8);
  if (version == 0 || version > MP_VULKAN_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "vulkan payload version %u is not supported (this runtime reads 1 to %d); "
                     "upgrade modpack",
                     version, MP_VULKAN_PAYLOAD_VERSION);
  *out_fits = true;
  char why[160];
  snprintf(why, sizeof why, "SPIR-V (%u shader%s), made into pipelines by the device's Vulkan "
           "driver at the first launch", shaders, shaders == 1 ? "" : "s");
  mp_json_printf(out, "\"fits\": true, \"variant\": \"spirv\", \"kind\": \"spirv\", \"reason\": ");
  mp_json_string(out, why);
  return MP_OK;
}

const mp_preflight_api_t mp_vulkan_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
};
