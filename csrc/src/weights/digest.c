/* Chunked SHA-256 on several threads (weights/digest.h). Every chunk of every job is one work
 * item; threads take items in file order from one counter, so a cold file is still read
 * front to back, and write each chunk's digest into its job's slot; then each job's digests
 * are hashed once more. */
#include "weights/digest.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/crypto.h"
#include "core/error.h"
#include "core/mapped_read.h"

enum { CHUNK = MP_WEIGHTS_DIGEST_CHUNK, MAX_THREADS = 8 };

typedef struct {
  mp_digest_job_t* jobs;
  uint8_t zero_chunk[32]; /* the SHA-256 of a whole chunk of zeros, when some job has holes */
  bool holes;
  uint64_t* first_chunk; /* per job: the index of its first chunk; [count] = all chunks */
  uint64_t count;
  uint8_t* chunk_digests; /* 32 bytes per chunk, in order */
  atomic_ullong next;     /* the next chunk to hash */
  atomic_int failed;
} work_t;

static uint64_t chunks_of(uint64_t size) {
  return (size + CHUNK - 1) / CHUNK;
}

/* The job holding chunk |c|: the last whose first chunk is <= c (a binary search). */
static uint64_t job_of(const work_t* w, uint64_t c) {
  uint64_t low = 0, high = w->count; /* first_chunk[low] <= c < first_chunk[high] */
  while (high - low > 1) {
    uint64_t mid = low + (high - low) / 2;
    if (w->first_chunk[mid] <= c) low = mid;
    else high = mid;
  }
  return low;
}

static mp_status_t sha256_sink(void* context, const uint8_t* bytes, uint64_t size) {
  return mp_sha256_update(context, bytes, size);
}

/* The SHA-256 of a chunk in which the job's file has holes: its data from the mapping, its
 * holes as zeros (core/mapped_read.h). */
static mp_status_t hash_with_holes(const mp_digest_job_t* job, uint64_t begin, uint64_t size,
                                   uint8_t digest[32]) {
  mp_sha256_t* hash;
  MP_RETURN_IF_ERROR(mp_sha256_begin(&hash));
  mp_status_t status = mp_read_mapped_file(job->data + begin, size, job->fd,
                                           job->file_offset + begin, sha256_sink, hash);
  if (status != MP_OK) {
    mp_sha256_abandon(hash);
    return status;
  }
  return mp_sha256_finish(hash, digest);
}

static void* hash_chunks(void* arg) {
  work_t* w = arg;
  uint64_t total = w->first_chunk[w->count];
  for (uint64_t c; (c = atomic_fetch_add(&w->next, 1)) < total && !atomic_load(&w->failed);) {
    uint64_t j = job_of(w, c);
    const mp_digest_job_t* job = &w->jobs[j];
    uint64_t begin = (c - w->first_chunk[j]) * CHUNK;
    uint64_t size = job->size - begin < CHUNK ? job->size - begin : CHUNK;
    uint8_t* digest = w->chunk_digests + 32 * c;
    bool holes = w->holes && mp_file_has_hole(job->fd, job->file_offset + begin, size);
    mp_status_t status;
    if (!holes)
      status = mp_crypto_sha256(job->data + begin, size, digest);
    else if (size == CHUNK && mp_file_is_hole(job->fd, job->file_offset + begin, size))
      status = (memcpy(digest, w->zero_chunk, 32), MP_OK);
    else
      status = hash_with_holes(job, begin, size, digest);
    if (status != MP_OK) atomic_store(&w->failed, 1);
  }
  return NULL;
}

static int thread_count(uint64_t chunks) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t n = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (uint64_t)cores;
  return (int)(chunks < n ? (chunks ? chunks : 1) : n);
}

mp_status_t mp_chunked_sha256(mp_digest_job_t* jobs, uint64_t count) {
  if (count == 0) return MP_OK;
  uint8_t probe[32]; /* libcrypto loaded (or its absence reported) before threads start */
  MP_RETURN_IF_ERROR(mp_crypto_sha256("", 0, probe));
  work_t w = {.jobs = jobs, .count = count};
  for (uint64_t j = 0; j < count && !w.holes; ++j)
    w.holes = mp_file_has_hole(jobs[j].fd, jobs[j].file_offset, jobs[j].size);
  _Static_assert((uint64_t)MP_ZEROS_SIZE >= (uint64_t)CHUNK, "a chunk of zeros at hand");
  if (w.holes) MP_RETURN_IF_ERROR(mp_crypto_sha256(mp_zeros(), CHUNK, w.zero_chunk));
  w.first_chunk = malloc((count + 1) * sizeof *w.first_chunk);
  if (!w.first_chunk) return mp_out_of_memory("hashing weights");
  uint64_t total = 0, bytes = 0;
  for (uint64_t j = 0; j < count; ++j) {
    w.first_chunk[j] = total;
    total += chunks_of(jobs[j].size);
    bytes += jobs[j].size;
  }
  w.first_chunk[count] = total;
  w.chunk_digests = malloc(total ? 32 * total : 1);
  if (!w.chunk_digests) {
    free(w.first_chunk);
    return mp_out_of_memory("hashing weights");
  }
  atomic_init(&w.next, 0);
  atomic_init(&w.failed, 0);
  /* One advice over the jobs' span when they lie in one mapping in order (a whole file). */
  const uint8_t* span_begin = jobs[0].data;
  const uint8_t* span_end = jobs[count - 1].data + jobs[count - 1].size;
  bool one_span = span_end >= span_begin && (uint64_t)(span_end - span_begin) <= 2 * bytes;
  if (one_span) mp_mapped_read_begin(span_begin, (uint64_t)(span_end - span_begin));
  int threads = thread_count(total);
  pthread_t helpers[MAX_THREADS];
  int started = 0;
  for (int t = 1; t < threads; ++t)
    if (pthread_create(&helpers[started], NULL, hash_chunks, &w) == 0) ++started;
  hash_chunks(&w); /* this thread works too; fewer helpers just means slower */
  for (int t = 0; t < started; ++t) pthread_join(helpers[t], NULL);
  if (one_span) mp_mapped_read_end(span_begin, (uint64_t)(span_end - span_begin));
  mp_status_t status =
      atomic_load(&w.failed) ? mp_errorf(MP_ERR_INTERNAL, "SHA-256 failed in libcrypto") : MP_OK;
  for (uint64_t j = 0; j < count && status == MP_OK; ++j)
    status = mp_crypto_sha256(w.chunk_digests + 32 * w.first_chunk[j],
                              32 * (w.first_chunk[j + 1] - w.first_chunk[j]), jobs[j].digest);
  free(w.chunk_digests);
  free(w.first_chunk);
  return status;
}
