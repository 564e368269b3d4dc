/*
 * tests/gpu/emulated_device_backend.c: a device backend without a device.
 *
 * Built as libkvcache-cuda.so in a directory of its own and loaded by the
 * core through KVC_BACKEND_PATH exactly like the real plugin, so that the
 * core's device paths run in every build, under AddressSanitizer too, on
 * machines without a GPU. It keeps device memory in host memory and moves
 * bytes with the CPU backend's routines (backends/cpu/cpu_backend.c is
 * compiled into this plugin; its symbols stay hidden here), re-rotates sink
 * keys with the GPU kernels' arithmetic (backends/gpu/gpu_rope.h) and
 * quantizes with the GPU backend's kernel code run over simulated grids
 * (quant_grid.h), but:
 *
 *  - device buffers are handed out as poisoned pointers (emulated_device.h):
 *    the core faults on any dereference of device memory;
 *  - it holds the core to the backend contract of core/backend.h and stops
 *    the process with a message and a stack when the core breaks it: an
 *    operation on a place exec_open did not prepare, a buffer freed twice or
 *    with the wrong free, memory of another device, an access outside a
 *    buffer, copies of one copy_4d_batch that overlap (a GPU runs them in
 *    parallel), an overlapping copy_4d that is not a move along the seq axis,
 *    copy_rows writing a row twice (or copy_rows_batch, across its jobs), a
 *    tier copy in the wrong direction,
 *    any use of a buffer that a prefetch still writes before tier_wait, and
 *    a RoPE operation of sink layers given host memory for device memory or
 *    the reverse;
 *  - it plans every copy, fill, row gather, batch and tier copy the way the
 *    CUDA/HIP backend plans its kernels (backends/gpu/gpu_plan.c) and stops
 *    the process when a plan's unit does not divide every address its
 *    kernel would form, a fault on a real GPU (emulated_alignment.h);
 *    copy_rows_batch's bytes then move through that plan's walk, the
 *    kernel's own addressing;
 *  - prefetches are asynchronous as on a GPU's side stream: they complete at
 *    tier_wait, exec_close or a device synchronisation (a buffer released
 *    while one still uses it is kept until then), and an operation that
 *    touches a buffer a pending prefetch writes is a violation;
 *  - it counts launches, allocations, places and streams for the tests
 *    (kvc_emulated_read_counters and the other exports, found with dlsym).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <execinfo.h>
#endif

#include "backend.h"
#include "emulated_alignment.h"
#include "emulated_device.h"
#include "emulated_faults.h"
#include "emulated_regions.h"
#include "gpu_plan_walk.h"
#include "simulated_rope_grid.h"
#include "quant_grid.h"

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------- violations */

/* AddressSanitizer's symbolizing stack printer, when the process has it. */
extern void __sanitizer_print_stack_trace(void) __attribute__((weak));

