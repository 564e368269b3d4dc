/*
 * The CPU backend's host memory (backends/cpu/host_memory.c, kvc_host_memory_* in kvcache/allocator.h): large
 * blocks are aligned, zeroed when asked, kept when freed and handed to the next block of about their size, and
 * given back when they wait too long, pass the limit or are released. Small ones are malloc's.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/cpu/host_memory.h"
#include "internal.h"
#include "test_util.h"

#define MIB ((size_t)1 << 20)

static uint64_t fake_now;
static uint64_t fake_clock(void) { return fake_now; }

static int all_bytes(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* Every test starts with nothing kept and a limit large enough for what it frees. */
static void start(uint64_t limit) {
  kvc_host_memory_release();
  kvc_host_memory_set_retention(limit);
  fake_now = 1000;
  kvci_host_memory_clock = fake_clock;
}

static void test_large_blocks_are_aligned_and_zeroed(void) {
  start(64 * MIB);
  unsigned char* a = kvci_host_memory_alloc(4 * MIB + 100, 1);
  REQUIRE(a != NULL);
  CHECK(((uintptr_t)a & (2 * MIB - 1)) == 0); /* huge-page aligned */
  CHECK(all_bytes(a, 4 * MIB + 100, 0));
  unsigned char* b = kvci_host_memory_alloc(KVCI_HOST_LARGE_BLOCK, 0); /* below a huge page: page aligned */
  REQUIRE(b != NULL);
  CHECK(((uintptr_t)b & 4095) == 0);
  memset(a, 7, 4 * MIB + 100);
  memset(b, 7, KVCI_HOST_LARGE_BLOCK);
  kvci_host_memory_free(a);
  kvci_host_memory_free(b);
  CHECK_EQ_U64(kvc_host_memory_retained(), 4 * MIB + 4096 + KVCI_HOST_LARGE_BLOCK);
}

static void test_a_freed_block_is_reused_zeroed_only_when_asked(void) {
  start(64 * MIB);
  unsigned char* a = kvci_host_memory_alloc(8 * MIB, 1);
  REQUIRE(a != NULL);
  memset(a, 0x5A, 8 * MIB);
  kvci_host_memory_free(a);
  CHECK_EQ_U64(kvc_host_memory_retained(), 8 * MIB);
  unsigned char* b = kvci_host_memory_alloc(8 * MIB, 0); /* the same size: the kept block, as it was left */
  CHECK_EQ_PTR(b, a);
  CHECK(all_bytes(b, 8 * MIB, 0x5A));
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
  kvci_host_memory_free(b);
  unsigned char* c = kvci_host_memory_alloc(7 * MIB, 1); /* smaller by less than a quarter: reused, zeroed */
  CHECK_EQ_PTR(c, a);
  CHECK(all_bytes(c, 7 * MIB, 0));
  kvci_host_memory_free(c);
}

static void test_blocks_far_from_the_size_are_not_reused(void) {
  start(64 * MIB);
  void* big = kvci_host_memory_alloc(16 * MIB, 0);
  REQUIRE(big != NULL);
  kvci_host_memory_free(big);
  void* small = kvci_host_memory_alloc(4 * MIB, 0); /* would hold 12 MiB nobody uses */
  CHECK_NE_PTR(small, big);
  void* larger = kvci_host_memory_alloc(17 * MIB, 0); /* does not fit */
  CHECK_NE_PTR(larger, big);
  CHECK_EQ_U64(kvc_host_memory_retained(), 16 * MIB);
  kvci_host_memory_free(small);
  kvci_host_memory_free(larger);
  /* Of several that fit, the smallest. */
  void* fits = kvci_host_memory_alloc(15 * MIB, 0);
  CHECK_EQ_PTR(fits, big);
  kvci_host_memory_free(fits);
}

static void test_the_limit_keeps_the_newest(void) {
  start(64 * MIB);
  void* a = kvci_host_memory_alloc(4 * MIB, 0);
  void* b = kvci_host_memory_alloc(4 * MIB, 0);
  REQUIRE(a && b);
  CHECK_EQ_U64(kvc_host_memory_set_retention(6 * MIB), 64 * MIB); /* the previous limit */
  kvci_host_memory_free(a);
  kvci_host_memory_free(b); /* a is given back: b is newer and both do not fit */
  CHECK_EQ_U64(kvc_host_memory_retained(), 4 * MIB);
  void* c = kvci_host_memory_alloc(4 * MIB, 0);
  CHECK_EQ_PTR(c, b);
  kvci_host_memory_free(c);
  void* huge = kvci_host_memory_alloc(8 * MIB, 0); /* larger than the limit: never kept */
  REQUIRE(huge != NULL);
  kvci_host_memory_free(huge);
  CHECK_EQ_U64(kvc_host_memory_retained(), 4 * MIB);
  CHECK_EQ_U64(kvc_host_memory_set_retention(0), 6 * MIB); /* 0: nothing kept from now on */
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
  void* d = kvci_host_memory_alloc(4 * MIB, 0);
  kvci_host_memory_free(d);
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
}

static void test_idle_blocks_go_back_after_ten_seconds(void) {
  start(64 * MIB);
  void* a = kvci_host_memory_alloc(4 * MIB, 0);
  void* b = kvci_host_memory_alloc(4 * MIB, 0);
  kvci_host_memory_free(a);
  fake_now += 6000000000ull;
  kvci_host_memory_free(b);
  CHECK_EQ_U64(kvc_host_memory_retained(), 8 * MIB);
  fake_now += 4000000000ull; /* a has waited 10 s, b 4 s */
  CHECK_EQ_U64(kvc_host_memory_retained(), 4 * MIB);
  fake_now += 6000000000ull;
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
}

