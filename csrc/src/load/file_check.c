/* The checks of a library file before dlopen (load/file_check.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "load/file_check.h"

#include <elf.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "files/elf_check.h"
#include "files/elf_dynamic.h"
#include "files/seal.h"
#include "modpack/weights.h"

/* A modpack weight file (modpack/weights.h) is data, not a library: refused by name before
 * dlopen would call it an invalid ELF header. */
static mp_status_t refuse_weight_file(int fd, const char* path, const mp_file_id_t* id) {
  uint8_t magic[sizeof MP_WEIGHTS_MAGIC - 1];
  if (id->size < sizeof magic || !mp_file_read_at(fd, magic, sizeof magic, 0) ||
      memcmp(magic, MP_WEIGHTS_MAGIC, sizeof magic) != 0)
    return MP_OK;
  return mp_errorf(MP_ERR_FORMAT,
                   "'%s' is a modpack weight file (.mpw), not a library: open it with "
                   "modpack.load_weights(path) (C: mp_weights_load), or load the library that "
                   "refers to it with weights= (C: mp_load_options_t.weights)",
                   path);
}

/* A library made by Apache TVM, whether or not the load allows unsealed libraries: dlopen
 * would fail on TVM's runtime symbols, or run TVM's constructors. */
static mp_status_t refuse_tvm_library(int fd, const char* path, const mp_file_id_t* id) {
  static const char* const tvm_symbols[] = {"__tvm_ffi__library_bin", "__tvm_dev_mblob"};
  for (size_t i = 0; i < sizeof tvm_symbols / sizeof tvm_symbols[0]; ++i)
    if (mp_elf_defines_symbol(fd, id->size, tvm_symbols[i]))
      return mp_errorf(MP_ERR_INCOMPATIBLE,
                       "'%s' is a library made by Apache TVM (it defines %s), not by modpack's "
                       "export: modpack does not load TVM's libraries, but `modpack inspect` and "
                       "`modpack extract` read them (module tree, kernels, device code)",
                       path, tvm_symbols[i]);
  return MP_OK;
}

/* Whether modpack's export made the ELF file: it defines the blob or the module context's
 * library slot, found by the section headers' symbol table or, where a tool dropped those,
 * as the dynamic loader would find them. */
static bool made_by_modpack(int fd, const char* path, const mp_file_id_t* id) {
  static const char* const symbols[] = {MP_BLOB_SYMBOL, MP_CTX_LIBRARY_SYMBOL};
  for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; ++i) {
    if (mp_elf_defines_symbol(fd, id->size, symbols[i])) return true;
    mp_elf_symbol_t found;
    if (mp_elf_dynamic_symbol(fd, id->size, path, symbols[i], &found) != MP_OK) mp_error_clear();
    else if (found.found) return true;
  }
  return false;
}

/* What a file that carries no seal is, for the message: one made by TVM; one modpack's export
 * made, which lost its seal (allow_unsealed loads it); or one modpack did not make at all (not
 * ELF, damaged, or another tool's library), which allow_unsealed would only dlopen. */
static mp_status_t unsealed(int fd, const char* path, const mp_file_id_t* id) {
  MP_RETURN_IF_ERROR(refuse_tvm_library(fd, path, id));
  uint8_t magic[SELFMAG];
  bool elf = id->size >= sizeof magic && mp_file_read_at(fd, magic, sizeof magic, 0) &&
             memcmp(magic, ELFMAG, SELFMAG) == 0;
  if (elf && made_by_modpack(fd, path, id))
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' carries no modpack seal, though modpack's export made it: it was "
                     "stripped after export (strip, objcopy and packagers' strip steps drop the "
                     "seal of libraries exported by a modpack before the version 2 seal; those "
                     "exported now keep it, docs/format.md), or rewritten by another tool, or "
                     "exported by a modpack before the seal. Export it again with this modpack "
                     "(or ship it unstripped); or load it without the check (load_module(path, "
                     "allow_unsealed=True); C: MP_LOAD_ALLOW_UNSEALED), which leaves its code, "
                     "headers and blob index unchecked before dlopen",
                     path);
  if (!elf)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' was not made by modpack: it is not a shared library (%" PRIu64
                     " bytes, no ELF header) and carries no modpack seal; load_module loads the "
                     "libraries modpack's export_library writes (.so, .tar), and "
                     "modpack.load_weights its weight files",
                     path, id->size);
  if (mp_elf_check_fd(fd, id->size, path) != MP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", mp_error_message());
    return mp_errorf(MP_ERR_FORMAT, "%s (and it carries no modpack seal)", why);
  }
  return mp_errorf(MP_ERR_FORMAT,
                   "'%s' was not made by modpack: it carries no modpack seal, no blob (%s) and "
                   "no modpack symbols, so another tool built this shared library; load_module "
                   "loads only the libraries modpack's export_library writes (load this one "
                   "with ctypes.CDLL or dlopen)",
                   path, MP_BLOB_SYMBOL);
}

mp_status_t mp_file_check_before_dlopen(int fd, const char* path, const mp_file_id_t* id,
                                        uint32_t flags, bool any_machine, mp_seal_v1_t* seal,
                                        bool* sealed) {
  *sealed = false;
  MP_RETURN_IF_ERROR(refuse_weight_file(fd, path, id));
  MP_RETURN_IF_ERROR(mp_elf_check_kind(fd, id->size, path, any_machine));
  mp_status_t status = mp_seal_check_fd(fd, id->size, path, seal);
  *sealed = status == MP_OK;
  if (status != MP_ERR_NOT_FOUND) return status;
  if (!(flags & MP_LOAD_ALLOW_UNSEALED)) return unsealed(fd, path, id);
  MP_RETURN_IF_ERROR(refuse_tvm_library(fd, path, id));
  return mp_elf_check_fd(fd, id->size, path);
}

