/* ctest: the "vulkan" kind's payload parser (layout: modpack/kinds/vulkan.h). Loading never
 * touches Vulkan, so this runs anywhere. Public API only. */
#include "modpack/kinds/kernel.h"
#include "modpack/kinds/vulkan.h"
#include "test_util.h"

/* A stand-in shader: the SPIR-V header (magic, version 1.0, generator, bound, schema). The
 * parser checks only the magic number and the size; the driver reads the rest. */
static const uint32_t SHADER[5] = {MP_VULKAN_SPIRV_MAGIC, 0x00010000, 0, 8, 0};
static const char* const TAGS[3] = {"workgroups.x", "workgroups.y", "workgroups.z"};

typedef struct {
  uint32_t version, reserved, shader_count;
  uint64_t shader_size;     /* of shader 0 */
  uint32_t magic;           /* of shader 0 */
  const char* module_name;  /* NULL: unnamed */
  uint8_t first_kind;       /* of scale's first argument */
  uint32_t shader_index;    /* scale's shader */
  uint32_t push_size;       /* scale's push-constant block */
  uint32_t scalar_offset;   /* scale's scalar */
  uint32_t second_binding;  /* copy's second buffer */
  uint32_t set;             /* copy's first buffer's set */
  int scalar_before_buffer; /* scale's arguments reversed */
  uint8_t pad_byte;         /* the padding before shader 0 */
  int trailing;
  /* Version 2: scale's specialization constants (BLOCK_SIZE, then an unnamed float16 left at
   * its default) and workgroup size. */
  uint32_t workgroup_x;
  uint32_t constant_count; /* as written; two are */
  uint32_t second_id;      /* the float16's SpecId */
  uint8_t first_type, first_bits, first_flags, first_reserved;
  uint64_t first_value;
  const char* first_name;
  /* Version 2: shader 0's requirements (its capabilities: Shader, Float16, an unknown one). */
  uint32_t spirv_version, vulkan_version, capability_count;
} spec_t;

static spec_t defaults(void) {
  spec_t s = {MP_VULKAN_PAYLOAD_VERSION, 0, 1, sizeof SHADER, MP_VULKAN_SPIRV_MAGIC, NULL,
              MP_KERNEL_ARG_BUFFER, 0, 8, 4, 1, 0, 0, 0, 0, 64, 2, 3, kDLUInt, 32, 0, 0, 64,
              "BLOCK_SIZE", 0x00010000, 1u << 22 | 2u << 12, 3};
  return s;
}

/* Scale's specialization constants (version 2). */
static void constants(buf_t* b, const spec_t* s) {
  put_u32(b, s->constant_count);
  put_u32(b, 0); /* SpecId */
  put_u8(b, s->first_type);
  put_u8(b, s->first_bits);
  put_u8(b, s->first_flags);
  put_u8(b, s->first_reserved);
  put_u64(b, s->first_value);
  put_str(b, s->first_name);
  put_u32(b, s->second_id);
  put_u8(b, kDLFloat);
  put_u8(b, 16);
  put_u8(b, MP_VULKAN_CONSTANT_DEFAULT);
  put_u8(b, 0);
  put_u64(b, 0xbc00); /* -1.0 as a binary16 */
  put_u32(b, 0);      /* unnamed */
}

/* A version 2 record: |nargs| (kind, code, bits, lanes), the three launch tags, |symbol|. */
static void record(buf_t* b, const char* name, int nargs, const uint8_t (*args)[4],
                   const char* symbol) {
  put_str(b, name);
  put_u32(b, (uint32_t)nargs);
  for (int i = 0; i < nargs; ++i) put(b, args[i], 4);
  put_u32(b, 3);
  for (int i = 0; i < 3; ++i) put_str(b, TAGS[i]);
  put_str(b, symbol); /* the entry point */
  put_u32(b, 0);      /* nothing fixed */
}