static void violation(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void violation(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kvcache emulated device: backend contract violated: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (__sanitizer_print_stack_trace) {
    __sanitizer_print_stack_trace();
  } else {
#if defined(__GLIBC__)
    void* frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
#endif
  }
  fflush(stderr);
  abort();
}

/* ------------------------------------------------------------- state */

typedef struct buffer {
  uintptr_t lo, hi; /* untagged [lo, hi) */
  int host;         /* host tier (host_alloc_zeroed) */
  int32_t device_id;
  int released;     /* freed by the core while a pending prefetch still uses it: kept until that completes */
  struct buffer* next;
} buffer;

typedef struct pending_prefetch {
  void* dst; /* untagged */
  const void* src;
  int64_t ds[4], ss[4], shape[4];
  size_t elem;
  const buffer* dst_buf; /* registry entries (one released meanwhile stays until the copy has run) */
  const buffer* src_buf;
} pending_prefetch;

#define PLACE_MAGIC UINT64_C(0x6b7663656d75706c) /* "kvcemupl" */

typedef struct place {
  uint64_t magic;
  pending_prefetch* pending;
  int npending, cap;
  struct place* next; /* every open place, for kvc_emulated_synchronize */
} place;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static buffer* buffers;
static place* places;
static kvc_emulated_counters counters = {.struct_size = sizeof(kvc_emulated_counters), .last_device_id = -1};
static int expect_stream_on;
static void* expected_stream;

static const kvc_backend* cpu(void) { return kvci_cpu_backend(); }
/* The CPU backend works synchronously and ignores its place. */
static const kvc_exec cpu_place = {0, NULL, NULL};

static int device_count_now(void) {
  const char* env = getenv(KVC_EMULATED_DEVICES_ENV);
  if (!env || !*env) return 1;
  char* end = NULL;
  long n = strtol(env, &end, 10);
  if (*end || n < 0 || n > 64) {
    fprintf(stderr, "kvcache emulated device: %s=\"%s\" is not a device count in [0, 64]; using 1\n",
            KVC_EMULATED_DEVICES_ENV, env);
    return 1;
  }
  return (int)n;
}

static const buffer* find_buffer(uintptr_t addr) {
  for (const buffer* b = buffers; b; b = b->next)
    if (addr >= b->lo && addr < b->hi) return b;
  return NULL;
}

/* -------------------------------------------------------- op checks */

static place* checked_place(const char* op, const kvc_exec* exec) {
  if (!exec) violation("%s: exec is NULL", op);
  place* p = (place*)exec->state;
  if (!p || p->magic != PLACE_MAGIC)
    violation("%s: the place (device %d, stream %p) was not prepared by exec_open (state %p)", op,
              (int)exec->device_id, exec->stream, exec->state);
  if (exec->device_id < 0 || exec->device_id >= device_count_now())
    violation("%s: the place is on device %d but there are %d emulated devices", op, (int)exec->device_id,
              device_count_now());
  counters.last_stream = exec->stream;
  counters.last_device_id = exec->device_id;
  if (expect_stream_on && exec->stream != expected_stream) counters.stream_mismatches++;
  return p;
}

/* A pending prefetch writes `dst_buf` and reads `src_buf`: nothing may touch the one or write the other. */
static void check_not_pending(const char* op, const place* p, const buffer* b, int writes) {
  if (!b) return;
  for (int i = 0; i < p->npending; i++) {
    if (p->pending[i].dst_buf == b)
      violation("%s: uses a buffer [%#" PRIxPTR ", %#" PRIxPTR ") that a prefetch issued before still writes; "
                "work on it must come after tier_wait",
                op, b->lo, b->hi);
    if (writes && p->pending[i].src_buf == b)
      violation("%s: writes a host-tier buffer [%#" PRIxPTR ", %#" PRIxPTR ") that a prefetch issued before "
                "still reads; the write must come after tier_wait",
                op, b->lo, b->hi);
  }
}

/*
 * Checks one region an operation touches: tagged exactly when it is device
 * memory, inside its buffer, on the place's device, and not in use by a
 * pending prefetch. Returns the untagged base and the buffer (NULL for
 * memory the plugin did not allocate: the tests' own device inputs).
 */
static void* checked_bytes(const char* op, const char* what, const kvc_exec* exec, const place* p, const void* ptr,
                           int nonempty, uintptr_t lo, uintptr_t hi, int writes, const buffer** out) {
  uintptr_t addr = (uintptr_t)kvc_emulated_untag(ptr);
  const buffer* b = find_buffer(addr);
  if (out) *out = b;
  if (!nonempty) return (void*)addr;
  if (!ptr) violation("%s: %s is NULL for a non-empty region", op, what);
  if (b) {
    if (b->released)
      violation("%s: %s %p is in a buffer [%#" PRIxPTR ", %#" PRIxPTR ") that was freed", op, what, ptr, b->lo, b->hi);
    if (b->host == kvc_emulated_is_tagged(ptr))
      violation("%s: %s %p is a %s buffer but is %s", op, what, ptr, b->host ? "host-tier" : "device",
                b->host ? "tagged as device memory" : "missing the device tag");
    if (hi > b->hi || lo < b->lo)
      violation("%s: %s spans [%#" PRIxPTR ", %#" PRIxPTR "), outside its buffer [%#" PRIxPTR ", %#" PRIxPTR ")", op,
                what, lo, hi, b->lo, b->hi);
    if (!b->host && b->device_id != exec->device_id)
      violation("%s: %s is memory of device %d but the place is on device %d", op, what, (int)b->device_id,
                (int)exec->device_id);
    check_not_pending(op, p, b, writes);
  }
  return (void*)addr;
}

/* checked_bytes over the bytes of a strided 4-D region whose element [0, 0, 0, 0] is at ptr. */
static void* checked_region(const char* op, const char* what, const kvc_exec* exec, const place* p, const void* ptr,
                            const int64_t st[4], const int64_t shape[4], size_t elem, int writes,
                            const buffer** out) {
  uintptr_t lo = 0, hi = 0;
  int nonempty = region_extent((uintptr_t)kvc_emulated_untag(ptr), st, shape, elem, &lo, &hi);
  return checked_bytes(op, what, exec, p, ptr, nonempty, lo, hi, writes, out);
}

/* The live buffer that starts at `ptr`, released with the right call on the right device. */
static buffer* checked_buffer_start(const char* op, const kvc_exec* exec, void* ptr, int host) {
  uintptr_t addr = (uintptr_t)kvc_emulated_untag(ptr);
  buffer* b = buffers;
  while (b && b->lo != addr) b = b->next;
  if (!b || b->released)
    violation("%s: %p is not a live buffer of this backend (freed twice, or never allocated here)", op, ptr);
  if (b->host != host)
    violation("%s: %p is a %s buffer; release it with %s", op, ptr, b->host ? "host-tier" : "device",
              b->host ? "host_free" : "free");
  if (b->host == kvc_emulated_is_tagged(ptr))
    violation("%s: %p has the wrong tag for a %s buffer", op, ptr, host ? "host-tier" : "device");
  if (!host && b->device_id != exec->device_id)
    violation("%s: %p is memory of device %d but the place is on device %d", op, ptr, (int)b->device_id,
              (int)exec->device_id);
  return b;
}

/* ------------------------------------------------------ prefetches */

static void run_pending(pending_prefetch* q) {
  cpu()->copy_tier_4d(cpu()->ctx, &cpu_place, 0, q->dst, q->ds, q->src, q->ss, q->shape, q->elem);
}

static int pending_uses(const place* p, const buffer* b) {
  for (int i = 0; i < p->npending; i++)
    if (p->pending[i].dst_buf == b || p->pending[i].src_buf == b) return 1;
  return 0;
}

static void unlink_and_free(buffer* b) {
  buffer** link = &buffers;
  while (*link != b) link = &(*link)->next;
  *link = b->next;
  free((void*)b->lo);
  free(b);
}

/* Releases the memory of buffers the core freed while a prefetch still used them, once none does. */
static void sweep_released(void) {
  buffer* b = buffers;
  while (b) {
    buffer* next = b->next;
    int used = 0;
    for (const place* p = places; p && !used; p = p->next) used = pending_uses(p, b);
    if (b->released && !used) unlink_and_free(b);
    b = next;
  }
}

/* Completes every pending prefetch of `p`, in issue order (tier_wait, exec_close, a device synchronisation). */
static void complete_pending(place* p) {
  for (int i = 0; i < p->npending; i++) run_pending(&p->pending[i]);
  p->npending = 0;
  sweep_released();
}

/* ------------------------------------------------------- the table */

static int emu_device_count(void* ctx) {
  (void)ctx;
  return device_count_now();
}

static int emu_exec_open(void* ctx, kvc_exec* exec) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  if (!exec) violation("exec_open: exec is NULL");
  if (exec->device_id < 0 || exec->device_id >= device_count_now())
    violation("exec_open: device %d, but there are %d emulated devices", (int)exec->device_id, device_count_now());
  if (exec->state) violation("exec_open: the place already has state %p (opened twice?)", exec->state);
  place* p = (place*)calloc(1, sizeof(place));
  if (p) {
    p->magic = PLACE_MAGIC;
    p->next = places;
    places = p;
    exec->state = p;
    counters.open_places++;
  }
  pthread_mutex_unlock(&lock);
  return p ? 0 : 1;
}

static void emu_exec_close(void* ctx, kvc_exec* exec) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("exec_close", exec);
  complete_pending(p);
  place** link = &places;
  while (*link != p) link = &(*link)->next;
  *link = p->next;
  free(p->pending);
  p->magic = 0;
  free(p);
  exec->state = NULL;
  counters.open_places--;
  pthread_mutex_unlock(&lock);
}

