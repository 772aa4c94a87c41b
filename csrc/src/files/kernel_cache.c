/* The kernel cache (files/kernel_cache.h, modpack.h): the folder, its checks, entries read and
 * written, build locks, the size bound, and the public listing, pruning and counters.
 *
 * Trust: the folder must be this user's and writable by nobody else (it is made 0700), and an
 * entry is opened without following a link (O_NOFOLLOW, and O_NONBLOCK so that a FIFO planted
 * there cannot block), then must be a regular file of this user's, writable by nobody else,
 * whose header names the key it was looked up by and whose checksums hold. What a writer of the
 * folder can still do is docs/trust.md's "The kernel cache". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECTORY, O_NOFOLLOW, futimens */
#endif
#include "files/kernel_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/crypto.h"
#include "core/error.h"
#include "core/json.h"
#include "core/trace.h"
#include "files/file.h"

enum {
  HEADER = MP_KERNEL_CACHE_HEADER_SIZE,
  KEY = MP_KERNEL_CACHE_KEY_SIZE,
  NAME = 2 * KEY,
  LOCK_WAIT_MS = 120 * 1000, /* a build lock is waited on at most this long, then ignored */
  STALE_TEMP_SECONDS = 3600, /* a temporary file older than this is a write that died */
};
#define MAX_DATA ((uint64_t)1 << 32)          /* 4 GiB: no device binary is larger */
#define DEFAULT_MAX_SIZE ((uint64_t)1 << 30) /* 1 GiB */

static const char PHASE[] = "kernel cache";

/* ---- counters --------------------------------------------------------------------------- */

static _Atomic uint64_t count_hits, count_misses, count_stores, count_ignored, count_refused,
    count_off, count_waited;

mp_status_t mp_kernel_cache_stats(mp_kernel_cache_stats_t* out) {
  if (!out || out->struct_size < sizeof *out)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_kernel_cache_stats: NULL, or a struct whose "
                     "struct_size is not sizeof(mp_kernel_cache_stats_t)");
  out->reserved = 0;
  out->hits = atomic_load(&count_hits);
  out->misses = atomic_load(&count_misses);
  out->stores = atomic_load(&count_stores);
  out->ignored = atomic_load(&count_ignored);
  out->refused = atomic_load(&count_refused);
  out->off = atomic_load(&count_off);
  out->waited = atomic_load(&count_waited);
  return MP_OK;
}

/* ---- the folder -------------------------------------------------------------------------- */

/* The folder's path into |path|, or false with why it is off in |why|. */
static bool folder_path(char* path, size_t capacity, char* why, size_t why_capacity) {
  const char* set = getenv("MODPACK_KERNEL_CACHE");
  int n;
  if (set) {
    if (!set[0]) {
      snprintf(why, why_capacity, "MODPACK_KERNEL_CACHE is set empty");
      return false;
    }
    if (set[0] != '/') {
      snprintf(why, why_capacity, "MODPACK_KERNEL_CACHE='%s' is not an absolute path", set);
      return false;
    }
    n = snprintf(path, capacity, "%s", set);
  } else {
    const char* xdg = getenv("XDG_CACHE_HOME");
    const char* home = getenv("HOME");
    if (xdg && xdg[0] == '/') {
      n = snprintf(path, capacity, "%s/modpack/kernels", xdg);
    } else if (home && home[0] == '/') {
      n = snprintf(path, capacity, "%s/.cache/modpack/kernels", home);
    } else {
      snprintf(why, why_capacity, "no folder for it: HOME is not set (set MODPACK_KERNEL_CACHE "
               "to one)");
      return false;
    }
  }
  if (n < 0 || (size_t)n >= capacity) {
    snprintf(why, why_capacity, "its folder's path is longer than %zu bytes", capacity - 1);
    return false;
  }
  while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
  return true;
}

/* mkdir -p |path|, each folder made 0700. */
static void make_folders(const char* path) {
  char partial[PATH_MAX];
  size_t length = strlen(path);
  if (length >= sizeof partial) return;
  memcpy(partial, path, length + 1);
  for (size_t i = 1; i <= length; ++i) {
    if (partial[i] != '/' && partial[i] != '\0') continue;
    char saved = partial[i];
    partial[i] = '\0';
    if (mkdir(partial, 0700) != 0 && errno != EEXIST) return;
    partial[i] = saved;
  }
}

