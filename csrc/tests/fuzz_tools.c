/* libFuzzer target over what the read-only tools parse before anything else looks at a file:
 * the seal (the version 1 trailer, and the version 2 note found through the ELF program
 * headers), the blob index as preflight reads it ahead of any mapping, each device kind's
 * preflight head parser (the part of a payload that says which code a device would get), and
 * every check a load makes short of running a library (mp_library_check_file, the verdict
 * inspect, verify and extract share with the loader). Nothing is mapped for use or run.
 *
 * The first input byte chooses what the rest is:
 *   FILE  a whole file: its seal checked, preflight asked for each device form, and the
 *         loader's checks made;
 *   BLOB  a blob in a file of its own, as preflight reads a .tar export's (mp_preflight_blob),
 *         for each device form;
 *   SAFETENSORS, GGUF  a file of that format (mp_safetensors_read_index, mp_gguf_read_index):
 *         its index read, checked against the file (every array inside the data section, in
 *         order, disjoint, its bytes its dtype and shape say, GGUF's aligned; the header the
 *         file's bytes) and freed;
 *   then one selector per built-in kind, in mp_builtin_kind's order (so a new kind is fuzzed
 *   without an edit here): the bytes are a payload of that kind, answered for each device the
 *   kind names, through the kind's own head parser and an in-memory reader (nothing for a kind
 *   without devices, such as const).
 * The preflight heads are reached through the runtime's internal registry (core/registry.h),
 * as fuzz_dltensor.c reaches the signature checker, and the weight formats' readers through
 * their internal header (weights/foreign_index.h); see README.md in this folder.
 * MODPACK_FUZZ_VERBOSE=1 prints each weight file input's verdict. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"
#include "core/registry.h"
#include "modpack/kind.h"
#include "modpack/modpack.h"
#include "weights/foreign_index.h"

enum {
  FILE_INPUT = 0,
  BLOB_INPUT = 1,
  SAFETENSORS_INPUT = 2,
  GGUF_INPUT = 3,
  FIRST_KIND = 4,
  MAX_KINDS = 16
};

/* The device forms every file and blob is asked about (modpack preflight --device ...). */
static const char* const DEVICES[] = {"cuda:sm_90", "cuda:sm_75", "rocm:gfx90a:xnack-",
                                      "rocm:gfx1100", "opencl", "vulkan"};

/* What follows "KIND:" for each kind's own answers (NULL: the kind alone). */
static const char* const ARCHES[] = {NULL, "sm_90", "sm_80", "gfx90a:xnack-", "gfx906",
                                     "gfx11-generic"};

static const mp_kind_t* kinds[MAX_KINDS];
static uint32_t kind_count;

static void find_kinds(void) {
  /* Registering the built-in kinds is an entry point's job: a preflight of nothing does it. */
  mp_preflight_result_t result = {.struct_size = sizeof result};
  uint64_t length = 0;
  (void)mp_preflight("/nonexistent", "opencl", NULL, 0, &length, &result);
  for (uint32_t i = 0; mp_builtin_kind(i) && kind_count < MAX_KINDS; ++i)
    kinds[kind_count++] = mp_registry_find_kind(mp_builtin_kind(i)); /* NULL: none */
}

static const char* scratch_path(void) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/modpack-fuzz-tools-%d", (int)getpid());
  return path;
}

static bool write_scratch(const uint8_t* data, size_t size) {
  FILE* f = fopen(scratch_path(), "wb");
  if (!f) return false;
  size_t wrote = fwrite(data, 1, size, f);
  return fclose(f) == 0 && wrote == size;
}

static void ask_every_device(bool blob, uint64_t size) {
  char text[2048];
  for (size_t d = 0; d < sizeof DEVICES / sizeof DEVICES[0]; ++d) {
    mp_preflight_result_t result = {.struct_size = sizeof result};
    uint64_t length = 0;
    if (blob)
      (void)mp_preflight_blob(scratch_path(), 0, size, DEVICES[d], text, sizeof text, &length,
                              &result);
    else
      (void)mp_preflight(scratch_path(), DEVICES[d], text, sizeof text, &length, &result);
  }
}

