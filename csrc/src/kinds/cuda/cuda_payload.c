/* Parsing and validating a cuda payload (layout: modpack/kinds/cuda.h): the variants' headers
 * and arch names, the kernel records, and each variant's bytes, which stay in place. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kinds/cuda/cuda_module.h"
#include "kinds/cuda/cuda_select.h"

const char* const mp_cuda_variant_kind_names[3] = {"cubin", "ptx", "fatbin"};

static void read_ptx_isa(mp_cuda_variant_t* v, const uint8_t* raw, uint64_t size) {
  /* ".version X.Y" comes right after the header comments. */
  uint64_t limit = size < 8192 ? size : 8192;
  const char* text = (const char*)raw;
  for (uint64_t i = 0; i + 9 < limit; ++i) {
    if (memcmp(text + i, ".version", 8) != 0 || (i > 0 && text[i - 1] != '\n')) continue;
    uint64_t j = i + 8, n = 0;
    while (j < limit && (text[j] == ' ' || text[j] == '\t')) ++j;
    while (j < limit && n + 1 < sizeof v->ptx_isa &&
           ((text[j] >= '0' && text[j] <= '9') || text[j] == '.'))
      v->ptx_isa[n++] = text[j++];
    v->ptx_isa[n] = '\0';
    return;
  }
}

bool mp_cuda_variant_defines(const mp_cuda_variant_t* variant, uint32_t k) {
  if (variant->kernel_count == 0) return true;
  for (uint32_t i = 0; i < variant->kernel_count; ++i)
    if (variant->kernels[i] == k) return true;
  return false;
}

/* Version 2: the kernels a variant's image defines, by index (checked against the records
 * once they are read). */
static mp_status_t parse_variant_kernels(mp_reader_t* r, uint32_t index, mp_cuda_variant_t* v) {
  if (!mp_read_u32(r, &v->kernel_count) || v->kernel_count > (r->size - r->pos) / 4)
    return mp_reader_error(r, "variant kernel count");
  if (v->kernel_count == 0) return MP_OK;
  v->kernels = calloc(v->kernel_count, sizeof *v->kernels);
  if (!v->kernels) return mp_out_of_memory("variant kernel indices");
  for (uint32_t i = 0; i < v->kernel_count; ++i) {
    if (!mp_read_u32(r, &v->kernels[i])) return mp_reader_error(r, "variant kernel index");
    if (i > 0 && v->kernels[i] <= v->kernels[i - 1])
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: variant %u lists its kernels out of order",
                       index);
  }
  return MP_OK;
}

static mp_status_t parse_variant_header(mp_reader_t* r, uint32_t version, uint32_t index,
                                        mp_cuda_variant_t* v) {
  if (!mp_read_u32(r, &v->kind) || !mp_read_u32(r, &v->arch_count))
    return mp_reader_error(r, "variant header");
  if (v->kind > MP_CUDA_VARIANT_FATBIN)
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: variant %u has unknown kind %u (0 cubin, 1 ptx, "
                     "2 fatbin)",
                     index, v->kind);
  if (v->arch_count == 0 || v->arch_count > MP_CUDA_MAX_ARCHES_PER_VARIANT ||
      (v->kind != MP_CUDA_VARIANT_FATBIN && v->arch_count != 1))
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: %s variant %u lists %u architectures",
                     mp_cuda_variant_kind_names[v->kind], index, v->arch_count);
  v->arches = calloc(v->arch_count, sizeof *v->arches);
  if (!v->arches) return mp_out_of_memory("arch names");
  for (uint32_t a = 0; a < v->arch_count; ++a) {
    uint32_t size;
    const uint8_t* bytes;
    if (!mp_read_u32(r, &size) || size == 0 || size >= MP_CUDA_MAX_ARCH_NAME ||
        !mp_read_bytes(r, size, &bytes))
      return mp_reader_error(r, "variant architecture");
    v->arches[a] = malloc((size_t)size + 1);
    if (!v->arches[a]) return mp_out_of_memory("an arch name");
    memcpy(v->arches[a], bytes, size);
    v->arches[a][size] = '\0';
    mp_cuda_arch_t parsed;
    if (strlen(v->arches[a]) != size || !mp_cuda_parse_arch(v->arches[a], &parsed))
      return mp_errorf(MP_ERR_FORMAT,
                       "cuda payload: variant %u names architecture '%s', which is "
                       "not sm_XY[a|f] or compute_XY[a|f]",
                       index, v->arches[a]);
    if ((v->kind == MP_CUDA_VARIANT_CUBIN && parsed.ptx) ||
        (v->kind == MP_CUDA_VARIANT_PTX && !parsed.ptx))
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: %s variant %u is labelled '%s'",
                       mp_cuda_variant_kind_names[v->kind], index, v->arches[a]);
  }
  if (!mp_read_u64(r, &v->size) || v->size == 0) return mp_reader_error(r, "variant size");
  return version >= 2 ? parse_variant_kernels(r, index, v) : MP_OK;
}