static void test_release_gives_everything_back(void) {
  start(64 * MIB);
  void* a = kvci_host_memory_alloc(4 * MIB, 0);
  void* b = kvci_host_memory_alloc(2 * MIB, 0);
  kvci_host_memory_free(a);
  kvci_host_memory_free(b);
  CHECK_EQ_U64(kvc_host_memory_release(), 6 * MIB);
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
  CHECK_EQ_U64(kvc_host_memory_release(), 0);
  CHECK_EQ_U64(kvc_host_memory_set_retention(64 * MIB), 64 * MIB); /* release keeps the limit */
}

static void test_small_and_foreign_pointers_go_to_malloc(void) {
  start(64 * MIB);
  unsigned char* s = kvci_host_memory_alloc(1000, 1);
  REQUIRE(s != NULL);
  CHECK(all_bytes(s, 1000, 0));
  kvci_host_memory_free(s);
  kvci_host_memory_free(NULL);
  /* A malloc block that happens to start on a page is looked up, not found, and given to free. */
  void* aligned = aligned_alloc(4096, 8192);
  REQUIRE(aligned != NULL);
  kvci_host_memory_free(aligned);
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
}

/* The VmFlags line of the mapping that holds p, from /proc/self/smaps ("hg": advised MADV_HUGEPAGE); 0 when it
   was found. */
static int vm_flags_of(const void* p, char* out, size_t n) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0, found = -1;
  while (found && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(out, n, "%s", line + 8);
      found = 0;
    }
  }
  fclose(f);
  return found;
}

/* 1 when the mapping holding p is advised MADV_HUGEPAGE, 0 when not, -1 when it is not in smaps. */
static int advised_huge(const void* p) {
  char flags[512];
  if (vm_flags_of(p, flags, sizeof flags) != 0) return -1;
  return strstr(flags, " hg") != NULL;
}

/* Huge pages only where the whole block will be written: a zeroed block (a new store, a pool) may be written
   sparsely, and each write to an untouched 2 MiB range of a huge-page mapping faults in all of it. */
static void test_only_blocks_written_whole_are_advised_huge_pages(void) {
  start(0);
  unsigned char* whole = kvci_host_memory_alloc(8 * MIB, 0);
  unsigned char* sparse = kvci_host_memory_alloc(8 * MIB, 1);
  REQUIRE(whole && sparse);
  CHECK(advised_huge(sparse) == 0);
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0) {
    CHECK(advised_huge(whole) == 1);
  } else {
    printf("SKIPPED: the unzeroed block's huge-page advice: this kernel has no transparent huge pages\n");
  }
  kvci_host_memory_free(whole);
  kvci_host_memory_free(sparse);
}

static size_t resident_bytes(void) {
  unsigned long size = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  CHECK(f != NULL && fscanf(f, "%lu %lu", &size, &resident) == 2);
  if (f) fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* A store of gigabytes holding a few tokens (what a file may declare) costs the pages written, from allocation
   to free: not 2 MiB per write (huge pages), and, under AddressSanitizer, not an eighth of the block in shadow
   bytes (unpoisoning a whole fresh block when it is mapped or unmapped). */
static void test_a_large_sparse_block_costs_only_what_is_written(void) {
  start(0);
  size_t before = resident_bytes(), big = (size_t)4 << 30;
  unsigned char* p = kvci_host_memory_alloc(big, 1);
  if (!p) {
    printf("SKIPPED: a 4 GiB mapping to write sparsely: this machine refuses to map it\n");
    return;
  }
  for (size_t at = 0; at < big; at += 64 * MIB) p[at] = 1; /* 64 writes, one per 64 MiB */
  size_t written = resident_bytes();
  CHECK(written < before + 16 * MIB);
  kvci_host_memory_free(p);
  CHECK(resident_bytes() < before + 16 * MIB);
  if (written >= before + 16 * MIB) fprintf(stderr, "resident grew by %zu MiB\n", (written - before) / MIB);
}

static void* churn(void* arg) {
  size_t mib = (size_t)(uintptr_t)arg;
  for (int i = 0; i < 200; i++) {
    unsigned char* p = kvci_host_memory_alloc(mib * MIB, i & 1);
    if (!p) return (void*)1;
    if ((i & 1) && !all_bytes(p, mib * MIB, 0)) return (void*)2;
    memset(p, (int)mib, mib * MIB);
    kvci_host_memory_free(p);
  }
  return NULL;
}

/* Threads allocating and freeing at once: each zeroed block is zero, every block is its own (TSan sees the
   lock), nothing is lost. */
static void test_threads(void) {
  start(16 * MIB);
  kvci_host_memory_clock = fake_clock;
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) REQUIRE(pthread_create(&t[i], NULL, churn, (void*)(i % 2 + 1)) == 0);
  for (int i = 0; i < 4; i++) {
    void* r;
    pthread_join(t[i], &r);
    CHECK(r == NULL);
  }
  CHECK(kvc_host_memory_retained() <= 16 * MIB);
  kvc_host_memory_release();
}

int main(void) {
  TU_RUN(test_large_blocks_are_aligned_and_zeroed);
  TU_RUN(test_a_freed_block_is_reused_zeroed_only_when_asked);
  TU_RUN(test_blocks_far_from_the_size_are_not_reused);
  TU_RUN(test_the_limit_keeps_the_newest);
  TU_RUN(test_idle_blocks_go_back_after_ten_seconds);
  TU_RUN(test_release_gives_everything_back);
  TU_RUN(test_small_and_foreign_pointers_go_to_malloc);
  TU_RUN(test_only_blocks_written_whole_are_advised_huge_pages);
  TU_RUN(test_a_large_sparse_block_costs_only_what_is_written);
  TU_RUN(test_threads);
  return tu_finish();
}
