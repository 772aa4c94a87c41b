/* ctest: the "cuda" kind's payload parser (layout: modpack/kinds/cuda.h) and its public
 * variant-selection rule. Loading never touches the driver, so this runs without a GPU. Public
 * API only. */
#include "modpack/kinds/cuda.h"
#include "modpack/kinds/kernel.h"
#include "test_util.h"

static const char PTX[] = ".version 8.0\n.target sm_80\n.address_size 64\n";

typedef struct {
  uint32_t version, reserved, variant_count;
  uint32_t cubin_kind;     /* the first variant's kind (a cubin) */
  const char* cubin_arch;  /* and its arch name */
  uint32_t ptx_arch_count; /* the second variant (PTX) lists this many arches */
  uint32_t fatbin_arches;  /* the third variant (fatbin) lists this many */
  const char* kernel2;     /* the second kernel's name */
  const char* shared_tag;  /* the first kernel's last launch tag */
  int bad_elf, ptx_no_nul, bad_padding, trailing;
  /* version 2 only: the module's name (NULL: unnamed), k's symbol, k's fixed launch tag (which
   * replaces shared_tag among the passed ones), copy's hidden NULL pointer */
  const char* module_name;
  const char* symbol;
  const char* fixed_tag;
  uint8_t null_kind;
  /* version 2: the kernels each variant defines, {count, index...}; NULL: all of them */
  const uint32_t* kernels[3];
} spec_t;

static spec_t defaults(void) {
  spec_t s = {1,
              0,
              3,
              MP_CUDA_VARIANT_CUBIN,
              "sm_80",
              1,
              2,
              "copy",
              "dyn_shared_memory",
              0,
              0,
              0,
              0,
              NULL,
              NULL,
              NULL,
              MP_KERNEL_ARG_NULL,
              {NULL, NULL, NULL}};
  return s;
}

static spec_t version2(void) {
  spec_t s = defaults();
  s.version = 2;
  s.module_name = "gemm";
  s.symbol = "_Z1kPvi";
  s.fixed_tag = "dyn_shared_memory";
  return s;
}

/* Version 2: the variant's kernel list. */
static void put_kernels(buf_t* b, spec_t s, int variant) {
  if (s.version < 2) return;
  const uint32_t* list = s.kernels[variant];
  put_u32(b, list ? list[0] : 0);
  for (uint32_t i = 0; list && i < list[0]; ++i) put_u32(b, list[1 + i]);
}

