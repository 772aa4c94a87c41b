/* The kernel cache (modpack.h): what a device built from a payload's code, kept in a folder of
 * entries (format.h: mp_kernel_cache_entry_v1_t) so that the next process on the same device
 * and driver loads it instead of compiling.
 *
 * A kind wraps its build in a slot:
 *
 *   mp_kernel_cache_slot_t slot;
 *   mp_kernel_cache_open(&slot, &input, load_flags, library_path);
 *   uint8_t* data;
 *   uint64_t size;
 *   if (mp_kernel_cache_get(&slot, &data, &size)) {
 *     loaded = device_load(data, size);      // the driver's own loader
 *     free(data);
 *     if (!loaded) mp_kernel_cache_refused(&slot, "why");
 *   }
 *   if (!loaded && build() == ok) mp_kernel_cache_put(&slot, built, built_size);
 *   mp_kernel_cache_close(&slot);
 *
 * Nothing here fails: a folder that cannot be used, an entry damaged, truncated, foreign or not
 * this user's, a full disk: each is a line on the load trace (core/trace.h: the modpack.load
 * logger, MODPACK_LOG_LOADING) and a build, never an error. A miss takes the key's build lock
 * (a lock file beside the entry, flock) and looks again once it holds it, so that processes
 * starting at once build each key once; a lock is never waited on for more than two minutes.
 *
 * Vulkan (kinds/vulkan/vulkan_pipeline_cache.c) keys the SPIR-V words with the entry point and
 * specialisation as its options and the device's identity (vendor, device ID, pipelineCacheUUID,
 * driver version), checks an entry's VkPipelineCache header itself (the input's accept) before
 * seeding vkCreatePipelineCache with it, and puts what vkGetPipelineCacheData gives after a
 * miss's pipeline is made. */
#ifndef MODPACK_FILES_KERNEL_CACHE_H_
#define MODPACK_FILES_KERNEL_CACHE_H_

#include <stdbool.h>
#include <stdint.h>

#include "modpack/modpack.h"

/* What a key is made of: every field that changes what the driver would build. */
typedef struct {
  const char* kind;    /* the kind that builds ("opencl", "cuda"; < MP_KERNEL_CACHE_MAX_KIND) */
  const uint8_t* code; /* the bytes the driver compiles, as it gets them (decoded) */
  uint64_t code_size;
  const char* options; /* build or JIT options ("" for none) */
  const char* device;  /* which device: name, architecture */
  const char* driver;  /* the driver's version */
  const char* what;    /* what an entry holds, for log lines ("program binary", "cubin") */
  /* Optional (NULL: none): the kind's own check of a sealed entry's data before it counts as a
   * hit, for data the driver would take on trust (Vulkan: the pipeline cache header names this
   * device). false, with why in |why|: the entry is ignored as a damaged one is, and built. */
  bool (*accept)(const void* context, const uint8_t* data, uint64_t size, char* why,
                 size_t capacity);
  const void* accept_context; /* passed to accept (borrowed: it must outlive the slot) */
} mp_kernel_cache_input_t;

typedef struct {
  bool enabled; /* false: get finds nothing and put stores nothing */
  uint8_t key[MP_KERNEL_CACHE_KEY_SIZE];
  char name[2 * MP_KERNEL_CACHE_KEY_SIZE + 1]; /* the entry's file name: the key in hex */
  char kind[MP_KERNEL_CACHE_MAX_KIND];
  const char* what;
  const char* subject; /* for log lines: the library's path (borrowed) */
  bool (*accept)(const void*, const uint8_t*, uint64_t, char*, size_t); /* the input's */
  const void* accept_context;
  int dir_fd;          /* the folder, opened by get (-1: not yet) */
  int lock_fd;         /* the key's build lock, held from a miss to close (-1: none) */
  double clock;        /* when the current step began (for the trace's times) */
} mp_kernel_cache_slot_t;

/* Make |slot| for |input|: its key, unless the cache is off (|load_flags| has
 * MP_LOAD_NO_KERNEL_CACHE, MODPACK_KERNEL_CACHE is empty, SHA-256 is unavailable). |subject|
 * (borrowed; NULL: "<payload>") names the library in log lines. */
void mp_kernel_cache_open(mp_kernel_cache_slot_t* slot, const mp_kernel_cache_input_t* input,
                          uint32_t load_flags, const char* subject);
/* true with the entry's data (the caller's to free) when a valid entry is there; false on a
 * miss, the key's build lock then held (when it can be taken) until close. */
bool mp_kernel_cache_get(mp_kernel_cache_slot_t* slot, uint8_t** out_data, uint64_t* out_size);
/* Store |size| bytes built after a miss (written to a new file, then renamed into place), and
 * remove the entries least recently used while the folder is over its bound. */
void mp_kernel_cache_put(mp_kernel_cache_slot_t* slot, const void* data, uint64_t size);
/* The driver did not take what get returned (|why|): counted and said; the caller builds. */
void mp_kernel_cache_refused(mp_kernel_cache_slot_t* slot, const char* why);
/* Release the build lock and the folder. */
void mp_kernel_cache_close(mp_kernel_cache_slot_t* slot);

/* For modpack preflight: whether a valid entry for |input| is there, without using it (no
 * lock, no counter, its last use unchanged). Writes "hit", "miss" or "off" to |out_state| and
 * what it found to |detail|. */
void mp_kernel_cache_probe(const mp_kernel_cache_input_t* input, const char** out_state,
                           char* detail, uint64_t capacity);

#endif /* MODPACK_FILES_KERNEL_CACHE_H_ */