static int emu_exec_set_stream(void* ctx, kvc_exec* exec, void* stream) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  /* The check runs against the stream the place had: that is where the old work was ordered. */
  int saved = expect_stream_on;
  expect_stream_on = 0;
  checked_place("exec_set_stream", exec);
  expect_stream_on = saved;
  if (emulated_fault_due("exec_set_stream")) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  exec->stream = stream;
  counters.stream_changes++;
  counters.last_stream = stream;
  pthread_mutex_unlock(&lock);
  return 0;
}

static void* alloc_buffer(const char* op, const kvc_exec* exec, size_t bytes, int host) {
  pthread_mutex_lock(&lock);
  checked_place(op, exec);
  if (bytes == 0) violation("%s: bytes is 0; the contract asks for > 0", op);
  counters.allocations++;
  void* mem = emulated_fault_due(op) ? NULL : calloc(1, bytes);
  buffer* b = mem ? (buffer*)calloc(1, sizeof(buffer)) : NULL;
  if (!b) {
    free(mem);
    pthread_mutex_unlock(&lock);
    return NULL;
  }
  b->lo = (uintptr_t)mem;
  b->hi = b->lo + bytes;
  b->host = host;
  b->device_id = exec->device_id;
  b->next = buffers;
  buffers = b;
  if (host) {
    counters.live_host_buffers++;
    counters.live_host_bytes += (int64_t)bytes;
  } else {
    counters.live_device_buffers++;
    counters.live_device_bytes += (int64_t)bytes;
  }
  pthread_mutex_unlock(&lock);
  return host ? mem : kvc_emulated_tag(mem);
}

static void free_buffer(const char* op, const kvc_exec* exec, void* ptr, int host) {
  if (!ptr) return;
  pthread_mutex_lock(&lock);
  place* p = checked_place(op, exec);
  buffer* b = checked_buffer_start(op, exec, ptr, host);
  int64_t bytes = (int64_t)(b->hi - b->lo);
  /* Stream-ordered release: a prefetch issued before may still use the buffer; the memory goes when it is done,
     and the prefetch stays pending (a release is no synchronisation). */
  if (pending_uses(p, b))
    b->released = 1;
  else
    unlink_and_free(b);
  counters.frees++;
  if (host) {
    counters.live_host_buffers--;
    counters.live_host_bytes -= bytes;
  } else {
    counters.live_device_buffers--;
    counters.live_device_bytes -= bytes;
  }
  pthread_mutex_unlock(&lock);
}

static void* emu_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  return alloc_buffer("alloc_zeroed", exec, bytes, 0);
}

static void emu_free(void* ctx, const kvc_exec* exec, void* ptr) {
  (void)ctx;
  free_buffer("free", exec, ptr, 0);
}

static void* emu_host_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  return alloc_buffer("host_alloc_zeroed", exec, bytes, 1);
}

/* Version 5: not zeroed. Filled with a pattern instead, so that a byte the core forgets to write or zero shows
   in the tests' comparisons (calloc's zeroes would hide it). */
static void* emu_host_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  void* p = alloc_buffer("host_alloc", exec, bytes, 1);
  if (p) memset(p, 0xA5, bytes);
  return p;
}

/* Version 9: a device store the core fills in full (a restore's), patterned like host_alloc. */
static void* emu_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  void* p = alloc_buffer("alloc", exec, bytes, 0);
  if (p) memset(kvc_emulated_untag(p), 0xA5, bytes); /* device pointers are tagged: the host cannot use them */
  return p;
}

static void emu_host_free(void* ctx, const kvc_exec* exec, void* ptr) {
  (void)ctx;
  free_buffer("host_free", exec, ptr, 1);
}

/* Stops the process when a plan the GPU backend would launch is misaligned (`why` from emulated_alignment.h). */
static void check_plans(const char* op, const char* why) {
  if (why) violation("%s: %s", op, why);
}

/* An overlapping copy_4d must be a move along the seq axis of one buffer with one set of strides (compaction). */
static void check_copy_overlap(const char* op, void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                               const int64_t shape[4], size_t elem, int allow_seq_move) {
  uintptr_t dlo, dhi, slo, shi;
  if (!region_extent((uintptr_t)dst, ds, shape, elem, &dlo, &dhi) ||
      !region_extent((uintptr_t)src, ss, shape, elem, &slo, &shi))
    return;
  if (dhi <= slo || shi <= dlo) return;
  region_runs d = {0}, s = {0};
  region_runs_add(&d, (uintptr_t)dst, ds, shape, elem);
  region_runs_add(&s, (uintptr_t)src, ss, shape, elem);
  region_runs_sort(&d);
  region_runs_sort(&s);
  int overlap = region_runs_intersect(&d, &s);
  region_runs_free(&d);
  region_runs_free(&s);
  if (!overlap) return;
  int same_strides = !memcmp(ds, ss, 4 * sizeof(int64_t));
  intptr_t diff = (intptr_t)((uintptr_t)dst - (uintptr_t)src);
  intptr_t slot = (intptr_t)(ds[2] * (int64_t)elem);
  if (!allow_seq_move || !same_strides || slot == 0 || diff % slot != 0)
    violation("%s: source and destination overlap (dst %p strides {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
              "}, src %p strides {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "}, shape {%" PRId64 ", %" PRId64
              ", %" PRId64 ", %" PRId64 "}) and this is not a move along the seq axis%s",
              op, dst, ds[0], ds[1], ds[2], ds[3], src, ss[0], ss[1], ss[2], ss[3], shape[0], shape[1], shape[2],
              shape[3], allow_seq_move ? "" : " (the buffers of this copy never overlap)");
}

