/* modpack preflight for the opencl kind. Every OpenCL device builds the module's source at its
 * first launch, unless the module carries a prebuilt binary under that device's key
 * (mp_opencl_binary_for, the loader's test); the answer reads the header, the part after the
 * source (build options, records) and each binary's key, never the source or a binary; the
 * kernel cache's answer for a device of this machine reads the source too, to hash it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "kinds/common/preflight.h"
#include "files/kernel_cache.h"
#include "kinds/opencl/opencl_module.h"
#include "modpack/format.h"

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

/* The module's header, build part and binaries' keys (never the source or a binary's bytes)
 * into |h|; |*out_chosen| receives the key of the binary a device of key |arch| would take
 * ("" for none), |keys| every key (cut short at its end). */
static mp_status_t read_module(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                               const char* arch, head_t* h, uint64_t* out_source_size,
                               char* chosen, size_t chosen_capacity, char* keys,
                               size_t keys_capacity) {
  chosen[0] = keys[0] = '\0';
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
  *out_source_size = source_size;
  h->kind = kind;
  h->version = version;
  mp_status_t status = mp_preflight_parse_head(payload, at, parse, reset, h);
  uint32_t count = h->binary_count;
  at += h->end;
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
    if (!chosen[0] && arch[0] && mp_opencl_binary_for(key, arch))
      snprintf(chosen, chosen_capacity, "%s", key);
    if (used < keys_capacity) { /* the list is cut short at its buffer's end */
      int n = snprintf(keys + used, keys_capacity - used, "%s%s", used ? "; " : "", key);
      if (n > 0) used += (size_t)n;
    }
  }
  return status;
}

static mp_status_t answer(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                          const char* arch, mp_json_t* out, bool* out_fits) {
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  char keys[1024];
  char chosen[MP_OPENCL_MAX_BINARY_KEY + 1];
  uint64_t source_size;
  mp_status_t status = read_module(kind, payload, arch, h, &source_size, chosen, sizeof chosen,
                                   keys, sizeof keys);
  if (status == MP_OK) {
    *out_fits = true;
    mp_json_printf(out, "\"fits\": true, \"variant\": \"%s\", \"kind\": \"%s\", \"reason\": ",
                   chosen[0] ? "binary" : "source", chosen[0] ? "binary" : "opencl-c");
    char why[1400];
    if (chosen[0])
      snprintf(why, sizeof why, "the module carries a program binary built for this device "
               "(%s); the source is built instead if the driver refuses it", chosen);
    else
      snprintf(why, sizeof why, "OpenCL C source, built for the device by its driver at the "
               "first launch%s%s%s", h->binary_count ? " (prebuilt binaries, for other devices: "
               : "", keys, h->binary_count ? ")" : "");
    mp_json_string(out, why);
  }
  reset(h);
  free(h);
  return status;
}

/* The kernel cache for this machine's device |id|: "unused" when the module carries the
 * device's binary, else whether the entry of the source's build is there (the source is read
 * and, in a code frame, decoded, to hash it as the build does). */
static mp_status_t kernel_cache(const mp_kind_t* kind, const mp_payload_reader_t* payload,
                                int32_t id, mp_json_t* out) {
  const mp_opencl_t* cl = mp_opencl();
  if (!cl) return mp_error_code();
  head_t* h = calloc(1, sizeof *h);
  if (!h) return mp_out_of_memory("a preflight");
  char keys[8];
  char chosen[MP_OPENCL_MAX_BINARY_KEY + 1];
  uint64_t source_size;
  mp_status_t status = read_module(kind, payload, cl->device_keys[id], h, &source_size, chosen,
                                   sizeof chosen, keys, sizeof keys);
  const uint8_t* stored;
  if (status == MP_OK && chosen[0]) {
    mp_preflight_cache_answer(out, "unused", "the module carries this device's program binary: "
                                             "the cache is asked only if the driver refuses it");
  } else if (status == MP_OK &&
             (status = payload->read(payload->context, sizeof(mp_opencl_header_v1_t),
                                     source_size, &stored)) == MP_OK) {
    mp_code_t code;
    memset(&code, 0, sizeof code);
    const uint8_t* raw = NULL;
    status = mp_code_open(&code, stored, source_size,
                          (payload->entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) != 0);
    if (status == MP_OK) status = mp_code_get(&code, NULL, NULL, &raw);
    if (status == MP_OK) {
      char driver[128], detail[1024];
      const char* state;
      mp_kernel_cache_input_t input;
      mp_opencl_cache_input(cl, id, raw, code.raw_size, h->m.build_options, driver,
                            sizeof driver, &input);
      mp_kernel_cache_probe(&input, &state, detail, sizeof detail);
      mp_preflight_cache_answer(out, state, detail);
    }
    mp_code_free(&code);
  }
  reset(h);
  free(h);
  return status;
}

const mp_preflight_api_t mp_opencl_preflight = {
    .parse_device = parse_device,
    .host_device = host_device,
    .answer = answer,
    .kernel_cache = kernel_cache,
};
