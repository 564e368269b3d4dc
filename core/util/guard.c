/* core/util/guard.c: the slow paths of core/guard.h: the refusal's message and the entries that wait. */
#define _DEFAULT_SOURCE 1 /* sched_yield (POSIX) */
#include <sched.h>

#include "guard.h"
#include "error.h"

kvc_error* kvci_guard_busy(const kvci_guard* g, const kvci_guard_entry* refused, const char* fn) {
  static const char* RULE = "this call did nothing (the handle is unchanged). A handle is used by one thread at a "
                            "time (kvcache.h, Thread safety): serialize the calls on it or give each thread its own";
  if (!(refused->seen & KVCI_GUARD_WRITER))
    return kvci_err(KVC_ERROR_BUSY, "%s: another thread is inside a read-only call on the same handle; %s", fn,
                    RULE);
  /* The holder may already have left and another entered: the name is the last mutating call, said as such. */
  const char* holder = atomic_load_explicit(&((kvci_guard*)g)->holder, memory_order_relaxed);
  return kvci_err(KVC_ERROR_BUSY, "%s: another thread is inside a call on the same handle (last entered: %s); %s",
                  fn, holder ? holder : "unknown", RULE);
}

/* A thread's mark: the address of a thread-local byte (only the lending paths, never the hot one, read it). */
static _Thread_local char thread_mark;

int kvci_guard_lent_here(const kvci_guard* g, uint32_t seen) {
  if (!(seen & KVCI_GUARD_LENT)) return 0;
  return atomic_load_explicit(&((kvci_guard*)g)->lent_to, memory_order_relaxed) == (uintptr_t)&thread_mark;
}

kvci_guard_entry kvci_guard_enter_lent(kvci_guard* g, const char* fn) {
  kvci_guard_entry entry = kvci_guard_enter_exclusive(g, fn);
  if (!entry.guard) return entry; /* refused, or already lent to this thread (nested: nothing to lend) */
  atomic_store_explicit(&g->lent_to, (uintptr_t)&thread_mark, memory_order_relaxed);
  atomic_store_explicit(&g->state, KVCI_GUARD_WRITER | KVCI_GUARD_LENT, memory_order_relaxed);
  entry.lent = 1;
  return entry;
}

kvci_guard_entry kvci_guard_wait_exclusive(kvci_guard* g, const char* fn) {
  kvci_guard_entry entry = kvci_guard_enter_exclusive(g, fn);
  while (entry.seen) {
    sched_yield();
    entry = kvci_guard_enter_exclusive(g, fn);
  }
  return entry;
}

kvci_guard_entry kvci_guard_wait_shared(kvci_guard* g) {
  kvci_guard_entry entry = kvci_guard_enter_shared(g);
  while (entry.seen) {
    sched_yield();
    entry = kvci_guard_enter_shared(g);
  }
  return entry;
}
