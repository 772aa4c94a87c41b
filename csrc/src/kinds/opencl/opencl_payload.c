/* Parsing and validating an opencl payload (layout: modpack/kinds/opencl.h): the source, the
 * build options, the module's name, the kernel records and the prebuilt binaries, which stay in
 * place. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kinds/opencl/opencl_module.h"

bool mp_opencl_binary_for(const char* key, const char* device_key) {
  return strcmp(key, device_key) == 0;
}

mp_status_t mp_opencl_payload_parse_build(mp_opencl_module_t* m, const mp_kind_t* kind,
                                          uint32_t version, mp_reader_t* reader) {
  mp_reader_t r = *reader;
  uint32_t options_size = 0;
  const uint8_t* options = NULL;
  if (version >= 2 &&
      (!mp_read_u32(&r, &options_size) || !mp_read_bytes(&r, options_size, &options)))
    return mp_reader_error(&r, "build options");
  if (options_size > MP_OPENCL_MAX_BUILD_OPTIONS || (options && memchr(options, 0, options_size)))
    return mp_errorf(MP_ERR_FORMAT,
                     "opencl payload: build options of %u bytes (at most %d, no NUL byte)",
                     options_size, MP_OPENCL_MAX_BUILD_OPTIONS);
  m->build_options = malloc((size_t)options_size + 1);
  if (!m->build_options) return mp_out_of_memory("the OpenCL build options");
  if (options_size) memcpy(m->build_options, options, options_size);
  m->build_options[options_size] = '\0';
  if (version >= 2) MP_RETURN_IF_ERROR(mp_kernel_read_module_name(&r, &m->base.name));
  MP_RETURN_IF_ERROR(mp_kernel_table_read(&r, kind, version, false, &m->base.table));
  *reader = r;
  return MP_OK;
}

mp_status_t mp_opencl_payload_parse(void* state, const mp_kind_t* kind,
                                    mp_const_byte_span_t payload) {
  mp_opencl_module_t* m = state;
  mp_reader_t r = {payload.data, payload.size, 0, "opencl payload"};
  uint32_t version, reserved, count;
  uint64_t source_size;
  const uint8_t* source;
  if (!mp_read_u32(&r, &version) || !mp_read_u32(&r, &reserved))
    return mp_reader_error(&r, "header");
  if (version == 0 || version > MP_OPENCL_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "opencl payload version %u is not supported (this runtime "
                     "reads 1 to %d); upgrade modpack",
                     version, MP_OPENCL_PAYLOAD_VERSION);
  if (reserved != 0)
    return mp_errorf(MP_ERR_FORMAT, "opencl payload: reserved header field is not 0");
  if (!mp_read_u64(&r, &source_size)) return mp_reader_error(&r, "source");
  m->source_offset = r.pos;
  if (!mp_read_bytes(&r, source_size, &source)) return mp_reader_error(&r, "source");
  MP_RETURN_IF_ERROR_PREFIX(mp_code_open(&m->source_code, source, source_size, m->base.code_frames),
                            "opencl payload: source");
  m->source_size = m->source_code.raw_size;
  const uint8_t* text = mp_code_in_place(&m->source_code);
  if (text) { /* else decoded at the first build */
    m->source = malloc(m->source_size + 1);
    if (!m->source) return mp_out_of_memory("the OpenCL source");
    memcpy(m->source, text, m->source_size);
    m->source[m->source_size] = '\0';
  }
  MP_RETURN_IF_ERROR(mp_opencl_payload_parse_build(m, kind, version, &r));
  if (!mp_read_u32(&r, &count) || count > r.size / 12) return mp_reader_error(&r, "binary count");
  m->binaries = calloc(count ? count : 1, sizeof *m->binaries);
  if (!m->binaries) return mp_out_of_memory("the OpenCL binaries");
  for (uint32_t b = 0; b < count; ++b) {
    uint32_t key_size;
    const uint8_t* key;
    mp_opencl_binary_t* bin = &m->binaries[b];
    if (!mp_read_u32(&r, &key_size) || key_size == 0 || key_size > MP_OPENCL_MAX_BINARY_KEY ||
        !mp_read_bytes(&r, key_size, &key) || !mp_read_u64(&r, &bin->size) ||
        !mp_read_bytes(&r, bin->size, &bin->data))
      return mp_reader_error(&r, "program binary");
    bin->key = malloc(key_size + 1);
    if (!bin->key) return mp_out_of_memory("an OpenCL binary key");
    memcpy(bin->key, key, key_size);
    bin->key[key_size] = '\0';
    m->binary_count = b + 1;
    MP_RETURN_IF_ERROR_PREFIX(mp_code_open(&bin->code, bin->data, bin->size, m->base.code_frames),
                              "opencl payload: binary %u ('%s')", b, bin->key);
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "opencl payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

void mp_opencl_payload_free(mp_opencl_module_t* m) {
  for (uint32_t b = 0; b < m->binary_count; ++b) {
    free(m->binaries[b].key);
    mp_code_free(&m->binaries[b].code);
  }
  mp_code_free(&m->source_code);
  free(m->binaries);
  free(m->source);
  free(m->build_options);
  m->binaries = NULL;
  m->source = m->build_options = NULL;
  m->binary_count = 0;
}
