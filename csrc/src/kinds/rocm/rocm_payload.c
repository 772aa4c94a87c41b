/* Parsing and validating a rocm payload (layout: modpack/kinds/rocm.h): the head (target IDs,
 * kernel records, argument layouts, per-code-object facts) and each code object, which stays in
 * place. modpack preflight reads the head alone (mp_rocm_payload_parse_head). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "kinds/rocm/rocm_module.h"
#include "kinds/rocm/rocm_select.h"

static mp_status_t parse_variant(mp_reader_t* r, uint32_t index, mp_rocm_variant_t* v) {
  uint32_t size;
  const uint8_t* bytes;
  if (!mp_read_u32(r, &size) || size == 0 || size >= MP_ROCM_MAX_TARGET ||
      !mp_read_bytes(r, size, &bytes))
    return mp_reader_error(r, "code object target");
  memcpy(v->target, bytes, size);
  v->target[size] = '\0';
  mp_rocm_target_t parsed;
  char why[512];
  if (strlen(v->target) != size || !mp_rocm_parse_target(v->target, &parsed, why, sizeof why))
    return mp_errorf(MP_ERR_FORMAT, "rocm payload: code object %u: %s", index, why);
  if (!mp_read_u64(r, &v->size) || v->size == 0) return mp_reader_error(r, "code object size");
  return MP_OK;
}

/* Argument |a| of |info| must lie where its layout says, in order, naturally aligned. */
static mp_status_t parse_layout(mp_reader_t* r, const mp_kernel_info_t* info,
                                mp_rocm_layout_t* layout) {
  if (!mp_read_u32(r, &layout->explicit_size)) return mp_reader_error(r, "argument layout");
  uint32_t n = info->arg_count ? info->arg_count : 1;
  layout->offsets = calloc(n, sizeof *layout->offsets);
  layout->sizes = calloc(n, sizeof *layout->sizes);
  if (!layout->offsets || !layout->sizes) return mp_out_of_memory("argument layouts");
  uint64_t end = 0;
  for (uint32_t a = 0; a < info->arg_count; ++a) {
    uint32_t offset, size;
    if (!mp_read_u32(r, &offset) || !mp_read_u32(r, &size))
      return mp_reader_error(r, "argument layout");
    const mp_kernel_arg_t* arg = &info->args[a];
    uint32_t expected = arg->kind == MP_KERNEL_ARG_SCALAR
                            ? (uint32_t)arg->dtype.bits * arg->dtype.lanes / 8
                            : 8;
    if (arg->kind == MP_KERNEL_ARG_LOCAL)
      return mp_errorf(MP_ERR_FORMAT,
                       "rocm payload: kernel %s argument %u is __local memory, which the rocm "
                       "kind does not pass (use dyn_shared_memory)",
                       info->name, a);
    uint32_t align = expected < 8 ? expected : 8;
    if (size != expected || expected == 0 || offset < end || offset % align != 0 ||
        (uint64_t)offset + size > layout->explicit_size)
      return mp_errorf(MP_ERR_FORMAT,
                       "rocm payload: kernel %s argument %u lies at offset %u, %u bytes (a "
                       "%u-byte argument, in order, aligned, within the %u bytes of explicit "
                       "arguments)",
                       info->name, a, offset, size, expected, layout->explicit_size);
    layout->offsets[a] = offset;
    layout->sizes[a] = size;
    end = (uint64_t)offset + size;
  }
  return MP_OK;
}

