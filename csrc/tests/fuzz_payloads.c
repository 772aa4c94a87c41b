/* libFuzzer target over the runtime's trust boundary: the blob reader (mp_blob_parse), each
 * built-in kind's payload loader (mp_module_load_from_payload) and the weight file reader
 * (mp_weights_load), the code that reads bytes from a file before anything else looks at them.
 *
 * The first input byte chooses what the rest is: a blob (then each of its payloads goes to its
 * kind's loader too, its checksum skipped so mutated payloads get through), a weight file
 * (written to a scratch file and loaded, checksums and digests checked or not), a weights
 * payload (a reference to a weight file), or a payload of a built-in kind: selectors from
 * FIRST_BUILTIN on follow the one list of built-in kinds (mp_builtin_kind), so a new kind is
 * fuzzed without an edit here (make_fuzz_corpus.py numbers its seeds the same way). After
 * them come the same kinds again, loaded with the entry flag MP_FORMAT_ENTRY_CODE_FRAMES (the
 * payload's code in code frames, as export_library(compress_code=...) writes it): each frame
 * the payload holds is then also decoded, as a device's first use would (blob entries with
 * the flag take the same path). Whatever loads is exercised the way inspect and lookups do: listing,
 * describing, looking functions up, and reading every byte of every array view (so a view
 * reaching past its payload is caught by AddressSanitizer). Nothing is called: a kernel call
 * would start a device driver. Public API only; see README.md in this folder. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modpack/kind.h"

/* Selectors: 0 a blob, 1 a weight file, 2 a weights payload (the library layer's own kind), then
 * one per built-in kind, in mp_builtin_kind's order, then one per built-in kind again for its
 * payload with code frames. */
enum { BLOB = 0, WEIGHT_FILE = 1, WEIGHTS_PAYLOAD = 2, FIRST_BUILTIN = 3 };
static const char* const WEIGHTS_KIND = "weights";

static uint32_t builtin_count(void) {
  uint32_t n = 0;
  while (mp_builtin_kind(n)) ++n;
  return n;
}

/* Whether the blob's |type_key| has a loader the target feeds: a built-in kind or weights. */
static int fuzzed_kind(const char* type_key) {
  if (strcmp(type_key, WEIGHTS_KIND) == 0) return 1;
  for (uint32_t i = 0; mp_builtin_kind(i); ++i)
    if (strcmp(type_key, mp_builtin_kind(i)) == 0) return 1;
  return 0;
}

static volatile uint8_t sink;

static void exercise(mp_module_t* module) {
  uint64_t count = mp_module_function_count(module);
  for (uint64_t i = 0; i < count; ++i) {
    const char* name = mp_module_function_name(module, i);
    mp_function_t* function = NULL;
    if (name && mp_module_get_function(module, name, 0, &function) == MP_OK)
      mp_function_release(function);
  }
  count = mp_module_array_count(module);
  for (uint64_t i = 0; i < count; ++i) {
    const char* name;
    const DLTensor* array;
    if (mp_module_array_at(module, i, &name, &array) != MP_OK) continue;
    sink ^= (uint8_t)name[0];
    const uint8_t* bytes = array->data;
    for (uint64_t b = 0, n = mp_array_nbytes(array); b < n; ++b) sink ^= bytes[b];
  }
  char small[16], large[1 << 14];
  uint64_t needed = 0;
  mp_module_describe(module, small, sizeof small, &needed);
  mp_module_describe(module, large, sizeof large, &needed);
}

/* Frames are decoded only when a device first uses a piece, and the fuzzer starts no device:
 * decode every frame header at a 64-byte boundary of a payload that loaded (code is aligned so
 * in every kind) as that first use would, within a bound on what it may allocate. */
