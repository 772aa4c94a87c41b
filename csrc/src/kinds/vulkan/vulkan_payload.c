/* Parsing and validating a vulkan payload (layout: modpack/kinds/vulkan.h): the shaders' sizes,
 * the kernel records and interfaces, and each shader's SPIR-V words, which stay in place. The
 * SPIR-V itself is checked only for its magic number and size; the driver reads the rest when a
 * pipeline is made. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "kinds/vulkan/vulkan_module.h"

/* The bits a constant of DLPack type |type| may have: a mask of 8, 16, 32, 64 as 1, 2, 4, 8. */
static unsigned constant_sizes(uint8_t type) {
  switch (type) {
    case kDLInt:
    case kDLUInt:
      return 1 | 2 | 4 | 8;
    case kDLFloat:
      return 2 | 4 | 8;
    case kDLBool:
      return 4;
    default:
      return 0;
  }
}

/* Kernel |info|'s specialization constants (payload version 2) at |r| into |in|. */
static mp_status_t parse_constants(mp_reader_t* r, const mp_kernel_info_t* info,
                                   mp_vulkan_interface_t* in) {
  uint32_t count;
  if (!mp_read_u32(r, &count)) return mp_reader_error(r, "specialization constant count");
  if (count > MP_VULKAN_MAX_CONSTANTS)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: kernel %s has %u specialization constants (at most %d)",
                     info->name, count, MP_VULKAN_MAX_CONSTANTS);
  if (count > (r->size - r->pos) / MP_VULKAN_CONSTANT_SIZE)
    return mp_reader_error(r, "specialization constant count");
  in->constants = calloc(count ? count : 1, sizeof *in->constants);
  if (!in->constants) return mp_out_of_memory("specialization constants");
  char where[MP_KERNEL_MAX_NAME + 64];
  snprintf(where, sizeof where, "kernel %s: ", info->name);
  for (uint32_t c = 0; c < count; ++c) {
    mp_vulkan_constant_t* k = &in->constants[c];
    uint8_t reserved;
    if (!mp_read_u32(r, &k->id) || !mp_read_u8(r, &k->type) || !mp_read_u8(r, &k->bits) ||
        !mp_read_u8(r, &k->flags) || !mp_read_u8(r, &reserved) || !mp_read_u64(r, &k->value))
      return mp_reader_error(r, "specialization constant");
    MP_RETURN_IF_ERROR(mp_read_optional_string(r, MP_VULKAN_MAX_CONSTANT_NAME, where,
                                               "specialization constant name", &k->name));
    in->constant_count = c + 1;
    unsigned bytes = k->bits / 8u;
    bool sized = k->bits % 8 == 0 && bytes >= 1 && bytes <= 8 && !(bytes & (bytes - 1)) &&
                 (constant_sizes(k->type) & bytes);
    if (!sized)
      return mp_errorf(MP_ERR_FORMAT,
                       "vulkan payload: kernel %s specialization constant %u (SpecId %u) has "
                       "type code %u of %u bits (an int or uint of 8, 16, 32 or 64 bits, a "
                       "float of 16, 32 or 64, a 32-bit bool)",
                       info->name, c, k->id, (unsigned)k->type, (unsigned)k->bits);
    uint64_t limit = k->type == kDLBool ? 1 : (bytes == 8 ? UINT64_MAX : (1ull << k->bits) - 1);
    if (k->value > limit || reserved != 0 || (k->flags & ~(unsigned)MP_VULKAN_CONSTANT_DEFAULT))
      return mp_errorf(MP_ERR_FORMAT,
                       "vulkan payload: kernel %s specialization constant %u (SpecId %u): "
                       "value 0x%" PRIx64 " has bits above its %u, or a reserved byte or flag "
                       "is set",
                       info->name, c, k->id, k->value, (unsigned)k->bits);
    for (uint32_t d = 0; d < c; ++d)
      if (in->constants[d].id == k->id)
        return mp_errorf(MP_ERR_FORMAT,
                         "vulkan payload: kernel %s gives specialization constant SpecId %u "
                         "twice",
                         info->name, k->id);
  }
  return MP_OK;
}

