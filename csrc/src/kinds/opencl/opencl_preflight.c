/* modpack preflight for the opencl kind. Every OpenCL device builds the module's source at its
 * first launch, unless the module carries a prebuilt binary under that device's key
 * (mp_opencl_binary_for, the loader's test); the answer reads the header, the part after the
 * source (build options, records) and each binary's key, never the source or a binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "kinds/common/preflight.h"
#include "kinds/opencl/opencl_module.h"

static mp_status_t parse_device(const char* arch, char* canonical, size_t capacity) {
  if (arch)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "an OpenCL device is named 'opencl' (any OpenCL device: the source is built "
                     "for it), or found with 'host'; 'opencl:%s' names nothing more",
                     arch);
  if (capacity) canonical[0] = '\0';
  return MP_OK;
}

static mp_status_t host_device(int32_t id, char* canonical, size_t capacity) {
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  snprintf(canonical, capacity, "%s", cl->device_keys[id]);
  return MP_OK;
}

typedef struct {
  const mp_kind_t* kind;
  uint32_t version;
  uint64_t end;          /* of the part parsed, from its start */
  uint32_t binary_count; /* read here: the module's binaries array is never made */
  mp_opencl_module_t m;
} head_t;

static mp_status_t parse(void* state, mp_const_byte_span_t bytes) {
  head_t* h = state;
  mp_reader_t r = {bytes.data, bytes.size, 0, "opencl payload"};
  MP_RETURN_IF_ERROR(mp_opencl_payload_parse_build(&h->m, h->kind, h->version, &r));
  uint32_t count;
  if (!mp_read_u32(&r, &count)) return mp_reader_error(&r, "binary count");
  h->binary_count = count;
  h->end = r.pos;
  return MP_OK;
}

static void reset(void* state) {
  head_t* h = state;
  mp_opencl_payload_free(&h->m);
  mp_kernel_table_free(&h->m.base.table);
  free(h->m.base.name);
  memset(&h->m, 0, sizeof h->m);
  h->binary_count = 0;
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  const uint8_t* header;
  MP_RETURN_IF_ERROR(payload->read(payload->context, 0, sizeof(mp_opencl_header_v1_t), &header));
  uint32_t version = mp_load_le32(header);
  uint64_t source_size = mp_load_le64(header + 8);
  if (version == 0 || version > MP_OPENCL_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "opencl payload version %u is not supported (this runtime reads 1 to %d); "
                     "upgrade modpack",
                     version, MP_OPENCL_PAYLOAD_VERSION);
  uint64_t at = sizeof(mp_opencl_header_v1_t) + source_size;
  if (source_size > payload->size || at > payload->size)
    return mp_errorf(MP_ERR_FORMAT, "opencl payload: its source runs past its end");
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  h->kind = kind;
  h->version = version;
  mp_status_t status = mp_preflight_parse_head(payload, at, parse, reset, h);
  uint32_t count = h->binary_count;
  at += h->end;
  const char* chosen = NULL;
  char keys[1024] = "";
  char matched[MP_OPENCL_MAX_BINARY_KEY + 1] = "";
  size_t used = 0;
  /* Each binary's key and size, skipping its bytes. */
  for (uint32_t b = 0; status == MP_OK && b < count; ++b) {
    const uint8_t* bytes;
    status = payload->read(payload->context, at, 4, &bytes);
    if (status != MP_OK) break;
    uint32_t key_size = mp_load_le32(bytes);
    if (key_size == 0 || key_size > MP_OPENCL_MAX_BINARY_KEY) {
      status = mp_errorf(MP_ERR_FORMAT, "opencl payload: binary %u has a key of %u bytes", b,
                         key_size);
      break;
    }
    char key[MP_OPENCL_MAX_BINARY_KEY + 1];
    status = payload->read(payload->context, at + 4, key_size + 8, &bytes);
    if (status != MP_OK) break;
    memcpy(key, bytes, key_size);
    key[key_size] = '\0';
    uint64_t size = mp_load_le64(bytes + key_size);
    at += 4 + key_size + 8;
    if (size > payload->size - at) {
      status = mp_errorf(MP_ERR_FORMAT, "opencl payload: binary %u runs past its end", b);
      break;
    }
    at += size;
    if (!chosen && arch[0] && mp_opencl_binary_for(key, arch)) {
      snprintf(matched, sizeof matched, "%s", key);
      chosen = matched;
    }
    if (used < sizeof keys) { /* the list is cut short at its buffer's end */
      int n = snprintf(keys + used, sizeof keys - used, "%s%s", used ? "; " : "", key);
      if (n > 0) used += (size_t)n;
    }
  }
  if (status == MP_OK) {
    *out_fits = true;
    mp_json_printf(out, "\"fits\": true, \"variant\": \"%s\", \"kind\": \"%s\", \"reason\": ",
                   chosen ? "binary" : "source", chosen ? "binary" : "opencl-c");
    char why[1400];
    if (chosen)
      snprintf(why, sizeof why, "the module carries a program binary built for this device "
               "(%s); the source is built instead if the driver refuses it", chosen);
    else
      snprintf(why, sizeof why, "OpenCL C source, built for the device by its driver at the "
               "first launch%s%s%s", count ? " (prebuilt binaries, for other devices: " : "",
               keys, count ? ")" : "");
    mp_json_string(out, why);
  }
  reset(h);
  free(h);
  return status;
}

const mp_preflight_api_t mp_opencl_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
};