static int emu_copy_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                       const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("copy_4d", exec);
  counters.launches++;
  counters.copy_4d_calls++;
  void* d = checked_region("copy_4d", "dst", exec, p, dst, ds, shape, elem, 1, NULL);
  const void* s = checked_region("copy_4d", "src", exec, p, src, ss, shape, elem, 0, NULL);
  check_copy_overlap("copy_4d", d, ds, s, ss, shape, elem, 1);
  check_plans("copy_4d", emulated_plans_copy_4d(d, ds, s, ss, shape, elem));
  int rc = emulated_fault_due("copy_4d") ? -1 : cpu()->copy_4d(cpu()->ctx, &cpu_place, d, ds, s, ss, shape, elem);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int emu_fill_zero_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t st[4], const int64_t shape[4],
                            size_t elem) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("fill_zero_4d", exec);
  counters.launches++;
  counters.fill_zero_calls++;
  void* d = checked_region("fill_zero_4d", "dst", exec, p, dst, st, shape, elem, 1, NULL);
  check_plans("fill_zero_4d", emulated_plans_fill(d, st, shape, elem));
  int rc = emulated_fault_due("fill_zero_4d") ? -1 : cpu()->fill_zero_4d(cpu()->ctx, &cpu_place, d, st, shape, elem);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int emu_copy_rows(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const int64_t* dst_rows,
                         const void* src, const int64_t ss[4], const int64_t* src_rows, int64_t count,
                         const int64_t row_shape[4], size_t elem) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("copy_rows", exec);
  counters.launches++;
  counters.copy_rows_calls++;
  if (count < 0) violation("copy_rows: count is %" PRId64, count);
  const int64_t one_row[4] = {1, row_shape[1], row_shape[2], row_shape[3]};
  int empty = one_row[1] <= 0 || one_row[2] <= 0 || one_row[3] <= 0 || count == 0;
  void* d = kvc_emulated_untag(dst);
  const void* s = kvc_emulated_untag(src);
  if (!empty) {
    if (!dst_rows || !src_rows) violation("copy_rows: row index arrays are NULL for %" PRId64 " rows", count);
    /* Every row must be inside its buffer; a GPU copies the rows in parallel, so no row is written twice and no
       row written is read by another. */
    region_runs w = {0}, r = {0};
    for (int64_t i = 0; i < count; i++) {
      if (dst_rows[i] < 0 || src_rows[i] < 0)
        violation("copy_rows: row %" PRId64 " -> %" PRId64 " (negative index)", src_rows[i], dst_rows[i]);
      const char* drow = (const char*)dst + dst_rows[i] * ds[0] * (int64_t)elem;
      const char* srow = (const char*)src + src_rows[i] * ss[0] * (int64_t)elem;
      uintptr_t du = (uintptr_t)checked_region("copy_rows", "dst row", exec, p, drow, ds, one_row, elem, 1, NULL);
      uintptr_t su = (uintptr_t)checked_region("copy_rows", "src row", exec, p, srow, ss, one_row, elem, 0, NULL);
      region_runs_add(&w, du, ds, one_row, elem);
      region_runs_add(&r, su, ss, one_row, elem);
    }
    region_runs_sort(&w);
    region_runs_sort(&r);
    int twice = region_runs_self_overlap(&w), clash = region_runs_intersect(&w, &r);
    region_runs_free(&w);
    region_runs_free(&r);
    if (twice) violation("copy_rows: %" PRId64 " rows write some destination bytes twice (a repeated dst row)", count);
    if (clash) violation("copy_rows: a destination row overlaps a source row of the same call");
    const char* blind = getenv(KVC_EMULATED_BLIND_ROWS_PLAN_ENV);
    check_plans("copy_rows", emulated_plans_rows(d, ds, dst_rows, s, ss, src_rows, count, row_shape, elem,
                                                 blind && !strcmp(blind, "1")));
  }
  int rc = emulated_fault_due("copy_rows") ? -1 : cpu()->copy_rows(cpu()->ctx, &cpu_place, d, ds, dst_rows, s, ss, src_rows, count, row_shape, elem);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int emu_copy_tier_4d(void* ctx, const kvc_exec* exec, int to_host, void* dst, const int64_t ds[4],
                            const void* src, const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)ctx;
  const char* op = to_host ? "copy_tier_4d(offload)" : "copy_tier_4d(prefetch)";
  pthread_mutex_lock(&lock);
  place* p = checked_place(op, exec);
  counters.launches++;
  counters.tier_copies++;
  const buffer *db = NULL, *sb = NULL;
  void* d = checked_region(op, "dst", exec, p, dst, ds, shape, elem, 1, &db);
  const void* s = checked_region(op, "src", exec, p, src, ss, shape, elem, 0, &sb);
  uintptr_t lo, hi;
  int empty = !region_extent((uintptr_t)d, ds, shape, elem, &lo, &hi);
  if (!empty) {
    if (!db || !sb) violation("%s: dst %p or src %p is not a buffer of this backend", op, dst, src);
    if (db->host != (to_host != 0) || sb->host != (to_host == 0))
      violation("%s: copies from a %s buffer to a %s buffer; an %s goes from the device tier to the host tier", op,
                sb->host ? "host-tier" : "device", db->host ? "host-tier" : "device",
                to_host ? "offload" : "prefetch (reversed)");
    check_copy_overlap(op, d, ds, s, ss, shape, elem, 0);
    /* The backend gives a tier copy to the copy engines when it can, else to the copy kernel: checked as if
       always the kernel, so no layout that reaches the kernel escapes. */
    check_plans(op, emulated_plans_copy(d, ds, s, ss, shape, elem));
  }
  int rc = 0;
  if (emulated_fault_due(op)) {
    rc = -1;
  } else if (to_host || empty) {
    /* Offloads run on the compute stream, after the work issued before them. */
    rc = cpu()->copy_tier_4d(cpu()->ctx, &cpu_place, to_host, d, ds, s, ss, shape, elem);
  } else {
    /* Prefetches run on a side stream: they complete when waited for. */
    if (p->npending == p->cap) {
      int cap = p->cap ? p->cap * 2 : 8;
      pending_prefetch* q = (pending_prefetch*)realloc(p->pending, (size_t)cap * sizeof(*q));
      if (!q) {
        pthread_mutex_unlock(&lock);
        return 1;
      }
      p->pending = q;
      p->cap = cap;
    }
    pending_prefetch* q = &p->pending[p->npending++];
    q->dst = d;
    q->src = s;
    memcpy(q->ds, ds, sizeof q->ds);
    memcpy(q->ss, ss, sizeof q->ss);
    memcpy(q->shape, shape, sizeof q->shape);
    q->elem = elem;
    q->dst_buf = db;
    q->src_buf = sb;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int emu_tier_wait(void* ctx, const kvc_exec* exec) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("tier_wait", exec);
  counters.tier_waits++;
  /* A failed wait leaves the prefetches pending: the compute stream was not ordered after them. */
  int rc = emulated_fault_due("tier_wait") ? -1 : 0;
  if (!rc) complete_pending(p);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int emu_copy_4d_batch(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, int32_t count) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("copy_4d_batch", exec);
  counters.launches++;
  counters.batch_calls++;
  if (count < 0) violation("copy_4d_batch: count is %d", (int)count);
  if (count > 0 && !copies) violation("copy_4d_batch: copies is NULL for %d copies", (int)count);
  counters.batch_copies += (uint64_t)count;
  /* A GPU runs the copies of a batch in parallel: no destination byte may be written twice or read by any copy. */
  region_runs w = {0}, r = {0};
  kvc_copy_4d* plain = (kvc_copy_4d*)malloc(sizeof(kvc_copy_4d) * (size_t)(count > 0 ? count : 1));
  if (!plain) violation("copy_4d_batch: out of host memory");
  for (int32_t i = 0; i < count; i++) {
    const kvc_copy_4d* c = &copies[i];
    plain[i] = *c;
    plain[i].dst = checked_region("copy_4d_batch", "a copy's dst", exec, p, c->dst, c->dst_strides, c->shape,
                                  c->elem_size, 1, NULL);
    plain[i].src = checked_region("copy_4d_batch", "a copy's src", exec, p, c->src, c->src_strides, c->shape,
                                  c->elem_size, 0, NULL);
    region_runs_add(&w, (uintptr_t)plain[i].dst, c->dst_strides, c->shape, c->elem_size);
    region_runs_add(&r, (uintptr_t)plain[i].src, c->src_strides, c->shape, c->elem_size);
  }
  region_runs_sort(&w);
  region_runs_sort(&r);
  int twice = region_runs_self_overlap(&w), clash = region_runs_intersect(&w, &r);
  region_runs_free(&w);
  region_runs_free(&r);
  if (twice) violation("copy_4d_batch: %d copies write some destination bytes twice", (int)count);
  if (clash) violation("copy_4d_batch: a copy's destination overlaps the source of a copy of the same batch");
  check_plans("copy_4d_batch", emulated_plans_batch(plain, count));
  int rc = emulated_fault_due("copy_4d_batch") ? -1 : 0;
  for (int32_t i = 0; i < count && !rc; i++)
    rc = cpu()->copy_4d(cpu()->ctx, &cpu_place, plain[i].dst, plain[i].dst_strides, plain[i].src,
                        plain[i].src_strides, plain[i].shape, plain[i].elem_size);
  free(plain);
  pthread_mutex_unlock(&lock);
  return rc;
}