static void build(buf_t* b, spec_t s) {
  memset(b, 0, sizeof *b);
  put_u32(b, s.version);
  put_u32(b, s.reserved);
  put_u32(b, s.shader_count);
  if (s.module_name)
    put_str(b, s.module_name);
  else
    put_u32(b, 0);
  for (uint32_t i = 0; i < s.shader_count; ++i) put_u64(b, i ? sizeof SHADER : s.shader_size);
  for (uint32_t i = 0; s.version >= 2 && i < s.shader_count; ++i) {
    put_u32(b, i ? 0x00010000 : s.spirv_version);
    put_u32(b, i ? 1u << 22 : s.vulkan_version);
    uint32_t count = i ? 1 : s.capability_count;
    put_u32(b, count);
    static const uint32_t capabilities[3] = {1, 9, 6022}; /* Shader, Float16, unknown */
    for (uint32_t c = 0; c < count; ++c) put_u32(b, capabilities[c % 3]);
  }
  put_u32(b, 2);
  /* scale(float32* x, float32 k): x at set 0 binding 0, k at push offset |scalar_offset|. */
  uint8_t scale[2][4] = {{s.first_kind, kDLFloat, 32, 1}, {MP_KERNEL_ARG_SCALAR, kDLFloat, 32, 1}};
  if (s.scalar_before_buffer) {
    uint8_t t[4];
    memcpy(t, scale[0], 4);
    memcpy(scale[0], scale[1], 4);
    memcpy(scale[1], t, 4);
  }
  record(b, "scale", 2, (const uint8_t(*)[4])scale, "main");
  /* copy(void* a, uint8* b): two buffers, in the second shader when there are two. */
  static const uint8_t copy[2][4] = {{MP_KERNEL_ARG_BUFFER, kDLOpaqueHandle, 8, 1},
                                     {MP_KERNEL_ARG_BUFFER, kDLUInt, 8, 1}};
  record(b, "copy", 2, copy, "copy_main");
  /* scale's interface: shader, workgroup 64x1x1, push constants, its two slots. */
  put_u32(b, s.shader_index);
  put_u32(b, s.workgroup_x);
  put_u32(b, 1);
  put_u32(b, 1);
  put_u32(b, s.push_size);
  if (s.scalar_before_buffer) {
    put_u32(b, s.scalar_offset);
    put_u32(b, 0);
  }
  put_u32(b, 0); /* set */
  put_u32(b, 0); /* binding */
  if (!s.scalar_before_buffer) {
    put_u32(b, s.scalar_offset);
    put_u32(b, 0);
  }
  if (s.version >= 2) constants(b, &s);
  /* copy's interface. */
  put_u32(b, s.shader_count - 1);
  put_u32(b, 32);
  put_u32(b, 2);
  put_u32(b, 1);
  put_u32(b, 0);
  put_u32(b, s.set);
  put_u32(b, 0);
  put_u32(b, 0);
  put_u32(b, s.second_binding);
  if (s.version >= 2) put_u32(b, 0); /* no specialization constant */
  for (uint32_t i = 0; i < s.shader_count; ++i) {
    while (b->size % MP_VULKAN_SHADER_ALIGNMENT) put_u8(b, i == 0 ? s.pad_byte : 0);
    uint32_t words[8] = {0};
    memcpy(words, SHADER, sizeof SHADER);
    if (i == 0) words[0] = s.magic;
    put(b, words, i ? sizeof SHADER : s.shader_size);
  }
  for (int i = 0; i < s.trailing; ++i) put_u8(b, 0);
}

