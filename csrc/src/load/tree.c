/* A library's module tree from its blob (load/tree.h): the blob reader validates everything,
 * each entry's loader (found by type key in the registry) builds its module over the payload
 * in place, and the CSR import tree is wired. The "_lib" entry becomes the library's node,
 * whose context is installed so host code can reach the rest. */
#include "load/tree.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blob.h"
#include "core/error.h"
#include "core/module.h"
#include "core/registry.h"
#include "core/trace.h"
#include "library/context.h"
#include "library/library.h"

/* The library's node, context installed (a reused node keeps the context it has). */
static mp_status_t library_node(mp_library_t* library, mp_module_t** out_node, bool* out_reused) {
  MP_RETURN_IF_ERROR(mp_library_node(library, out_node, out_reused));
  if (!*out_reused) mp_context_install(library, *out_node);
  return MP_OK;
}

mp_status_t mp_tree_host_only(mp_library_t* library, mp_module_t** out_root) {
  bool reused;
  return library_node(library, out_root, &reused);
}

/* Module |index| of the blob, made by its loader (or the library's node for "_lib"). */
static mp_status_t load_entry(mp_library_t* library, mp_const_byte_span_t bytes,
                              const mp_blob_module_t* entry, uint32_t entry_flags,
                              uint32_t load_flags, uint64_t index, mp_module_t** out_module,
                              bool* out_reused) {
  const char* path = mp_library_path(library);
  if (strcmp(entry->type_key, MP_LIB_TYPE_KEY) == 0)
    return library_node(library, out_module, out_reused);
  mp_loader_fn_t loader;
  void* user_data;
  MP_RETURN_IF_ERROR_PREFIX(mp_registry_find_loader(entry->type_key, &loader, &user_data),
                            "'%s': module[%" PRIu64 "]", path, index);
  if (entry_flags & MP_FORMAT_ENTRY_CODE_FRAMES) {
    const mp_kind_t* kind = mp_registry_find_kind(entry->type_key);
    if (!kind || !kind->code_frames)
      return mp_errorf(MP_ERR_FORMAT,
                       "'%s': module[%" PRIu64 "] (%s) says its code is in code frames, which "
                       "only the built-in device kinds store; the library is damaged",
                       path, index, entry->type_key);
  }
  mp_loader_args_t args = {
      .type_key = entry->type_key,
      .payload = {bytes.data + entry->payload_offset, entry->payload_size},
      .library = library,
      .entry_flags = entry_flags,
      .load_flags = load_flags,
      .library_path = path,
  };
  mp_error_clear();
  mp_status_t status = loader(user_data, &args, out_module);
  if (status == MP_OK && !*out_module)
    status = mp_errorf(MP_ERR_INTERNAL, "loader returned no module");
  if (status != MP_OK) {
    if (mp_error_message()[0] == '\0')
      mp_errorf(status, "loader failed with status %d", (int)status);
    return mp_error_prefix(status, "'%s': loading module[%" PRIu64 "] (%s)", path, index,
                           entry->type_key);
  }
  if (!mp_module_library(*out_module)) mp_library_adopt_module(library, *out_module);
  return MP_OK;
}

/* Validates the blob; payload checksums are a separate, timed phase. */
static mp_status_t parse_blob(mp_library_t* library, mp_const_byte_span_t bytes, uint32_t flags,
                              int holes_fd, uint64_t file_offset, mp_blob_t** out_blob) {
  const char* path = mp_library_path(library);
  double clock = mp_trace_now_ms();
  char detail[128];
  MP_RETURN_IF_ERROR_PREFIX(mp_blob_parse(bytes, flags | MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, out_blob),
                            "'%s': %s", path, MP_BLOB_SYMBOL);
  mp_blob_info_t info;
  mp_blob_info(*out_blob, &info);
  if (mp_trace_enabled()) {
    snprintf(detail, sizeof detail, "%" PRIu64 " modules, %" PRIu64 " bytes", info.module_count,
             info.blob_size);
    mp_trace_phase(path, "index", &clock, detail);
  }
  if (flags & MP_LOAD_SKIP_PAYLOAD_CHECKSUMS) {
    mp_trace_phase(path, "checksums", &clock, "skipped (MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)");
    return MP_OK;
  }
  mp_status_t status = mp_blob_verify_payloads_in_file(*out_blob, holes_fd, file_offset);
  if (status != MP_OK) {
    mp_blob_free(*out_blob);
    *out_blob = NULL;
    return mp_error_prefix(status, "'%s': %s", path, MP_BLOB_SYMBOL);
  }
  if (mp_trace_enabled()) {
    uint64_t hashed = info.blob_size - info.index_size; /* payloads and their padding */
    double seconds = (mp_trace_now_ms() - clock) / 1e3;
    snprintf(detail, sizeof detail, "XXH3 over %" PRIu64 " bytes, %.2f GB/s", hashed,
             seconds > 0 ? (double)hashed / seconds / 1e9 : 0.0);
    mp_trace_phase(path, "checksums", &clock, detail);
  }
  return MP_OK;
}

mp_status_t mp_tree_build(mp_library_t* library, mp_const_byte_span_t bytes, uint32_t flags,
                          int holes_fd, uint64_t file_offset, mp_module_t** out_root) {
  mp_blob_t* blob = NULL;
  MP_RETURN_IF_ERROR(parse_blob(library, bytes, flags, holes_fd, file_offset, &blob));
  mp_library_keep_extras(library, blob);
  double clock = mp_trace_now_ms();
  mp_blob_info_t info;
  mp_blob_info(blob, &info);
  mp_module_t** modules = calloc(info.module_count, sizeof *modules);
  bool* reused = calloc(info.module_count, sizeof *reused);
  if (!modules || !reused) {
    free(modules), free(reused);
    mp_blob_free(blob);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory loading %" PRIu64 " modules",
                     info.module_count);
  }
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; i < info.module_count && status == MP_OK; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    status = load_entry(library, bytes, &entry, mp_blob_module_flags(blob, i), flags, i,
                        &modules[i], &reused[i]);
  }
  for (uint64_t i = 0; i < info.module_count && status == MP_OK; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (reused[i]) continue; /* a surviving "library" node keeps the imports it has */
    for (uint64_t k = 0; k < entry.child_count && status == MP_OK; ++k)
      status =
          mp_module_append_import(modules[i], modules[mp_blob_child(blob, entry.first_edge + k)]);
  }
  mp_trace_phase(mp_library_path(library), "loaders + tree", &clock, "");
  /* The tree now holds its own references; keep the root's. */
  for (uint64_t i = 1; i < info.module_count; ++i) mp_module_release(modules[i]);
  if (status == MP_OK) {
    *out_root = modules[0];
  } else {
    mp_module_release(modules[0]);
  }
  free(modules);
  free(reused);
  mp_blob_free(blob);
  return status;
}
