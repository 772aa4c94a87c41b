/* ctest: the "opencl" kind's payload parser (layout: modpack/kinds/opencl.h) and the kernel
 * records it shares with cuda (modpack/kinds/kernel.h). Loading never touches OpenCL, so this
 * runs anywhere. Public API only. */
#include "modpack/kinds/kernel.h"
#include "modpack/kinds/opencl.h"
#include "test_util.h"

static const char* const SOURCE = "kernel void scale(global float* x, int n) {}\n";

/* A record: |name|, |args| as (kind, code, bits, lanes) quadruples, |tags| launch tags. */
static void record(buf_t* b, const char* name, int nargs, const uint8_t (*args)[4], int ntags,
                   const char* const* tags) {
  put_str(b, name);
  put_u32(b, (uint32_t)nargs);
  for (int i = 0; i < nargs; ++i) put(b, args[i], 4);
  put_u32(b, (uint32_t)ntags);
  for (int i = 0; i < ntags; ++i) put_str(b, tags[i]);
}

static const char* const TAGS[6] = {"global.x", "global.y", "global.z",
                                    "local.x",  "local.y",  "local.z"};
static const uint8_t SCALE_ARGS[2][4] = {{MP_KERNEL_ARG_BUFFER, kDLFloat, 32, 1},
                                         {MP_KERNEL_ARG_SCALAR, kDLInt, 32, 1}};
static const uint8_t UNTYPED[1][4] = {{MP_KERNEL_ARG_BUFFER, kDLOpaqueHandle, 8, 1}};
/* Version 2 only: a hidden NULL pointer after the untyped one. */
static const uint8_t UNTYPED_AND_NULL[2][4] = {{MP_KERNEL_ARG_BUFFER, kDLOpaqueHandle, 8, 1},
                                               {MP_KERNEL_ARG_NULL, kDLOpaqueHandle, 8, 1}};

typedef struct {
  uint32_t version, reserved;
  const char* name;       /* of the first kernel */
  uint32_t arg_count;     /* claimed by the first kernel */
  uint8_t first_arg_kind; /* of the first kernel's first argument */
  uint8_t first_arg_bits;
  int ntags;                /* of the first kernel */
  const char* first_tag;    /* replaces its first tag */
  const char* second_tag;   /* replaces its second tag */
  uint32_t binary_key_size; /* of the binary */
  int trailing;             /* extra bytes at the end */
  const char* options;      /* build options: a version 2 payload (NULL: version 1) */
  const char* module_name;  /* version 2: the module's name (NULL: unnamed) */
  const char* fixed_tag;    /* version 2: copy_any's fixed launch tag */
} spec_t;

static spec_t defaults(void) {
  spec_t s = {1, 0, "scale", 2, MP_KERNEL_ARG_BUFFER, 32, 6, NULL, NULL, 5, 0, NULL, NULL, NULL};
  return s;
}

static void build(buf_t* b, spec_t s) {
  memset(b, 0, sizeof *b);
  put_u32(b, s.options ? 2 : s.version);
  put_u32(b, s.reserved);
  put_u64(b, strlen(SOURCE));
  put(b, SOURCE, strlen(SOURCE));
  if (s.options) {
    put_str(b, s.options);
    if (s.module_name)
      put_str(b, s.module_name);
    else
      put_u32(b, 0);
  }
  put_u32(b, 2);
  uint8_t args[2][4];
  memcpy(args, SCALE_ARGS, sizeof args);
  args[0][0] = s.first_arg_kind;
  args[0][2] = s.first_arg_bits;
  const char* tags[6];
  memcpy(tags, TAGS, sizeof tags);
  if (s.first_tag) tags[0] = s.first_tag;
  if (s.second_tag) tags[1] = s.second_tag;
  put_str(b, s.name);
  put_u32(b, s.arg_count);
  for (uint32_t i = 0; i < 2 && i < s.arg_count; ++i) put(b, args[i], 4);
  put_u32(b, (uint32_t)s.ntags);
  for (int i = 0; i < s.ntags; ++i) put_str(b, tags[i % 6]);
  if (!s.options) {
    record(b, "copy_any", 1, UNTYPED, 6, TAGS);
  } else {         /* version 2 records: a symbol and fixed launch values */
    put_u32(b, 0); /* scale: its own symbol */
    put_u32(b, 0); /* nothing fixed */
    record(b, "copy_any", 2, UNTYPED_AND_NULL, 3, TAGS);
    put_str(b, "copy_any_impl");
    put_u32(b, 3);
    static const char* const fixed[3] = {"local.x", "local.y", "local.z"};
    for (int i = 0; i < 3; ++i) {
      put_str(b, i == 0 && s.fixed_tag ? s.fixed_tag : fixed[i]);
      put_u64(b, i == 0 ? 64 : 1);
    }
  }
  put_u32(b, 1); /* one binary */
  put_u32(b, s.binary_key_size);
  put(b, "a/b/c", s.binary_key_size < 5 ? s.binary_key_size : 5);
  put_u64(b, 4);
  put(b, "\x01\x02\x03\x04", 4);
  for (int i = 0; i < s.trailing; ++i) put_u8(b, 0);
}