/* ---- Version 6: copy_rows_batch ---- */

/* A unit the rows batch kernel moves (gpu_plan_walk.h's visit): the kernel's own loads and stores, on the CPU. */
static void move_unit(void* ctx, char* dst, const char* src, int32_t unit) {
  (void)ctx;
  if (unit > 0) memcpy(dst, src, (size_t)unit);
}

/*
 * Every job's rows in one launch. The contract is checked as for copy_rows,
 * across the whole batch (a GPU runs all jobs' rows in parallel): every row
 * inside its buffer, no destination byte written twice or read by any job,
 * index arrays in host memory. The bytes then move through the CUDA/HIP
 * backend's own plan of the batch (gpu_plan.c), walked unit by unit as the
 * kernel does (gpu_plan_walk.c), after the alignment check of that walk: so
 * the device tests compare the kernel's addressing, not the CPU backend's,
 * with the CPU backend. A batch the planner refuses fails here as it fails
 * in the backend, before anything is written.
 */
static int emu_copy_rows_batch(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, int32_t count) {
  (void)ctx;
  const char* op = "copy_rows_batch";
  pthread_mutex_lock(&lock);
  place* p = checked_place(op, exec);
  counters.launches++;
  counters.rows_batch_calls++;
  if (count < 0) violation("%s: count is %d", op, (int)count);
  if (count > 0 && !jobs) violation("%s: jobs is NULL for %d jobs", op, (int)count);
  counters.rows_batch_jobs += (uint64_t)count;
  kvc_copy_rows_job* plain = (kvc_copy_rows_job*)malloc(sizeof(kvc_copy_rows_job) * (size_t)(count > 0 ? count : 1));
  if (!plain) violation("%s: out of host memory", op);
  region_runs w = {0}, r = {0};
  for (int32_t i = 0; i < count; i++) {
    const kvc_copy_rows_job* j = &jobs[i];
    plain[i] = *j;
    plain[i].dst = kvc_emulated_untag(j->dst);
    plain[i].src = kvc_emulated_untag(j->src);
    if (j->count < 0) violation("%s: job %d has count %" PRId64, op, (int)i, j->count);
    const int64_t one_row[4] = {1, j->row_shape[1], j->row_shape[2], j->row_shape[3]};
    if (j->count == 0 || one_row[1] <= 0 || one_row[2] <= 0 || one_row[3] <= 0) continue;
    if (!j->dst_rows || !j->src_rows)
      violation("%s: job %d's row index arrays are NULL for %" PRId64 " rows", op, (int)i, j->count);
    if (kvc_emulated_is_tagged(j->dst_rows) || kvc_emulated_is_tagged(j->src_rows))
      violation("%s: job %d's row index arrays are device memory; the contract passes them in host memory", op,
                (int)i);
    for (int64_t k = 0; k < j->count; k++) {
      if (j->dst_rows[k] < 0 || j->src_rows[k] < 0)
        violation("%s: job %d, row %" PRId64 " -> %" PRId64 " (negative index)", op, (int)i, j->src_rows[k],
                  j->dst_rows[k]);
      const char* drow = (const char*)j->dst + j->dst_rows[k] * j->dst_strides[0] * (int64_t)j->elem_size;
      const char* srow = (const char*)j->src + j->src_rows[k] * j->src_strides[0] * (int64_t)j->elem_size;
      uintptr_t du =
          (uintptr_t)checked_region(op, "a job's dst row", exec, p, drow, j->dst_strides, one_row, j->elem_size, 1, NULL);
      uintptr_t su =
          (uintptr_t)checked_region(op, "a job's src row", exec, p, srow, j->src_strides, one_row, j->elem_size, 0, NULL);
      region_runs_add(&w, du, j->dst_strides, one_row, j->elem_size);
      region_runs_add(&r, su, j->src_strides, one_row, j->elem_size);
    }
  }
  region_runs_sort(&w);
  region_runs_sort(&r);
  int twice = region_runs_self_overlap(&w), clash = region_runs_intersect(&w, &r);
  region_runs_free(&w);
  region_runs_free(&r);
  if (twice) violation("%s: %d jobs write some destination bytes twice (a row repeated in one job or in two)", op,
                       (int)count);
  if (clash) violation("%s: a destination row overlaps a source row of the same batch", op);
  kvc_gpu_rows_batch b;
  int refused = 0;
  check_plans(op, emulated_plans_rows_batch(plain, count, &b, &refused));
  if (!refused && emulated_fault_due(op)) refused = 1;
  if (!refused) kvc_gpu_walk_rows_batch(b.jobs, b.njobs, b.index, b.blocks, move_unit, NULL);
  kvc_gpu_rows_batch_free(&b);
  free(plain);
  pthread_mutex_unlock(&lock);
  return refused ? -1 : 0;
}