static void build(buf_t* b, spec_t s) {
  memset(b, 0, sizeof *b);
  put_u32(b, s.version);
  put_u32(b, s.reserved);
  put_u32(b, s.variant_count);
  if (s.version >= 2) {
    if (s.module_name)
      put_str(b, s.module_name);
    else
      put_u32(b, 0);
  }
  const uint64_t cubin_size = 16, ptx_size = sizeof PTX, fatbin_size = 24;
  /* cubin */
  put_u32(b, s.cubin_kind);
  put_u32(b, 1);
  put_str(b, s.cubin_arch);
  put_u64(b, cubin_size);
  put_kernels(b, s, 0);
  /* ptx */
  if (s.variant_count > 1) {
    put_u32(b, MP_CUDA_VARIANT_PTX);
    put_u32(b, s.ptx_arch_count);
    for (uint32_t i = 0; i < s.ptx_arch_count; ++i) put_str(b, "compute_80");
    put_u64(b, ptx_size);
    put_kernels(b, s, 1);
  }
  /* fatbin */
  if (s.variant_count > 2) {
    put_u32(b, MP_CUDA_VARIANT_FATBIN);
    put_u32(b, s.fatbin_arches);
    for (uint32_t i = 0; i < s.fatbin_arches; ++i) put_str(b, i % 2 ? "compute_90" : "sm_90a");
    put_u64(b, fatbin_size);
    put_kernels(b, s, 2);
  }
  /* kernels: k(void* p, int32 n) with grid, block and shared memory; copy(float16* x) */
  put_u32(b, 2);
  put_str(b, "k");
  put_u32(b, 2);
  put(b, (uint8_t[4]){MP_KERNEL_ARG_BUFFER, kDLOpaqueHandle, 8, 1}, 4);
  put(b, (uint8_t[4]){MP_KERNEL_ARG_SCALAR, kDLInt, 32, 1}, 4);
  static const char* const tags[6] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                      "threadIdx.x", "threadIdx.y", "threadIdx.z"};
  bool v2 = s.version >= 2, fixed = v2 && s.fixed_tag;
  put_u32(b, fixed ? 6 : 7);
  for (int i = 0; i < 6; ++i) put_str(b, tags[i]);
  if (!fixed) put_str(b, s.shared_tag);
  if (v2) {
    if (s.symbol)
      put_str(b, s.symbol);
    else
      put_u32(b, 0);
    put_u32(b, fixed ? 1 : 0);
    if (fixed) {
      put_str(b, s.fixed_tag);
      put_u64(b, 4096);
    }
  }
  put_str(b, s.kernel2);
  put_u32(b, v2 ? 2 : 1);
  put(b, (uint8_t[4]){MP_KERNEL_ARG_BUFFER, kDLFloat, 16, 1}, 4);
  if (v2) put(b, (uint8_t[4]){s.null_kind, kDLOpaqueHandle, 64, 1}, 4);
  put_u32(b, 6);
  for (int i = 0; i < 6; ++i) put_str(b, tags[i]);
  if (v2) {
    put_u32(b, 0);
    put_u32(b, 0);
  }
  /* the variants' bytes, each 64-byte aligned */
  pad_to(b, MP_CUDA_VARIANT_ALIGNMENT);
  put(b,
      s.bad_elf ? "NOTELF.........."
                : "\x7f"
                  "ELF............",
      cubin_size);
  if (s.variant_count > 1) {
    pad_to(b, MP_CUDA_VARIANT_ALIGNMENT); /* 48 bytes after the 16-byte cubin */
    if (s.bad_padding) b->data[b->size - 1] = 1;
    put(b, PTX, ptx_size);
    if (s.ptx_no_nul) b->data[b->size - 1] = '\n';
  }
  if (s.variant_count > 2) {
    pad_to(b, MP_CUDA_VARIANT_ALIGNMENT);
    put(b,
        "\x50\xed\x55\xba"
        "fatbin..............",
        fatbin_size);
  }
  for (int i = 0; i < s.trailing; ++i) put_u8(b, 0);
}

static void select_rule(void) {
  const char* arches[] = {"sm_80", "compute_80", "sm_90a", "compute_90"};
  int32_t index = -1;
  CHECK(mp_cuda_select_variant(arches, 4, 8, 0, &index) == MP_OK && index == 0, "8.0: exact SASS");
  CHECK(mp_cuda_select_variant(arches, 4, 8, 6, &index) == MP_OK && index == 0,
        "8.6: compatible SASS");
  CHECK(mp_cuda_select_variant(arches, 4, 9, 0, &index) == MP_OK && index == 2, "9.0: sm_90a");
  CHECK(mp_cuda_select_variant(arches, 4, 10, 0, &index) == MP_OK && index == 3,
        "10.0: the newest PTX");
  CHECK(mp_cuda_select_variant(arches, 4, 7, 5, &index) == MP_ERR_UNAVAILABLE && index == -1 &&
            strstr(mp_error_message(), "compute capability 7.5") != NULL,
        "7.5: nothing runs: %s", mp_error_message());
  const char* bad[] = {"sm_8"};
  CHECK(mp_cuda_select_variant(bad, 1, 8, 0, &index) == MP_ERR_INVALID_ARGUMENT,
        "not an arch name");
}

/* Version 2: a named module, a kernel found by a C++ name with its lowered symbol, dynamic
 * shared memory fixed by the record, a hidden NULL pointer. */
