/*
 * test_internal_persist_read_large.c: read_file.c on files of 8 MiB and more
 * (their buffer is aligned to 2 MiB and offered huge pages: the bytes must
 * be the file's, whole, in one read or in many) and a file whose
 * modification time moves by nanoseconds only while it is read, with its
 * size unchanged: still refused as modified.
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

static void test_large_files_read_whole(void) {
  char path[256];
  ps_path(path, sizeof path, "large");
  const size_t n = ((size_t)9 << 20) + 123; /* past the 8 MiB where the aligned buffer starts */
  REQUIRE(write_pattern(path, n) == 0);
  static const size_t chunks[] = {(size_t)64 << 20, (size_t)1 << 20};
  for (size_t k = 0; k < 2; k++) {
    kvci_read_file_chunk = chunks[k];
    unsigned char* data = NULL;
    size_t len = 0;
    if (CHECK_OK(kvci_read_file("test", path, &data, &len))) {
      CHECK_EQ_U64(len, n);
      CHECK(((uintptr_t)data & (((uintptr_t)2 << 20) - 1)) == 0); /* the 2 MiB alignment */
      CHECK(is_pattern(data, len));
    }
    kvci_read_file_free(data);
  }
  kvci_read_file_chunk = (size_t)64 << 20;
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
  kvci_read_file_chunk = 4096;
  kvci_read_file_after_chunk = touch_nanoseconds;
  touched = 0;
  unsigned char* data = (unsigned char*)0x1;
  size_t len = 5;
  kvc_error* e = kvci_read_file("test", path, &data, &len);
  kvci_read_file_after_chunk = NULL;
  kvci_read_file_chunk = (size_t)64 << 20;
  close(fd);
  CHECK(touched > 0);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "was modified while it was read"));
  kvc_error_destroy(e);
  CHECK(data == NULL && len == 0); /* nothing handed out */
  unlink(path);
}

int main(void) {
  TU_RUN(test_large_files_read_whole);
  TU_RUN(test_nanosecond_change_is_a_change);
  return tu_finish();
}
