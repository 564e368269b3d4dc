/*
 * core/util/guard.h: detection of overlapping calls on one handle
 * (kvcache.h, "Thread safety"; docs/threads.md).
 *
 * Every handle carries a kvci_guard. A public entry point enters it first
 * thing, with one line, and leaves it when the function returns (the
 * compiler's cleanup attribute runs the leave on every return path, so the
 * functions keep their early returns):
 *
 *   KVCI_GUARD_EXCLUSIVE(kvci_guard_of(cache), FN);  a call that mutates
 *   KVCI_GUARD_SHARED(kvci_guard_of(cache), FN);     a call on a const handle
 *
 * A call that finds another thread inside returns KVC_ERROR_BUSY before it
 * reads anything: exclusive entry is refused while anyone is inside, shared
 * entry while a mutating call is inside, so concurrent const calls still run
 * together as the header promises. A NULL guard (a NULL handle) enters
 * nothing, and the function's own argument check refuses the handle.
 *
 * The uncontended cost is one compare-and-swap at entry and, at exit, one
 * store (exclusive) or one fetch-and-sub (shared):
 * the per-layer update pays that (docs/threads.md has the measurement).
 *
 * Calls that cannot return an error (lengths, the stream, a sequence's
 * destroy) wait for the handle instead: KVCI_GUARD_EXCLUSIVE_WAIT,
 * KVCI_GUARD_SHARED_WAIT; a handle's destroy waits too (kvci_guard_retire).
 *
 * Entry is not re-entrant: a function that needs another public entry point
 * on the same handle calls its internal body (a const call inside a shared
 * one is fine: readers nest), or lends the handle to its own thread for the
 * call (KVCI_GUARD_LEND: the encoder-decoder pair's calls on its halves). A
 * callback into the program that calls the handle again is refused.
 */
#ifndef KVC_CORE_GUARD_H
#define KVC_CORE_GUARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcache/error.h"

typedef struct kvci_guard {
  _Atomic uint32_t state;        /* 0: free; KVCI_GUARD_WRITER: a mutating call inside; else: readers inside */
  _Atomic(const char*) holder;   /* the mutating call that entered last: named in the refusal */
  _Atomic uintptr_t lent_to;     /* the thread a lent handle's calls may enter from (KVCI_GUARD_LEND), else 0 */
} kvci_guard;

#define KVCI_GUARD_WRITER 0x80000000u
#define KVCI_GUARD_LENT 0x40000000u /* with WRITER: the holder's own thread may call the public entry points */

/* One entry: what the leave at scope exit releases (guard NULL: nothing, or the entry was refused). */
typedef struct kvci_guard_entry {
  kvci_guard* guard;
  uint16_t shared;
  uint16_t lent;
  uint32_t seen; /* the state that refused the entry (busy when nonzero) */
} kvci_guard_entry;

/* guard.c: whether a refusing state is a handle lent to this very thread (a nested entry, allowed). */
int kvci_guard_lent_here(const kvci_guard* g, uint32_t seen);

/* The guard of a handle of any type (const or not), NULL for NULL: entering it does not modify the handle. */
#define kvci_guard_of(handle) ((handle) ? (kvci_guard*)&(handle)->guard : (kvci_guard*)NULL)

static inline kvci_guard_entry kvci_guard_enter_exclusive(kvci_guard* g, const char* fn) {
  kvci_guard_entry entry = {g, 0, 0, 0};
  if (!g) return entry;
  uint32_t expected = 0;
  if (atomic_compare_exchange_strong_explicit(&g->state, &expected, KVCI_GUARD_WRITER, memory_order_acquire,
                                              memory_order_relaxed)) {
    atomic_store_explicit(&g->holder, fn, memory_order_relaxed);
    return entry;
  }
  entry.guard = NULL;
  entry.seen = kvci_guard_lent_here(g, expected) ? 0 : expected;
  return entry;
}

/* Readers never touch the word while a writer holds it, so the writer leaves with a plain store. */
static inline kvci_guard_entry kvci_guard_enter_shared(kvci_guard* g) {
  kvci_guard_entry entry = {g, 1, 0, 0};
  if (!g) return entry;
  uint32_t seen = atomic_load_explicit(&g->state, memory_order_relaxed);
  do {
    if (seen & KVCI_GUARD_WRITER) {
      entry.guard = NULL;
      entry.seen = kvci_guard_lent_here(g, seen) ? 0 : seen;
      return entry;
    }
  } while (!atomic_compare_exchange_weak_explicit(&g->state, &seen, seen + 1, memory_order_acquire,
                                                  memory_order_relaxed));
  return entry;
}

