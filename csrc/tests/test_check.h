/* The checks every C test of the runtime shares: a failure counted and printed with what
 * happened, and the verdict at the end. */
#ifndef MODPACK_TEST_CHECK_H_
#define MODPACK_TEST_CHECK_H_

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      ++failures;                                            \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
    }                                                        \
  } while (0)

static inline int starts_with(const char* text, const char* prefix) {
  return strncmp(text, prefix, strlen(prefix)) == 0;
}

static inline int finish(const char* name) {
  if (failures) {
    printf("%s: %d failure(s)\n", name, failures);
    return 1;
  }
  printf("%s: all passed\n", name);
  return 0;
}

#endif /* MODPACK_TEST_CHECK_H_ */
