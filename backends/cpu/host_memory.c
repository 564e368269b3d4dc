/*
 * backends/cpu/host_memory.c: the CPU backend's memory (host_memory.h).
 *
 * A K/V store or a pool's block storage is megabytes to gigabytes that are
 * written in full soon after they are allocated. From malloc such a block is
 * a fresh mapping every time (glibc maps anything this large by itself and
 * unmaps it on free), and its first write pays a page fault and the kernel's
 * zeroing for every 4 KiB page: on the project's VM, reading a file into new
 * memory ran at 0.4 of reading it into memory touched before (bench_persist).
 * So blocks of KVCI_HOST_LARGE_BLOCK bytes or more are mapped here:
 *
 *  - aligned to 2 MiB and, when the caller will write the block whole (an
 *    unzeroed allocation: a restore's or a tier's stores), advised
 *    MADV_HUGEPAGE, so that where transparent huge pages are on (the
 *    "madvise" mode most distributions ship) one fault maps and zeroes 2 MiB;
 *  - kept when freed, up to the retention limit, and handed to the next
 *    allocation of about the same size (a restore, a load, a new cache of the
 *    same model, a store growing to the size another one had): such a block
 *    is written into pages that are already there. A kept block goes back to
 *    the kernel after KEEP_NS without reuse (checked by the next allocation or
 *    free of a large block), when keeping it would pass the limit, and on
 *    kvc_host_memory_release. That is jemalloc's and PyTorch's caching
 *    allocator's trade: memory the process freed stays its own for a while.
 *
 * Smaller blocks stay with malloc, whose free lists already reuse them.
 * AddressSanitizer builds poison a kept block and the slack past a block's
 * end, so a store used after its free or past its end is still reported.
 */
#define _DEFAULT_SOURCE 1 /* madvise, MAP_ANONYMOUS */
#include "host_memory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kvcache/allocator.h"

#if defined(__SANITIZE_ADDRESS__)
#define KVCI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVCI_ASAN 1
#endif
#endif
#ifdef KVCI_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HUGE_PAGE ((size_t)2 << 20)
/* How long a kept block waits for reuse: jemalloc's default decay time. */
#define KEEP_NS (10ull * 1000000000ull)

typedef struct {
  unsigned char* base; /* the block's address: 2 MiB-aligned when len is 2 MiB or more */
  size_t len;          /* bytes mapped from base: the asked size rounded up to pages */
  uint64_t kept_at;    /* when it was freed (kept blocks only) */
  size_t poisoned;     /* AddressSanitizer builds: the offset from which the block is poisoned (len: none) */
} block;

typedef struct {
  block* at;
  size_t count, cap;
} block_list;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_list live, kept;
static uint64_t kept_bytes, limit;
static int limit_known;

static uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
uint64_t (*kvci_host_memory_clock)(void) = clock_ns;

static size_t page_size(void) {
  static size_t page;
  if (!page) {
    long p = sysconf(_SC_PAGESIZE);
    page = p > 0 ? (size_t)p : 4096;
  }
  return page;
}

/* The limit when the process has not set one: $KVC_HOST_MEMORY_RETAIN bytes, else the smaller of 1 GiB and an
   eighth of the RAM (a container's memory limit can be far below the machine's RAM, which is what sysconf sees). */
static uint64_t default_limit(void) {
  const char* env = getenv("KVC_HOST_MEMORY_RETAIN");
  if (env && *env) {
    char* end;
    unsigned long long v = strtoull(env, &end, 10);
    if (!*end) return v;
  }
  long pages = sysconf(_SC_PHYS_PAGES);
  uint64_t eighth = pages > 0 ? (uint64_t)pages * page_size() / 8 : 0;
  return eighth < ((uint64_t)1 << 30) ? eighth : (uint64_t)1 << 30;
}

static uint64_t current_limit(void) {
  if (!limit_known) {
    limit = default_limit();
    limit_known = 1;
  }
  return limit;
}

static int list_push(block_list* l, block b) {
  if (l->count == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    block* at = realloc(l->at, cap * sizeof *at);
    if (!at) return -1;
    l->at = at;
    l->cap = cap;
  }
  l->at[l->count++] = b;
  return 0;
}

/* Removes entry i; kept blocks stay in the order they were freed (the oldest first goes first). */
static block list_take(block_list* l, size_t i) {
  block b = l->at[i];
  memmove(l->at + i, l->at + i + 1, (l->count - i - 1) * sizeof *l->at);
  l->count--;
  return b;
}

static void unmap(block b) {
  /* The range may be mapped again by anyone, and this ASan's munmap leaves the shadow as it is. Only the poisoned
     part is cleared: clearing a whole store's shadow writes an eighth of it (2 GiB for the 16 GiB store a hostile
     file may declare); the mmap that maps the range again clears the rest (ASan intercepts it). */
  UNPOISON(b.base + b.poisoned, b.len - b.poisoned);
  munmap(b.base, b.len);
}

/* Gives back kept blocks, the oldest first: all of them, or those past max_bytes or idle for KEEP_NS. Under the
   lock; the bytes given back. */
static uint64_t release_kept(uint64_t now, uint64_t max_bytes, int all) {
  uint64_t released = 0;
  while (kept.count && (all || kept_bytes > max_bytes ||
                        (now >= kept.at[0].kept_at && now - kept.at[0].kept_at >= KEEP_NS))) {
    block b = list_take(&kept, 0);
    kept_bytes -= b.len;
    released += b.len;
    unmap(b);
  }
  return released;
}