/* The folder, opened (made first when |create| and missing), and checked: this user's, and
 * writable by nobody else. -1 with why not in |why| (and |*out_missing| set when it does not
 * exist); |path| receives its path either way ("" when there is none). */
static int open_folder(bool create, char* path, size_t capacity, char* why, size_t why_capacity,
                       bool* out_missing) {
  path[0] = '\0';
  *out_missing = false;
  if (!folder_path(path, capacity, why, why_capacity)) return -1;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    make_folders(path);
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    *out_missing = errno == ENOENT;
    snprintf(why, why_capacity, "cannot open its folder %s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, why_capacity, "cannot read its folder %s: %s", path, strerror(errno));
  } else if (st.st_uid != geteuid()) {
    snprintf(why, why_capacity, "its folder %s belongs to uid %u, not to this user (uid %u): "
             "another user could change what this process runs; use a folder of your own",
             path, (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, why_capacity, "its folder %s is writable by others (mode %03o): another user "
             "could change what this process runs; chmod 700 %s", path,
             (unsigned)(st.st_mode & 0777), path);
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

/* $MODPACK_KERNEL_CACHE_MAX: bytes, or with a K, M or G suffix (powers of 1024). */
static uint64_t max_size(void) {
  const char* text = getenv("MODPACK_KERNEL_CACHE_MAX");
  if (!text || !*text) return DEFAULT_MAX_SIZE;
  char* end;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (errno || end == text || *end || text[0] == '-' || value > (UINT64_MAX >> shift))
    return DEFAULT_MAX_SIZE; /* said by `modpack cache list`, which reads the same variable */
  return (uint64_t)value << shift;
}

/* ---- keys and names ---------------------------------------------------------------------- */

static void hex(const uint8_t* bytes, size_t count, char* out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < count; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * count] = '\0';
}

static bool is_entry_name(const char* name) {
  size_t i = 0;
  for (; name[i]; ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return i == NAME;
}

static void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static mp_status_t add_field(mp_sha256_t* hash, const void* bytes, uint64_t size) {
  uint8_t length[8];
  store_le64(length, size);
  MP_RETURN_IF_ERROR(mp_sha256_update(hash, length, sizeof length));
  return size ? mp_sha256_update(hash, bytes, size) : MP_OK;
}

/* The key of |in| (format.h: MP_KERNEL_CACHE_KEY_CONTEXT, the version, six fields). */
static mp_status_t make_key(const mp_kernel_cache_input_t* in, uint8_t out[KEY]) {
  uint8_t code_digest[KEY];
  MP_RETURN_IF_ERROR(mp_crypto_sha256(in->code, in->code_size, code_digest));
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MP_VERSION_MAJOR, MP_VERSION_MINOR,
           MP_VERSION_PATCH);
  uint8_t entry_version[4];
  store_le32(entry_version, MP_KERNEL_CACHE_VERSION);
  mp_sha256_t* hash;
  MP_RETURN_IF_ERROR(mp_sha256_begin(&hash));
  mp_status_t status =
      mp_sha256_update(hash, MP_KERNEL_CACHE_KEY_CONTEXT, strlen(MP_KERNEL_CACHE_KEY_CONTEXT));
  if (status == MP_OK) status = mp_sha256_update(hash, entry_version, sizeof entry_version);
  const struct {
    const void* bytes;
    uint64_t size;
  } fields[] = {
      {version, strlen(version)},
      {in->kind, strlen(in->kind)},
      {code_digest, KEY},
      {in->options, strlen(in->options)},
      {in->device, strlen(in->device)},
      {in->driver, strlen(in->driver)},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && status == MP_OK; ++i)
    status = add_field(hash, fields[i].bytes, fields[i].size);
  if (status != MP_OK) {
    mp_sha256_abandon(hash);
    return status;
  }
  return mp_sha256_finish(hash, out);
}

/* ---- entries ----------------------------------------------------------------------------- */

typedef struct {
  uint64_t size;      /* the file's */
  int64_t last_used;  /* its modification time, seconds */
  char kind[MP_KERNEL_CACHE_MAX_KIND];
} entry_info_t;

/* Check the header at |h| of a file of |file_size| bytes named |name|; |key| (NULL: the name's
 * own) must be the one it holds. false with why in |why|. */
static bool check_header(const uint8_t* h, uint64_t file_size, const char* name, const uint8_t* key,
                         entry_info_t* info, char* why, size_t capacity) {
  if (memcmp(h, MP_KERNEL_CACHE_MAGIC, 8) != 0) {
    snprintf(why, capacity, "not a kernel cache entry (its magic is wrong)");
    return false;
  }
  uint32_t version = mp_load_le32(h + offsetof(mp_kernel_cache_entry_v1_t, version));
  uint32_t header_size = mp_load_le32(h + offsetof(mp_kernel_cache_entry_v1_t, header_size));
  if (version != MP_KERNEL_CACHE_VERSION || header_size != HEADER) {
    snprintf(why, capacity, "entry version %u with a %u-byte header (this runtime writes "
             "version %d, %d bytes)", version, header_size, MP_KERNEL_CACHE_VERSION, HEADER);
    return false;
  }
  uint64_t checksum =
      mp_checksum((mp_const_byte_span_t){h, offsetof(mp_kernel_cache_entry_v1_t, header_checksum)});
  if (checksum != mp_load_le64(h + offsetof(mp_kernel_cache_entry_v1_t, header_checksum))) {
    snprintf(why, capacity, "its header is damaged (checksum mismatch)");
    return false;
  }
  for (size_t i = 0; i < 5; ++i)
    if (mp_load_le64(h + offsetof(mp_kernel_cache_entry_v1_t, reserved) + 8 * i) != 0) {
      snprintf(why, capacity, "reserved header field %zu is not 0", i);
      return false;
    }
  char held[NAME + 1];
  hex(h + offsetof(mp_kernel_cache_entry_v1_t, key), KEY, held);
  if (key ? memcmp(h + offsetof(mp_kernel_cache_entry_v1_t, key), key, KEY) != 0
          : strcmp(held, name) != 0) {
    snprintf(why, capacity, "it holds the entry of another key (%.16s...), not its own", held);
    return false;
  }
  const char* kind = (const char*)h + offsetof(mp_kernel_cache_entry_v1_t, kind);
  if (!memchr(kind, 0, MP_KERNEL_CACHE_MAX_KIND)) {
    snprintf(why, capacity, "its kind is not NUL-terminated");
    return false;
  }
  memcpy(info->kind, kind, MP_KERNEL_CACHE_MAX_KIND);
  uint64_t data_size = mp_load_le64(h + offsetof(mp_kernel_cache_entry_v1_t, data_size));
  if (data_size != file_size - HEADER) {
    snprintf(why, capacity,
             "%s: its header says %" PRIu64 " bytes of data, the file holds %" PRIu64,
             data_size > file_size - HEADER ? "truncated" : "bytes past its end", data_size,
             file_size - HEADER);
    return false;
  }
  return true;
}

/* What an opened entry is: false (why in |why|) unless a regular file of this user's, writable
 * by nobody else, of a size an entry can have. */
static bool check_file(int fd, uint64_t* out_size, int64_t* out_mtime, char* why, size_t capacity) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, capacity, "cannot read it: %s", strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(why, capacity, "not a regular file");
  } else if (st.st_uid != geteuid()) {
    snprintf(why, capacity, "it belongs to uid %u, not to this user (uid %u)",
             (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, capacity, "it is writable by others (mode %03o)", (unsigned)(st.st_mode & 0777));
  } else if ((uint64_t)st.st_size < HEADER) {
    snprintf(why, capacity, "truncated: %" PRIu64 " bytes, shorter than an entry's header",
             (uint64_t)st.st_size);
  } else if ((uint64_t)st.st_size - HEADER > MAX_DATA) {
    snprintf(why, capacity, "%" PRIu64 " bytes, larger than any entry", (uint64_t)st.st_size);
  } else {
    *out_size = (uint64_t)st.st_size;
    *out_mtime = (int64_t)st.st_mtime;
    return true;
  }
  return false;
}

typedef enum { ENTRY_ABSENT, ENTRY_VALID, ENTRY_INVALID } entry_state_t;

/* Entry |name| of the folder |dir_fd|, checked (|key|: the one it must hold, NULL: its name's).
 * With |out_data|, its data is read (the caller's to free) and checked against its checksum,
 * and |touch| sets its last use to now. */
static entry_state_t read_entry(int dir_fd, const char* name, const uint8_t* key, bool touch,
                                uint8_t** out_data, entry_info_t* info, char* why,
                                size_t capacity) {
  memset(info, 0, sizeof *info);
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return ENTRY_ABSENT;
    snprintf(why, capacity, "%s", errno == ELOOP ? "a symbolic link, never followed"
                                                 : strerror(errno));
    return ENTRY_INVALID;
  }
  uint8_t header[HEADER];
  uint8_t* data = NULL;
  bool valid = check_file(fd, &info->size, &info->last_used, why, capacity);
  if (valid && !mp_file_read_at(fd, header, HEADER, 0)) {
    snprintf(why, capacity, "cannot read its header: %s", errno ? strerror(errno) : "truncated");
    valid = false;
  }
  valid = valid && check_header(header, info->size, name, key, info, why, capacity);
  uint64_t data_size = valid ? info->size - HEADER : 0;
  if (valid && out_data) {
    data = malloc(data_size ? (size_t)data_size : 1);
    if (!data) {
      snprintf(why, capacity, "no memory for its %" PRIu64 " bytes", data_size);
      valid = false;
    } else if (!mp_file_read_at(fd, data, (size_t)data_size, HEADER)) {
      snprintf(why, capacity, "cannot read it: %s", errno ? strerror(errno) : "truncated");
      valid = false;
    } else if (mp_checksum((mp_const_byte_span_t){data, data_size}) !=
               mp_load_le64(header + offsetof(mp_kernel_cache_entry_v1_t, data_checksum))) {
      snprintf(why, capacity, "its data is damaged (checksum mismatch)");
      valid = false;
    }
  }
  if (valid && touch) futimens(fd, NULL); /* its last use, for the least-recently-used bound */
  close(fd);
  if (!valid) {
    free(data);
    return ENTRY_INVALID;
  }
  if (out_data) *out_data = data;
  return ENTRY_VALID;
}

