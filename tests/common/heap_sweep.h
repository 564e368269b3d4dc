/*
 * heap_sweep.h: every heap allocation of one call refused in turn
 * (heap_fail.h), for the pool, persistence and tier tests.
 *
 * A case makes a fresh fixture (a pool, a cache, a directory of blocks,
 * every allocation granted), runs the call once to count its allocations,
 * then once per allocation with that one and all after it refused. Each
 * refused run must either fail with KVC_ERROR_OUT_OF_MEMORY and leave what
 * `observe` records as it was, or succeed with the outcome of the run that
 * was refused nothing (an allocation the call can do without); a case with
 * misses_ok may also succeed differently (a tier that turns the failure
 * into a miss), checked by `degraded`. Nothing may leak: the blocks live
 * after the fixture is destroyed are those live before it was made.
 */
#ifndef KVC_TESTS_HEAP_SWEEP_H
#define KVC_TESTS_HEAP_SWEEP_H

#include <stdlib.h>
#include <string.h>

#include "heap_fail.h"
#include "test_util.h"

/* What a fixture shows: bytes appended by observe, compared whole. Static, not heap: the sweep counts the heap. */
#define HEAP_STATE_BYTES ((size_t)4 << 20)
typedef struct heap_state {
  unsigned char data[HEAP_STATE_BYTES];
  size_t len;
} heap_state;

static TU_UNUSED void heap_state_put(heap_state* s, const void* p, size_t n) {
  if (n > HEAP_STATE_BYTES - s->len) {
    fprintf(TU_LOG, "FAILED: a fixture's state is larger than HEAP_STATE_BYTES\n");
    abort();
  }
  memcpy(s->data + s->len, p, n);
  s->len += n;
}

static TU_UNUSED void heap_state_u64(heap_state* s, uint64_t v) { heap_state_put(s, &v, sizeof v); }

static TU_UNUSED int heap_state_same(const heap_state* a, const heap_state* b) {
  return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

typedef struct heap_case {
  const char* name;
  void* (*make)(void);                                /* a fresh fixture, or NULL (counted a failure) */
  kvc_error* (*op)(void* fixture);                    /* the call under test; frees what it made on success */
  void (*observe)(void* fixture, heap_state* out);    /* what a refusal must leave as it was */
  void (*destroy)(void* fixture);
  int misses_ok;                                      /* a refusal may become another success (a miss) */
  int (*degraded)(void* fixture);                     /* with misses_ok: 1 when such a success is acceptable */
} heap_case;

/* Runs one case; returns how many allocations the call makes. */
static TU_UNUSED long heap_sweep(const heap_case* hc) {
  if (!heap_fail_available()) {
    printf("SKIPPED %s: the linker cannot wrap malloc (-Wl,--wrap), so allocations cannot be refused\n", hc->name);
    return 0;
  }
  static heap_state before, after, reference;
  before.len = after.len = reference.len = 0;
  long live0 = heap_live();
  void* f = hc->make();
  if (!CHECK(f != NULL)) return 0;
  hc->observe(f, &before);
  long calls0 = heap_calls;
  kvc_error* e = hc->op(f);
  long total = heap_calls - calls0;
  if (!CHECK_OK(e)) fprintf(TU_LOG, "    %s: the call fails with every allocation granted\n", hc->name);
  hc->observe(f, &reference);
  hc->destroy(f);
  CHECK_EQ_I64(heap_live(), live0);
  long refused = 0, same = 0, degraded = 0;
  for (long n = 0; n < total; n++) {
    f = hc->make();
    if (!CHECK(f != NULL)) break;
    before.len = after.len = 0;
    hc->observe(f, &before);
    heap_fail_after = n;
    e = hc->op(f);
    heap_fail_after = -1;
    hc->observe(f, &after);
    if (e) {
      refused++;
      if (!CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_OUT_OF_MEMORY))
        fprintf(TU_LOG, "    %s, allocation %ld refused: %s\n", hc->name, n, kvc_error_message(e));
      kvc_error_destroy(e);
      if (!CHECK(heap_state_same(&before, &after)))
        fprintf(TU_LOG, "    %s, allocation %ld refused: the fixture changed\n", hc->name, n);
    } else if (heap_state_same(&after, &reference)) {
      same++;
    } else {
      degraded++;
      if (!CHECK(hc->misses_ok && hc->degraded && hc->degraded(f)))
        fprintf(TU_LOG, "    %s, allocation %ld refused: succeeded with another outcome\n", hc->name, n);
    }
    hc->destroy(f);
    if (!CHECK_EQ_I64(heap_live(), live0)) fprintf(TU_LOG, "    %s, allocation %ld refused: leaked\n", hc->name, n);
  }
  printf("  %s: %ld allocations; refusing each: %ld out-of-memory errors, %ld the same success, %ld misses\n",
         hc->name, total, refused, same, degraded);
  return total;
}

/* Every case; each must allocate (with every_allocates) or not all of them may be allocation-free. */
static TU_UNUSED void heap_sweep_all(const heap_case* cases, size_t n, int every_allocates) {
  long most = 0;
  for (size_t i = 0; i < n; i++) {
    long k = heap_sweep(&cases[i]);
    if (every_allocates && heap_fail_available() && !CHECK(k > 0))
      fprintf(TU_LOG, "    %s allocates nothing: is the library wrapped?\n", cases[i].name);
    if (k > most) most = k;
  }
  if (heap_fail_available()) CHECK(most > 0); /* the wrappers see the library's allocations */
}

#endif /* KVC_TESTS_HEAP_SWEEP_H */