mp_status_t mp_rocm_payload_parse_head(mp_rocm_module_t* m, const mp_kind_t* kind,
                                       mp_const_byte_span_t payload, uint64_t* out_end) {
  mp_reader_t r = {payload.data, payload.size, 0, "rocm payload"};
  uint32_t version, reserved, count;
  if (!mp_read_u32(&r, &version) || !mp_read_u32(&r, &reserved))
    return mp_reader_error(&r, "header");
  if (version == 0 || version > MP_ROCM_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "rocm payload version %u is not supported (this runtime reads 1 to %d); "
                     "upgrade modpack",
                     version, MP_ROCM_PAYLOAD_VERSION);
  if (reserved != 0) return mp_errorf(MP_ERR_FORMAT, "rocm payload: reserved header field is not 0");
  if (!mp_read_u32(&r, &count) || count == 0) return mp_reader_error(&r, "code object count");
  if (count > MP_ROCM_MAX_VARIANTS)
    return mp_errorf(MP_ERR_FORMAT, "rocm payload: %u code objects (at most %d)", count,
                     MP_ROCM_MAX_VARIANTS);
  MP_RETURN_IF_ERROR(mp_kernel_read_module_name(&r, &m->base.name));
  m->variants = calloc(count, sizeof *m->variants);
  if (!m->variants) return mp_out_of_memory("the ROCm code objects");
  m->variant_count = count;
  for (uint32_t v = 0; v < count; ++v) MP_RETURN_IF_ERROR(parse_variant(&r, v, &m->variants[v]));
  MP_RETURN_IF_ERROR(mp_kernel_table_read(&r, kind, 2, true, &m->base.table));
  uint32_t kernels = m->base.table.count;
  m->layouts = calloc(kernels ? kernels : 1, sizeof *m->layouts);
  if (!m->layouts) return mp_out_of_memory("argument layouts");
  for (uint32_t k = 0; k < kernels; ++k)
    MP_RETURN_IF_ERROR(parse_layout(&r, &m->base.table.kernels[k], &m->layouts[k]));
  for (uint32_t v = 0; v < count; ++v) {
    mp_rocm_variant_t* variant = &m->variants[v];
    variant->facts = calloc(kernels ? kernels : 1, sizeof *variant->facts);
    if (!variant->facts) return mp_out_of_memory("kernel facts");
    for (uint32_t k = 0; k < kernels; ++k) {
      uint32_t f[MP_ROCM_FACTS_SIZE / 4];
      for (uint32_t i = 0; i < MP_ROCM_FACTS_SIZE / 4; ++i)
        if (!mp_read_u32(&r, &f[i])) return mp_reader_error(&r, "kernel facts");
      mp_rocm_facts_t* facts = &variant->facts[k];
      *facts = (mp_rocm_facts_t){f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
      if (f[7] != 0)
        return mp_errorf(MP_ERR_FORMAT, "rocm payload: reserved kernel fact is not 0");
      if (facts->kernarg_segment_size < m->layouts[k].explicit_size)
        return mp_errorf(MP_ERR_FORMAT,
                         "rocm payload: kernel %s has %u bytes of explicit arguments but the %s "
                         "code object's argument segment has %u",
                         m->base.table.kernels[k].name, m->layouts[k].explicit_size,
                         variant->target, facts->kernarg_segment_size);
    }
  }
  *out_end = r.pos;
  return MP_OK;
}

/* The ELF header of code object |v|: 64-bit little-endian, EM_AMDGPU, the HSA OS ABI, and
 * (code object v4 and later) the feature settings its target ID names. */
static mp_status_t check_code_object(uint32_t index, const mp_rocm_variant_t* v,
                                     const uint8_t* e, uint64_t size) {
  if (size < 64 || memcmp(e, "\x7f" "ELF", 4) != 0 || e[4] != 2 || e[5] != 1)
    return mp_errorf(MP_ERR_FORMAT,
                     "rocm payload: code object %u (%s) is not a 64-bit little-endian ELF file",
                     index, v->target);
  uint16_t machine = mp_load_le16(e + 18);
  if (machine != MP_ROCM_EM_AMDGPU || e[7] != MP_ROCM_ELFOSABI_AMDGPU_HSA)
    return mp_errorf(MP_ERR_FORMAT,
                     "rocm payload: code object %u (%s) is an ELF file for machine %u, OS ABI %u, "
                     "not an AMD GPU code object (EM_AMDGPU %d, OS ABI %d)",
                     index, v->target, machine, e[7], MP_ROCM_EM_AMDGPU,
                     MP_ROCM_ELFOSABI_AMDGPU_HSA);
  if (e[8] < 2) /* code object v3 and older: other feature bits */
    return mp_errorf(MP_ERR_FORMAT,
                     "rocm payload: code object %u (%s) is code object version %u; modpack reads "
                     "version 4 and later",
                     index, v->target, (unsigned)e[8] + 2);
  uint32_t flags = mp_load_le32(e + 48);
  mp_rocm_target_t t;
  char why[256];
  if (!mp_rocm_parse_target(v->target, &t, why, sizeof why))
    return mp_errorf(MP_ERR_FORMAT, "rocm payload: %s", why);
  /* e_flags: xnack in bits 8-9, sramecc in bits 10-11 (0 unsupported, 1 any, 2 off, 3 on). */
  uint32_t settings[2] = {(flags >> 10) & 3, (flags >> 8) & 3};
  uint8_t stated[2] = {t.sramecc, t.xnack};
  static const char* const names[2] = {"sramecc", "xnack"};
  for (int i = 0; i < 2; ++i) {
    uint32_t want = stated[i] == MP_ROCM_ON ? 3 : stated[i] == MP_ROCM_OFF ? 2 : settings[i] <= 1
                                                                                 ? settings[i]
                                                                                 : 1;
    if (settings[i] != want)
      return mp_errorf(MP_ERR_FORMAT,
                       "rocm payload: code object %u is labelled %s, but its ELF header says "
                       "%s%s",
                       index, v->target, names[i],
                       settings[i] == 3 ? "+" : settings[i] == 2 ? "-" : " for either setting");
  }
  return MP_OK;
}

typedef struct {
  mp_rocm_module_t* m;
  uint32_t index;
} code_ref_t;

static mp_status_t check_decoded(void* context, const uint8_t* raw, uint64_t size) {
  code_ref_t* ref = context;
  return check_code_object(ref->index, &ref->m->variants[ref->index], raw, size);
}

mp_status_t mp_rocm_code_object(mp_rocm_module_t* m, uint32_t v, const uint8_t** out_code) {
  code_ref_t ref = {m, v};
  MP_RETURN_IF_ERROR_PREFIX(mp_code_get(&m->variants[v].code, check_decoded, &ref, out_code),
                            "rocm module: code object %u (%s)", v, m->variants[v].target);
  return MP_OK;
}

mp_status_t mp_rocm_payload_parse(void* state, const mp_kind_t* kind,
                                  mp_const_byte_span_t payload) {
  mp_rocm_module_t* m = state;
  uint64_t end = 0;
  MP_RETURN_IF_ERROR(mp_rocm_payload_parse_head(m, kind, payload, &end));
  m->head_size = end;
  mp_reader_t r = {payload.data, payload.size, end, "rocm payload"};
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    mp_rocm_variant_t* variant = &m->variants[v];
    uint64_t padding =
        (MP_ROCM_CODE_ALIGNMENT - r.pos % MP_ROCM_CODE_ALIGNMENT) % MP_ROCM_CODE_ALIGNMENT;
    const uint8_t* pad;
    if (!mp_read_bytes(&r, padding, &pad)) return mp_reader_error(&r, "code object padding");
    for (uint64_t i = 0; i < padding; ++i)
      if (pad[i] != 0)
        return mp_errorf(MP_ERR_FORMAT, "rocm payload: nonzero padding before code object %u",
                         v);
    if (!mp_read_bytes(&r, variant->size, &variant->data))
      return mp_reader_error(&r, "code object bytes");
    MP_RETURN_IF_ERROR_PREFIX(
        mp_code_open(&variant->code, variant->data, variant->size, m->base.code_frames),
        "rocm payload: code object %u (%s)", v, variant->target);
    const uint8_t* raw = mp_code_in_place(&variant->code);
    if (raw) MP_RETURN_IF_ERROR(check_code_object(v, variant, raw, variant->code.raw_size));
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "rocm payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

mp_status_t mp_rocm_module_rank(const mp_rocm_module_t* m, const mp_rocm_target_t* device,
                                uint32_t* order, uint32_t* out_usable) {
  const char* targets[MP_ROCM_MAX_VARIANTS];
  for (uint32_t v = 0; v < m->variant_count; ++v) targets[v] = m->variants[v].target;
  return mp_rocm_rank_targets(targets, m->variant_count, device, order, out_usable);
}

void mp_rocm_payload_free(mp_rocm_module_t* m) {
  for (uint32_t v = 0; m->variants && v < m->variant_count; ++v) {
    free(m->variants[v].facts);
    mp_code_free(&m->variants[v].code);
  }
  free(m->variants);
  for (uint32_t k = 0; m->layouts && k < m->base.table.count; ++k) {
    free(m->layouts[k].offsets);
    free(m->layouts[k].sizes);
  }
  free(m->layouts);
  m->variants = NULL;
  m->layouts = NULL;
  m->variant_count = 0;
}
