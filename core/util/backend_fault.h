/*
 * core/util/backend_fault.h: what the core does when a backend call fails.
 *
 * The core validates everything it can before it writes, so that a refused
 * call changes nothing. A device can still fail a call the core could not
 * foresee (no kernel image for the card, a lost context, an allocation the
 * device cannot serve), and a GPU backend issues its work asynchronously: by
 * the time a launch of layer 5 fails, layers 0 to 4 of the step are written
 * and cannot be rolled back. So every backend result is checked, and a
 * failure in a write phase *poisons* the object (a cache or a pool): the
 * operation returns an error naming the backend entry and the vendor's
 * message, and every later call but reset and destroy is refused with
 * KVC_ERROR_INVALID_STATE until reset empties it (docs/gpus.md, 'When the
 * device fails'). Failures in a check or room phase, before anything changed,
 * are plain errors (kvci_fault_error) and poison nothing.
 */
#ifndef KVC_CORE_BACKEND_FAULT_H
#define KVC_CORE_BACKEND_FAULT_H

#include <stdint.h>

#include "backend.h"
#include "kvcache/error.h"

/* What a poisoned object is called in messages, and what it still accepts. */
typedef struct kvci_fault_owner {
  const char* what;   /* "cache", "pool" */
  const char* remedy; /* which calls still work */
} kvci_fault_owner;
extern const kvci_fault_owner kvci_fault_cache, kvci_fault_pool;

typedef struct kvci_fault {
  int poisoned;      /* a write phase failed: the contents are unknown until reset */
  int fresh;         /* the failure happened in the operation running now and is not reported yet */
  char entry[32];    /* the first failed backend entry */
  char message[400]; /* its vendor message (backend last_error), or its return value */
} kvci_fault;

/* Notes a write-phase result `rc` of backend entry `entry` in `f` (the first failure wins); returns rc. Inline:
   every backend call passes here, and almost every one succeeds. */
int kvci_fault_note_failure(kvci_fault* f, const kvc_backend* b, int rc, const char* entry);
static inline int kvci_fault_note(kvci_fault* f, const kvc_backend* b, int rc, const char* entry) {
  return rc ? kvci_fault_note_failure(f, b, rc, entry) : 0;
}

/* The end of an operation that may have noted a failure: `e` when none is fresh, else the failure's error
   (INVALID_STATE, naming fn, the backend, the entry, its message and the poisoned state; `e` is destroyed). */
kvc_error* kvci_fault_result_fresh(const char* fn, kvci_fault* f, const kvc_backend* b, const kvci_fault_owner* owner,
                                   kvc_error* e);
static inline kvc_error* kvci_fault_result(const char* fn, kvci_fault* f, const kvc_backend* b,
                                           const kvci_fault_owner* owner, kvc_error* e) {
  return f->fresh ? kvci_fault_result_fresh(fn, f, b, owner, e) : e; /* inline: every update ends here */
}

/* The refusal of an operation on a poisoned object (NULL when it is not poisoned). */
kvc_error* kvci_fault_refusal_poisoned(const char* fn, const kvci_fault* f, const kvc_backend* b,
                                       const kvci_fault_owner* owner);
static inline kvc_error* kvci_fault_refusal(const char* fn, const kvci_fault* f, const kvc_backend* b,
                                            const kvci_fault_owner* owner) {
  return f->poisoned ? kvci_fault_refusal_poisoned(fn, f, b, owner) : NULL; /* inline: every call starts here */
}

/* For a failure that damaged nothing that stays (a clone or fork the operation was making, which the caller
   then destroys; the caller's output tensors): NULL when no failure is fresh, else an error naming fn, the entry
   and its message, then `unchanged`; `f` is neither fresh nor poisoned after. */
kvc_error* kvci_fault_discard(const char* fn, kvci_fault* f, const kvc_backend* b, const char* unchanged);

/* An error for a backend entry that failed before anything changed: names fn, the backend, the entry and the
   backend's message; `unchanged` says what the caller keeps (e.g. "the cache is unchanged"). */
kvc_error* kvci_fault_error(const char* fn, const kvc_backend* b, const char* entry, int rc, const char* unchanged);

/*
 * A backend entry on a cache's (or pool's) place, its result noted in the object's latch:
 * KVCI_BE(c, copy_4d, dst, ...). Once a call of the operation has failed, the rest of its device work is not
 * issued (the call returns -1): the object is poisoned anyway, and work issued after a failed tier_wait would
 * race with the prefetch it did not wait for.
 */
#define KVCI_BE(cache, entry, ...)                                                                            \
  ((cache)->fault.fresh                                                                                       \
       ? -1                                                                                                   \
       : kvci_fault_note((kvci_fault*)&(cache)->fault, (cache)->backend,                                      \
                         (cache)->backend->entry((cache)->backend->ctx, (kvc_exec*)&(cache)->exec, __VA_ARGS__), \
                         #entry))

/* The same for an entry that takes nothing but the place (tier_wait). */
#define KVCI_BE0(cache, entry)                                                                                \
  ((cache)->fault.fresh ? -1                                                                                  \
                        : kvci_fault_note((kvci_fault*)&(cache)->fault, (cache)->backend,                     \
                                          (cache)->backend->entry((cache)->backend->ctx, (kvc_exec*)&(cache)->exec), \
                                          #entry))

#endif /* KVC_CORE_BACKEND_FAULT_H */