/* ---- Version 4: sink layers ---- */

/*
 * The RoPE operations of sink layers, with the GPU kernels' arithmetic
 * (backends/gpu/gpu_rope.h, run as a simulated grid of the size the GPU
 * backend launches) on the real memory: the keys must be one of this
 * backend's device buffers on the place's device (a GPU kernel would rotate
 * them there); the cos/sin tensors are device memory of the caller (tagged),
 * read back as a GPU backend would, by a copy the host waits for.
 */
static int emu_rerotate_keys_4d(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t st[4],
                                const int64_t shape[4], const float* rcos, const float* rsin) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("rerotate_keys_4d", exec);
  counters.launches++;
  counters.rerotate_calls++;
  if (dtype != KVC_DTYPE_FLOAT32 && dtype != KVC_DTYPE_FLOAT16 && dtype != KVC_DTYPE_BFLOAT16)
    violation("rerotate_keys_4d: dtype is %d; keys are float32, float16 or bfloat16", (int)dtype);
  size_t elem = dtype == KVC_DTYPE_FLOAT32 ? 4 : 2;
  const buffer* b = NULL;
  void* k = checked_region("rerotate_keys_4d", "keys", exec, p, keys, st, shape, elem, 1, &b);
  uintptr_t lo, hi;
  if (region_extent((uintptr_t)k, st, shape, elem, &lo, &hi)) {
    if (!b || b->host) violation("rerotate_keys_4d: keys %p are not a device buffer of this backend", keys);
    if (st[3] != 1) violation("rerotate_keys_4d: strides[3] is %" PRId64 "; key channels are contiguous", st[3]);
    if (!rcos || !rsin) violation("rerotate_keys_4d: the host tables rcos/rsin are NULL");
    if (kvc_emulated_is_tagged(rcos) || kvc_emulated_is_tagged(rsin))
      violation("rerotate_keys_4d: the tables rcos/rsin are device memory; the contract passes them in host memory");
  }
  int rc = emulated_fault_due("rerotate_keys_4d") ? -1 : kvc_gpu_rope_extents(shape);
  if (rc > 0) {
    kvc_gpu_rope r = kvc_gpu_rope_of(dtype, k, st, shape);
    kvc_sim_rerotate(&r, rcos, rsin, kvc_gpu_rope_grid(kvc_gpu_rope_items(&r)));
  }
  pthread_mutex_unlock(&lock);
  return rc < 0 ? -1 : 0;
}

/* ------------------------------------- Version 4: quantized layers */

/*
 * The quantizer entries run the GPU backend's kernels as the device runs
 * them (quant_grid.h: the plans of backends/gpu/gpu_quant_plan.c, every
 * launch, every thread of its grid) on the untagged memory, so the emulated
 * suite compares the kernels' arithmetic with the CPU caches byte for byte;
 * before that they check that every span of the job stays inside its buffer (a
 * kernel would read or write exactly those bytes) and that the job's
 * outputs do not overlap its inputs or each other (a GPU runs its groups in
 * parallel), except a dequantization written in place over the very span it
 * was read from.
 */

static size_t dtype_elem(int32_t dt) { return dt == KVC_DTYPE_FLOAT32 ? 4 : 2; }

/* How every quantizer entry starts: the backend's lock taken, the execution
 * place checked, one launch counted. Returns the place. */
static place* quant_entry(const char* op, const kvc_exec* exec) {
  pthread_mutex_lock(&lock);
  place* p = checked_place(op, exec);
  counters.launches++;
  counters.quant_calls++;
  return p;
}

/* How it ends: the CPU code's result `rc` (computed under the lock) returned with the lock released. */
static int quant_exit(int rc) {
  pthread_mutex_unlock(&lock);
  return rc;
}

/* The [lo, hi) of n items `stride` bytes apart, each `size` bytes, over up to five axes; 0 when empty. */
static int axes_extent(uintptr_t base, const int64_t* n, const int64_t* stride, int axes, int64_t size, uintptr_t* lo,
                       uintptr_t* hi) {
  int64_t min = 0, max = 0;
  for (int i = 0; i < axes; i++) {
    if (n[i] <= 0) return 0;
    int64_t reach = (n[i] - 1) * stride[i];
    if (reach < 0)
      min += reach;
    else
      max += reach;
  }
  if (size <= 0) return 0;
  *lo = base + (uintptr_t)min;
  *hi = base + (uintptr_t)max + (uintptr_t)size;
  return 1;
}

/* The bytes values lo..hi-1 of every group of a span cover (strides in elements of `elem` bytes). */
static int span_extent(const void* ptr, const kvc_quant_span* s, int64_t values, size_t elem, uintptr_t* lo,
                       uintptr_t* hi) {
  const int64_t e = (int64_t)elem;
  const int64_t n[5] = {s->calls[0], s->calls[1], s->groups[0], s->groups[1], values};
  const int64_t st[5] = {s->call_strides[0] * e, s->call_strides[1] * e, s->group_strides[0] * e,
                         s->group_strides[1] * e, s->value_stride * e};
  return axes_extent((uintptr_t)kvc_emulated_untag(ptr), n, st, 5, e, lo, hi);
}

static int records_extent(const kvc_quant_records* r, const kvc_quant_span* s, int64_t record_bytes, uintptr_t* lo,
                          uintptr_t* hi) {
  const int64_t n[3] = {s->calls[0], s->calls[1], s->groups[0] * s->groups[1]};
  const int64_t st[3] = {r->call_strides[0], r->call_strides[1], r->record_stride};
  return axes_extent((uintptr_t)kvc_emulated_untag(r->base), n, st, 3, record_bytes, lo, hi);
}

