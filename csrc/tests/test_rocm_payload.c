/* ctest: the "rocm" kind's payload parser (layout: modpack/kinds/rocm.h) and its selection rule
 * (mp_rocm_select_variant). Loading never touches the HIP runtime, so this runs anywhere.
 * Public API only. */
#include "modpack/kinds/kernel.h"
#include "modpack/kinds/rocm.h"
#include "test_util.h"

static const char* const TAGS[6] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                    "threadIdx.x", "threadIdx.y", "threadIdx.z"};

typedef struct {
  uint32_t version, reserved, count;
  const char* targets[2];
  uint32_t elf_flags[2]; /* e_flags of each code object */
  uint16_t machine;
  uint8_t abi_version;
  uint32_t explicit_size;
  uint32_t scalar_offset; /* vadd's n */
  uint32_t kernarg_size;  /* vadd's argument segment in code object 0 */
  uint8_t first_kind;     /* vadd's first argument */
  uint32_t reserved_fact;
  uint8_t pad_byte;
  int trailing;
} spec_t;

/* e_flags: mach in bits 0-7 (0x3f gfx90a, 0x30 gfx908), xnack bits 8-9, sramecc bits 10-11
 * (1 any, 2 off, 3 on). */
static spec_t defaults(void) {
  spec_t s = {MP_ROCM_PAYLOAD_VERSION, 0, 2, {"gfx90a:xnack-", "gfx908"}, {0x63f, 0x530},
              MP_ROCM_EM_AMDGPU, 2, 28, 24, 28, MP_KERNEL_ARG_BUFFER, 0, 0, 0};
  return s;
}

static void code_object(buf_t* b, const spec_t* s, int i) {
  uint8_t elf[128] = {0x7f, 'E', 'L', 'F', 2, 1, 1, MP_ROCM_ELFOSABI_AMDGPU_HSA, s->abi_version};
  elf[18] = (uint8_t)s->machine;
  elf[19] = (uint8_t)(s->machine >> 8);
  for (int k = 0; k < 4; ++k) elf[48 + k] = (uint8_t)(s->elf_flags[i] >> (8 * k));
  put(b, elf, sizeof elf);
}

static void build(buf_t* b, spec_t s) {
  memset(b, 0, sizeof *b);
  put_u32(b, s.version);
  put_u32(b, s.reserved);
  put_u32(b, s.count);
  put_str(b, "k"); /* the module's name */
  for (uint32_t i = 0; i < s.count; ++i) {
    put_str(b, s.targets[i]);
    put_u64(b, 128);
  }
  put_u32(b, 1); /* vadd(float32* a, float32* b, float32* c, int32 n) */
  put_str(b, "vadd");
  put_u32(b, 4);
  uint8_t args[4][4] = {{s.first_kind, kDLFloat, 32, 1},
                        {MP_KERNEL_ARG_BUFFER, kDLFloat, 32, 1},
                        {MP_KERNEL_ARG_BUFFER, kDLFloat, 32, 1},
                        {MP_KERNEL_ARG_SCALAR, kDLInt, 32, 1}};
  for (int a = 0; a < 4; ++a) put(b, args[a], 4);
  put_u32(b, 6);
  for (int t = 0; t < 6; ++t) put_str(b, TAGS[t]);
  put_u32(b, 0); /* symbol: the name */
  put_u32(b, 0); /* nothing fixed */
  put_u32(b, s.explicit_size);
  for (uint32_t a = 0; a < 3; ++a) {
    put_u32(b, 8 * a);
    put_u32(b, 8);
  }
  put_u32(b, s.scalar_offset);
  put_u32(b, 4);
  for (uint32_t i = 0; i < s.count; ++i) {
    put_u32(b, i == 0 ? s.kernarg_size : 28); /* kernarg segment */
    put_u32(b, 0);                            /* LDS */
    put_u32(b, 16);                           /* scratch */
    put_u32(b, 256);
    put_u32(b, 64);
    put_u32(b, 11);
    put_u32(b, 8);
    put_u32(b, s.reserved_fact);
  }
  for (uint32_t i = 0; i < s.count; ++i) {
    while (b->size % MP_ROCM_CODE_ALIGNMENT) put_u8(b, i == 0 ? s.pad_byte : 0);
    code_object(b, &s, (int)i);
  }
  for (int i = 0; i < s.trailing; ++i) put_u8(b, 0);
}