int main(void) {
  static buf_t b;
  build(&b, defaults());
  mp_module_t* m = load("opencl", b.data, b.size);
  if (m) {
    CHECK(mp_module_function_count(m) == 2, "two kernels");
    CHECK(strcmp(mp_module_function_name(m, 0), "scale") == 0, "first kernel's name");
    CHECK(mp_module_function_name(m, 2) == NULL, "no third kernel");
    const char* text = describe(m);
    CHECK(strstr(text, "\"source_bytes\": 45") != NULL, "%s", text);
    CHECK(strstr(text, "{\"name\": \"scale\", \"args\": [\"float32*\", \"int32\"]") != NULL, "%s",
          text);
    CHECK(strstr(text, "\"args\": [\"void*\"]") != NULL, "untyped pointer: %s", text);
    CHECK(strstr(text, "\"source_offset\": 16,") != NULL, "the source after the header: %s", text);
    /* The binary's offset says where its bytes are in the payload (tools write them out). */
    static const char binary_key[] = "\"binaries\": [{\"device\": \"a/b/c\", \"offset\": ";
    const char* binary = strstr(text, binary_key);
    unsigned long long offset = 0;
    CHECK(binary && sscanf(binary + strlen(binary_key), "%llu", &offset) == 1 &&
              offset + 4 <= b.size && memcmp(b.data + offset, "\x01\x02\x03\x04", 4) == 0,
          "%s", text);
    CHECK(strstr(text, ", \"size\": 4, \"stored_bytes\": 4, \"raw_bytes\": 4, "
                       "\"encoding\": \"raw\"}]") != NULL,
          "%s", text);
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "scale", 0, &f) == MP_OK && f, "lookup");
    if (f) {
      mp_value_t args[1] = {mp_int(1)}, ret;
      CHECK(mp_function_call(f, args, 1, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(), "scale: expected 8 arguments") != NULL,
            "a wrong count is refused before OpenCL is touched: %s", mp_error_message());
      mp_function_release(f);
    }
    CHECK(mp_module_get_function(m, "absent", 0, &f) == MP_ERR_NOT_FOUND, "absent kernel");
    mp_module_release(m);
  }
  for (uint32_t i = 0;; ++i) {
    const char* tag = mp_kind_launch_tag("opencl", i);
    if (i < 6) CHECK(tag && strcmp(tag, TAGS[i]) == 0, "launch tag %u is %s", i, tag ? tag : "-");
    if (!tag) {
      CHECK(i == 6, "opencl has 6 launch tags, not %u", i);
      break;
    }
  }

  static char long_name[MP_KERNEL_MAX_NAME + 2];
  memset(long_name, 'k', MP_KERNEL_MAX_NAME + 1);
  struct {
    const char* what;
    spec_t spec;
    mp_status_t code;
    const char* needle;
  } cases[] = {
      {"version 3", defaults(), MP_ERR_INCOMPATIBLE, "version 3 is not supported"},
      {"build options with NUL", defaults(), MP_ERR_FORMAT, "no NUL byte"},
      {"reserved", defaults(), MP_ERR_FORMAT, "reserved header field"},
      {"empty kernel name", defaults(), MP_ERR_FORMAT, "kernel name is empty"},
      {"kernel name too long", defaults(), MP_ERR_FORMAT, "exceeds 1024"},
      {"257 arguments", defaults(), MP_ERR_FORMAT, "argument count of 257 exceeds 256"},
      {"argument kind 3", defaults(), MP_ERR_FORMAT, "has kind 3"},
      {"0-bit argument", defaults(), MP_ERR_FORMAT, "bits 0"},
      {"17 launch tags", defaults(), MP_ERR_FORMAT, "launch tag count of 17 exceeds 16"},
      {"unknown launch tag", defaults(), MP_ERR_FORMAT, "unknown launch tag 'global.w'"},
      {"a launch tag twice", defaults(), MP_ERR_FORMAT, "launch tag 'global.x' twice"},
      {"empty binary key", defaults(), MP_ERR_FORMAT, "program binary"},
      {"trailing bytes", defaults(), MP_ERR_FORMAT, "3 unexpected trailing bytes"},
  };
  cases[0].spec.version = 3;
  cases[1].spec.options = "-DA=1";
  cases[2].spec.reserved = 1;
  cases[3].spec.name = "";
  cases[4].spec.name = long_name;
  cases[5].spec.arg_count = 257;
  cases[6].spec.first_arg_kind = 3;
  cases[7].spec.first_arg_bits = 0;
  cases[8].spec.ntags = 17;
  cases[9].spec.first_tag = "global.w";
  cases[10].spec.second_tag = "global.x";
  cases[11].spec.binary_key_size = 0;
  cases[12].spec.trailing = 3;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    build(&b, cases[i].spec);
    if (cases[i].spec.options) b.data[16 + strlen(SOURCE) + 4 + 3] = 0; /* "-DA\0" */
    expect_refused(cases[i].what, "opencl", b.data, b.size, cases[i].code, cases[i].needle);
  }
  spec_t v2 = defaults();
  v2.options = "-DT=float -cl-mad-enable";
  v2.module_name = "fp32";
  build(&b, v2);
  m = load("opencl", b.data, b.size);
  if (m) {
    const char* text = describe(m);
    CHECK(strstr(text, "\"build_options\": \"-DT=float -cl-mad-enable\"") != NULL, "%s", text);
    CHECK(starts_with(text, "{\"name\": \"fp32\", "), "the name comes first: %s", text);
    CHECK(strstr(text,
                 "{\"name\": \"copy_any\", \"symbol\": \"copy_any_impl\", \"args\": "
                 "[\"void*\", \"null void*\"], \"launch\": [\"global.x\", \"global.y\", "
                 "\"global.z\"], \"fixed\": {\"local.x\": 64, \"local.y\": 1, "
                 "\"local.z\": 1}}") != NULL,
          "%s", text);
    CHECK(mp_module_name(m) && strcmp(mp_module_name(m), "fp32") == 0, "named");
    mp_function_t* f = NULL;
    CHECK(mp_module_get_function(m, "fp32/copy_any", 0, &f) == MP_OK && f, "qualified lookup: %s",
          mp_error_message());
    if (f) {
      mp_value_t ret;
      CHECK(mp_function_call(f, NULL, 0, &ret) == MP_ERR_INVALID_ARGUMENT &&
                strstr(mp_error_message(),
                       "copy_any: expected 4 arguments (1 kernel arguments + 3 launch") != NULL,
            "the NULL argument and fixed launch values are not passed: %s", mp_error_message());
      mp_function_release(f);
    }
    CHECK(mp_module_get_function(m, "fp16/copy_any", 0, &f) == MP_ERR_NOT_FOUND,
          "another module's name");
    mp_module_release(m);
  }
  every_prefix_refused("opencl", &b);
  spec_t bad = v2;
  bad.module_name = "a/b";
  build(&b, bad);
  expect_refused("module name with '/'", "opencl", b.data, b.size, MP_ERR_FORMAT,
                 "module name 'a/b' contains '/'");
  bad = v2;
  bad.fixed_tag = "global.x";
  build(&b, bad);
  expect_refused("a tag both passed and fixed", "opencl", b.data, b.size, MP_ERR_FORMAT,
                 "launch tag 'global.x' twice");
  bad = v2;
  bad.first_arg_kind = 4;
  build(&b, bad);
  expect_refused("argument kind 4", "opencl", b.data, b.size, MP_ERR_FORMAT, "has kind 4");
  build(&b, defaults());
  every_prefix_refused("opencl", &b);
  return finish("test_opencl_payload");
}
