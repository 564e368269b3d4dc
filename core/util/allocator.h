/*
 * core/util/allocator.h: a caller's kvc_allocator as the core uses it.
 *
 * The core frees stores by pointer alone (a layer does not keep its store's
 * byte count), but the caller's free wants the bytes it was asked for, so
 * the allocator records every live allocation. Caches made from one another
 * (clones, splits, loads, restores) share one record, because their stores
 * move between them (a restore swaps the contents of two caches): it is
 * reference counted and locked, since those caches may be used from
 * different threads at once.
 */
#ifndef KVCI_ALLOCATOR_H
#define KVCI_ALLOCATOR_H

#include <stddef.h>

#include "kvcache/allocator.h"
#include "kvcache/error.h"
#include "backend.h"

typedef struct kvci_allocator kvci_allocator;

/* Checks `in` (NULL: none; *out = NULL) and makes a shared record of it. Errors name `fn` and `arg`. */
kvc_error* kvci_allocator_new(const char* fn, const char* arg, const kvc_allocator* in, kvci_allocator** out);
/* Another owner of `a` (NULL stays NULL). */
kvci_allocator* kvci_allocator_share(kvci_allocator* a);
/* The create or load that made `a` succeeded: the caller's release (if any) runs when the last owner goes.
 * Until then a failed call can drop its owners without telling the caller, whose ctx stays its own. */
void kvci_allocator_adopt(kvci_allocator* a);
/* Drops one owner; the last frees the record (every allocation must have been given back). */
void kvci_allocator_release(kvci_allocator* a);

/*
 * `bytes` of memory from the caller's allocator, for the place `exec` of `device`: zeroed with the backend's
 * fill_zero_4d on the place's stream when `zeroed` is set (else as the allocator gave it, for a store the core
 * writes in full); NULL when the allocator refuses or the zeroing fails.
 */
void* kvci_allocator_take(kvci_allocator* a, const kvc_backend* be, const kvc_exec* exec, kvc_device device,
                          size_t bytes, int zeroed);
/* Gives `ptr` back to the caller's allocator if it came from `a`: 1 then, else 0 (not the allocator's). */
int kvci_allocator_give(kvci_allocator* a, const kvc_exec* exec, kvc_device device, void* ptr);

#endif /* KVCI_ALLOCATOR_H */
