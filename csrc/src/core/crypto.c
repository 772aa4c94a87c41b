/* SHA-256 and Ed25519 from OpenSSL's libcrypto, loaded with dlopen (core/crypto.h). Only the
 * handful of functions below are used; their prototypes are OpenSSL's stable ABI (1.1.1 and
 * 3.x), declared here with opaque pointer types so that no OpenSSL header is needed to build. */
#include "core/crypto.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

enum { NID_ED25519 = 1087 }; /* EVP_PKEY_ED25519 */

typedef struct {
  void* (*md_ctx_new)(void);
  void (*md_ctx_free)(void*);
  const void* (*sha256)(void);
  int (*digest)(const void* data, size_t count, unsigned char* md, unsigned int* size,
                const void* type, void* engine);
  int (*digest_init)(void* ctx, const void* type, void* engine);
  int (*digest_update)(void* ctx, const void* data, size_t count);
  int (*digest_final)(void* ctx, unsigned char* md, unsigned int* size);
  void* (*pkey_new_raw_public_key)(int type, void* engine, const unsigned char* key, size_t len);
  int (*pkey_get_raw_public_key)(const void* pkey, unsigned char* pub, size_t* len);
  int (*pkey_id)(const void* pkey);
  void (*pkey_free)(void*);
  int (*digest_verify_init)(void* ctx, void** pctx, const void* type, void* engine, void* pkey);
  int (*digest_verify)(void* ctx, const unsigned char* sig, size_t siglen, const unsigned char* tbs,
                       size_t tbslen);
  void* (*bio_new_mem_buf)(const void* buf, int len);
  int (*bio_free)(void*);
  void* (*pem_read_bio_pubkey)(void* bio, void** out, void* callback, void* user);
  /* SHA-256 as every digest here asks for it: on 3.x fetched once (EVP_MD_fetch), since a
   * digest started with EVP_sha256() fetches its implementation anew each time, costlier
   * than hashing a weight file's header; on 1.1.1 EVP_sha256(). */
  const void* sha256_md;
} libcrypto_t;

static libcrypto_t crypto;
static bool crypto_loaded;
static char crypto_problem[256];
static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void load_libcrypto(void) {
  static const char* const names[] = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"};
  void* handle = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !handle; ++i)
    handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(crypto_problem, sizeof crypto_problem,
             "signature checks need OpenSSL's libcrypto (libcrypto.so.3 or .so.1.1), which "
             "could not be loaded: install it (Debian: apt-get install libssl3)");
    return;
  }
  struct {
    const char* name;
    void** slot;
  } wanted[] = {
      {"EVP_MD_CTX_new", (void**)&crypto.md_ctx_new},
      {"EVP_MD_CTX_free", (void**)&crypto.md_ctx_free},
      {"EVP_sha256", (void**)&crypto.sha256},
      {"EVP_Digest", (void**)&crypto.digest},
      {"EVP_DigestInit_ex", (void**)&crypto.digest_init},
      {"EVP_DigestUpdate", (void**)&crypto.digest_update},
      {"EVP_DigestFinal_ex", (void**)&crypto.digest_final},
      {"EVP_PKEY_new_raw_public_key", (void**)&crypto.pkey_new_raw_public_key},
      {"EVP_PKEY_get_raw_public_key", (void**)&crypto.pkey_get_raw_public_key},
      {"EVP_PKEY_free", (void**)&crypto.pkey_free},
      {"EVP_DigestVerifyInit", (void**)&crypto.digest_verify_init},
      {"EVP_DigestVerify", (void**)&crypto.digest_verify},
      {"BIO_new_mem_buf", (void**)&crypto.bio_new_mem_buf},
      {"BIO_free", (void**)&crypto.bio_free},
      {"PEM_read_bio_PUBKEY", (void**)&crypto.pem_read_bio_pubkey},
  };
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; ++i) {
    void* address = dlsym(handle, wanted[i].name);
    if (!address) {
      snprintf(crypto_problem, sizeof crypto_problem,
               "the libcrypto found lacks %s (OpenSSL 1.1.1 or newer is needed)", wanted[i].name);
      return;
    }
    memcpy(wanted[i].slot, &address, sizeof address);
  }
  const void* (*fetch)(void* library_context, const char* algorithm, const char* properties);
  void* fetch_address = dlsym(handle, "EVP_MD_fetch"); /* 3.x only */
  memcpy(&fetch, &fetch_address, sizeof fetch);
  crypto.sha256_md = fetch ? fetch(NULL, "SHA256", NULL) : NULL;
  if (!crypto.sha256_md) crypto.sha256_md = crypto.sha256();
  /* 3.x names it EVP_PKEY_get_id; 1.1.1 EVP_PKEY_id. */
  void* id = dlsym(handle, "EVP_PKEY_get_id");
  if (!id) id = dlsym(handle, "EVP_PKEY_id");
  if (!id) {
    snprintf(crypto_problem, sizeof crypto_problem, "the libcrypto found lacks EVP_PKEY_get_id");
    return;
  }
  memcpy(&crypto.pkey_id, &id, sizeof id);
  crypto_loaded = true; /* the handle stays open for the life of the process */
}