static inline void kvci_guard_leave(kvci_guard_entry* entry) {
  if (!entry->guard) return;
  if (entry->shared) {
    atomic_fetch_sub_explicit(&entry->guard->state, 1, memory_order_release);
    return;
  }
  /* Cleared before the release: a thread that sees the handle taken later never finds its own mark here. */
  if (entry->lent) atomic_store_explicit(&entry->guard->lent_to, 0, memory_order_relaxed);
  atomic_store_explicit(&entry->guard->state, 0, memory_order_release);
}

/* guard.c: the KVC_ERROR_BUSY of a refused entry, naming the call and, when it is known, the one inside. */
kvc_error* kvci_guard_busy(const kvci_guard* g, const kvci_guard_entry* refused, const char* fn);
/* guard.c: entries that wait (yielding the processor) until the other threads have left. */
kvci_guard_entry kvci_guard_wait_exclusive(kvci_guard* g, const char* fn);
kvci_guard_entry kvci_guard_wait_shared(kvci_guard* g);
/* guard.c: exclusive entry that lends the handle to this thread's own calls of its public entry points. */
kvci_guard_entry kvci_guard_enter_lent(kvci_guard* g, const char* fn);

#if defined(__GNUC__)
#define KVCI_GUARD_SCOPE_ __attribute__((cleanup(kvci_guard_leave))) kvci_guard_entry
#else
#error "kvcache's call guard needs the cleanup attribute (GCC or Clang)"
#endif

/* Names of one macro use (two guards may be entered in one function: a pool and a tier). */
#define KVCI_GUARD_CAT2_(a, b) a##b
#define KVCI_GUARD_CAT_(a, b) KVCI_GUARD_CAT2_(a, b)
#define KVCI_GUARD_VAR_ KVCI_GUARD_CAT_(kvci_guard_, __LINE__)
#define KVCI_ENTRY_VAR_ KVCI_GUARD_CAT_(kvci_entry_, __LINE__)

/* Refused entries return KVC_ERROR_BUSY from the enclosing function (which returns kvc_error*). */
#define KVCI_GUARD_ENTER_(g, fn, enter)                                               \
  kvci_guard* const KVCI_GUARD_VAR_ = (g);                                            \
  KVCI_GUARD_SCOPE_ KVCI_ENTRY_VAR_ = enter;                                          \
  if (KVCI_ENTRY_VAR_.seen) return kvci_guard_busy(KVCI_GUARD_VAR_, &KVCI_ENTRY_VAR_, (fn))
#define KVCI_GUARD_EXCLUSIVE(g, fn) KVCI_GUARD_ENTER_(g, fn, kvci_guard_enter_exclusive(KVCI_GUARD_VAR_, (fn)))
#define KVCI_GUARD_SHARED(g, fn) KVCI_GUARD_ENTER_(g, fn, kvci_guard_enter_shared(KVCI_GUARD_VAR_))
/*
 * Exclusive entry on a handle whose public entry points the call itself uses (an encoder-decoder pair's
 * halves): other threads are refused as usual, this thread's nested calls enter. Not on the hot path.
 */
#define KVCI_GUARD_LEND(g, fn) KVCI_GUARD_ENTER_(g, fn, kvci_guard_enter_lent(KVCI_GUARD_VAR_, (fn)))

/* Entries that wait, for calls that return no error. */
#define KVCI_GUARD_EXCLUSIVE_WAIT(g, fn) KVCI_GUARD_SCOPE_ KVCI_ENTRY_VAR_ = kvci_guard_wait_exclusive((g), (fn))
#define KVCI_GUARD_SHARED_WAIT(g) KVCI_GUARD_SCOPE_ KVCI_ENTRY_VAR_ = kvci_guard_wait_shared(g)

/*
 * Destroy: waits until the calls inside have left and keeps everyone out (the guard is freed with the handle).
 * A call that starts after the handle is freed is still the caller's bug: nothing can detect it.
 */
static inline void kvci_guard_retire(kvci_guard* g, const char* fn) {
  if (g) (void)kvci_guard_wait_exclusive(g, fn);
}

#endif /* KVC_CORE_GUARD_H */
