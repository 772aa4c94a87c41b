/* Signature blocks (load/signatures.h): the trailer found and checked by reading the file's
 * last bytes; the records verified over a copy of the file held in memory, so that what was
 * verified is what gets loaded. */
#include "load/signatures.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "load/crypto.h"
#include "load/file.h"

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

mp_status_t mp_signatures_verify(const uint8_t* file, uint64_t size, const char* path,
                                 const mp_trusted_key_t* keys, uint64_t num_keys,
                                 mp_signature_info_t* out_infos, uint64_t capacity,
                                 uint64_t* out_count, bool* out_trusted) {
  *out_count = 0;
  *out_trusted = false;
  if (size < MP_SIGNATURES_TRAILER_SIZE || memcmp(file + size - 8, MP_SIGNATURES_MAGIC, 8) != 0)
    return MP_OK; /* not signed: no records */
  uint64_t signed_size, count;
  MP_RETURN_IF_ERROR(
      decode_trailer(file + size - MP_SIGNATURES_TRAILER_SIZE, size, path, &signed_size, &count));
  /* The key ids of the trusted keys, once. */
  uint8_t ids[16][32];
  if (num_keys > 16)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "at most 16 trusted keys, not %" PRIu64, num_keys);
  for (uint64_t k = 0; k < num_keys; ++k)
    MP_RETURN_IF_ERROR(mp_crypto_sha256(keys[k].public_key, 32, ids[k]));
  /* What every record signs: the context, then the SHA-256 of the sealed file. */
  const size_t context = sizeof MP_SIGNATURE_CONTEXT - 1;
  uint8_t message[sizeof MP_SIGNATURE_CONTEXT - 1 + 32];
  memcpy(message, MP_SIGNATURE_CONTEXT, context);
  bool hashed = false;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* record = file + signed_size + i * MP_SIGNATURE_SIZE;
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
      if (!hashed) { /* every byte before the block: code, payloads, seal */
        MP_RETURN_IF_ERROR(mp_crypto_sha256(file, signed_size, message + context));
        hashed = true;
      }
      bool valid;
      MP_RETURN_IF_ERROR(mp_crypto_ed25519_verify(keys[k].public_key,
                                                  record + offsetof(mp_signature_v1_t, signature),
                                                  message, sizeof message, &valid));
      info.valid = valid;
      *out_trusted = *out_trusted || valid;
    }
    if (i < capacity && out_infos) out_infos[i] = info;
  }
  *out_count = count;
  return MP_OK;
}