/* The huge-page advice unless $KVC_HOST_MEMORY_HUGE_PAGES is "0" (read once, under the lock): a machine whose
   kernel stalls on compaction to find huge pages can turn it off. The advice covers whole 2 MiB ranges only, so
   a block's partial last range stays in small pages. */
static int huge_pages_wanted(void) {
  static int wanted = -1;
  if (wanted < 0) {
    const char* env = getenv("KVC_HOST_MEMORY_HUGE_PAGES");
    wanted = !(env && strcmp(env, "0") == 0);
  }
  return wanted;
}

/* A fresh mapping of len bytes (a multiple of the page), 2 MiB-aligned when len is a huge page or more, advised
   MADV_HUGEPAGE when `dense`: only a block its caller will write whole. A zeroed block may be written sparsely (a
   static layer of 128k slots holding one token writes one row of each head; a file may declare a store of
   gigabytes around a few tokens), and in huge pages each such write would fault in 2 MiB instead of 4 KiB. */
static unsigned char* map_block(size_t len, int dense) {
  size_t align = len >= HUGE_PAGE ? HUGE_PAGE : page_size(), span = len + align - page_size();
  if (span < len) return NULL;
  unsigned char* m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  unsigned char* base = (unsigned char*)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
  if (base > m) munmap(m, (size_t)(base - m));
  if (base + len < m + span) munmap(base + len, (size_t)(m + span - (base + len)));
#ifdef MADV_HUGEPAGE
  if (dense && len >= HUGE_PAGE && huge_pages_wanted()) (void)madvise(base, len - len % HUGE_PAGE, MADV_HUGEPAGE);
#endif
  return base;
}

/* The kept block that fits `len` best: at least len, at most a quarter more (a larger one would hold memory
   the store never uses), the most recently freed of equals (its pages are the likeliest to be in the caches).
   Under the lock; SIZE_MAX when none does. */
static size_t best_kept(size_t len) {
  size_t best = SIZE_MAX;
  for (size_t i = kept.count; i-- > 0;) {
    size_t l = kept.at[i].len;
    if (l >= len && l - len <= len / 4 && (best == SIZE_MAX || l < kept.at[best].len)) best = i;
  }
  return best;
}

void* kvci_host_memory_alloc(size_t bytes, int zeroed) {
  if (bytes < KVCI_HOST_LARGE_BLOCK) return zeroed ? calloc(1, bytes) : malloc(bytes);
  size_t page = page_size(), len = (bytes + page - 1) & ~(page - 1);
  if (len < bytes) return NULL;
  pthread_mutex_lock(&lock);
  release_kept(kvci_host_memory_clock(), current_limit(), 0);
  size_t i = best_kept(len);
  int reused = i != SIZE_MAX;
  block b = {NULL, len, 0, len};
  if (reused) {
    b = list_take(&kept, i);
    kept_bytes -= b.len;
  } else {
    b.base = map_block(len, !zeroed);
  }
  if (b.base) {
    /* A fresh mapping's shadow is clear already (ASan's mmap interceptor clears it): unpoisoning it again
       would write an eighth of the block in shadow bytes. Only a kept block, poisoned while it waited, needs it. */
    if (reused) UNPOISON(b.base, bytes);
    POISON(b.base + bytes, b.len - bytes); /* ASan marks whole 8-byte granules: the slack starts at one */
    b.poisoned = bytes & ~(size_t)7;
    if (list_push(&live, b)) { /* no room to remember it: give it back */
      unmap(b);
      b.base = NULL;
    }
  }
  pthread_mutex_unlock(&lock);
  if (!b.base) return NULL;
  /* A fresh mapping reads as zeros already (and stays untouched until its first write). */
  if (reused && zeroed) memset(b.base, 0, bytes);
  return b.base;
}

void kvci_host_memory_free(void* p) {
  if (!p) return;
  /* Blocks mapped here start on a page; most of malloc's pointers do not, and those skip the lookup. */
  if ((uintptr_t)p & (page_size() - 1)) {
    free(p);
    return;
  }
  pthread_mutex_lock(&lock);
  size_t i = live.count;
  while (i-- > 0 && live.at[i].base != p) {
  }
  if (i == SIZE_MAX) {
    pthread_mutex_unlock(&lock);
    free(p);
    return;
  }
  block b = list_take(&live, i);
  uint64_t now = kvci_host_memory_clock(), max = current_limit();
  block k = b; /* kept: poisoned whole while it waits */
  k.kept_at = now;
  k.poisoned = 0;
  if (b.len <= max && !list_push(&kept, k)) {
    kept_bytes += b.len;
    POISON(b.base, b.len);
  } else {
    unmap(b);
  }
  release_kept(now, max, 0);
  pthread_mutex_unlock(&lock);
}

uint64_t kvc_host_memory_set_retention(uint64_t max_bytes) {
  pthread_mutex_lock(&lock);
  uint64_t previous = current_limit();
  limit = max_bytes;
  release_kept(kvci_host_memory_clock(), max_bytes, 0);
  pthread_mutex_unlock(&lock);
  return previous;
}

uint64_t kvc_host_memory_release(void) {
  pthread_mutex_lock(&lock);
  uint64_t released = release_kept(0, 0, 1);
  pthread_mutex_unlock(&lock);
  return released;
}

uint64_t kvc_host_memory_retained(void) {
  pthread_mutex_lock(&lock);
  release_kept(kvci_host_memory_clock(), current_limit(), 0);
  uint64_t bytes = kept_bytes;
  pthread_mutex_unlock(&lock);
  return bytes;
}
