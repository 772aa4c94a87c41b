/* Signature blocks (files/signatures.h): the trailer found and checked by reading the file's
 * last bytes; the records checked against the message their signers signed, which the caller
 * computes over the bytes it goes on to use. */
#include "files/signatures.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/crypto.h"
#include "files/file.h"

static mp_status_t decode_trailer(const uint8_t* raw, uint64_t file_size, const char* path,
                                  uint64_t* out_signed_size, uint64_t* out_count) {
  uint64_t signed_size = mp_load_le64(raw + offsetof(mp_signatures_trailer_v1_t, signed_size));
  uint64_t count = mp_load_le64(raw + offsetof(mp_signatures_trailer_v1_t, count));
  uint32_t version = mp_load_le32(raw + offsetof(mp_signatures_trailer_v1_t, version));
  uint32_t reserved = mp_load_le32(raw + offsetof(mp_signatures_trailer_v1_t, reserved));
  if (version > MP_SIGNATURES_VERSION)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "'%s' has version %u signatures; this runtime reads version %d: upgrade "
                     "modpack",
                     path, version, MP_SIGNATURES_VERSION);
  if (version == 0 || reserved != 0 || count == 0 || count > MP_SIGNATURES_MAX ||
      signed_size > file_size ||
      file_size - signed_size != count * MP_SIGNATURE_SIZE + MP_SIGNATURES_TRAILER_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "'%s' is damaged: its signature block (%" PRIu64 " records after byte %" PRIu64
                     ") does not fit the %" PRIu64 "-byte file",
                     path, count, signed_size, file_size);
  *out_signed_size = signed_size;
  *out_count = count;
  return MP_OK;
}

mp_status_t mp_signatures_locate(int fd, uint64_t file_size, const char* path,
                                 uint64_t* out_signed_size, uint64_t* out_count) {
  *out_signed_size = file_size;
  *out_count = 0;
  uint8_t raw[MP_SIGNATURES_TRAILER_SIZE];
  if (file_size < sizeof raw) return MP_OK;
  if (!mp_file_read_at(fd, raw, sizeof raw, file_size - sizeof raw))
    return mp_errorf(MP_ERR_IO, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
  if (memcmp(raw + offsetof(mp_signatures_trailer_v1_t, magic), MP_SIGNATURES_MAGIC, 8) != 0)
    return MP_OK; /* not signed */
  return decode_trailer(raw, file_size, path, out_signed_size, out_count);
}

static const char* hex_id(const uint8_t id[32], char buffer[17]) {
  for (int i = 0; i < 8; ++i) snprintf(buffer + 2 * i, 3, "%02x", id[i]);
  return buffer;
}

mp_status_t mp_signatures_check(const uint8_t* records, uint64_t count, const char* path,
                                const mp_trusted_key_t* keys, uint64_t num_keys,
                                const uint8_t* message, uint64_t message_size,
                                mp_signature_info_t* out_infos, uint64_t capacity,
                                bool* out_trusted) {
  *out_trusted = false;
  if (num_keys > 16)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "at most 16 trusted keys, not %" PRIu64, num_keys);
  uint8_t ids[16][32]; /* the key ids of the trusted keys, once */
  for (uint64_t k = 0; k < num_keys; ++k)
    MP_RETURN_IF_ERROR(mp_crypto_sha256(keys[k].public_key, 32, ids[k]));
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* record = records + i * MP_SIGNATURE_SIZE;
    static const uint8_t zeros[16] = {0};
    if (memcmp(record, MP_SIGNATURE_MAGIC, 8) != 0 ||
        mp_load_le32(record + offsetof(mp_signature_v1_t, algorithm)) != MP_SIGNATURE_ED25519 ||
        mp_load_le32(record + offsetof(mp_signature_v1_t, reserved)) != 0 ||
        memcmp(record + offsetof(mp_signature_v1_t, reserved2), zeros, 16) != 0)
      return mp_errorf(MP_ERR_FORMAT, "'%s' is damaged: signature record %" PRIu64 " is malformed",
                       path, i);
    const uint8_t* key_id = record + offsetof(mp_signature_v1_t, key_id);
    mp_signature_info_t info = {.trusted = 0, .valid = 0};
    memcpy(info.key_id, key_id, 32);
    for (uint64_t k = 0; k < num_keys && !info.trusted; ++k) {
      if (memcmp(ids[k], key_id, 32) != 0) continue;
      info.trusted = 1;
      if (!message) continue;
      bool valid;
      MP_RETURN_IF_ERROR(mp_crypto_ed25519_verify(keys[k].public_key,
                                                  record + offsetof(mp_signature_v1_t, signature),
                                                  message, message_size, &valid));
      info.valid = valid;
      *out_trusted = *out_trusted || valid;
    }
    if (i < capacity && out_infos) out_infos[i] = info;
  }
  return MP_OK;
}

mp_status_t mp_signatures_require_trusted(const mp_signature_info_t* infos, uint64_t count,
                                          uint64_t known, bool trusted, const char* path) {
  if (trusted) return MP_OK;
  if (count == 0)
    return mp_errorf(MP_ERR_UNTRUSTED,
                     "'%s' is not signed, and a trusted signature is required: sign it (`modpack "
                     "sign FILE --key KEY.pem`) or load it without trusted_keys",
                     path);
  char id[17];
  for (uint64_t i = 0; i < known; ++i)
    if (infos[i].trusted)
      return mp_errorf(MP_ERR_UNTRUSTED,
                       "'%s' was changed after it was signed: the signature by trusted key %s "
                       "does not match its bytes; get the file again from its source",
                       path, hex_id(infos[i].key_id, id));
  return mp_errorf(MP_ERR_UNTRUSTED,
                   "'%s' is signed only by keys that are not trusted here (%" PRIu64
                   " signature%s, the first by key %s): add the signer's public key to the trusted "
                   "keys if it is one you trust",
                   path, count, count == 1 ? "" : "s", hex_id(infos[0].key_id, id));
}