/* Every variant's kernel indices name a kernel, and every kernel has a variant. */
static mp_status_t check_variant_kernels(const mp_cuda_module_t* m) {
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    const mp_cuda_variant_t* variant = &m->variants[v];
    if (variant->kernel_count && variant->kernels[variant->kernel_count - 1] >= m->base.table.count)
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: variant %u names kernel %u of %u", v,
                       variant->kernels[variant->kernel_count - 1], m->base.table.count);
  }
  for (uint32_t k = 0; k < m->base.table.count; ++k) {
    bool defined = false;
    for (uint32_t v = 0; v < m->variant_count && !defined; ++v)
      defined = mp_cuda_variant_defines(&m->variants[v], k);
    if (!defined)
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: no variant defines kernel %s",
                       m->base.table.kernels[k].name);
  }
  return MP_OK;
}

static mp_status_t check_variant_bytes(uint32_t index, mp_cuda_variant_t* v, const uint8_t* raw,
                                       uint64_t size) {
  static const uint8_t elf[4] = {0x7f, 'E', 'L', 'F'}, fatbin[4] = {0x50, 0xed, 0x55, 0xba};
  const char* arch = v->arches[0];
  if (size == 0)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: variant %u (%s) is empty", index, arch);
  if (v->kind == MP_CUDA_VARIANT_CUBIN && (size < 4 || memcmp(raw, elf, 4) != 0))
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: cubin variant %u (%s) does not start with the "
                     "ELF magic",
                     index, arch);
  if (v->kind == MP_CUDA_VARIANT_FATBIN && (size < 4 || memcmp(raw, fatbin, 4) != 0))
    return mp_errorf(MP_ERR_FORMAT,
                     "cuda payload: fatbin variant %u does not start with the "
                     "fatbin magic 50 ED 55 BA",
                     index);
  if (v->kind == MP_CUDA_VARIANT_PTX) {
    if (raw[size - 1] != '\0')
      return mp_errorf(MP_ERR_FORMAT, "cuda payload: PTX variant %u (%s) is not NUL-terminated",
                       index, arch);
    read_ptx_isa(v, raw, size);
  }
  return MP_OK;
}

/* The checks of a compressed variant's image, once decoded (code.h). */
typedef struct {
  mp_cuda_module_t* m;
  uint32_t index;
} variant_ref_t;

static mp_status_t check_decoded(void* context, const uint8_t* raw, uint64_t size) {
  variant_ref_t* ref = context;
  return check_variant_bytes(ref->index, &ref->m->variants[ref->index], raw, size);
}

mp_status_t mp_cuda_variant_image(mp_cuda_module_t* m, uint32_t v, const uint8_t** out_image) {
  variant_ref_t ref = {m, v};
  MP_RETURN_IF_ERROR_PREFIX(mp_code_get(&m->variants[v].code, check_decoded, &ref, out_image),
                            "cuda module: the %s variant %u (%s)",
                            mp_cuda_variant_kind_names[m->variants[v].kind], v,
                            m->variants[v].arches[0]);
  return MP_OK;
}

uint32_t mp_cuda_candidates(const mp_cuda_module_t* m, uint32_t k, const char** arches,
                            uint32_t* owner) {
  uint32_t count = 0;
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    if (!mp_cuda_variant_defines(&m->variants[v], k)) continue;
    for (uint32_t a = 0; a < m->variants[v].arch_count && count < MP_CUDA_MAX_VARIANTS; ++a) {
      arches[count] = m->variants[v].arches[a];
      owner[count++] = v;
    }
  }
  return count;
}