static void decode_frames(const uint8_t* data, size_t size) {
  for (size_t at = 0; at + MP_CODE_FRAME_HEADER_SIZE <= size; at += 64) {
    if (memcmp(data + at, MP_CODE_FRAME_MAGIC, 4) != 0) continue;
    uint64_t stored = 0; /* the frame's stored_size (u64 LE at 24): its exact extent */
    for (int k = 7; k >= 0; --k) stored = stored << 8 | data[at + 24 + (size_t)k];
    if (stored > size - at - MP_CODE_FRAME_HEADER_SIZE) continue;
    uint64_t extent = MP_CODE_FRAME_HEADER_SIZE + stored;
    uint32_t encoding;
    uint64_t raw_size;
    if (mp_code_frame_info(data + at, extent, &encoding, &raw_size) != MP_OK) continue;
    if (raw_size > (16u << 20)) continue;
    uint8_t* raw = malloc(raw_size ? (size_t)raw_size : 1);
    if (!raw) continue;
    if (mp_code_frame_decode(data + at, extent, raw, raw_size) == MP_OK)
      for (uint64_t b = 0; b < raw_size; ++b) sink ^= raw[b];
    free(raw);
  }
}

static void load_payload(const char* type_key, const uint8_t* data, size_t size,
                         uint32_t entry_flags) {
  mp_module_t* module = NULL;
  mp_const_byte_span_t payload = {data, size};
  if (mp_module_load_from_entry(type_key, payload, entry_flags, &module) != MP_OK) return;
  exercise(module);
  mp_module_release(module);
  if (entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) decode_frames(data, size);
}

static void load_blob(const uint8_t* data, size_t size, uint32_t flags) {
  mp_blob_t* blob = NULL;
  mp_const_byte_span_t bytes = {data, size};
  if (mp_blob_parse(bytes, flags, &blob) != MP_OK) return;
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  for (uint64_t i = 0; i < info.module_count; ++i) {
    mp_blob_module_t entry;
    if (mp_blob_module(blob, i, &entry) != MP_OK) continue;
    for (uint64_t k = 0; k < entry.child_count; ++k)
      sink ^= (uint8_t)mp_blob_child(blob, entry.first_edge + k);
    if (fuzzed_kind(entry.type_key))
      load_payload(entry.type_key, data + entry.payload_offset, entry.payload_size,
                   mp_blob_module_flags(blob, i));
  }
  mp_blob_free(blob);
}

/* The bytes as a weight file on disk (the reader takes paths), loaded with and without its
 * checks. */
static void load_weight_file(const uint8_t* data, size_t size) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/modpack-fuzz-%d.mpw", (int)getpid());
  FILE* f = fopen(path, "wb");
  if (!f) return;
  size_t wrote = fwrite(data, 1, size, f);
  fclose(f);
  if (wrote != size) return;
  static const uint32_t flags[] = {0, MP_LOAD_SKIP_PAYLOAD_CHECKSUMS | MP_LOAD_CHECK_DIGESTS};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    mp_load_options_t options = {.struct_size = sizeof options, .flags = flags[i]};
    mp_module_t* module = NULL;
    if (mp_weights_load(path, &options, &module) != MP_OK) continue;
    exercise(module);
    mp_module_release(module);
  }
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint32_t selectors, builtins;
  if (!selectors) {
    builtins = builtin_count();
    selectors = FIRST_BUILTIN + 2 * builtins;
  }
  if (size == 0) return 0;
  uint32_t selector = data[0] % selectors;
  if (selector == BLOB) {
    load_blob(data + 1, size - 1, 0);
    load_blob(data + 1, size - 1, MP_LOAD_SKIP_PAYLOAD_CHECKSUMS);
  } else if (selector == WEIGHT_FILE) {
    load_weight_file(data + 1, size - 1);
  } else if (selector == WEIGHTS_PAYLOAD) {
    load_payload(WEIGHTS_KIND, data + 1, size - 1, 0);
  } else if (selector < FIRST_BUILTIN + builtins) {
    load_payload(mp_builtin_kind(selector - FIRST_BUILTIN), data + 1, size - 1, 0);
  } else {
    load_payload(mp_builtin_kind(selector - FIRST_BUILTIN - builtins), data + 1, size - 1,
                 MP_FORMAT_ENTRY_CODE_FRAMES);
  }
  return 0;
}