static void check_apart(const char* op, const char* a, uintptr_t alo, uintptr_t ahi, const char* b, uintptr_t blo,
                        uintptr_t bhi) {
  if (alo < bhi && blo < ahi)
    violation("%s: the job's %s [%#" PRIxPTR ", %#" PRIxPTR ") overlaps its %s [%#" PRIxPTR ", %#" PRIxPTR ")", op, a,
              alo, ahi, b, blo, bhi);
}

static void check_spec(const char* op, const kvc_quant_spec* s, int64_t group) {
  if (s->dtype != KVC_DTYPE_FLOAT16 && s->dtype != KVC_DTYPE_BFLOAT16 && s->dtype != KVC_DTYPE_FLOAT32)
    violation("%s: dtype %d is not a floating dtype of the cache", op, (int)s->dtype);
  if (s->nbits < 1 || s->nbits > 8 || group < 1) violation("%s: nbits %d, group %" PRId64, op, (int)s->nbits, group);
}

static int emu_quantize_groups(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job) {
  (void)ctx;
  const char* op = "quantize_groups";
  place* p = quant_entry(op, exec);
  if (!job) violation("%s: job is NULL", op);
  check_spec(op, &job->spec, job->group);
  kvc_quantize_job plain = *job;
  const size_t elem = dtype_elem(job->spec.dtype);
  const kvc_quant_span* s = &job->src_span;
  uintptr_t slo = 0, shi = 0, rlo = 0, rhi = 0, dlo = 0, dhi = 0;
  int any = span_extent(job->src, s, job->group, elem, &slo, &shi);
  plain.src = checked_bytes(op, "src", exec, p, job->src, any, slo, shi, 0, NULL);
  if (any) {
    const int64_t ngroups = s->groups[0] * s->groups[1];
    if (job->scratch_bytes < kvc_quantize_scratch_bytes(ngroups, job->group))
      violation("%s: scratch of %zu bytes for calls of %" PRId64 " groups of %" PRId64 " (%zu needed)", op,
                job->scratch_bytes, ngroups, job->group, kvc_quantize_scratch_bytes(ngroups, job->group));
    uintptr_t xlo = (uintptr_t)kvc_emulated_untag(job->scratch), xhi = xlo + job->scratch_bytes;
    plain.scratch = checked_bytes(op, "scratch", exec, p, job->scratch, 1, xlo, xhi, 1, NULL);
    check_apart(op, "scratch", xlo, xhi, "src", slo, shi);
    if (job->records.base) {
      int64_t rb = kvc_quant_record_bytes(job->group, job->spec.nbits, elem);
      records_extent(&job->records, s, rb, &rlo, &rhi);
      plain.records.base = checked_bytes(op, "records", exec, p, job->records.base, 1, rlo, rhi, 1, NULL);
      check_apart(op, "records", rlo, rhi, "src", slo, shi);
      check_apart(op, "records", rlo, rhi, "scratch", xlo, xhi);
    }
    if (job->dequant) {
      const kvc_quant_span* d = &job->dequant_span;
      if (memcmp(d->calls, s->calls, sizeof d->calls) || memcmp(d->groups, s->groups, sizeof d->groups))
        violation("%s: the dequantized span's calls and groups differ from the source's", op);
      span_extent(job->dequant, d, job->group, elem, &dlo, &dhi);
      plain.dequant = checked_bytes(op, "dequant", exec, p, job->dequant, 1, dlo, dhi, 1, NULL);
      int in_place = kvc_emulated_untag(job->dequant) == kvc_emulated_untag(job->src) && !memcmp(d, s, sizeof *d);
      if (!in_place) check_apart(op, "dequantized values", dlo, dhi, "src", slo, shi);
      check_apart(op, "dequantized values", dlo, dhi, "scratch", xlo, xhi);
      if (job->records.base) check_apart(op, "dequantized values", dlo, dhi, "records", rlo, rhi);
    }
  }
  return quant_exit(emulated_fault_due(op) ? -1 : kvc_grid_quantize_groups(&plain));
}

static int emu_read_f32_4d(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                           const int64_t ss[4], const int64_t shape[4]) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  place* p = checked_place("read_f32_4d", exec);
  counters.host_reads++;
  if (dtype != KVC_DTYPE_FLOAT32 && dtype != KVC_DTYPE_FLOAT16 && dtype != KVC_DTYPE_BFLOAT16)
    violation("read_f32_4d: dtype is %d; cos/sin are float32, float16 or bfloat16", (int)dtype);
  size_t elem = dtype == KVC_DTYPE_FLOAT32 ? 4 : 2;
  const void* s = checked_region("read_f32_4d", "src", exec, p, src, ss, shape, elem, 0, NULL);
  uintptr_t lo, hi;
  if (region_extent((uintptr_t)s, ss, shape, elem, &lo, &hi)) {
    if (!kvc_emulated_is_tagged(src)) violation("read_f32_4d: src %p is not device memory", src);
    if (!dst || kvc_emulated_is_tagged(dst)) violation("read_f32_4d: dst %p is not host memory", (void*)dst);
  }
  int rc = emulated_fault_due("read_f32_4d") ? -1 : kvc_gpu_rope_extents(shape);
  if (rc > 0) {
    kvc_gpu_read r = kvc_gpu_read_of(dtype, s, ss, shape);
    kvc_sim_read_f32(&r, (uint32_t*)dst, kvc_gpu_rope_grid(kvc_gpu_read_items(&r)));
  }
  pthread_mutex_unlock(&lock);
  return rc < 0 ? -1 : 0;
}