static void version2_payload(buf_t* b) {
  build(b, version2());
  mp_module_t* m = load("cuda", b->data, b->size);
  if (m) {
    const char* text = describe(m);
    CHECK(starts_with(text, "{\"name\": \"gemm\", "), "%s", text);
    CHECK(strstr(text, "{\"name\": \"k\", \"symbol\": \"_Z1kPvi\"") != NULL, "%s", text);
    CHECK(strstr(text, "\"fixed\": {\"dyn_shared_memory\": 4096}}") != NULL, "%s", text);
    CHECK(strstr(text, "\"args\": [\"float16*\", \"null void*\"]") != NULL, "%s", text);
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "gemm/copy", 1, &f) == MP_OK && f, "qualified: %s",
          mp_error_message());
    if (f) {
      mp_value_t ret;
      CHECK(mp_function_call(f, NULL, 0, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "copy: expected 7 arguments (1 kernel") != NULL,
            "the NULL pointer is not passed: %s", mp_error_message());
      mp_function_release(f);
    }
    CHECK(mp_module_get_function(m, "k", 0, &f) == MP_OK && f, "lookup");
    if (f) {
      mp_value_t ret;
      CHECK(mp_function_call(f, NULL, 0, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "k: expected 8 arguments (2 kernel") != NULL,
            "fixed launch values are not passed: %s", mp_error_message());
      mp_function_release(f);
    }
    mp_module_release(m);
  }
  every_prefix_refused("cuda", b);
  spec_t s = version2();
  s.fixed_tag = "blockIdx.y";
  build(b, s);
  expect_refused("a tag passed and fixed", "cuda", b->data, b->size, MP_ERR_FORMAT,
                 "launch tag 'blockIdx.y' twice");
  s = version2();
  s.null_kind = 4;
  build(b, s);
  expect_refused("argument kind 4", "cuda", b->data, b->size, MP_ERR_FORMAT, "has kind 4");
  s = version2();
  s.module_name = "a/b";
  build(b, s);
  expect_refused("module name with '/'", "cuda", b->data, b->size, MP_ERR_FORMAT,
                 "module name 'a/b' contains '/'");

  /* Images made one kernel at a time: the cubin defines k, the PTX copy, the fatbin both. */
  static const uint32_t only_k[] = {1, 0}, only_copy[] = {1, 1}, both[] = {2, 0, 1};
  static const uint32_t out_of_range[] = {1, 2}, out_of_order[] = {2, 1, 0};
  s = version2();
  s.kernels[0] = only_k;
  s.kernels[1] = only_copy;
  s.kernels[2] = both;
  build(b, s);
  m = load("cuda", b->data, b->size);
  if (m) {
    CHECK(mp_module_function_count(m) == 2, "two kernels");
    mp_module_release(m);
  }
  every_prefix_refused("cuda", b);
  s.kernels[2] = out_of_range;
  build(b, s);
  expect_refused("a variant names kernel 2", "cuda", b->data, b->size, MP_ERR_FORMAT,
                 "variant 2 names kernel 2 of 2");
  s.kernels[2] = out_of_order;
  build(b, s);
  expect_refused("kernel indices out of order", "cuda", b->data, b->size, MP_ERR_FORMAT,
                 "variant 2 lists its kernels out of order");
  s.kernels[1] = only_k;
  s.kernels[2] = only_k;
  build(b, s);
  expect_refused("a kernel no variant defines", "cuda", b->data, b->size, MP_ERR_FORMAT,
                 "no variant defines kernel copy");
}

