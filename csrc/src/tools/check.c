/* mp_library_check_file (modpack.h): every check a load makes short of running the library,
 * so that tools (modpack inspect, verify, extract) and the loader give one verdict on every
 * file: the checks before dlopen (load/file_check.c), the blob's symbol as dlsym will find it
 * against the seal (files/elf_dynamic.c), the blob and its payloads read from the file instead
 * of the library's image, and the weight files the library refers to. mp_library_check_blob
 * makes the last two for a blob its caller located (a .tar export's, read in the archive). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* realpath */
#endif
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/blob.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/registry.h"
#include "files/blob_index.h"
#include "files/elf_check.h"
#include "files/elf_dynamic.h"
#include "library/load_settings.h"
#include "library/weights_kind.h"
#include "load/file_check.h"
#include "load/kinds.h"

/* The blob where the seal says, parsed from a read-only mapping of the file (payload checksums
 * as |flags| say), and each payload a registered loader knows given to it: what a load does
 * after dlopen, from the file instead of the library's image. */
static mp_status_t check_blob(int fd, const char* path, const mp_seal_v1_t* seal, uint32_t flags,
                              int32_t* out_stage, uint64_t* out_unregistered) {
  void* map = mmap(NULL, (size_t)seal->file_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return mp_errorf(MP_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
  const uint8_t* blob_bytes = (const uint8_t*)map + seal->blob_offset;
  mp_blob_t* blob = NULL;
  *out_stage = MP_CHECK_BLOB;
  mp_status_t status = mp_blob_parse((mp_const_byte_span_t){blob_bytes, seal->blob_size},
                                     flags | MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, &blob);
  if (status == MP_OK && !(flags & MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)) {
    *out_stage = MP_CHECK_PAYLOADS;
    status = mp_blob_verify_payloads_in_file(blob, fd, seal->blob_offset);
  }
  if (status != MP_OK) status = mp_error_prefix(status, "'%s': %s", path, MP_BLOB_SYMBOL);
  mp_blob_info_t info = {0};
  if (blob) mp_blob_info(blob, &info);
  for (uint64_t i = 0; status == MP_OK && i < info.module_count; ++i) {
    mp_blob_module_t entry;
    mp_blob_module(blob, i, &entry);
    if (strcmp(entry.type_key, MP_LIB_TYPE_KEY) == 0) continue;
    if (mp_registry_find_kind(entry.type_key)) {
      mp_module_t* module = NULL;
      status = mp_module_load_from_entry(
          entry.type_key,
          (mp_const_byte_span_t){blob_bytes + entry.payload_offset, entry.payload_size},
          mp_blob_module_flags(blob, i), &module);
      mp_module_release(module);
    } else {
      /* The runtime's own kinds only: a kind registered by the caller (a Python loader, say)
       * is the caller's to judge, and running it here would run it twice. A kind nobody
       * registered fails the load, and fails the check with the load's words, last: it says
       * nothing of the file's soundness, which the other checks still establish. */
      mp_loader_fn_t fn;
      void* user_data;
      if (mp_registry_find_loader(entry.type_key, &fn, &user_data) != MP_OK &&
          *out_unregistered == UINT64_MAX)
        *out_unregistered = i;
      mp_error_clear();
    }
    if (status != MP_OK)
      status = mp_error_prefix(status, "'%s': module[%llu] (%s)", path,
                               (unsigned long long)i, entry.type_key);
  }
  mp_blob_free(blob);
  munmap(map, (size_t)seal->file_size);
  return status;
}

/* The load's refusal of module |index|, whose kind no loader is registered for here, read
 * again from the blob's index (checked already). */
static mp_status_t refuse_unregistered(int fd, const char* path, const mp_seal_v1_t* seal,
                                       uint64_t index, int32_t* stage) {
  uint8_t* bytes = NULL;
  mp_blob_t* blob = NULL;
  MP_RETURN_IF_ERROR(mp_blob_index_read(fd, seal, path, &bytes, &blob));
  mp_blob_module_t entry;
  mp_blob_module(blob, index, &entry);
  mp_loader_fn_t fn;
  void* user_data;
  *stage = MP_CHECK_LOADERS;
  mp_status_t status = mp_registry_find_loader(entry.type_key, &fn, &user_data);
  if (status != MP_OK)
    status = mp_error_prefix(status, "'%s': module[%llu] (%s)", path, (unsigned long long)index,
                             entry.type_key);
  else
    *stage = MP_CHECK_WEIGHT_FILES; /* registered meanwhile, by another thread */
  mp_blob_free(blob);
  free(bytes);
  return status;
}

/* What a load checks after dlopen (library/blob_location.c), checked in the file: the
 * __dev_mblob that dlsym will find is there exactly when the seal places a blob, at the address
 * and with the size the seal gives. */
static mp_status_t check_blob_symbol(int fd, const char* path, uint64_t file_size,
                                     const mp_seal_v1_t* seal) {
  mp_elf_symbol_t sym;
  MP_RETURN_IF_ERROR(mp_elf_dynamic_symbol(fd, file_size, path, MP_BLOB_SYMBOL, &sym));
  if (sym.found != (seal->blob_size > 0))
    return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: its seal says it has %s blob, but %s is %s",
                     path, seal->blob_size ? "a" : "no", MP_BLOB_SYMBOL,
                     sym.found ? "defined" : "not found");
  /* dlsym gives a TLS symbol's or an IFUNC's address at run time: never the seal's. */
  if (sym.found && (sym.value != seal->blob_vaddr || sym.size != seal->blob_size ||
                    sym.type == STT_TLS || sym.type == STT_GNU_IFUNC))
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: %s is at %#" PRIx64 " with %" PRIu64
                     " bytes, its seal says %#" PRIx64 " with %" PRIu64,
                     path, MP_BLOB_SYMBOL, sym.value, sym.size, seal->blob_vaddr, seal->blob_size);
  return MP_OK;
}