static mp_status_t need_libcrypto(void) {
  pthread_once(&crypto_once, load_libcrypto);
  return crypto_loaded ? MP_OK : mp_errorf(MP_ERR_UNAVAILABLE, "%s", crypto_problem);
}

mp_status_t mp_crypto_sha256(const void* data, uint64_t size, uint8_t out_digest[32]) {
  MP_RETURN_IF_ERROR(need_libcrypto());
  unsigned int length = 0;
  if (!crypto.digest(data, (size_t)size, out_digest, &length, crypto.sha256_md, NULL) ||
      length != 32)
    return mp_errorf(MP_ERR_INTERNAL, "SHA-256 failed in libcrypto");
  return MP_OK;
}

struct mp_sha256 {
  void* ctx; /* an EVP_MD_CTX */
};

mp_status_t mp_sha256_begin(mp_sha256_t** out_hash) {
  *out_hash = NULL;
  MP_RETURN_IF_ERROR(need_libcrypto());
  mp_sha256_t* hash = malloc(sizeof *hash);
  void* ctx = hash ? crypto.md_ctx_new() : NULL;
  if (!ctx) {
    free(hash);
    return mp_out_of_memory("a SHA-256 context");
  }
  if (crypto.digest_init(ctx, crypto.sha256_md, NULL) != 1) {
    crypto.md_ctx_free(ctx);
    free(hash);
    return mp_errorf(MP_ERR_INTERNAL, "SHA-256 failed in libcrypto");
  }
  hash->ctx = ctx;
  *out_hash = hash;
  return MP_OK;
}

mp_status_t mp_sha256_update(mp_sha256_t* hash, const void* data, uint64_t size) {
  const uint8_t* p = data;
  while (size > 0) { /* size_t may be narrower than the span */
    size_t n = size > (1u << 30) ? (1u << 30) : (size_t)size;
    if (crypto.digest_update(hash->ctx, p, n) != 1)
      return mp_errorf(MP_ERR_INTERNAL, "SHA-256 failed in libcrypto");
    p += n;
    size -= n;
  }
  return MP_OK;
}

mp_status_t mp_sha256_finish(mp_sha256_t* hash, uint8_t out_digest[32]) {
  unsigned int length = 0;
  int ok = crypto.digest_final(hash->ctx, out_digest, &length);
  mp_sha256_abandon(hash);
  return ok == 1 && length == 32 ? MP_OK : mp_errorf(MP_ERR_INTERNAL, "SHA-256 failed in libcrypto");
}

void mp_sha256_abandon(mp_sha256_t* hash) {
  if (!hash) return;
  crypto.md_ctx_free(hash->ctx);
  free(hash);
}

mp_status_t mp_crypto_ed25519_verify(const uint8_t public_key[32], const uint8_t signature[64],
                                     const uint8_t* message, uint64_t length, bool* out_valid) {
  *out_valid = false;
  MP_RETURN_IF_ERROR(need_libcrypto());
  void* key = crypto.pkey_new_raw_public_key(NID_ED25519, NULL, public_key, 32);
  if (!key) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "libcrypto refused an Ed25519 public key");
  void* ctx = crypto.md_ctx_new();
  mp_status_t status = MP_OK;
  if (!ctx)
    status = mp_out_of_memory("a signature check");
  else if (crypto.digest_verify_init(ctx, NULL, NULL, NULL, key) != 1)
    status = mp_errorf(MP_ERR_INTERNAL, "libcrypto cannot start an Ed25519 verification");
  else
    *out_valid = crypto.digest_verify(ctx, signature, 64, message, (size_t)length) == 1;
  if (ctx) crypto.md_ctx_free(ctx);
  crypto.pkey_free(key);
  return status;
}

mp_status_t mp_crypto_ed25519_key_from_pem(const char* pem, uint64_t length,
                                           uint8_t out_public_key[32]) {
  MP_RETURN_IF_ERROR(need_libcrypto());
  if (!pem || length > INT_MAX)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_trusted_key_from_pem: no PEM text");
  void* bio = crypto.bio_new_mem_buf(pem, (int)length);
  if (!bio) return mp_out_of_memory("reading a PEM key");
  void* key = crypto.pem_read_bio_pubkey(bio, NULL, NULL, NULL);
  crypto.bio_free(bio);
  if (!key)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "not a PEM public key (-----BEGIN PUBLIC KEY-----): make one from a private "
                     "key with `openssl pkey -in key.pem -pubout -out key.pub.pem`");
  size_t size = 32;
  mp_status_t status = MP_OK;
  if (crypto.pkey_id(key) != NID_ED25519)
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT,
                       "the PEM key is not an Ed25519 key (make one with `openssl genpkey "
                       "-algorithm ed25519`)");
  else if (crypto.pkey_get_raw_public_key(key, out_public_key, &size) != 1 || size != 32)
    status = mp_errorf(MP_ERR_INVALID_ARGUMENT, "cannot read the Ed25519 public key");
  crypto.pkey_free(key);
  return status;
}