mp_status_t mp_cuda_payload_parse_head(mp_cuda_module_t* m, const mp_kind_t* kind,
                                       mp_const_byte_span_t payload, uint64_t* out_end) {
  mp_reader_t r = {payload.data, payload.size, 0, "cuda payload"};
  uint32_t version, reserved, count;
  if (!mp_read_u32(&r, &version) || !mp_read_u32(&r, &reserved))
    return mp_reader_error(&r, "header");
  if (version == 0 || version > MP_CUDA_PAYLOAD_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "cuda payload version %u is not supported (this runtime "
                     "reads 1 to %d); upgrade modpack",
                     version, MP_CUDA_PAYLOAD_VERSION);
  if (reserved != 0)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: reserved header field is not 0");
  if (!mp_read_u32(&r, &count) || count == 0 || count > r.size / 16)
    return mp_reader_error(&r, "variant count");
  if (count > MP_CUDA_MAX_VARIANTS)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload: %u variants (at most %d)", count,
                     MP_CUDA_MAX_VARIANTS);
  if (version >= 2) MP_RETURN_IF_ERROR(mp_kernel_read_module_name(&r, &m->base.name));
  m->variants = calloc(count, sizeof *m->variants);
  if (!m->variants) return mp_out_of_memory("the CUDA variants");
  for (uint32_t v = 0; v < count; ++v) {
    m->variant_count = v + 1;
    MP_RETURN_IF_ERROR(parse_variant_header(&r, version, v, &m->variants[v]));
  }
  MP_RETURN_IF_ERROR(mp_kernel_table_read(&r, kind, version, true, &m->base.table));
  MP_RETURN_IF_ERROR(check_variant_kernels(m));
  for (uint32_t k = 0; k < m->base.table.count; ++k)
    for (uint32_t a = 0; a < m->base.table.kernels[k].arg_count; ++a)
      if (m->base.table.kernels[k].args[a].kind == MP_KERNEL_ARG_LOCAL)
        return mp_errorf(MP_ERR_FORMAT,
                         "cuda payload: kernel %s argument %u is __local memory, which CUDA "
                         "kernels do not have (use dyn_shared_memory)",
                         m->base.table.kernels[k].name, a);
  *out_end = r.pos;
  return MP_OK;
}

mp_status_t mp_cuda_payload_parse(void* state, const mp_kind_t* kind,
                                  mp_const_byte_span_t payload) {
  mp_cuda_module_t* m = state;
  uint64_t end = 0;
  MP_RETURN_IF_ERROR(mp_cuda_payload_parse_head(m, kind, payload, &end));
  m->head_size = end;
  mp_reader_t r = {payload.data, payload.size, end, "cuda payload"};
  /* The variants' bytes, each 64-byte aligned within the payload, read in place. */
  for (uint32_t v = 0; v < m->variant_count; ++v) {
    mp_cuda_variant_t* variant = &m->variants[v];
    uint64_t padding =
        (MP_CUDA_VARIANT_ALIGNMENT - r.pos % MP_CUDA_VARIANT_ALIGNMENT) % MP_CUDA_VARIANT_ALIGNMENT;
    const uint8_t* pad;
    if (!mp_read_bytes(&r, padding, &pad)) return mp_reader_error(&r, "variant padding");
    for (uint64_t i = 0; i < padding; ++i)
      if (pad[i] != 0)
        return mp_errorf(MP_ERR_FORMAT, "cuda payload: nonzero padding before variant %u", v);
    if (!mp_read_bytes(&r, variant->size, &variant->data))
      return mp_reader_error(&r, "variant bytes");
    MP_RETURN_IF_ERROR_PREFIX(
        mp_code_open(&variant->code, variant->data, variant->size, m->base.code_frames),
        "cuda payload: variant %u (%s)", v, variant->arches[0]);
    const uint8_t* raw = mp_code_in_place(&variant->code);
    if (raw) MP_RETURN_IF_ERROR(check_variant_bytes(v, variant, raw, variant->code.raw_size));
  }
  if (r.pos != r.size)
    return mp_errorf(MP_ERR_FORMAT, "cuda payload has %" PRIu64 " unexpected trailing bytes",
                     r.size - r.pos);
  return MP_OK;
}

void mp_cuda_payload_free(mp_cuda_module_t* m) {
  for (uint32_t v = 0; m->variants && v < m->variant_count; ++v) {
    for (uint32_t a = 0; m->variants[v].arches && a < m->variants[v].arch_count; ++a)
      free(m->variants[v].arches[a]);
    free(m->variants[v].arches);
    free(m->variants[v].kernels);
    mp_code_free(&m->variants[v].code);
  }
  free(m->variants);
  m->variants = NULL;
  m->variant_count = 0;
}