int main(void) {
  static buf_t b;
  build(&b, defaults());
  mp_module_t* m = load("cuda", b.data, b.size);
  if (m) {
    CHECK(mp_module_function_count(m) == 2, "two kernels");
    const char* text = describe(m);
    CHECK(strstr(text, "{\"arch\": \"sm_80\", \"kind\": \"cubin\", \"offset\": ") != NULL, "%s",
          text);
    /* The PTX variant's offset says where its text is in the payload (tools write it out). */
    static const char ptx_key[] = "\"kind\": \"ptx\", \"offset\": ";
    const char* ptx = strstr(text, ptx_key);
    unsigned long long offset = 0;
    size_t size = 0;
    CHECK(ptx && sscanf(ptx + strlen(ptx_key), "%llu, \"size\": %zu", &offset, &size) == 2, "%s",
          text);
    CHECK(size == sizeof PTX && offset + size <= b.size &&
              memcmp(b.data + offset, PTX, sizeof PTX) == 0,
          "the PTX at offset %llu: %s", offset, text);
    CHECK(strstr(text, "\"ptx_isa\": \"8.0\"") != NULL, "%s", text);
    CHECK(strstr(text, "\"arch\": \"sm_90a+compute_90\", \"kind\": \"fatbin\"") != NULL, "%s",
          text);
    CHECK(strstr(text, "\"contains\": [\"sm_90a\", \"compute_90\"]") != NULL, "%s", text);
    CHECK(strstr(text, "\"args\": [\"void*\", \"int32\"], \"launch\": [\"blockIdx.x\"") != NULL,
          "%s", text);
    CHECK(strstr(text, "\"dyn_shared_memory\"]") != NULL, "%s", text);
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "k", 0, &f) == MP_OK && f, "lookup");
    if (f) {
      mp_value_t ret;
      CHECK(mp_function_call(f, NULL, 0, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "k: expected 9 arguments") != NULL,
            "a wrong count is refused before the driver: %s", mp_error_message());
      mp_function_release(f);
    }
    mp_module_release(m);
  }
  CHECK(strcmp(mp_kind_launch_tag("cuda", 6), "dyn_shared_memory") == 0, "the last cuda tag");
  CHECK(mp_kind_launch_tag("cuda", 7) == NULL && mp_kind_launch_tag("const", 0) == NULL,
        "no tags past the end, none for const");
  select_rule();

  struct {
    const char* what;
    spec_t spec;
    mp_status_t code;
    const char* needle;
  } cases[] = {
      {"version 3", defaults(), MP_ERR_INCOMPATIBLE, "version 3 is not supported"},
      {"reserved", defaults(), MP_ERR_FORMAT, "reserved header field"},
      {"no variants", defaults(), MP_ERR_FORMAT, "variant count"},
      {"variant kind 3", defaults(), MP_ERR_FORMAT, "unknown kind 3"},
      {"cubin labelled as PTX", defaults(), MP_ERR_FORMAT, "cubin variant 0 is labelled"},
      {"not an arch", defaults(), MP_ERR_FORMAT, "'sm_8'"},
      {"PTX with two arches", defaults(), MP_ERR_FORMAT, "ptx variant 1 lists 2"},
      {"fatbin with 65 arches", defaults(), MP_ERR_FORMAT, "fatbin variant 2 lists 65"},
      {"kernel declared twice", defaults(), MP_ERR_FORMAT, "kernel k is declared twice"},
      {"unknown launch tag", defaults(), MP_ERR_FORMAT, "unknown launch tag 'gridDim.x'"},
      {"a launch tag twice", defaults(), MP_ERR_FORMAT, "launch tag 'blockIdx.x' twice"},
      {"cubin without ELF magic", defaults(), MP_ERR_FORMAT, "ELF magic"},
      {"PTX without NUL", defaults(), MP_ERR_FORMAT, "not NUL-terminated"},
      {"non-zero padding", defaults(), MP_ERR_FORMAT, "nonzero padding"},
      {"trailing bytes", defaults(), MP_ERR_FORMAT, "2 unexpected trailing bytes"},
  };
  cases[0].spec.version = 3;
  cases[1].spec.reserved = 1;
  cases[2].spec.variant_count = 0;
  cases[3].spec.cubin_kind = 3;
  cases[4].spec.cubin_arch = "compute_80";
  cases[5].spec.cubin_arch = "sm_8";
  cases[6].spec.ptx_arch_count = 2;
  cases[7].spec.fatbin_arches = 65;
  cases[8].spec.kernel2 = "k";
  cases[9].spec.shared_tag = "gridDim.x";
  cases[10].spec.shared_tag = "blockIdx.x";
  cases[11].spec.bad_elf = 1;
  cases[12].spec.ptx_no_nul = 1;
  cases[13].spec.bad_padding = 1;
  cases[14].spec.trailing = 2;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    build(&b, cases[i].spec);
    expect_refused(cases[i].what, "cuda", b.data, b.size, cases[i].code, cases[i].needle);
  }
  build(&b, defaults());
  every_prefix_refused("cuda", &b);
  version2_payload(&b);
  return finish("test_cuda_payload");
}
