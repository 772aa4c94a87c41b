/* Zstandard through the system's libzstd, loaded with dlopen (core/zstd.h). The few functions
 * below are zstd's stable API (1.3 and later), declared here with opaque types so that no zstd
 * header is needed to build and nothing is linked. */
#include "core/zstd.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

/* ZSTD_getFrameContentSize's two error values. */
#define ZSTD_CONTENTSIZE_UNKNOWN (0ULL - 1)
#define ZSTD_CONTENTSIZE_ERROR (0ULL - 2)

typedef struct {
  size_t (*compress)(void* dst, size_t capacity, const void* src, size_t size, int level);
  size_t (*compress_bound)(size_t size);
  void* (*create_dctx)(void);
  size_t (*free_dctx)(void* dctx);
  size_t (*decompress_dctx)(void* dctx, void* dst, size_t capacity, const void* src,
                            size_t size);
  unsigned long long (*frame_content_size)(const void* src, size_t size);
  size_t (*find_frame_compressed_size)(const void* src, size_t size);
  unsigned (*is_error)(size_t code);
  const char* (*error_name)(size_t code);
} libzstd_t;

static libzstd_t zstd;
static bool zstd_loaded;
static char zstd_problem[256];
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;
/* One decompression context kept for the next decode (making one costs more than decoding a
 * small cubin); a decode that finds it taken makes its own. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static void* spare_dctx;

static void load_libzstd(void) {
  static const char* const names[] = {"libzstd.so.1", "libzstd.so"};
  void* handle = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !handle; ++i)
    handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(zstd_problem, sizeof zstd_problem,
             "this library's device code is compressed with Zstandard, which needs libzstd "
             "(libzstd.so.1), and it could not be loaded: install it (Debian: apt-get install "
             "libzstd1), or export the library again with compress_code=False");
    return;
  }
  struct {
    const char* name;
    void** slot;
  } wanted[] = {
      {"ZSTD_compress", (void**)&zstd.compress},
      {"ZSTD_compressBound", (void**)&zstd.compress_bound},
      {"ZSTD_createDCtx", (void**)&zstd.create_dctx},
      {"ZSTD_freeDCtx", (void**)&zstd.free_dctx},
      {"ZSTD_decompressDCtx", (void**)&zstd.decompress_dctx},
      {"ZSTD_getFrameContentSize", (void**)&zstd.frame_content_size},
      {"ZSTD_findFrameCompressedSize", (void**)&zstd.find_frame_compressed_size},
      {"ZSTD_isError", (void**)&zstd.is_error},
      {"ZSTD_getErrorName", (void**)&zstd.error_name},
  };
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; ++i) {
    void* address = dlsym(handle, wanted[i].name);
    if (!address) {
      snprintf(zstd_problem, sizeof zstd_problem,
               "the libzstd found lacks %s (zstd 1.3 or newer is needed)", wanted[i].name);
      return;
    }
    memcpy(wanted[i].slot, &address, sizeof address);
  }
  zstd_loaded = true; /* the handle stays open for the life of the process */
}

static mp_status_t need_libzstd(void) {
  pthread_once(&zstd_once, load_libzstd);
  return zstd_loaded ? MP_OK : mp_errorf(MP_ERR_UNAVAILABLE, "%s", zstd_problem);
}

mp_status_t mp_zstd_frame_content_size(const uint8_t* data, uint64_t size, uint64_t* out_size) {
  MP_RETURN_IF_ERROR(need_libzstd());
  if (size > SIZE_MAX) return mp_errorf(MP_ERR_FORMAT, "a Zstandard frame too large to address");
  size_t whole = zstd.find_frame_compressed_size(data, (size_t)size);
  if (zstd.is_error(whole))
    return mp_errorf(MP_ERR_FORMAT, "not a whole Zstandard frame (%s)", zstd.error_name(whole));
  if (whole != size)
    return mp_errorf(MP_ERR_FORMAT,
                     "the Zstandard frame is %zu bytes, but %" PRIu64 " are stored for it", whole,
                     size);
  unsigned long long content = zstd.frame_content_size(data, (size_t)size);
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN)
    return mp_errorf(MP_ERR_FORMAT, "the Zstandard frame does not record its decoded size");
  *out_size = (uint64_t)content;
  return MP_OK;
}

mp_status_t mp_zstd_decompress(const uint8_t* data, uint64_t size, uint8_t* out, uint64_t capacity,
                               uint64_t* out_size) {
  MP_RETURN_IF_ERROR(need_libzstd());
  if (size > SIZE_MAX || capacity > SIZE_MAX)
    return mp_errorf(MP_ERR_FORMAT, "a Zstandard frame too large to address");
  pthread_mutex_lock(&spare_lock);
  void* dctx = spare_dctx;
  spare_dctx = NULL;
  pthread_mutex_unlock(&spare_lock);
  if (!dctx && !(dctx = zstd.create_dctx())) return mp_out_of_memory("a Zstandard context");
  size_t n = zstd.decompress_dctx(dctx, out, (size_t)capacity, data, (size_t)size);
  pthread_mutex_lock(&spare_lock);
  if (!spare_dctx) spare_dctx = dctx, dctx = NULL;
  pthread_mutex_unlock(&spare_lock);
  if (dctx) zstd.free_dctx(dctx);
  if (zstd.is_error(n))
    return mp_errorf(MP_ERR_FORMAT, "damaged Zstandard data (%s)", zstd.error_name(n));
  *out_size = n;
  return MP_OK;
}

uint64_t mp_zstd_bound(uint64_t size) {
  if (need_libzstd() != MP_OK) return 0;
  return size > SIZE_MAX / 2 ? 0 : zstd.compress_bound((size_t)size);
}

mp_status_t mp_zstd_compress(const uint8_t* data, uint64_t size, int32_t level, uint8_t* out,
                             uint64_t capacity, uint64_t* out_size) {
  MP_RETURN_IF_ERROR(need_libzstd());
  if (size > SIZE_MAX || capacity > SIZE_MAX)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "too large to compress in one piece");
  size_t n = zstd.compress(out, (size_t)capacity, data, (size_t)size, level);
  if (zstd.is_error(n))
    return mp_errorf(MP_ERR_INTERNAL, "Zstandard compression failed (%s)", zstd.error_name(n));
  *out_size = n;
  return MP_OK;
}
