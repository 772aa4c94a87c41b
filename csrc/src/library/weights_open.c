/* Weight files opened and checked for a tree (library/weights_open.h). */
#include "library/weights_open.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "files/signatures.h"

static void hex8(const uint8_t* digest, char out[17]) {
  for (int i = 0; i < 8; ++i) snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

/* Integrity and, for a signed tree, authenticity of |file|, as |settings| ask. |trusted|: the
 * file's content digest is vouched for already (a signed library recorded it); otherwise a
 * signed load needs the file's own signature. */
mp_status_t mp_weights_check_file(mp_weight_file_t* file, const mp_load_settings_t* settings,
                                  bool trusted) {
  uint32_t checks = (settings->flags & MP_LOAD_SKIP_PAYLOAD_CHECKSUMS) ? 0
                                                                      : MP_WEIGHTS_CHECK_CHECKSUMS;
  bool signed_load = settings->num_keys > 0;
  if (signed_load && !trusted && mp_weight_file_format(file) != MP_WEIGHTS_FORMAT_MODPACK)
    return mp_errorf(MP_ERR_UNTRUSTED,
                     "'%s' is a %s file, which carries no signature: a signed load takes it "
                     "only through a signed library that records its digests (weights_module), "
                     "or as a modpack weight file signed itself (save_weights, modpack sign)",
                     mp_weight_file_path(file),
                     mp_weight_file_format(file) == MP_WEIGHTS_FORMAT_GGUF ? "GGUF"
                                                                            : "safetensors");
  if (signed_load && !trusted) {
    mp_signature_info_t infos[8];
    uint64_t count;
    bool ok;
    MP_RETURN_IF_ERROR(mp_weight_file_signatures(file, settings->keys, settings->num_keys, infos,
                                                 8, &count, &ok));
    MP_RETURN_IF_ERROR(mp_signatures_require_trusted(infos, count, count < 8 ? count : 8,
                                                     ok, mp_weight_file_path(file)));
  }
  if ((signed_load || (settings->flags & MP_LOAD_CHECK_DIGESTS)) &&
      !(settings->flags & MP_LOAD_VERIFY_ON_FIRST_USE))
    checks |= MP_WEIGHTS_CHECK_DIGESTS;
  return mp_weight_file_check(file, checks);
}

/* |file| is the file the library at |library_path| recorded as |ref| says, handing out its
 * specs: refused otherwise, naming the first array that differs, else saying the contents
 * do. */
mp_status_t mp_weights_check_recorded(mp_weight_file_t* file, const mp_weights_reference_t* ref,
                                      const char* library_path, bool signed_load) {
  /* The refusal's words are made only for a refusal: every load checks every file. */
  if (mp_weight_file_match(file, ref->specs, ref->count, false, "") != MP_OK) {
    mp_error_clear();
    char what[600];
    snprintf(what, sizeof what, "'%s' (which was exported with it)", library_path);
    return mp_weight_file_match(file, ref->specs, ref->count, false, what);
  }
  const uint8_t* digest = ref->digest;
  const char* file_name = ref->file_name;
  if (!mp_weight_file_records_match(file, ref->records_digest))
    return mp_errorf(signed_load ? MP_ERR_UNTRUSTED : MP_ERR_MISMATCH,
                     "'%s' is read by several weights modules of '%s' that recorded different "
                     "checksums or digests of its arrays: export the tree again",
                     mp_weight_file_path(file), library_path);
  if (memcmp(mp_weight_file_digest(file), digest, 32) == 0) return MP_OK;
  char have[17], want[17];
  hex8(mp_weight_file_digest(file), have);
  hex8(digest, want);
  return mp_errorf(signed_load ? MP_ERR_UNTRUSTED : MP_ERR_MISMATCH,
                   "'%s' is not the weight file '%s' was exported with: it has the arrays the "
                   "library reads, with other contents (content digest sha256:%s..., the library "
                   "records %s as sha256:%s...); to run the library with these weights, load it "
                   "with its own and swap them in (swap_weights)",
                   mp_weight_file_path(file), library_path, have, file_name, want);
}

mp_status_t mp_weights_open_checked(const char* path, const mp_weights_reference_t* ref,
                                    const char* library_path,
                                    const mp_load_settings_t* settings,
                                    mp_weight_file_t** out_file) {
  *out_file = NULL;
  mp_weight_file_t* file;
  MP_RETURN_IF_ERROR(ref->records_digest
                         ? mp_weight_file_open_recorded(path, ref->records, ref->record_count,
                                                        ref->records_digest, &file)
                         : mp_weight_file_open(path, &file));
  mp_status_t status =
      ref->digest ? mp_weights_check_recorded(file, ref, library_path, settings->num_keys > 0)
                  : MP_OK;
  if (status == MP_OK) status = mp_weights_check_file(file, settings, ref->digest != NULL);
  if (status != MP_OK) {
    mp_weight_file_release(file);
    return status;
  }
  *out_file = file;
  return MP_OK;
}

