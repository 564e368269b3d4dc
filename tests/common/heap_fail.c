/*
 * heap_fail.c: see heap_fail.h. Built with KVC_HEAP_WRAP where the linker
 * takes -Wl,--wrap; without it, only heap_fail_available (0) and the
 * counters exist.
 */
#include "heap_fail.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

long heap_fail_after = -1;
long heap_calls = 0;

#ifdef KVC_HEAP_WRAP

void* __real_malloc(size_t n);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* p, size_t n);
void __real_free(void* p);
int __real_posix_memalign(void** out, size_t align, size_t n);
void* __real_aligned_alloc(size_t align, size_t n);

/* The live blocks: an open-addressed set of addresses (linear probing, deletion by backward shift). */
static uintptr_t* live_set;
static size_t live_cap, live_count;

static size_t slot_of(uintptr_t p, size_t cap) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static void live_add(void* p) {
  if ((live_count + 1) * 2 > live_cap) {
    size_t cap = live_cap ? live_cap * 2 : 1024;
    uintptr_t* grown = (uintptr_t*)__real_calloc(cap, sizeof *grown);
    if (!grown) abort(); /* the test's own bookkeeping: never an injected failure */
    for (size_t i = 0; i < live_cap; i++) {
      if (!live_set[i]) continue;
      size_t s = slot_of(live_set[i], cap);
      while (grown[s]) s = (s + 1) & (cap - 1);
      grown[s] = live_set[i];
    }
    __real_free(live_set);
    live_set = grown;
    live_cap = cap;
  }
  size_t s = slot_of((uintptr_t)p, live_cap);
  while (live_set[s]) s = (s + 1) & (live_cap - 1);
  live_set[s] = (uintptr_t)p;
  live_count++;
}

/* Removes p if the wrappers allocated it (a block from libc's own allocations is not in the set). */
static void live_remove(void* p) {
  if (!live_cap) return;
  size_t s = slot_of((uintptr_t)p, live_cap);
  while (live_set[s] && live_set[s] != (uintptr_t)p) s = (s + 1) & (live_cap - 1);
  if (!live_set[s]) return;
  live_set[s] = 0;
  live_count--;
  for (size_t j = (s + 1) & (live_cap - 1); live_set[j]; j = (j + 1) & (live_cap - 1)) {
    uintptr_t v = live_set[j];
    live_set[j] = 0;
    size_t t = slot_of(v, live_cap);
    while (live_set[t]) t = (t + 1) & (live_cap - 1);
    live_set[t] = v;
  }
}

static int refuse(void) {
  heap_calls++;
  if (heap_fail_after == 0) return 1;
  if (heap_fail_after > 0) heap_fail_after--;
  return 0;
}

static void* granted(void* p) {
  if (p) live_add(p);
  return p;
}

void* __wrap_malloc(size_t n) { return refuse() ? NULL : granted(__real_malloc(n)); }
void* __wrap_calloc(size_t n, size_t size) { return refuse() ? NULL : granted(__real_calloc(n, size)); }
void* __wrap_aligned_alloc(size_t align, size_t n) {
  return refuse() ? NULL : granted(__real_aligned_alloc(align, n));
}

int __wrap_posix_memalign(void** out, size_t align, size_t n) {
  if (refuse()) return 12; /* ENOMEM */
  int rc = __real_posix_memalign(out, align, n);
  if (!rc) granted(*out);
  return rc;
}

void* __wrap_realloc(void* p, size_t n) {
  if (refuse()) return NULL; /* p stays valid, as when realloc fails */
  void* q = __real_realloc(p, n);
  if (q || !n) {
    if (p) live_remove(p);
    granted(q);
  }
  return q;
}

void __wrap_free(void* p) {
  if (p) live_remove(p);
  __real_free(p);
}

long heap_live(void) { return (long)live_count; }
int heap_fail_available(void) { return 1; }

#else

long heap_live(void) { return 0; }
int heap_fail_available(void) { return 0; }

#endif