/* Kernel |k|'s interface at |r|, checked against its record. */
static mp_status_t parse_interface(mp_reader_t* r, const mp_vulkan_module_t* m, uint32_t k,
                                   mp_vulkan_interface_t* in) {
  const mp_kernel_info_t* info = &m->base.table.kernels[k];
  if (!mp_read_u32(r, &in->shader) || !mp_read_u32(r, &in->workgroup_size[0]) ||
      !mp_read_u32(r, &in->workgroup_size[1]) || !mp_read_u32(r, &in->workgroup_size[2]) ||
      !mp_read_u32(r, &in->push_constant_size))
    return mp_reader_error(r, "kernel interface");
  if (in->shader >= m->shader_count)
    return mp_errorf(MP_ERR_FORMAT, "vulkan payload: kernel %s names shader %u of %u", info->name,
                     in->shader, m->shader_count);
  if (in->push_constant_size > MP_VULKAN_MAX_PUSH_CONSTANTS || in->push_constant_size % 4)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: kernel %s has %u bytes of push constants (a multiple of 4, "
                     "at most %d)",
                     info->name, in->push_constant_size, MP_VULKAN_MAX_PUSH_CONSTANTS);
  if (m->version >= 2 &&
      (!in->workgroup_size[0] || !in->workgroup_size[1] || !in->workgroup_size[2]))
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: kernel %s has a workgroup size of %ux%ux%u (each at "
                     "least 1)",
                     info->name, in->workgroup_size[0], in->workgroup_size[1],
                     in->workgroup_size[2]);
  in->slots = calloc(info->arg_count ? info->arg_count : 1, sizeof *in->slots);
  if (!in->slots) return mp_out_of_memory("kernel interfaces");
  bool scalars = false;
  for (uint32_t a = 0; a < info->arg_count; ++a) {
    mp_vulkan_slot_t* slot = &in->slots[a];
    if (!mp_read_u32(r, &slot->set) || !mp_read_u32(r, &slot->binding))
      return mp_reader_error(r, "argument slot");
    const mp_kernel_arg_t* arg = &info->args[a];
    if (arg->kind == MP_KERNEL_ARG_BUFFER) {
      if (scalars)
        return mp_errorf(MP_ERR_FORMAT,
                         "vulkan payload: kernel %s argument %u is a buffer after a scalar "
                         "(buffers come first)",
                         info->name, a);
      if (slot->set >= MP_VULKAN_MAX_SETS || slot->binding >= MP_VULKAN_MAX_BINDING)
        return mp_errorf(MP_ERR_FORMAT,
                         "vulkan payload: kernel %s argument %u is at set %u binding %u (sets "
                         "below %d, bindings below %d)",
                         info->name, a, slot->set, slot->binding, MP_VULKAN_MAX_SETS,
                         MP_VULKAN_MAX_BINDING);
      /* Arguments sharing a set and binding (as version 1 writers made blocks declared on one
       * binding) are one descriptor: a call passes one array for all of them. */
      if (slot->set + 1 > in->set_count) in->set_count = slot->set + 1;
    } else if (arg->kind == MP_KERNEL_ARG_SCALAR) {
      scalars = true;
      uint32_t size = arg->dtype.bits / 8u;
      bool sized = arg->dtype.lanes == 1 && arg->dtype.bits % 8 == 0 && size > 0;
      if (!sized || slot->binding != 0 || slot->set > in->push_constant_size ||
          size > in->push_constant_size - slot->set)
        return mp_errorf(MP_ERR_FORMAT,
                         "vulkan payload: kernel %s scalar argument %u (%u bits) at push-constant "
                         "offset %u does not fit its %u-byte block",
                         info->name, a, (unsigned)arg->dtype.bits, slot->set,
                         in->push_constant_size);
    } else {
      return mp_errorf(MP_ERR_FORMAT,
                       "vulkan payload: kernel %s argument %u is %s, which Vulkan kernels do not "
                       "take (buffers and scalars only)",
                       info->name, a,
                       arg->kind == MP_KERNEL_ARG_LOCAL ? "local memory" : "a hidden NULL pointer");
    }
  }
  return m->version >= 2 ? parse_constants(r, info, in) : MP_OK;
}

static mp_status_t check_spirv_size(uint32_t s, uint64_t size) {
  if (size < 20 || size % 4)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u has %" PRIu64
                     " bytes (SPIR-V is whole 32-bit words, at least its 20-byte header)",
                     s, size);
  return MP_OK;
}

