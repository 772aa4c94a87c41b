/* ctest: mp_library_check_blob, the load's checks of a blob the caller located in a file (a
 * .tar export's blob object, read in the archive), refuses what it cannot read with a status,
 * the stage that failed and a message naming the problem, never reading past the file: a NULL
 * or missing path, a blob that does not fit the file (also where offset + size overflows),
 * bytes that are no blob. A blob of size 0 is host code only, and passes. Public API only. */
#define _GNU_SOURCE /* mkstemp */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modpack/modpack.h"

static int failures = 0;

static void expect(const char* what, mp_status_t status, int32_t stage, mp_status_t wanted,
                   int32_t wanted_stage, const char* needle) {
  const char* message = status == MP_OK ? "" : mp_error_message();
  int ok = status == wanted && stage == wanted_stage &&
           (status == MP_OK || (needle && strstr(message, needle)));
  printf("%s %s: status %d, stage %d, message: %s\n", ok ? "ok  " : "FAIL", what, (int)status,
         (int)stage, message);
  if (!ok) ++failures;
}

int main(void) {
  char path[] = "/tmp/modpack_test_check_blob_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 2;
  static uint8_t zeros[4096];
  if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) return 2;
  close(fd);
  int32_t stage = -1;
  mp_status_t status = mp_library_check_blob(NULL, 0, 0, NULL, &stage);
  expect("NULL path", status, stage, MP_ERR_INVALID_ARGUMENT, MP_CHECK_FILE, "NULL path");
  status = mp_library_check_blob("/nonexistent/modpack.tar", 0, 0, NULL, &stage);
  expect("a missing file", status, stage, MP_ERR_NOT_FOUND, MP_CHECK_FILE, "cannot open");
  status = mp_library_check_blob(path, 4000, 200, NULL, &stage);
  expect("a blob past the end", status, stage, MP_ERR_FORMAT, MP_CHECK_BLOB,
         "does not fit the 4096-byte file");
  status = mp_library_check_blob(path, UINT64_MAX, 2, NULL, &stage);
  expect("offset + size overflowing", status, stage, MP_ERR_FORMAT, MP_CHECK_BLOB,
         "does not fit");
  status = mp_library_check_blob(path, 16, UINT64_MAX, NULL, &stage);
  expect("size overflowing", status, stage, MP_ERR_FORMAT, MP_CHECK_BLOB, "does not fit");
  status = mp_library_check_blob(path, 0, 1024, NULL, &stage);
  expect("zeros that are no blob", status, stage, MP_ERR_FORMAT, MP_CHECK_BLOB, "__dev_mblob");
  status = mp_library_check_blob(path, 0, 0, NULL, &stage);
  expect("host code only", status, stage, MP_OK, 0, NULL);
  status = mp_library_check_blob(path, 0, 0, NULL, NULL); /* the stage may be NULL */
  expect("no stage asked", status, 0, MP_OK, 0, NULL);
  unlink(path);
  return failures ? 1 : 0;
}