static int emu_dequantize_groups(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job) {
  (void)ctx;
  const char* op = "dequantize_groups";
  place* p = quant_entry(op, exec);
  if (!job) violation("%s: job is NULL", op);
  check_spec(op, &job->spec, job->group);
  if (job->lo < 0 || job->hi > job->group || job->lo > job->hi)
    violation("%s: values %" PRId64 "..%" PRId64 " of groups of %" PRId64, op, job->lo, job->hi, job->group);
  kvc_dequantize_job plain = *job;
  const size_t elem = dtype_elem(job->spec.dtype);
  uintptr_t dlo = 0, dhi = 0, rlo = 0, rhi = 0;
  int any = span_extent(job->dst, &job->dst_span, job->hi - job->lo, elem, &dlo, &dhi);
  plain.dst = checked_bytes(op, "dst", exec, p, job->dst, any, dlo, dhi, 1, NULL);
  if (any) {
    records_extent(&job->records, &job->dst_span, kvc_quant_record_bytes(job->group, job->spec.nbits, elem), &rlo,
                   &rhi);
    plain.records.base = checked_bytes(op, "records", exec, p, job->records.base, 1, rlo, rhi, 0, NULL);
    check_apart(op, "dst", dlo, dhi, "records", rlo, rhi);
  }
  return quant_exit(emulated_fault_due(op) ? -1 : kvc_grid_dequantize_groups(&plain));
}

static int emu_fp8_calibrate(void* ctx, const kvc_exec* exec, const void* src, const int64_t st[4],
                             const int64_t shape[4], int32_t dtype, float* scale) {
  (void)ctx;
  const char* op = "fp8_calibrate";
  place* p = quant_entry(op, exec);
  if (!scale || kvc_emulated_is_tagged(scale)) violation("%s: scale %p is not host memory", op, (void*)scale);
  const void* s = checked_region(op, "src", exec, p, src, st, shape, dtype_elem(dtype), 0, NULL);
  return quant_exit(emulated_fault_due(op) ? -1 : kvc_grid_fp8_calibrate(s, st, shape, dtype, scale));
}

static int emu_fp8_round_trip(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                              const int64_t ss[4], const int64_t shape[4], int32_t dtype, float scale) {
  (void)ctx;
  const char* op = "fp8_round_trip";
  place* p = quant_entry(op, exec);
  const size_t elem = dtype_elem(dtype);
  void* d = checked_region(op, "dst", exec, p, dst, ds, shape, elem, 1, NULL);
  const void* s = checked_region(op, "src", exec, p, src, ss, shape, elem, 0, NULL);
  check_copy_overlap(op, d, ds, s, ss, shape, elem, 0);
  return quant_exit(emulated_fault_due(op) ? -1 : kvc_grid_fp8_round_trip(d, ds, s, ss, shape, dtype, scale));
}

/* Version 7: the message of an injected failure (emulated_faults.h); the device fails nothing else. */
static const char* emu_last_error(void* ctx) {
  (void)ctx;
  return emulated_faults_message();
}

static const kvc_backend emulated_backend = {
    sizeof(kvc_backend),
    KVC_BACKEND_API_VERSION,
    "cuda",
    KVC_DEVICE_CUDA,
    NULL,
    emu_device_count,
    emu_exec_open,
    emu_exec_close,
    emu_exec_set_stream,
    emu_alloc_zeroed,
    emu_free,
    emu_copy_4d,
    emu_fill_zero_4d,
    emu_copy_rows,
    emu_host_alloc_zeroed,
    emu_host_free,
    emu_copy_tier_4d,
    emu_tier_wait,
    emu_copy_4d_batch,
    /* Version 4: sink layers */
    emu_rerotate_keys_4d,
    emu_read_f32_4d,
    /* Version 4: quantized layers */
    emu_quantize_groups,
    emu_dequantize_groups,
    emu_fp8_calibrate,
    emu_fp8_round_trip,
    /* Version 5 */
    emu_host_alloc,
    /* Version 6 */
    emu_copy_rows_batch,
    /* Version 7 */
    emu_last_error,
    /* Version 8: no fp8 pool entries (pools refuse fp8 storage here, as on the GPU backends) */
    NULL,
    NULL,
    /* Version 9 */
    emu_alloc,
};

/* ---------------------------------------------------------- exports */

/*
 * The plugin entry point the core's registry looks up; the core checks the
 * version. KVC_EMULATED_API_VERSION=<n> makes the plugin claim another
 * backend API version, as a plugin of another release would, so that the
 * tests can see the core refuse it.
 */
EXPORT const kvc_backend* kvc_backend_entry(uint32_t api_version) {
  (void)api_version;
  static kvc_backend other_release;
  const char* claimed = getenv(KVC_EMULATED_API_VERSION_ENV);
  if (!claimed || !*claimed) return &emulated_backend;
  other_release = emulated_backend;
  other_release.api_version = (uint32_t)strtoul(claimed, NULL, 10);
  return &other_release;
}

EXPORT void kvc_emulated_read_counters(kvc_emulated_counters* out) {
  pthread_mutex_lock(&lock);
  *out = counters;
  pthread_mutex_unlock(&lock);
}

EXPORT void kvc_emulated_reset(void) {
  pthread_mutex_lock(&lock);
  kvc_emulated_counters keep = counters;
  memset(&counters, 0, sizeof counters);
  counters.struct_size = sizeof counters;
  counters.live_device_buffers = keep.live_device_buffers;
  counters.live_host_buffers = keep.live_host_buffers;
  counters.live_device_bytes = keep.live_device_bytes;
  counters.live_host_bytes = keep.live_host_bytes;
  counters.open_places = keep.open_places;
  counters.last_stream = keep.last_stream;
  counters.last_device_id = keep.last_device_id;
  pthread_mutex_unlock(&lock);
}

EXPORT void kvc_emulated_expect_stream(int enable, void* stream) {
  pthread_mutex_lock(&lock);
  expect_stream_on = enable;
  expected_stream = stream;
  pthread_mutex_unlock(&lock);
}

EXPORT void kvc_emulated_fail(const char* op, int64_t n) {
  pthread_mutex_lock(&lock);
  emulated_faults_arm(op, n);
  pthread_mutex_unlock(&lock);
}

EXPORT void kvc_emulated_fail_counts(int64_t* calls, int64_t* injected, char* entry, size_t entry_len) {
  pthread_mutex_lock(&lock);
  *calls = emulated_faults_calls();
  *injected = emulated_faults_injected();
  if (entry && entry_len) snprintf(entry, entry_len, "%s", emulated_faults_entry());
  pthread_mutex_unlock(&lock);
}

EXPORT void kvc_emulated_synchronize(void) {
  pthread_mutex_lock(&lock);
  for (place* p = places; p; p = p->next) complete_pending(p);
  pthread_mutex_unlock(&lock);
}