/* ---- the size bound ---------------------------------------------------------------------- */

typedef struct {
  char name[NAME + 1];
  uint64_t size;
  int64_t last_used;
} listed_t;

static int by_last_use(const void* a, const void* b) {
  const listed_t* x = a;
  const listed_t* y = b;
  if (x->last_used != y->last_used) return x->last_used < y->last_used ? -1 : 1;
  return strcmp(x->name, y->name);
}

static bool is_lock_name(const char* name) {
  char entry[NAME + 1];
  size_t length = strlen(name);
  if (length != NAME + 5 || strcmp(name + NAME, ".lock") != 0) return false;
  memcpy(entry, name, NAME);
  entry[NAME] = '\0';
  return is_entry_name(entry);
}

/* A build lock file left by a process that died while building (its lock went with it): removed
 * when an hour old and nobody holds it. */
static void remove_stale_lock(int dir_fd, const char* name, time_t now) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      now - st.st_mtime <= STALE_TEMP_SECONDS)
    return;
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    unlinkat(dir_fd, name, 0);
    flock(fd, LOCK_UN);
  }
  close(fd);
}

/* Remove, from the folder |dir_fd|, entries least recently used first (never |keep|) until
 * the entries take at most |bound| bytes; with |invalid_too|, entries a lookup would ignore;
 * always, temporary files an hour old (writes that died). */