int main(void) {
  static buf_t b;
  spec_t two = defaults();
  two.shader_count = 2;
  two.module_name = "vk";
  build(&b, two);
  mp_module_t* m = load("vulkan", b.data, b.size);
  if (m) {
    CHECK(mp_module_function_count(m) == 2, "two kernels");
    CHECK(mp_module_name(m) && strcmp(mp_module_name(m), "vk") == 0, "named");
    const char* text = describe(m);
    CHECK(strstr(text, "\"shaders\": [{\"offset\": ") != NULL, "%s", text);
    CHECK(strstr(text, "\"spirv\": \"1.0\", \"vulkan\": \"1.2\", \"capabilities\": "
                       "[\"Shader\", \"Float16\", 6022]") != NULL,
          "%s", text);
    /* Each shader's offset says where its words are in the payload (tools write .spv). */
    const char* second = strstr(text, "}, {\"offset\": ");
    unsigned long long offset = 0;
    CHECK(second && sscanf(second + strlen("}, {\"offset\": "), "%llu", &offset) == 1 &&
              offset % MP_VULKAN_SHADER_ALIGNMENT == 0 && offset + sizeof SHADER == b.size &&
              memcmp(b.data + offset, SHADER, sizeof SHADER) == 0,
          "%s", text);
    CHECK(strstr(text,
                 "{\"kernel\": \"scale\", \"shader\": 0, \"entry_point\": \"main\", "
                 "\"workgroup_size\": [64, 1, 1], \"push_constant_bytes\": 8, \"bindings\": "
                 "[{\"set\": 0, \"binding\": 0}, {\"push_offset\": 4}], \"specialization\": "
                 "[{\"id\": 0, \"name\": \"BLOCK_SIZE\", \"type\": \"uint32\", \"value\": 64, "
                 "\"default\": false}, {\"id\": 3, \"name\": null, \"type\": \"float16\", "
                 "\"value\": -1, \"default\": true}]}") != NULL,
          "%s", text);
    CHECK(strstr(text,
                 "{\"name\": \"copy\", \"symbol\": \"copy_main\", \"args\": [\"void*\", "
                 "\"uint8*\"], \"launch\": [\"workgroups.x\", \"workgroups.y\", "
                 "\"workgroups.z\"]}") != NULL,
          "%s", text);
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "vk/scale", 0, &f) == MP_OK && f, "qualified lookup: %s",
          mp_error_message());
    if (f) {
      mp_value_t args[1] = {mp_int(1)}, ret;
      CHECK(mp_function_call(f, args, 1, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(),
                       "scale: expected 5 arguments (2 kernel arguments + 3 launch") != NULL,
            "a wrong count is refused before Vulkan is touched: %s", mp_error_message());
      mp_value_t wrong[5] = {mp_int(1), mp_float(2.0), mp_int(1), mp_int(1), mp_int(1)};
      CHECK(mp_function_call(f, wrong, 5, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "argument 0 must be an array") != NULL,
            "a number for a buffer: %s", mp_error_message());
      mp_function_release(f);
    }
    mp_module_release(m);
  }
  every_prefix_refused("vulkan", &b);
  /* Version 1 (no specialization) still loads; its workgroup size is informative (a zero came
   * from reflection reading a specialization constant's SpecId). */
  spec_t v1 = defaults();
  v1.version = 1;
  v1.workgroup_x = 0;
  build(&b, v1);
  m = load("vulkan", b.data, b.size);
  if (m) {
    const char* text = describe(m);
    CHECK(strstr(text, "\"workgroup_size\": [0, 1, 1]") && !strstr(text, "specialization"),
          "%s", text);
    mp_module_release(m);
  }
  /* Two buffers on one set and binding (as version 1 writers made of blocks declared on one
   * binding) load: they are one descriptor, and a call must pass one array for both. */
  spec_t shared = defaults();
  shared.version = 1;
  shared.second_binding = 0;
  build(&b, shared);
  m = load("vulkan", b.data, b.size);
  if (m) {
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "copy", 0, &f) == MP_OK && f, "%s", mp_error_message());
    if (f) {
      float one[4], two[4];
      int64_t shape[1] = {4};
      DLTensor x = {one, {kDLVulkan, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
      DLTensor y = {two, {kDLVulkan, 0}, 1, {kDLUInt, 8, 1}, shape, NULL, 0};
      mp_value_t args[5] = {mp_tensor(&x), mp_tensor(&y), mp_int(1), mp_int(1), mp_int(1)}, ret;
      CHECK(mp_function_call(f, args, 5, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(),
                       "copy: arguments 0 and 1 are one storage buffer (set 0, binding 0): pass "
                       "the same array for both") != NULL,
            "two arrays for one descriptor: %s", mp_error_message());
      mp_function_release(f);
    }
    mp_module_release(m);
  }
  /* Each type of constant, as inspect shows it. */
  struct {
    uint8_t type, bits;
    uint64_t value;
    const char* shown;
  } typed[] = {
      {kDLInt, 8, 0xfe, "\"type\": \"int8\", \"value\": -2"},
      {kDLInt, 64, 0x8000000000000000ull, "\"type\": \"int64\", \"value\": -9223372036854775808"},
      {kDLUInt, 64, UINT64_MAX, "\"type\": \"uint64\", \"value\": 18446744073709551615"},
      {kDLFloat, 32, 0x3fc00000, "\"type\": \"float32\", \"value\": 1.5"},
      {kDLFloat, 64, 0x7ff0000000000000ull, "\"type\": \"float64\", \"value\": \"inf\""},
      {kDLFloat, 16, 0x0001, "\"type\": \"float16\", \"value\": 5.9604644775390625e-08"},
      {kDLBool, 32, 1, "\"type\": \"bool\", \"value\": true"},
  };
  for (size_t i = 0; i < sizeof typed / sizeof typed[0]; ++i) {
    spec_t t = defaults();
    t.first_type = typed[i].type;
    t.first_bits = typed[i].bits;
    t.first_value = typed[i].value;
    build(&b, t);
    m = load("vulkan", b.data, b.size);
    if (!m) continue;
    const char* text = describe(m);
    CHECK(strstr(text, typed[i].shown) != NULL, "%s in %s", typed[i].shown, text);
    mp_module_release(m);
  }
  for (uint32_t i = 0;; ++i) {
    const char* tag = mp_kind_launch_tag("vulkan", i);
    if (i < 3) CHECK(tag && strcmp(tag, TAGS[i]) == 0, "launch tag %u is %s", i, tag ? tag : "-");
    if (!tag) {
      CHECK(i == 3, "vulkan has 3 launch tags, not %u", i);
      break;
    }
  }

  struct {
    const char* what;
    spec_t spec;
    mp_status_t code;
    const char* needle;
  } cases[] = {
      {"version 3", defaults(), MP_ERR_INCOMPATIBLE, "version 3 is not supported"},
      {"reserved", defaults(), MP_ERR_FORMAT, "reserved header field"},
      {"no shader", defaults(), MP_ERR_FORMAT, "shader count"},
      {"a shader of 22 bytes", defaults(), MP_ERR_FORMAT, "shader 0 has 22 bytes"},
      {"no SPIR-V magic", defaults(), MP_ERR_FORMAT, "SPIR-V magic number 0x07230203"},
      {"a shader index past the end", defaults(), MP_ERR_FORMAT, "names shader 1 of 1"},
      {"push constants not a multiple of 4", defaults(), MP_ERR_FORMAT, "6 bytes of push"},
      {"a scalar outside its block", defaults(), MP_ERR_FORMAT, "does not fit its 8-byte block"},
      {"set 8", defaults(), MP_ERR_FORMAT, "set 8 binding 0"},
      {"a buffer after a scalar", defaults(), MP_ERR_FORMAT, "is a buffer after a scalar"},
      {"local memory", defaults(), MP_ERR_FORMAT, "local memory, which Vulkan kernels"},
      {"nonzero padding", defaults(), MP_ERR_FORMAT, "nonzero padding before shader 0"},
      {"trailing bytes", defaults(), MP_ERR_FORMAT, "4 unexpected trailing bytes"},
      {"a workgroup of 0 in version 2", defaults(), MP_ERR_FORMAT, "workgroup size of 0x1x1"},
      {"257 constants", defaults(), MP_ERR_FORMAT, "257 specialization constants (at most 256)"},
      {"more constants than bytes", defaults(), MP_ERR_FORMAT, "specialization constant count"},
      {"an 8-bit float", defaults(), MP_ERR_FORMAT, "type code 2 of 8 bits"},
      {"a 24-bit int", defaults(), MP_ERR_FORMAT, "type code 0 of 24 bits"},
      {"a 64-bit bool", defaults(), MP_ERR_FORMAT, "type code 6 of 64 bits"},
      {"an unknown type", defaults(), MP_ERR_FORMAT, "type code 4 of 32 bits"},
      {"a uint8 of 256", defaults(), MP_ERR_FORMAT, "value 0x100 has bits above its 8"},
      {"a bool of 2", defaults(), MP_ERR_FORMAT, "value 0x2 has bits above its 32"},
      {"an unknown flag", defaults(), MP_ERR_FORMAT, "a reserved byte or flag is set"},
      {"a reserved byte", defaults(), MP_ERR_FORMAT, "a reserved byte or flag is set"},
      {"a SpecId twice", defaults(), MP_ERR_FORMAT, "gives specialization constant SpecId 0 twice"},
      {"a name of 256 bytes", defaults(), MP_ERR_FORMAT,
       "kernel scale: specialization constant name of 256 bytes exceeds 255"},
      {"SPIR-V 2.0", defaults(), MP_ERR_FORMAT, "SPIR-V version 0x00020000 is not 1.x"},
      {"SPIR-V 1.5 recorded for 1.0", defaults(), MP_ERR_FORMAT,
       "shader 0 is SPIR-V version 0x00010000, and its requirements say 0x00010500"},
      {"Vulkan 2.0", defaults(), MP_ERR_FORMAT, "needs Vulkan version 0x00800000, which is no"},
      {"a Vulkan patch version", defaults(), MP_ERR_FORMAT, "which is no Vulkan 1.x API version"},
      {"129 capabilities", defaults(), MP_ERR_FORMAT, "declares 129 capabilities (at most 128)"},
  };
  cases[0].spec.version = 3;
  cases[1].spec.reserved = 1;
  cases[2].spec.shader_count = 0;
  cases[3].spec.shader_size = 22;
  cases[4].spec.magic = 0x03022307;
  cases[5].spec.shader_index = 1;
  cases[6].spec.push_size = 6;
  cases[7].spec.scalar_offset = 6;
  cases[8].spec.set = 8;
  cases[9].spec.scalar_before_buffer = 1;
  cases[10].spec.first_kind = MP_KERNEL_ARG_LOCAL;
  cases[11].spec.pad_byte = 1;
  cases[12].spec.trailing = 4;
  cases[13].spec.workgroup_x = 0;
  cases[14].spec.constant_count = 257;
  cases[15].spec.constant_count = 200;
  cases[16].spec.first_type = kDLFloat;
  cases[16].spec.first_bits = 8;
  cases[17].spec.first_type = kDLInt;
  cases[17].spec.first_bits = 24;
  cases[18].spec.first_type = kDLBool;
  cases[18].spec.first_bits = 64;
  cases[19].spec.first_type = 4;
  cases[20].spec.first_bits = 8;
  cases[20].spec.first_value = 256;
  cases[21].spec.first_type = kDLBool;
  cases[21].spec.first_value = 2;
  cases[22].spec.first_flags = 2;
  cases[23].spec.first_reserved = 1;
  cases[24].spec.second_id = 0;
  static char long_name[257];
  memset(long_name, 'n', 256);
  cases[25].spec.first_name = long_name;
  cases[26].spec.spirv_version = 0x00020000;
  cases[27].spec.spirv_version = 0x00010500;
  cases[28].spec.vulkan_version = 2u << 22;
  cases[29].spec.vulkan_version |= 1;
  cases[30].spec.capability_count = 129;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    build(&b, cases[i].spec);
    expect_refused(cases[i].what, "vulkan", b.data, b.size, cases[i].code, cases[i].needle);
  }
  return finish("test_vulkan_payload");
}