static int32_t select_one(const char* const* targets, uint32_t count, const char* device,
                          mp_status_t* out_status) {
  int32_t index = -7;
  *out_status = mp_rocm_select_variant(targets, count, device, &index);
  return index;
}

static void selection(void) {
  static const struct {
    const char* device;
    const char* targets[4];
    uint32_t count;
    int32_t expected; /* -1: none runs */
  } cases[] = {
      {"gfx90a:sramecc+:xnack-", {"gfx908", "gfx90a", "gfx90a:xnack-"}, 3, 2},
      {"gfx90a:sramecc+:xnack+", {"gfx90a:xnack-", "gfx90a"}, 2, 1},
      {"gfx90a:sramecc+:xnack+", {"gfx90a:xnack-"}, 1, -1},
      {"gfx90a", {"gfx90a:xnack+"}, 1, -1}, /* the device's xnack is not known */
      {"gfx1100", {"gfx11-generic", "gfx1100"}, 2, 1},
      {"gfx1101", {"gfx11-generic", "gfx1100"}, 2, 0},
      {"gfx906:sramecc-:xnack-", {"gfx9-generic", "gfx90a"}, 2, 0},
      {"gfx90a:sramecc+:xnack-", {"gfx9-generic"}, 1, -1}, /* gfx90a is not in gfx9-generic */
      {"gfx942:sramecc+:xnack-", {"gfx9-4-generic:xnack-", "gfx90a"}, 2, 0},
      {"gfx1030", {"gfx10-3-generic", "gfx10-1-generic"}, 2, 0},
      {"gfx90a:sramecc+:xnack-", {"gfx90a", "gfx90a"}, 2, 0}, /* ties keep the earlier */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    mp_status_t status;
    int32_t got = select_one(cases[i].targets, cases[i].count, cases[i].device, &status);
    if (cases[i].expected < 0)
      CHECK(status == MP_ERR_UNAVAILABLE && got == -1 &&
                strstr(mp_error_message(), "no code object for this GPU") &&
                strstr(mp_error_message(), cases[i].targets[0]),
            "case %zu: %d %d %s", i, (int)status, (int)got, mp_error_message());
    else
      CHECK(status == MP_OK && got == cases[i].expected, "case %zu (%s): got %d (%s)", i,
            cases[i].device, (int)got, mp_error_message());
  }
  static const char* const good[1] = {"gfx90a"};
  static const char* const bad[1] = {"gfx90a:xnack"};
  mp_status_t status;
  select_one(bad, 1, "gfx90a", &status);
  CHECK(status == MP_ERR_INVALID_ARGUMENT && strstr(mp_error_message(), "unknown feature"),
        "%s", mp_error_message());
  select_one(good, 1, "sm_90", &status);
  CHECK(status == MP_ERR_INVALID_ARGUMENT && strstr(mp_error_message(), "not an AMD GPU target"),
        "%s", mp_error_message());
  select_one(good, 1, "gfx11-generic", &status);
  CHECK(status == MP_ERR_INVALID_ARGUMENT && strstr(mp_error_message(), "not a device"), "%s",
        mp_error_message());
  select_one(good, 1, "gfx90a:xnack+:xnack-", &status);
  CHECK(status == MP_ERR_INVALID_ARGUMENT && strstr(mp_error_message(), "twice"), "%s",
        mp_error_message());
}