/* Shader |s|'s words: whole words, its header, the SPIR-V magic number, and (payload version 2)
 * the SPIR-V version its requirements record. */
static mp_status_t check_spirv(const mp_vulkan_module_t* m, uint32_t s, const uint8_t* w,
                               uint64_t size) {
  MP_RETURN_IF_ERROR(check_spirv_size(s, size));
  uint32_t magic = mp_load_le32(w), version = mp_load_le32(w + 4);
  if (magic != MP_VULKAN_SPIRV_MAGIC)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u does not start with the SPIR-V magic number "
                     "0x07230203 (found 0x%08x)",
                     s, magic);
  uint32_t recorded = m->shaders[s].requirements.spirv_version;
  if (m->version >= 2 && version != recorded)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u is SPIR-V version 0x%08x, and its requirements "
                     "say 0x%08x",
                     s, version, recorded);
  return MP_OK;
}

typedef struct {
  const mp_vulkan_module_t* m;
  uint32_t shader;
} decoded_t;

static mp_status_t check_decoded(void* context, const uint8_t* raw, uint64_t size) {
  const decoded_t* d = context;
  return check_spirv(d->m, d->shader, raw, size);
}

mp_status_t mp_vulkan_shader_words(mp_vulkan_module_t* m, uint32_t s, const uint8_t** out_words) {
  decoded_t context = {m, s};
  return mp_code_get(&m->shaders[s].code, check_decoded, &context, out_words);
}

/* Shader |s|'s requirements (payload version 2) at |r|. */
static mp_status_t parse_requirements(mp_reader_t* r, uint32_t s, mp_vulkan_requirements_t* req) {
  uint32_t count;
  if (!mp_read_u32(r, &req->spirv_version) || !mp_read_u32(r, &req->vulkan_version) ||
      !mp_read_u32(r, &count))
    return mp_reader_error(r, "shader requirements");
  if ((req->spirv_version & 0xffff00ffu) != 0x00010000u)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u's SPIR-V version 0x%08x is not 1.x "
                     "(0x00010m00)",
                     s, req->spirv_version);
  if (req->vulkan_version >> 29 || VK_API_VERSION_MAJOR(req->vulkan_version) != 1 ||
      req->vulkan_version & 0xfffu)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u needs Vulkan version 0x%08x, which is no "
                     "Vulkan 1.x API version",
                     s, req->vulkan_version);
  if (count > MP_VULKAN_MAX_CAPABILITIES)
    return mp_errorf(MP_ERR_FORMAT,
                     "vulkan payload: shader %u declares %u capabilities (at most %d)", s, count,
                     MP_VULKAN_MAX_CAPABILITIES);
  if (count > (r->size - r->pos) / 4) return mp_reader_error(r, "shader capabilities");
  req->capabilities = calloc(count ? count : 1, sizeof *req->capabilities);
  if (!req->capabilities) return mp_out_of_memory("shader capabilities");
  req->capability_count = count;
  for (uint32_t c = 0; c < count; ++c)
    if (!mp_read_u32(r, &req->capabilities[c])) return mp_reader_error(r, "shader capabilities");
  return MP_OK;
}

mp_status_t mp_vulkan_payload_parse_head(mp_vulkan_module_t* m, mp_reader_t* r) {
  uint32_t version, reserved, count;
  if (!mp_read_u32(r, &version) || !mp_read_u32(r, &reserved))
    return mp_reader_error(r, "header");
  if (version == 0 || version > MP_VULKAN_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "vulkan payload version %u is not supported (this runtime reads 1 to %d); "
                     "upgrade modpack",
                     version, MP_VULKAN_PAYLOAD_VERSION);
  if (reserved != 0)
    return mp_errorf(MP_ERR_FORMAT, "vulkan payload: reserved header field is not 0");
  m->version = version;
  if (!mp_read_u32(r, &count) || count == 0 || count > r->size / 8)
    return mp_reader_error(r, "shader count");
  if (count > MP_VULKAN_MAX_SHADERS)
    return mp_errorf(MP_ERR_FORMAT, "vulkan payload: %u shaders (at most %d)", count,
                     MP_VULKAN_MAX_SHADERS);
  MP_RETURN_IF_ERROR(mp_kernel_read_module_name(r, &m->base.name));
  m->shaders = calloc(count, sizeof *m->shaders);
  if (!m->shaders) return mp_out_of_memory("the Vulkan shaders");
  m->shader_count = count;
  for (uint32_t s = 0; s < count; ++s) {
    uint64_t size;
    if (!mp_read_u64(r, &size)) return mp_reader_error(r, "shader size");
    /* A code frame's size is checked by the frame, its words once decoded. */
    if (!m->base.code_frames) MP_RETURN_IF_ERROR(check_spirv_size(s, size));
    m->shaders[s].size = size;
  }
  for (uint32_t s = 0; m->version >= 2 && s < count; ++s)
    MP_RETURN_IF_ERROR(parse_requirements(r, s, &m->shaders[s].requirements));
  return MP_OK;
}