static mp_status_t prune(int dir_fd, uint64_t bound, const char* keep, bool invalid_too,
                         uint64_t* out_removed, uint64_t* out_freed) {
  *out_removed = *out_freed = 0;
  int listing = dup(dir_fd);
  DIR* dir = listing >= 0 ? fdopendir(listing) : NULL;
  if (!dir) {
    if (listing >= 0) close(listing);
    return mp_errorf(MP_ERR_IO, "cannot list the kernel cache's folder: %s", strerror(errno));
  }
  listed_t* entries = NULL;
  size_t count = 0, capacity = 0;
  uint64_t total = 0;
  time_t now = time(NULL);
  mp_status_t status = MP_OK;
  struct dirent* d;
  while ((d = readdir(dir)) != NULL) {
    struct stat st;
    if (strncmp(d->d_name, ".tmp.", 5) == 0) {
      if (fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          now - st.st_mtime > STALE_TEMP_SECONDS && unlinkat(dir_fd, d->d_name, 0) == 0)
        *out_freed += (uint64_t)st.st_size, ++*out_removed;
      continue;
    }
    if (is_lock_name(d->d_name)) {
      remove_stale_lock(dir_fd, d->d_name, now);
      continue;
    }
    if (!is_entry_name(d->d_name) || fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (invalid_too) {
      entry_info_t info;
      char why[256];
      uint8_t* data = NULL;
      entry_state_t state = read_entry(dir_fd, d->d_name, NULL, false, &data, &info, why,
                                       sizeof why);
      free(data);
      if (state == ENTRY_INVALID && unlinkat(dir_fd, d->d_name, 0) == 0) {
        *out_freed += (uint64_t)st.st_size, ++*out_removed;
        continue;
      }
    }
    if (count == capacity) {
      size_t grown = capacity ? 2 * capacity : 64;
      listed_t* more = realloc(entries, grown * sizeof *entries);
      if (!more) {
        status = mp_out_of_memory("the kernel cache's listing");
        break;
      }
      entries = more, capacity = grown;
    }
    memcpy(entries[count].name, d->d_name, NAME + 1);
    entries[count].size = (uint64_t)st.st_size;
    entries[count].last_used = (int64_t)st.st_mtime;
    total += (uint64_t)st.st_size;
    ++count;
  }
  closedir(dir);
  if (status == MP_OK && total > bound) {
    qsort(entries, count, sizeof *entries, by_last_use);
    for (size_t i = 0; i < count && total > bound; ++i) {
      if (keep && strcmp(entries[i].name, keep) == 0) continue;
      if (unlinkat(dir_fd, entries[i].name, 0) != 0) continue;
      total -= entries[i].size;
      *out_freed += entries[i].size;
      ++*out_removed;
    }
  }
  free(entries);
  return status;
}

/* ---- slots ------------------------------------------------------------------------------- */

static void say(mp_kernel_cache_slot_t* slot, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(mp_kernel_cache_slot_t* slot, const char* fmt, ...) {
  if (!mp_trace_enabled()) return;
  char detail[768];
  va_list args;
  va_start(args, fmt);
  vsnprintf(detail, sizeof detail, fmt, args);
  va_end(args);
  mp_trace_phase(slot->subject, PHASE, &slot->clock, detail);
}

/* The cache is off for |slot|: said and counted. */
static void turn_off(mp_kernel_cache_slot_t* slot, const char* why) {
  slot->enabled = false;
  atomic_fetch_add(&count_off, 1);
  say(slot, "off for this %s %s: %s; the device builds it", slot->kind, slot->what, why);
}

void mp_kernel_cache_open(mp_kernel_cache_slot_t* slot, const mp_kernel_cache_input_t* input,
                          uint32_t load_flags, const char* subject) {
  memset(slot, 0, sizeof *slot);
  slot->dir_fd = slot->lock_fd = -1;
  slot->subject = subject ? subject : "<payload>";
  slot->what = input->what;
  slot->accept = input->accept;
  slot->accept_context = input->accept_context;
  snprintf(slot->kind, sizeof slot->kind, "%s", input->kind);
  slot->clock = mp_trace_now_ms();
  char path[PATH_MAX], why[512];
  if (load_flags & MP_LOAD_NO_KERNEL_CACHE) {
    turn_off(slot, "the load asked for none (kernel_cache=False; C: MP_LOAD_NO_KERNEL_CACHE)");
    return;
  }
  if (!folder_path(path, sizeof path, why, sizeof why)) {
    turn_off(slot, why);
    return;
  }
  if (make_key(input, slot->key) != MP_OK) {
    snprintf(why, sizeof why, "no SHA-256 for its key (%s)", mp_error_message());
    mp_error_clear();
    turn_off(slot, why);
    return;
  }
  hex(slot->key, KEY, slot->name);
  slot->enabled = true;
}

/* Take the build lock of |slot|'s key: true once held (or when it cannot be taken: the build
 * goes on without it); |*out_waited| says whether another process held it meanwhile, and so may
 * have stored the entry. */
static void take_lock(mp_kernel_cache_slot_t* slot, bool* out_waited) {
  char name[NAME + 8];
  snprintf(name, sizeof name, "%s.lock", slot->name);
  *out_waited = false;
  double start = mp_trace_now_ms();
  for (;;) {
    int fd = openat(slot->dir_fd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
      if (fd >= 0) close(fd);
      say(slot, "cannot take the build lock of %.16s...: building without it", slot->name);
      return;
    }
    bool held = false, timed_out = false;
    long sleep_ns = 1000000; /* 1 ms, doubling to 32 ms */
    for (;;) {
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        held = true;
        break;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      *out_waited = true;
      if (mp_trace_now_ms() - start > LOCK_WAIT_MS) {
        timed_out = true;
        break;
      }
      struct timespec pause = {0, sleep_ns};
      nanosleep(&pause, NULL);
      if (sleep_ns < 32000000) sleep_ns *= 2;
    }
    if (!held) {
      close(fd);
      if (timed_out)
        say(slot, "the build lock of %.16s... was held for over %d s: building without it",
            slot->name, LOCK_WAIT_MS / 1000);
      else
        say(slot, "cannot take the build lock of %.16s...: building without it", slot->name);
      return;
    }
    /* A builder removes the lock file before it lets go: a lock on a removed file is stale,
     * and its entry is there now. */
    if (fstat(fd, &st) == 0 && st.st_nlink == 0) {
      close(fd);
      *out_waited = true;
      continue;
    }
    slot->lock_fd = fd;
    return;
  }
}

static void release_lock(mp_kernel_cache_slot_t* slot) {
  if (slot->lock_fd < 0) return;
  char name[NAME + 8];
  snprintf(name, sizeof name, "%s.lock", slot->name);
  unlinkat(slot->dir_fd, name, 0); /* before letting go: see take_lock */
  flock(slot->lock_fd, LOCK_UN);
  close(slot->lock_fd);
  slot->lock_fd = -1;
}

/* Look up |slot|'s entry: ENTRY_VALID with its data, else said (an invalid one) and counted. */
static bool look(mp_kernel_cache_slot_t* slot, uint8_t** out_data, uint64_t* out_size) {
  entry_info_t info;
  char why[512];
  uint8_t* data = NULL;
  entry_state_t state =
      read_entry(slot->dir_fd, slot->name, slot->key, true, &data, &info, why, sizeof why);
  if (state == ENTRY_VALID && slot->accept &&
      !slot->accept(slot->accept_context, data, info.size - HEADER, why, sizeof why)) {
    free(data);
    data = NULL;
    state = ENTRY_INVALID;
  }
  if (state == ENTRY_VALID) {
    *out_data = data;
    *out_size = info.size - HEADER;
    return true;
  }
  if (state == ENTRY_INVALID) {
    atomic_fetch_add(&count_ignored, 1);
    say(slot, "ignored entry %.16s...: %s; the device builds it anew", slot->name, why);
  }
  return false;
}

bool mp_kernel_cache_get(mp_kernel_cache_slot_t* slot, uint8_t** out_data, uint64_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  if (!slot->enabled) return false;
  char path[PATH_MAX], why[768];
  bool missing;
  slot->dir_fd = open_folder(true, path, sizeof path, why, sizeof why, &missing);
  if (slot->dir_fd < 0) {
    turn_off(slot, why);
    return false;
  }
  if (look(slot, out_data, out_size)) {
    atomic_fetch_add(&count_hits, 1);
    say(slot, "hit: %s %s from %.16s... (%" PRIu64 " bytes), no build", slot->kind, slot->what,
        slot->name, *out_size);
    return true;
  }
  bool waited;
  take_lock(slot, &waited);
  if (waited) {
    atomic_fetch_add(&count_waited, 1);
    if (look(slot, out_data, out_size)) {
      release_lock(slot);
      atomic_fetch_add(&count_hits, 1);
      say(slot, "hit after waiting for another process's build: %s %s from %.16s... (%" PRIu64
          " bytes)", slot->kind, slot->what, slot->name, *out_size);
      return true;
    }
  }
  atomic_fetch_add(&count_misses, 1);
  say(slot, "miss: no %s %s under %.16s... in %s; the device builds it", slot->kind, slot->what,
      slot->name, path);
  return false;
}

void mp_kernel_cache_put(mp_kernel_cache_slot_t* slot, const void* data, uint64_t size) {
  if (!slot->enabled || slot->dir_fd < 0) return;
  if (size == 0 || size > MAX_DATA) {
    say(slot, "not stored: the %s is %" PRIu64 " bytes", slot->what, size);
    return;
  }
  uint8_t header[HEADER] = {0};
  memcpy(header, MP_KERNEL_CACHE_MAGIC, 8);
  store_le32(header + offsetof(mp_kernel_cache_entry_v1_t, version), MP_KERNEL_CACHE_VERSION);
  store_le32(header + offsetof(mp_kernel_cache_entry_v1_t, header_size), HEADER);
  memcpy(header + offsetof(mp_kernel_cache_entry_v1_t, key), slot->key, KEY);
  memcpy(header + offsetof(mp_kernel_cache_entry_v1_t, kind), slot->kind,
         strnlen(slot->kind, MP_KERNEL_CACHE_MAX_KIND - 1));
  store_le64(header + offsetof(mp_kernel_cache_entry_v1_t, data_size), size);
  store_le64(header + offsetof(mp_kernel_cache_entry_v1_t, data_checksum),
             mp_checksum((mp_const_byte_span_t){data, size}));
  store_le64(header + offsetof(mp_kernel_cache_entry_v1_t, header_checksum),
             mp_checksum((mp_const_byte_span_t){
                 header, offsetof(mp_kernel_cache_entry_v1_t, header_checksum)}));
  static _Atomic uint64_t serial;
  char temp[NAME + 64];
  snprintf(temp, sizeof temp, ".tmp.%.16s.%ld.%" PRIu64, slot->name, (long)getpid(),
           atomic_fetch_add(&serial, 1));
  int fd = openat(slot->dir_fd, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool written = fd >= 0 && mp_file_write_at(fd, header, HEADER, 0) &&
                 mp_file_write_at(fd, data, (size_t)size, HEADER);
  int error = errno;
  if (fd >= 0 && close(fd) != 0 && written) written = false, error = errno;
  if (!written || renameat(slot->dir_fd, temp, slot->dir_fd, slot->name) != 0) {
    if (written) error = errno;
    if (fd >= 0) unlinkat(slot->dir_fd, temp, 0);
    say(slot, "not stored: writing %.16s... failed: %s", slot->name, strerror(error));
    return;
  }
  atomic_fetch_add(&count_stores, 1);
  say(slot, "stored the %s %s as %.16s... (%" PRIu64 " bytes); the time is the build's",
      slot->kind, slot->what, slot->name, size);
  uint64_t removed, freed;
  if (prune(slot->dir_fd, max_size(), slot->name, false, &removed, &freed) != MP_OK)
    mp_error_clear();
  else if (removed)
    say(slot, "over its bound: removed %" PRIu64 " entries least recently used (%" PRIu64
        " bytes)", removed, freed);
}

void mp_kernel_cache_refused(mp_kernel_cache_slot_t* slot, const char* why) {
  atomic_fetch_add(&count_refused, 1);
  say(slot, "the driver refused entry %.16s... (%s); the device builds it anew", slot->name, why);
}

void mp_kernel_cache_close(mp_kernel_cache_slot_t* slot) {
  release_lock(slot);
  if (slot->dir_fd >= 0) close(slot->dir_fd);
  slot->dir_fd = -1;
}

void mp_kernel_cache_probe(const mp_kernel_cache_input_t* input, const char** out_state,
                           char* detail, uint64_t capacity) {
  uint8_t key[KEY];
  char path[PATH_MAX], why[768], name[NAME + 1];
  *out_state = "off";
  bool missing;
  int dir_fd = open_folder(false, path, sizeof path, why, sizeof why, &missing);
  if (missing) {
    *out_state = "miss";
    snprintf(detail, capacity, "the folder %s does not exist yet", path);
    return;
  }
  if (dir_fd < 0) {
    snprintf(detail, capacity, "%s", why);
    return;
  }
  if (make_key(input, key) != MP_OK) {
    snprintf(detail, capacity, "no SHA-256 for its key (%s)", mp_error_message());
    mp_error_clear();
    close(dir_fd);
    return;
  }
  hex(key, KEY, name);
  entry_info_t info;
  uint8_t* data = NULL;
  entry_state_t state = read_entry(dir_fd, name, key, false, input->accept ? &data : NULL, &info,
                                   why, sizeof why);
  if (state == ENTRY_VALID && input->accept &&
      !input->accept(input->accept_context, data, info.size - HEADER, why, sizeof why))
    state = ENTRY_INVALID;
  free(data);
  switch (state) {
    case ENTRY_VALID:
      *out_state = "hit";
      snprintf(detail, capacity, "%s %s %s in %s (%" PRIu64 " bytes)", input->kind, input->what,
               name, path, info.size - HEADER);
      break;
    case ENTRY_INVALID:
      *out_state = "miss";
      snprintf(detail, capacity, "entry %s in %s would be ignored: %s", name, path, why);
      break;
    default:
      *out_state = "miss";
      snprintf(detail, capacity, "no entry %s in %s", name, path);
  }
  close(dir_fd);
}

/* ---- listing and pruning ----------------------------------------------------------------- */

mp_status_t mp_kernel_cache_list(char* buffer, uint64_t capacity, uint64_t* out_length) {
  if ((!buffer && capacity) || !out_length)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_kernel_cache_list: NULL argument");
  char path[PATH_MAX], why[768];
  mp_json_t j = {buffer, capacity, 0};
  bool missing;
  int dir_fd = open_folder(false, path, sizeof path, why, sizeof why, &missing);
  mp_json_printf(&j, "{\"folder\": ");
  if (path[0])
    mp_json_string(&j, path);
  else
    mp_json_printf(&j, "null");
  mp_json_printf(&j, ", \"enabled\": %s, \"reason\": ", dir_fd >= 0 || missing ? "true" : "false");
  if (dir_fd >= 0)
    mp_json_printf(&j, "null");
  else
    mp_json_string(&j, missing ? "its folder does not exist yet: the first build makes it" : why);
  mp_json_printf(&j, ", \"max_size\": %" PRIu64 ", \"entries\": [", max_size());
  uint64_t total = 0;
  DIR* dir = NULL;
  if (dir_fd >= 0) {
    int listing = dup(dir_fd);
    dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir && listing >= 0) close(listing);
  } else if (!missing && path[0]) { /* unusable: still listed, from the path, for prune's sake */
    dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int listing = dir_fd >= 0 ? dup(dir_fd) : -1;
    dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir && listing >= 0) close(listing);
  }
  size_t shown = 0;
  struct dirent* d;
  while (dir && (d = readdir(dir)) != NULL) {
    if (!is_entry_name(d->d_name)) continue;
    entry_info_t info;
    char problem[512] = "";
    uint8_t* data = NULL;
    entry_state_t state =
        read_entry(dir_fd, d->d_name, NULL, false, &data, &info, problem, sizeof problem);
    free(data);
    if (state == ENTRY_ABSENT) continue;
    struct stat st;
    if (state == ENTRY_INVALID && fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      info.size = (uint64_t)st.st_size;
      info.last_used = (int64_t)st.st_mtime;
    }
    total += info.size;
    mp_json_printf(&j, "%s{\"name\": \"%s\", \"kind\": ", shown++ ? ", " : "", d->d_name);
    if (state == ENTRY_VALID)
      mp_json_string(&j, info.kind);
    else
      mp_json_printf(&j, "null");
    mp_json_printf(&j,
                   ", \"size\": %" PRIu64 ", \"data_size\": %" PRIu64
                   ", \"last_used\": %" PRId64 ", \"valid\": %s, \"problem\": ",
                   info.size, state == ENTRY_VALID ? info.size - HEADER : 0, info.last_used,
                   state == ENTRY_VALID ? "true" : "false");
    if (state == ENTRY_VALID)
      mp_json_printf(&j, "null");
    else
      mp_json_string(&j, problem);
    mp_json_printf(&j, "}");
  }
  if (dir) closedir(dir);
  if (dir_fd >= 0) close(dir_fd);
  mp_json_printf(&j, "], \"total_size\": %" PRIu64 "}", total);
  *out_length = j.length;
  return MP_OK;
}

mp_status_t mp_kernel_cache_prune(uint64_t bound, uint64_t* out_removed, uint64_t* out_freed) {
  uint64_t removed = 0, freed = 0;
  if (out_removed) *out_removed = 0;
  if (out_freed) *out_freed = 0;
  char path[PATH_MAX], why[768];
  bool missing;
  int dir_fd = open_folder(false, path, sizeof path, why, sizeof why, &missing);
  if (dir_fd < 0) {
    if (missing) return MP_OK; /* nothing to prune */
    return mp_errorf(MP_ERR_UNAVAILABLE, "the kernel cache is off: %s", why);
  }
  mp_status_t status = prune(dir_fd, bound, NULL, true, &removed, &freed);
  close(dir_fd);
  if (out_removed) *out_removed = removed;
  if (out_freed) *out_freed = freed;
  return status;
}
