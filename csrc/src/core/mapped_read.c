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

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/checksum.h"

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

/* Never written: in .bss, so it costs the binary nothing (a const array would be 4 MiB of zeros
 * in .rodata) and reads come from the shared zero page. */
static uint8_t zeros[MP_ZEROS_SIZE];

const uint8_t* mp_zeros(void) {
  return zeros;
}

uint64_t mp_file_extent(int fd, uint64_t offset, uint64_t end, bool* out_hole) {
  *out_hole = false;
#if defined(SEEK_DATA) && defined(SEEK_HOLE)
  if (fd < 0 || offset >= end) return end;
  off_t data = lseek(fd, (off_t)offset, SEEK_DATA);
  if (data < 0) {
    *out_hole = errno == ENXIO; /* nothing but a hole from |offset| to the end of the file */
    return end;
  }
  if ((uint64_t)data > offset) {
    *out_hole = true;
    return (uint64_t)data < end ? (uint64_t)data : end;
  }
  off_t hole = lseek(fd, (off_t)offset, SEEK_HOLE);
  return hole > data && (uint64_t)hole < end ? (uint64_t)hole : end;
#else
  (void)fd, (void)offset;
  return end;
#endif
}

bool mp_file_is_hole(int fd, uint64_t offset, uint64_t size) {
  bool hole;
  return size > 0 && mp_file_extent(fd, offset, offset + size, &hole) == offset + size && hole;
}

bool mp_file_has_hole(int fd, uint64_t offset, uint64_t size) {
#if defined(SEEK_HOLE)
  if (fd < 0 || size == 0) return false;
  off_t hole = lseek(fd, (off_t)offset, SEEK_HOLE);
  return hole >= 0 && (uint64_t)hole < offset + size; /* the end of the file is a hole too */
#else
  (void)fd, (void)offset, (void)size;
  return false;
#endif
}

mp_status_t mp_read_mapped_file(const uint8_t* data, uint64_t size, int fd, uint64_t file_offset,
                                mp_bytes_sink_t consume, void* context) {
  bool holes = mp_file_has_hole(fd, file_offset, size);
  mp_status_t status = MP_OK;
  for (uint64_t at = 0; at < size && status == MP_OK;) {
    bool hole = false;
    uint64_t next = holes ? mp_file_extent(fd, file_offset + at, file_offset + size, &hole) -
                                file_offset
                          : size;
    if (hole) {
      for (; at < next && status == MP_OK; at += MP_ZEROS_SIZE)
        status = consume(context, zeros, next - at < MP_ZEROS_SIZE ? next - at : MP_ZEROS_SIZE);
    } else {
      mp_mapped_read_begin(data + at, next - at);
      status = consume(context, data + at, next - at);
      mp_mapped_read_end(data + at, next - at);
    }
    at = next;
  }
  return status;
}

static mp_status_t hash64_sink(void* context, const uint8_t* bytes, uint64_t size) {
  mp_hash64_update(context, bytes, (size_t)size);
  return MP_OK;
}

uint64_t mp_checksum_mapped_file(mp_const_byte_span_t bytes, int fd, uint64_t file_offset) {
  if (!mp_file_has_hole(fd, file_offset, bytes.size)) return mp_checksum_mapped(bytes);
  mp_hash64_t* hash = mp_hash64_new();
  if (!hash) return mp_checksum_mapped(bytes);
  (void)mp_read_mapped_file(bytes.data, bytes.size, fd, file_offset, hash64_sink, hash);
  uint64_t digest = mp_hash64_digest(hash);
  mp_hash64_free(hash);
  return digest;
}