mp_status_t mp_vulkan_payload_parse(void* state, const mp_kind_t* kind,
                                    mp_const_byte_span_t payload) {
  mp_vulkan_module_t* m = state;
  mp_reader_t r = {payload.data, payload.size, 0, "vulkan payload"};
  MP_RETURN_IF_ERROR(mp_vulkan_payload_parse_head(m, &r));
  uint32_t count = m->shader_count;
  MP_RETURN_IF_ERROR(mp_kernel_table_read(&r, kind, 2, true, &m->base.table));
  m->interfaces = calloc(m->base.table.count ? m->base.table.count : 1, sizeof *m->interfaces);
  if (!m->interfaces) return mp_out_of_memory("the Vulkan kernel interfaces");
  for (uint32_t k = 0; k < m->base.table.count; ++k)
    MP_RETURN_IF_ERROR(parse_interface(&r, m, k, &m->interfaces[k]));
  /* The shaders' words, each 64-byte aligned within the payload, read in place. */
  for (uint32_t s = 0; s < count; ++s) {
    uint64_t padding = (MP_VULKAN_SHADER_ALIGNMENT - r.pos % MP_VULKAN_SHADER_ALIGNMENT) %
                       MP_VULKAN_SHADER_ALIGNMENT;
    const uint8_t* pad;
    if (!mp_read_bytes(&r, padding, &pad)) return mp_reader_error(&r, "shader padding");
    for (uint64_t i = 0; i < padding; ++i)
      if (pad[i] != 0)
        return mp_errorf(MP_ERR_FORMAT, "vulkan payload: nonzero padding before shader %u", s);
    mp_vulkan_shader_t* shader = &m->shaders[s];
    if (!mp_read_bytes(&r, shader->size, &shader->data))
      return mp_reader_error(&r, "shader words");
    MP_RETURN_IF_ERROR_PREFIX(
        mp_code_open(&shader->code, shader->data, shader->size, m->base.code_frames),
        "vulkan payload: shader %u", s);
    const uint8_t* w = mp_code_in_place(&shader->code);
    if (w) MP_RETURN_IF_ERROR(check_spirv(m, s, w, shader->code.raw_size));
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "vulkan payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

void mp_vulkan_specialization_of(const mp_vulkan_interface_t* in,
                                 mp_vulkan_specialization_t* out) {
  size_t size = 0;
  for (uint32_t c = 0; c < in->constant_count; ++c) {
    const mp_vulkan_constant_t* constant = &in->constants[c];
    size_t bytes = constant->bits / 8u;
    for (size_t b = 0; b < bytes; ++b) out->data[size + b] = (uint8_t)(constant->value >> (8 * b));
    out->entries[c] = (VkSpecializationMapEntry){constant->id, (uint32_t)size, bytes};
    size += bytes;
  }
  out->info = (VkSpecializationInfo){in->constant_count, out->entries, size, out->data};
}

void mp_vulkan_payload_free(mp_vulkan_module_t* m) {
  for (uint32_t k = 0; m->interfaces && k < m->base.table.count; ++k) {
    mp_vulkan_interface_t* in = &m->interfaces[k];
    for (uint32_t c = 0; c < in->constant_count; ++c) free(in->constants[c].name);
    free(in->constants);
    free(in->slots);
  }
  free(m->interfaces);
  for (uint32_t s = 0; m->shaders && s < m->shader_count; ++s) {
    mp_code_free(&m->shaders[s].code);
    free(m->shaders[s].requirements.capabilities);
  }
  free(m->shaders);
  m->interfaces = NULL;
  m->shaders = NULL;
  m->shader_count = 0;
}
