/*
 * test_internal_persist_source.c: read_file.c's file source on its own: a
 * file past 8 MiB read back whole at offsets, in one read or in 1 MiB reads,
 * and left unchanged; a file whose modification time moves by nanoseconds
 * only while it is read, with its size unchanged: still refused as modified.
 */
#define _DEFAULT_SOURCE 1 /* futimens */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist/read_file.h"
#include "persist_test.h"

/* A file of n bytes, each a function of its offset; 0, or -1. */
static int write_pattern(const char* path, size_t n) {
  unsigned char* b = malloc(n);
  if (!b) return -1;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
  FILE* f = fopen(path, "wb");
  int ok = f && fwrite(b, 1, n, f) == n;
  if (f && fclose(f)) ok = 0;
  free(b);
  return ok ? 0 : -1;
}

static int is_pattern(const unsigned char* d, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (d[i] != (unsigned char)(i * 2654435761u >> 13)) return 0;
  return 1;
}

static void test_large_file_read_back(void) {
  char path[256];
  ps_path(path, sizeof path, "large");
  const size_t n = ((size_t)9 << 20) + 123;
  REQUIRE(write_pattern(path, n) == 0);
  unsigned char* data = malloc(n);
  REQUIRE(data != NULL);
  static const size_t chunks[] = {(size_t)64 << 20, (size_t)1 << 20};
  for (size_t k = 0; k < 2; k++) {
    kvci_read_file_chunk = chunks[k];
    kvci_source src;
    if (!CHECK_OK(kvci_source_open("test", path, &src))) continue;
    CHECK_EQ_U64(src.len, n);
    CHECK(kvci_source_view(&src, 0) == NULL); /* a file is read, never viewed in place */
    memset(data, 0, n);
    /* Two reads at offsets, the second one unaligned. */
    CHECK_OK(kvci_source_read(&src, 0, data, 4097));
    CHECK_OK(kvci_source_read(&src, 4097, data + 4097, n - 4097));
    CHECK(is_pattern(data, n));
    CHECK_OK(kvci_source_unchanged(&src));
    kvci_source_close(&src);
    CHECK_EQ_I64(src.fd, -1);
  }
  kvci_read_file_chunk = (size_t)64 << 20;
  free(data);
  unlink(path);
}

static int touched;
/* After the first chunk: the same second, another nanosecond; the size stays. */
static void touch_nanoseconds(int fd, uint64_t done) {
  (void)done;
  if (touched++) return;
  struct timespec t[2] = {{1000000000, 0}, {1000000000, 7}};
  CHECK(futimens(fd, t) == 0);
}

static void test_nanosecond_change_is_a_change(void) {
  char path[256];
  ps_path(path, sizeof path, "nanos");
  REQUIRE(write_pattern(path, 3 * 4096) == 0);
  int fd = open(path, O_WRONLY);
  REQUIRE(fd >= 0);
  struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};
  CHECK(futimens(fd, t) == 0);
  close(fd);
  kvci_source src;
  REQUIRE_OK(kvci_source_open("test", path, &src));
  unsigned char buf[3 * 4096];
  kvci_read_file_chunk = 4096;
  kvci_read_file_after_chunk = touch_nanoseconds;
  touched = 0;
  CHECK_OK(kvci_source_read(&src, 0, buf, sizeof buf)); /* the bytes are the same ones */
  kvci_read_file_after_chunk = NULL;
  kvci_read_file_chunk = (size_t)64 << 20;
  CHECK(touched > 0);
  CHECK(is_pattern(buf, sizeof buf));
  kvc_error* e = kvci_source_unchanged(&src);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "was modified while it was read"));
  kvc_error_destroy(e);
  kvci_source_close(&src);
  unlink(path);
}

int main(void) {
  TU_RUN(test_large_file_read_back);
  TU_RUN(test_nanosecond_change_is_a_change);
  return tu_finish();
}
