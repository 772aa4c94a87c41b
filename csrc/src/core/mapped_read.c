/* Reading mapped ranges once (core/mapped_read.h).
 *
 * How a large range is best read depends on where its pages are (measured in
 * benchmarks/RESULTS.md):
 * - in the page cache (a warm load): mapped in one call (MADV_POPULATE_READ, Linux >= 5.14)
 *   rather than faulted in 64 KiB at a time, which more than doubles the hash's cost;
 * - on disk (a cold load): the mapping is marked sequential, so the faults read ahead with the
 *   full read-ahead window, the same requests as read(), while the hash runs: the disk's
 *   sequential speed, where populating the whole range first reached a third of it.
 * mincore() tells the two apart. All of it is advisory: failures are ignored. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* madvise */
#endif
#include "core/mapped_read.h"

#include <stdbool.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

enum {
  PAGE = 4096,
  MP_MADV_POPULATE_READ = 22,
  RESIDENCY_SAMPLES = 64,
  SMALL = 1 << 20, /* below this, no advice: it costs more than it saves */
};

static void advise(const uint8_t* data, uint64_t size, int advice) {
#if defined(__linux__)
  uintptr_t start = (uintptr_t)data & ~(uintptr_t)(PAGE - 1);
  (void)madvise((void*)start, (size_t)((uintptr_t)data + size - start), advice);
#else
  (void)data, (void)size, (void)advice;
#endif
}

/* Whether most of the pages under |data| are in memory, judged by RESIDENCY_SAMPLES pages
 * spread evenly over it (asking for every page costs ~10 ms per 512 MiB); false when unknown. */
static bool mostly_resident(const uint8_t* data, uint64_t size) {
#if defined(__linux__)
  uintptr_t start = (uintptr_t)data & ~(uintptr_t)(PAGE - 1);
  uint64_t pages = ((uintptr_t)data + size - start + PAGE - 1) / PAGE, resident = 0;
  for (uint64_t k = 0; k < RESIDENCY_SAMPLES; ++k) {
    unsigned char in_memory = 0;
    uintptr_t page = start + (pages * k / RESIDENCY_SAMPLES) * PAGE;
    if (mincore((void*)page, PAGE, &in_memory) != 0) return false;
    resident += in_memory & 1;
  }
  return resident * 10 >= RESIDENCY_SAMPLES * 9;
#else
  (void)data, (void)size;
  return false;
#endif
}

void mp_mapped_read_begin(const uint8_t* data, uint64_t size) {
  if (size < SMALL) return;
  advise(data, size, mostly_resident(data, size) ? MP_MADV_POPULATE_READ : MADV_SEQUENTIAL);
}

void mp_mapped_read_end(const uint8_t* data, uint64_t size) {
  if (size >= SMALL) advise(data, size, MADV_NORMAL);
}

uint64_t mp_checksum_mapped(mp_const_byte_span_t bytes) {
  mp_mapped_read_begin(bytes.data, bytes.size);
  uint64_t digest = mp_checksum(bytes);
  mp_mapped_read_end(bytes.data, bytes.size);
  return digest;
}
