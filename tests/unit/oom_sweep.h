/*
 * oom_sweep.h: out-of-memory fault injection for the internal tests (those
 * that may reach a cache's backend through internal.h).
 *
 * oom_install puts the CPU backend behind a wrapper that refuses an
 * allocation, device or host tier, once the granted ones are used up, and
 * counts the buffers still live. oom_sweep runs an operation on a fresh
 * cache with 0, 1, 2, ... allocations granted until it succeeds, and
 * requires each refused run to fail with KVC_ERROR_OUT_OF_MEMORY, to leave
 * everything observable (snapshot) as it was and to leak nothing. A test
 * adds what else must not change through `also`.
 */
#ifndef KVCACHE_OOM_SWEEP_H
#define KVCACHE_OOM_SWEEP_H

#include "internal.h"
#include "test_util.h"

static const kvc_backend* oom_real;
static kvc_backend oom_backend;
static long oom_allocs_left = -1; /* allocations still granted; -1 = all */
static long oom_live = 0;         /* buffers allocated through the wrapper and not yet freed */

static void* oom_granted(void* p) {
  if (p) oom_live++;
  return p;
}
static int oom_refuse(void) {
  if (oom_allocs_left == 0) return 1;
  if (oom_allocs_left > 0) oom_allocs_left--;
  return 0;
}
static void* oom_alloc(void* ctx, const kvc_exec* dev, size_t bytes) {
  return oom_refuse() ? NULL : oom_granted(oom_real->alloc_zeroed(ctx, dev, bytes));
}
static void* oom_host_alloc(void* ctx, const kvc_exec* dev, size_t bytes) {
  return oom_refuse() ? NULL : oom_granted(oom_real->host_alloc_zeroed(ctx, dev, bytes));
}
static void* oom_host_alloc_unzeroed(void* ctx, const kvc_exec* dev, size_t bytes) {
  return oom_refuse() ? NULL : oom_granted(oom_real->host_alloc(ctx, dev, bytes));
}
static void oom_free(void* ctx, const kvc_exec* dev, void* p) {
  if (p) oom_live--;
  oom_real->free(ctx, dev, p);
}
static void oom_host_free(void* ctx, const kvc_exec* dev, void* p) {
  if (p) oom_live--;
  oom_real->host_free(ctx, dev, p);
}

/* Makes c allocate through the wrapper. (Clone, split and stack allocate through the new cache's own
 * backend, which the wrapper cannot reach.) */
static TU_UNUSED void oom_install(kvc_cache* c) {
  oom_real = kvci_cpu_backend();
  oom_backend = *oom_real;
  oom_backend.alloc_zeroed = oom_alloc;
  oom_backend.host_alloc_zeroed = oom_host_alloc;
  oom_backend.host_alloc = oom_host_alloc_unzeroed;
  oom_backend.free = oom_free;
  oom_backend.host_free = oom_host_free;
  c->backend = &oom_backend;
}

/* The batch-row operations both sweeps put through refused allocations, on a cache of batch 2: swap the rows, and
 * select rows 1, 1, 0. */
static TU_UNUSED kvc_error* oom_reorder_swap(kvc_cache* c) { return kvc_cache_reorder(c, TU_LIST(1, 0), 2); }
static TU_UNUSED kvc_error* oom_select_rows(kvc_cache* c) {
  return kvc_cache_batch_select_indices(c, TU_LIST(1, 1, 0), 3);
}

typedef struct oom_case {
  const char* name;
  kvc_cache* (*make)(void); /* a fresh cache, oom_install-ed */
  kvc_error* (*op)(kvc_cache*);
  int min_allocs; /* allocations the operation needs at least (it must fail at each of them) */
} oom_case;

/* Called with after = 0 on the cache before the operation, then with after = 1 once it was refused. */
typedef void (*oom_also)(const kvc_cache* c, int after, const char* name);

static TU_UNUSED void oom_sweep(const oom_case* oc, oom_also also) {
  long n = 0;
  for (; n < 64; n++) {
    kvc_cache* c = oc->make();
    if (!c) return;
    tu_snapshot before, after;
    snapshot(c, &before);
    if (also) also(c, 0, oc->name);
    long live_before = oom_live;
    oom_allocs_left = n;
    kvc_error* e = oc->op(c);
    oom_allocs_left = -1;
    if (!e) {
      snapshot_free(&before);
      kvc_cache_destroy(c);
      CHECK_EQ_I64(oom_live, 0);
      break;
    }
    if (!CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_OUT_OF_MEMORY))
      fprintf(TU_LOG, "    %s with %ld allocations granted: %s\n", oc->name, n, kvc_error_message(e));
    kvc_error_destroy(e);
    snapshot(c, &after);
    if (!CHECK_SNAPSHOT_EQUAL(&before, &after)) fprintf(TU_LOG, "    %s, allocation %ld refused\n", oc->name, n);
    if (also) also(c, 1, oc->name);
    CHECK_EQ_I64(oom_live, live_before); /* nothing leaked */
    snapshot_free(&before);
    snapshot_free(&after);
    kvc_cache_destroy(c);
    CHECK_EQ_I64(oom_live, 0);
  }
  if (!CHECK(n >= oc->min_allocs && n < 64)) fprintf(TU_LOG, "    %s succeeded after %ld refusals\n", oc->name, n);
}

static TU_UNUSED void oom_sweep_all(const oom_case* cases, size_t n, oom_also also) {
  for (size_t i = 0; i < n; i++) oom_sweep(&cases[i], also);
}

#endif /* KVCACHE_OOM_SWEEP_H */