int main(void) {
  static buf_t b;
  build(&b, defaults());
  mp_module_t* m = load("rocm", b.data, b.size);
  if (m) {
    CHECK(mp_module_function_count(m) == 1, "one kernel");
    CHECK(mp_module_name(m) && strcmp(mp_module_name(m), "k") == 0, "named");
    const char* text = describe(m);
    CHECK(strstr(text, "\"variants\": [{\"arch\": \"gfx90a:xnack-\", \"kind\": \"hsaco\", "
                       "\"offset\": ") != NULL,
          "%s", text);
    /* Each code object's offset says where its bytes are in the payload (tools write .hsaco). */
    const char* second = strstr(text, "{\"arch\": \"gfx908\", \"kind\": \"hsaco\", \"offset\": ");
    unsigned long long offset = 0;
    CHECK(second && sscanf(strstr(second, "\"offset\": ") + 10, "%llu", &offset) == 1 &&
              offset % MP_ROCM_CODE_ALIGNMENT == 0 && offset + 128 == b.size &&
              memcmp(b.data + offset, "\x7f" "ELF", 4) == 0,
          "%s", text);
    CHECK(strstr(text, "{\"kernel\": \"vadd\", \"explicit_size\": 28, \"offsets\": [0, 8, 16, 24]}"),
          "%s", text);
    CHECK(strstr(text, "\"private_segment_fixed_size\": 16"), "%s", text);
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "k/vadd", 0, &f) == MP_OK && f, "qualified lookup: %s",
          mp_error_message());
    if (f) {
      mp_value_t args[1] = {mp_int(1)}, ret;
      CHECK(mp_function_call(f, args, 1, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "vadd: expected 10 arguments (4 kernel arguments + 6 "
                                           "launch") != NULL,
            "a wrong count is refused before HIP is touched: %s", mp_error_message());
      mp_value_t wrong[10] = {mp_int(1), mp_int(1), mp_int(1), mp_int(1), mp_int(1),
                              mp_int(1), mp_int(1), mp_int(1), mp_int(1), mp_int(1)};
      CHECK(mp_function_call(f, wrong, 10, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "argument 0 must be an array") != NULL,
            "a number for a buffer: %s", mp_error_message());
      mp_function_release(f);
    }
    mp_module_release(m);
  }
  every_prefix_refused("rocm", &b);
  for (uint32_t i = 0;; ++i) {
    const char* tag = mp_kind_launch_tag("rocm", i);
    if (i < 6) CHECK(tag && strcmp(tag, TAGS[i]) == 0, "launch tag %u is %s", i, tag ? tag : "-");
    if (!tag) {
      CHECK(i == 7, "rocm has 7 launch tags, not %u", i);
      break;
    }
  }
  selection();

  struct {
    const char* what;
    spec_t spec;
    mp_status_t code;
    const char* needle;
  } cases[] = {
      {"version 2", defaults(), MP_ERR_INCOMPATIBLE, "version 2 is not supported"},
      {"reserved", defaults(), MP_ERR_FORMAT, "reserved header field"},
      {"no code object", defaults(), MP_ERR_FORMAT, "code object count"},
      {"a bad target", defaults(), MP_ERR_FORMAT, "not an AMD GPU target ID"},
      {"not for EM_AMDGPU", defaults(), MP_ERR_FORMAT, "not an AMD GPU code object"},
      {"code object v3", defaults(), MP_ERR_FORMAT, "code object version 3"},
      {"xnack disagrees", defaults(), MP_ERR_FORMAT, "labelled gfx90a:xnack-, but its ELF"},
      {"an argument past the explicit size", defaults(), MP_ERR_FORMAT, "argument 3 lies at"},
      {"a misaligned argument", defaults(), MP_ERR_FORMAT, "argument 3 lies at offset 26"},
      {"a segment smaller than the arguments", defaults(), MP_ERR_FORMAT,
       "code object's argument segment has 20"},
      {"local memory", defaults(), MP_ERR_FORMAT, "__local memory"},
      {"a reserved fact", defaults(), MP_ERR_FORMAT, "reserved kernel fact"},
      {"nonzero padding", defaults(), MP_ERR_FORMAT, "nonzero padding before code object 0"},
      {"trailing bytes", defaults(), MP_ERR_FORMAT, "4 unexpected trailing bytes"},
  };
  cases[0].spec.version = 2;
  cases[1].spec.reserved = 1;
  cases[2].spec.count = 0;
  cases[3].spec.targets[1] = "sm_90";
  cases[4].spec.machine = 190;
  cases[5].spec.abi_version = 1;
  cases[6].spec.elf_flags[0] = 0x73f;
  cases[7].spec.explicit_size = 26;
  cases[8].spec.scalar_offset = 26;
  cases[8].spec.explicit_size = 30;
  cases[9].spec.kernarg_size = 20;
  cases[10].spec.first_kind = MP_KERNEL_ARG_LOCAL;
  cases[11].spec.reserved_fact = 1;
  cases[12].spec.pad_byte = 1;
  cases[13].spec.trailing = 4;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    build(&b, cases[i].spec);
    expect_refused(cases[i].what, "rocm", b.data, b.size, cases[i].code, cases[i].needle);
  }
  return finish("test_rocm_payload");
}
