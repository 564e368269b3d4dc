/*
 * test_internal_persist_source.c: read_file.c's file source on its own: a
 * file past 8 MiB read back whole at offsets, in one read or in 1 MiB reads,
 * and left unchanged; a file whose modification time moves by nanoseconds
 * only while it is read, with its size unchanged: still refused as modified;
 * the checks' reads aside, which leave no pages of their own in the page
 * cache and keep the pages that were there.
 */
#define _DEFAULT_SOURCE 1 /* futimens, mincore */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
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

/* Pages of the file in the page cache, from mincore over a mapping of its first `pages` pages; -1 on failure. */
static int resident_pages(const char* path, size_t pages, unsigned char* vec) {
  long page = sysconf(_SC_PAGESIZE);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  void* m = mmap(NULL, pages * (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return -1;
  int r = mincore(m, pages * (size_t)page, vec);
  munmap(m, pages * (size_t)page);
  if (r) return -1;
  int n = 0;
  for (size_t i = 0; i < pages; i++) n += vec[i] & 1;
  return n;
}

static void drop_from_page_cache(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static void test_reads_aside_leave_the_page_cache_as_it_was(void) {
  char path[256];
  ps_path(path, sizeof path, "aside");
  enum { PAGES = 64 };
  long page = sysconf(_SC_PAGESIZE);
  const size_t n = (size_t)PAGES * (size_t)page;
  REQUIRE(write_pattern(path, n) == 0);
  unsigned char vec[PAGES];
  drop_from_page_cache(path);
  if (resident_pages(path, PAGES, vec) != 0) { /* tmpfs and the like keep every page: nothing to see */
    printf("SKIPPED: test_reads_aside_leave_the_page_cache_as_it_was: the file's pages cannot be dropped from the "
           "page cache on this filesystem (TMPDIR)\n");
    unlink(path);
    return;
  }
  kvci_source src;
  REQUIRE_OK(kvci_source_open("test", path, &src));
  unsigned char buf[256];
  /* Small reads scattered over a file not in the cache: the bytes, and no page left behind. */
  for (int p = 0; p < PAGES; p += 8) {
    uint64_t at = (uint64_t)p * (uint64_t)page + 100;
    CHECK_OK(kvci_source_read_aside(&src, at, buf, sizeof buf));
    for (size_t i = 0; i < sizeof buf; i++)
      if (buf[i] != (unsigned char)((at + i) * 2654435761u >> 13)) {
        CHECK(!"read aside returned the file's bytes");
        break;
      }
  }
  CHECK_EQ_I64(resident_pages(path, PAGES, vec), 0);
  /* A read across a page boundary, and one that the plain reader would have left in the cache. */
  CHECK_OK(kvci_source_read_aside(&src, (uint64_t)page - 10, buf, 20));
  CHECK_EQ_I64(resident_pages(path, PAGES, vec), 0);
  CHECK_OK(kvci_source_read(&src, 0, buf, sizeof buf));
  CHECK(resident_pages(path, PAGES, vec) > 0); /* the seam the test stands on: a plain read leaves pages */
  /* Pages already in the cache stay there. */
  unsigned char* all = malloc(n);
  REQUIRE(all != NULL);
  CHECK_OK(kvci_source_read(&src, 0, all, n));
  int before = resident_pages(path, PAGES, vec);
  CHECK_EQ_I64(before, PAGES);
  for (int p = 0; p < PAGES; p += 8) CHECK_OK(kvci_source_read_aside(&src, (uint64_t)p * (uint64_t)page, buf, 64));
  CHECK_EQ_I64(resident_pages(path, PAGES, vec), before);
  free(all);
  kvci_source_close(&src);
  unlink(path);
}

int main(void) {
  TU_RUN(test_large_file_read_back);
  TU_RUN(test_reads_aside_leave_the_page_cache_as_it_was);
  TU_RUN(test_nanosecond_change_is_a_change);
  return tu_finish();
}