/* The blob where |seal| places it, each payload, then the weight files it refers to, then
 * whether each module's kind has a loader here. */
static mp_status_t check_contents(int fd, const char* path, const mp_seal_v1_t* seal,
                                  const mp_load_settings_t* settings, int32_t* stage) {
  mp_status_t status = MP_OK;
  uint64_t unregistered = UINT64_MAX; /* the first module whose kind has no loader here */
  if (seal->blob_size > 0)
    status = check_blob(fd, path, seal, settings->flags, stage, &unregistered);
  mp_weight_files_t held = {0};
  if (status == MP_OK) {
    *stage = MP_CHECK_WEIGHT_FILES;
    status = mp_weights_precheck(fd, seal, path, settings, &held);
  }
  mp_weight_files_release(&held);
  if (status == MP_OK && unregistered != UINT64_MAX)
    status = refuse_unregistered(fd, path, seal, unregistered, stage);
  return status;
}

/* The checks' start: |path| resolved and opened (*fd, -1 when not), the kinds registered, the
 * options copied into |settings| (freed by the caller when this succeeds). */
static mp_status_t open_file(const char* path, const char* caller, const mp_load_options_t* options,
                             char resolved[PATH_MAX], mp_load_settings_t* settings, int* fd,
                             mp_file_id_t* id) {
  *fd = -1;
  if (!path) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "%s: NULL path", caller);
  if (!realpath(path, resolved))
    return mp_errorf(errno == ENOENT ? MP_ERR_NOT_FOUND : MP_ERR_IO, "cannot open '%s': %s", path,
                     strerror(errno));
  mp_load_register_kinds();
  MP_RETURN_IF_ERROR(mp_load_settings_copy(options, 0, settings));
  mp_status_t status = mp_file_open(resolved, fd, id);
  if (status != MP_OK) {
    *fd = -1;
    mp_load_settings_free(settings);
  }
  return status;
}

mp_status_t mp_library_check_file(const char* path, const mp_load_options_t* options,
                                  int32_t* out_stage) {
  int32_t stage_slot;
  int32_t* stage = out_stage ? out_stage : &stage_slot;
  *stage = MP_CHECK_FILE;
  char resolved[PATH_MAX];
  mp_load_settings_t settings;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(
      open_file(path, "mp_library_check_file", options, resolved, &settings, &fd, &id));
  mp_seal_v1_t seal;
  bool sealed = false;
  *stage = MP_CHECK_SEAL;
  /* A library for another machine is checked as on a machine of its kind, and refused for its
   * machine last: that says nothing against the file, and the rest may. */
  char other_machine[512] = "";
  if (mp_elf_check_machine(fd, id.size, resolved) != MP_OK) {
    snprintf(other_machine, sizeof other_machine, "%s", mp_error_message());
    mp_error_clear();
  }
  mp_status_t status = mp_file_check_before_dlopen(fd, resolved, &id, settings.flags,
                                                   other_machine[0] != '\0', &seal, &sealed);
  if (status == MP_OK && sealed) status = check_blob_symbol(fd, resolved, id.size, &seal);
  /* The file's own bytes first, then the files it refers to (a load checks those before
   * dlopen, the blob after: the verdict differs from a load only in which of two faults it
   * names first). */
  if (status == MP_OK && sealed) status = check_contents(fd, resolved, &seal, &settings, stage);
  if (status == MP_OK && other_machine[0]) {
    *stage = MP_CHECK_MACHINE;
    status = mp_errorf(MP_ERR_INCOMPATIBLE, "%s", other_machine);
  }
  if (status == MP_OK) *stage = 0;
  close(fd);
  mp_load_settings_free(&settings);
  return status;
}

mp_status_t mp_library_check_blob(const char* path, uint64_t blob_offset, uint64_t blob_size,
                                  const mp_load_options_t* options, int32_t* out_stage) {
  int32_t stage_slot;
  int32_t* stage = out_stage ? out_stage : &stage_slot;
  *stage = MP_CHECK_FILE;
  char resolved[PATH_MAX];
  mp_load_settings_t settings;
  int fd;
  mp_file_id_t id;
  MP_RETURN_IF_ERROR(
      open_file(path, "mp_library_check_blob", options, resolved, &settings, &fd, &id));
  *stage = MP_CHECK_BLOB;
  mp_status_t status = MP_OK;
  if (!mp_in_bounds(blob_offset, blob_size, id.size))
    status = mp_errorf(MP_ERR_FORMAT,
                       "'%s': its blob (%" PRIu64 " bytes at offset %" PRIu64
                       ") does not fit the %" PRIu64 "-byte file",
                       resolved, blob_size, blob_offset, id.size);
  /* Where the caller located it: what a seal would say of a library holding it. */
  mp_seal_v1_t seal = {.file_size = id.size, .blob_offset = blob_offset, .blob_size = blob_size};
  if (status == MP_OK) status = check_contents(fd, resolved, &seal, &settings, stage);
  if (status == MP_OK) *stage = 0;
  close(fd);
  mp_load_settings_free(&settings);
  return status;
}
