/* ctest: mp_preflight_blob, preflight of a blob the caller located in a file (a .tar export's
 * blob object), refuses what it cannot read with a status and a message naming the problem,
 * never reading past the file or the blob it was given: arguments that are NULL, a blob that
 * does not fit the file (also where offset + size overflows), a blob too small for its header,
 * an index claiming more than the blob, bytes that are no blob, and a device string it does
 * not know. A blob of size 0 is host code only, and fits any device. Public API only. */
#define _GNU_SOURCE /* mkstemp */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modpack/modpack.h"

static int failures = 0;

static void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* A file of |size| bytes: zeros, with |blob| (|blob_size| bytes) written at |offset|. */
static void write_file(const char* path, uint64_t size, const uint8_t* blob, uint64_t blob_size,
                       uint64_t offset) {
  uint8_t* bytes = calloc(1, (size_t)size);
  if (!bytes) exit(2);
  if (blob) memcpy(bytes + offset, blob, (size_t)blob_size);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, (size_t)size, f) != size || fclose(f) != 0) exit(2);
  free(bytes);
}

static mp_status_t run(const char* path, uint64_t offset, uint64_t size, const char* device,
                       char* buffer, uint64_t capacity, mp_preflight_result_t* result) {
  memset(result, 0, sizeof *result);
  result->struct_size = sizeof *result;
  uint64_t length = 0;
  return mp_preflight_blob(path, offset, size, device, buffer, capacity, &length, result);
}

static void expect(const char* what, mp_status_t status, mp_status_t wanted, const char* needle) {
  const char* message = status == MP_OK ? "" : mp_error_message();
  int ok = status == wanted && (status == MP_OK || (needle && strstr(message, needle)));
  printf("%s %s: status %d, message: %s\n", ok ? "ok  " : "FAIL", what, (int)status, message);
  if (!ok) ++failures;
}

int main(void) {
  char path[] = "/tmp/modpack_test_preflight_blob_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 2;
  close(fd);
  char json[4096];
  mp_preflight_result_t result;

  /* A file of 4 KiB of zeros. */
  write_file(path, 4096, NULL, 0, 0);
  expect("NULL path", run(NULL, 0, 0, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_INVALID_ARGUMENT, "NULL");
  expect("a blob past the end", run(path, 4000, 200, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_FORMAT, "holds no blob of 200 bytes at offset 4000");
  expect("offset + size overflowing", run(path, UINT64_MAX, 2, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_FORMAT, "holds no blob");
  expect("size overflowing", run(path, 16, UINT64_MAX, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_FORMAT, "holds no blob");
  expect("a blob smaller than its header", run(path, 0, 10, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_FORMAT, "its blob is 10 bytes");
  expect("zeros that are no blob", run(path, 0, 1024, "cuda:sm_90", json, sizeof json, &result),
         MP_ERR_FORMAT, "index claims 0 bytes");
  expect("an unknown device", run(path, 0, 0, "nodevice:7", json, sizeof json, &result),
         MP_ERR_INVALID_ARGUMENT, "nodevice");

  /* Host code only: no blob, so every device fits, and nothing is read. */
  mp_status_t status = run(path, 0, 0, "cuda:sm_90", json, sizeof json, &result);
  expect("host code only", status, MP_OK, NULL);
  if (status == MP_OK && (!result.fits || result.bytes_read != 0)) {
    printf("FAIL host code only: fits %d, %llu bytes read: %s\n", (int)result.fits,
           (unsigned long long)result.bytes_read, json);
    ++failures;
  }

  /* A header whose index claims more than the blob it is in, at an offset inside the file. */
  uint8_t header[64] = {0};
  memcpy(header, MP_FORMAT_MAGIC, MP_FORMAT_MAGIC_SIZE);
  put_le(header + 8, MP_FORMAT_MAJOR, 2);
  put_le(header + 10, MP_FORMAT_MINOR, 2);
  put_le(header + 12, MP_FORMAT_HEADER_SIZE, 4);
  put_le(header + 16, 256, 8);     /* blob_size */
  put_le(header + 48, 1u << 20, 8); /* index_size: 1 MiB, in a blob of 256 bytes */
  write_file(path, 4096, header, sizeof header, 512);
  status = run(path, 512, 256, "cuda:sm_90", json, sizeof json, &result);
  expect("an index larger than its blob", status, MP_ERR_FORMAT, "index claims 1048576 bytes");
  if (result.bytes_read > 64) {
    printf("FAIL an index larger than its blob: read %llu bytes, past the header\n",
           (unsigned long long)result.bytes_read);
    ++failures;
  }

  /* An index of a plausible size whose header is not a blob's: the index parser names it. */
  memcpy(header, "NOTABLOB", 8);
  put_le(header + 48, 64, 8);
  write_file(path, 4096, header, sizeof header, 512);
  expect("a header that is not a blob's", run(path, 512, 256, "cuda:sm_90", json, sizeof json,
                                               &result),
         MP_ERR_FORMAT, MP_BLOB_SYMBOL);

  unlink(path);
  printf("%s\n", failures ? "FAILED" : "all preflight_blob checks passed");
  return failures ? 1 : 0;
}