static void fuzz_file(const uint8_t* data, size_t size) {
  if (!write_scratch(data, size)) return;
  mp_seal_v1_t seal;
  (void)mp_seal_check_file(scratch_path(), &seal);
  /* What the writers of seals ask: the coverage, with the note's fields unread. Two ranges and
   * masks of room, so that counts larger than the room are exercised too. */
  int fd = open(scratch_path(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    mp_file_range_t ranges[2], masks[2];
    uint64_t range_count = 0, mask_count = 0, note = 0;
    (void)mp_seal_coverage(fd, ranges, 2, &range_count, masks, 2, &mask_count, &note);
    close(fd);
  }
  ask_every_device(false, size);
  static const uint32_t flags[] = {0, MP_LOAD_SKIP_PAYLOAD_CHECKSUMS};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    mp_load_options_t options = {.struct_size = sizeof options, .flags = flags[i]};
    int32_t stage = 0;
    (void)mp_library_check_file(scratch_path(), &options, &stage);
  }
  unlink(scratch_path());
}

static void fuzz_blob(const uint8_t* data, size_t size) {
  if (!write_scratch(data, size)) return;
  ask_every_device(true, size);
  unlink(scratch_path());
}

/* A finding: an index the reader accepted that says what the file cannot hold. */
#define REQUIRE(cond, ...)                         \
  do {                                             \
    if (!(cond)) {                                 \
      fprintf(stderr, "fuzz_tools: %s: ", #cond);  \
      fprintf(stderr, __VA_ARGS__);                \
      fputc('\n', stderr);                         \
      abort();                                     \
    }                                              \
  } while (0)

/* An accepted index against the file it came from: the header is the file's first bytes, the
 * data section follows it to the end, and every array lies inside the data section, after
 * the one before it, with exactly the bytes its dtype and shape (and blocks) say. */
static void check_index(const mp_foreign_index_t* x, const uint8_t* data, uint64_t size) {
  REQUIRE(x->header_size == x->data_offset && x->data_offset <= size &&
              x->data_size == size - x->data_offset,
          "header %" PRIu64 ", data [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64, x->header_size,
          x->data_offset, x->data_size, size);
  REQUIRE(memcmp(x->header, data, x->header_size) == 0, "the header is not the file's");
  REQUIRE(x->alignment && (x->alignment & (x->alignment - 1)) == 0, "alignment %u", x->alignment);
  REQUIRE(x->metadata_json && x->metadata_json[0] == '{' &&
              x->metadata_json[strlen(x->metadata_json) - 1] == '}',
          "metadata %s", x->metadata_json);
  uint64_t end = x->data_offset;
  for (uint64_t i = 0; i < x->count; ++i) {
    const mp_foreign_array_t* a = &x->arrays[i];
    REQUIRE(a->name && a->name[0] && strlen(a->name) <= MP_WEIGHTS_MAX_NAME, "array %" PRIu64,
            i);
    REQUIRE(a->offset >= x->data_offset && a->size <= size - a->offset &&
                (x->format != MP_WEIGHTS_FORMAT_GGUF ||
                 (a->offset - x->data_offset) % x->alignment == 0),
            "'%s' at [%" PRIu64 ", +%" PRIu64 ")", a->name, a->offset, a->size);
    REQUIRE(a->size == 0 || a->offset >= end, "'%s' overlaps the array before it", a->name);
    if (a->size) end = a->offset + a->size;
    unsigned __int128 bytes = (a->dtype.bits * a->dtype.lanes + 7) / 8, elements = 1;
    REQUIRE(a->ndim >= 0 && a->ndim <= MP_WEIGHTS_MAX_NDIM, "'%s': ndim %d", a->name, a->ndim);
    for (int32_t d = 0; d < a->ndim; ++d) {
      REQUIRE(a->shape[d] >= 0, "'%s': shape[%d] %" PRId64, a->name, (int)d, a->shape[d]);
      bytes *= (uint64_t)a->shape[d];
    }
    REQUIRE(bytes == a->size, "'%s': %" PRIu64 " bytes, not what its shape holds", a->name,
            a->size);
    REQUIRE(a->logical_ndim >= 0 && a->logical_ndim <= MP_WEIGHTS_MAX_NDIM && a->block_elements &&
                a->block_bytes,
            "'%s': logical ndim %d, block %u, %u", a->name, a->logical_ndim, a->block_elements,
            a->block_bytes);
    for (int32_t d = 0; d < a->logical_ndim; ++d) elements *= (uint64_t)a->logical_shape[d];
    REQUIRE(elements % a->block_elements == 0 &&
                elements / a->block_elements * a->block_bytes == a->size,
            "'%s': %" PRIu64 " bytes, not what its blocks hold", a->name, a->size);
  }
}

/* The bytes as a weight file of |format| read by its reader, an accepted index checked. */
static void fuzz_weight_file(mp_weights_format_t format, const uint8_t* data, size_t size) {
  if (!write_scratch(data, size)) return;
  int fd = open(scratch_path(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    mp_foreign_index_t index;
    /* Half the inputs come with their first bytes read already, as the loader hands them. */
    mp_const_byte_span_t head = {data, size % 2 ? (size < 4096 ? size : 4096) : 0};
    mp_status_t status = format == MP_WEIGHTS_FORMAT_GGUF
                             ? mp_gguf_read_index(fd, size, scratch_path(), head, &index)
                             : mp_safetensors_read_index(fd, size, scratch_path(), head, &index);
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("MODPACK_FUZZ_VERBOSE") != NULL;
    if (verbose)
      fprintf(stderr, "%s: %s (%" PRIu64 " arrays)\n",
              format == MP_WEIGHTS_FORMAT_GGUF ? "gguf" : "safetensors",
              status ? mp_error_message() : "read", status ? 0 : index.count);
    if (status == MP_OK) {
      check_index(&index, data, size);
      mp_foreign_index_free(&index);
    }
    mp_error_clear();
    close(fd);
  }
  unlink(scratch_path());
}

/* A payload in memory, read as preflight reads one from a file. */
typedef struct {
  const uint8_t* data;
  uint64_t size;
} memory_t;

static mp_status_t read_memory(void* context, uint64_t offset, uint64_t size,
                               const uint8_t** out) {
  const memory_t* m = context;
  if (offset > m->size || size > m->size - offset)
    return mp_errorf(MP_ERR_FORMAT, "the payload ends before byte %llu",
                     (unsigned long long)(offset + size));
  *out = m->data + offset;
  return MP_OK;
}

static void fuzz_head(const mp_kind_t* kind, const uint8_t* data, size_t size) {
  if (!kind || !kind->preflight) return;
  memory_t memory = {data, size};
  mp_payload_reader_t reader = {size, &memory, read_memory, 0};
  char text[4096];
  for (size_t a = 0; a < sizeof ARCHES / sizeof ARCHES[0]; ++a) {
    char canonical[256];
    if (kind->preflight->parse_device(ARCHES[a], canonical, sizeof canonical) != MP_OK) {
      mp_error_clear();
      continue;
    }
    mp_json_t json = {text, sizeof text, 0};
    bool fits = false;
    (void)kind->preflight->answer(kind, &reader, canonical, &json, &fits);
    mp_error_clear();
  }
  /* An OpenCL device is named by its key on a machine that has it (DEVICE "host"). */
  if (strcmp(kind->type_key, "opencl") == 0) {
    mp_json_t json = {text, sizeof text, 0};
    bool fits = false;
    (void)kind->preflight->answer(kind, &reader, "p/d/v", &json, &fits);
    mp_error_clear();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!kind_count) find_kinds();
  if (size == 0) return 0;
  uint32_t selector = data[0] % (FIRST_KIND + kind_count);
  if (selector == FILE_INPUT)
    fuzz_file(data + 1, size - 1);
  else if (selector == BLOB_INPUT)
    fuzz_blob(data + 1, size - 1);
  else if (selector == SAFETENSORS_INPUT)
    fuzz_weight_file(MP_WEIGHTS_FORMAT_SAFETENSORS, data + 1, size - 1);
  else if (selector == GGUF_INPUT)
    fuzz_weight_file(MP_WEIGHTS_FORMAT_GGUF, data + 1, size - 1);
  else if (selector >= FIRST_KIND)
    fuzz_head(kinds[selector - FIRST_KIND], data + 1, size - 1);
  return 0;
}
