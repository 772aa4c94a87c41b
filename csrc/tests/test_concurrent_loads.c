/* Threads loading, calling and dropping libraries at once, for the sanitizers (ASan, TSan):
 *
 *   modpack_test_concurrent_loads ROUNDS LIBRARY EXPECTED [LIBRARY EXPECTED ...]
 *
 * Each LIBRARY has a host function `weights_sum` (no arguments) that returns the sum of its
 * const array "weights" as an integer, which must be EXPECTED. Eight threads each load every
 * library ROUNDS times: look the function up, call it, read the array from C as well, and drop
 * the tree, so loads of one file share and release one mapped library concurrently. For the
 * first half of the rounds, half the threads keep their first tree of each library, so drops
 * race with loads and with calls on trees still held; in the second half nobody keeps one, so
 * the library is unmapped (dlclose) and mapped again while other threads load it. Exit 0 when
 * every call and read gave the expected value. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "modpack/modpack.h"

enum { THREADS = 8, MAX_LIBRARIES = 4 };

typedef struct {
  int index;
  int rounds;
  int num_libraries;
  const char* paths[MAX_LIBRARIES];
  long long expected[MAX_LIBRARIES];
  int failures;
} worker_t;

static int fail(worker_t* w, const char* path, const char* what) {
  fprintf(stderr, "thread %d, %s: %s: %s\n", w->index, path, what, mp_error_message());
  ++w->failures;
  return 1;
}

/* One load, call, read and (unless |keep|) drop; the tree goes to |kept| otherwise. */
static int round_trip(worker_t* w, int library, mp_module_t** kept) {
  const char* path = w->paths[library];
  mp_module_t* root = NULL;
  if (mp_module_load_from_file(path, 0, &root) != MP_OK) return fail(w, path, "load");
  mp_function_t* sum = NULL;
  int failed = 0;
  if (mp_module_get_function(root, "weights_sum", 0, &sum) != MP_OK) {
    failed = fail(w, path, "get_function");
  } else {
    mp_value_t ret;
    if (mp_function_call(sum, NULL, 0, &ret) != MP_OK)
      failed = fail(w, path, "call");
    else if (ret.type_code != MP_TYPE_INT || ret.v_int64 != w->expected[library])
      failed = fail(w, path, "wrong sum");
    mp_function_release(sum);
  }
  const DLTensor* weights = NULL;
  if (mp_module_get_array(root, "weights", 1, &weights) != MP_OK) {
    failed = fail(w, path, "get_array");
  } else {
    long long total = 0;
    const int64_t* values = (const int64_t*)((const char*)weights->data + weights->byte_offset);
    for (int64_t i = 0; i < weights->shape[0]; ++i) total += values[i];
    if (total != w->expected[library]) failed = fail(w, path, "wrong array contents");
  }
  if (kept && !*kept)
    *kept = root;
  else
    mp_module_release(root);
  return failed;
}

static void* work(void* arg) {
  worker_t* w = arg;
  mp_module_t* kept[MAX_LIBRARIES] = {0};
  int keeps = w->index % 2 == 0;
  for (int r = 0; r < w->rounds; ++r) {
    if (r == w->rounds / 2)
      for (int i = 0; i < w->num_libraries; ++i) mp_module_release(kept[i]);
    for (int i = 0; i < w->num_libraries; ++i)
      round_trip(w, i, keeps && r < w->rounds / 2 ? &kept[i] : NULL);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc % 2 != 0 || (argc - 2) / 2 > MAX_LIBRARIES) {
    fprintf(stderr, "usage: %s ROUNDS LIBRARY EXPECTED [LIBRARY EXPECTED ...] (at most %d)\n",
            argv[0], MAX_LIBRARIES);
    return 2;
  }
  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    workers[t] = (worker_t){.index = t, .rounds = atoi(argv[1]), .num_libraries = (argc - 2) / 2};
    for (int i = 0; i < workers[t].num_libraries; ++i) {
      workers[t].paths[i] = argv[2 + 2 * i];
      workers[t].expected[i] = atoll(argv[3 + 2 * i]);
    }
  }
  for (int t = 0; t < THREADS; ++t)
    if (pthread_create(&threads[t], NULL, work, &workers[t]) != 0) {
      fprintf(stderr, "cannot start thread %d\n", t);
      return 2;
    }
  int failures = 0;
  for (int t = 0; t < THREADS; ++t) {
    pthread_join(threads[t], NULL);
    failures += workers[t].failures;
  }
  printf("%d threads x %d rounds x %d libraries: %d failures\n", THREADS, atoi(argv[1]),
         workers[0].num_libraries, failures);
  return failures ? 1 : 0;
}
