/* core/util/allocator.c: the caller's allocator behind the core's stores (allocator.h says why it keeps a record). */
#include "allocator.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

typedef struct {
  void* ptr;
  size_t bytes;
} live_allocation;

struct kvci_allocator {
  kvc_allocator user;
  atomic_flag lock;
  atomic_uint owners;
  int adopted; /* a create or load succeeded with it: the user's release runs when the last owner goes */
  live_allocation* live;
  size_t count, cap;
};

/* The published sizes (the header lists them); the last is the current one. */
static const uint32_t ALLOCATOR_SIZES[] = {32, 40};
_Static_assert(sizeof(kvc_allocator) == 40, "kvc_allocator changed size");

void kvc_allocator_init(kvc_allocator* allocator) {
  if (allocator) *allocator = (kvc_allocator)KVC_ALLOCATOR_INIT;
}

kvc_error* kvci_allocator_new(const char* fn, const char* arg, const kvc_allocator* in, kvci_allocator** out) {
  *out = NULL;
  if (!in) return NULL;
  int known = 0;
  for (size_t i = 0; i < sizeof ALLOCATOR_SIZES / sizeof *ALLOCATOR_SIZES; i++) known |= in->struct_size == ALLOCATOR_SIZES[i];
  if (!known)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s->struct_size is %u but this library knows only %zu; "
                    "initialize it with KVC_ALLOCATOR_INIT", fn, arg, in->struct_size, sizeof(kvc_allocator));
  if (!in->alloc || !in->free)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s->%s is NULL; an allocator needs both alloc and free", fn,
                    arg, in->alloc ? "free" : "alloc");
  kvci_allocator* a = (kvci_allocator*)calloc(1, sizeof(*a));
  if (!a) return kvci_err_oom();
  /* An older, shorter struct has no `release`: copy what the caller has, the rest stays NULL. */
  memcpy(&a->user, in, in->struct_size);
  atomic_flag_clear(&a->lock);
  atomic_init(&a->owners, 1);
  *out = a;
  return NULL;
}

kvci_allocator* kvci_allocator_share(kvci_allocator* a) {
  if (a) atomic_fetch_add(&a->owners, 1);
  return a;
}

void kvci_allocator_adopt(kvci_allocator* a) {
  if (a) a->adopted = 1;
}

void kvci_allocator_release(kvci_allocator* a) {
  if (!a || atomic_fetch_sub(&a->owners, 1) != 1) return;
  if (a->adopted && a->user.release) a->user.release(a->user.ctx);
  free(a->live);
  free(a);
}

static void lock(kvci_allocator* a) {
  while (atomic_flag_test_and_set_explicit(&a->lock, memory_order_acquire)) {
  }
}

static void unlock(kvci_allocator* a) { atomic_flag_clear_explicit(&a->lock, memory_order_release); }

/* Records (ptr, bytes); 0 on success, -1 when the record cannot grow. */
static int record(kvci_allocator* a, void* ptr, size_t bytes) {
  lock(a);
  int ok = 1;
  if (a->count == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    live_allocation* grown = (live_allocation*)realloc(a->live, cap * sizeof(*grown));
    if (grown) {
      a->live = grown;
      a->cap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) a->live[a->count++] = (live_allocation){ptr, bytes};
  unlock(a);
  return ok ? 0 : -1;
}

/* Removes ptr from the record and returns its bytes (0 if it was not there: not ours to free). */
static size_t forget(kvci_allocator* a, void* ptr) {
  size_t bytes = 0;
  lock(a);
  for (size_t i = a->count; i-- > 0;)
    if (a->live[i].ptr == ptr) {
      bytes = a->live[i].bytes;
      a->live[i] = a->live[--a->count];
      break;
    }
  unlock(a);
  return bytes;
}

/* Zeroes bytes at p with the backend (on the place's stream): rows of 4096 bytes, then the tail, so that no
 * dimension exceeds what a device kernel indexes (2^31). 0 on success. */
static int zero_bytes(const kvc_backend* be, const kvc_exec* exec, void* p, size_t bytes) {
  const int64_t row = 4096, rows = (int64_t)(bytes / (size_t)row), tail = (int64_t)(bytes % (size_t)row);
  const int64_t row_strides[4] = {rows * row, rows * row, row, 1}, row_shape[4] = {1, 1, rows, row};
  const int64_t tail_strides[4] = {tail, tail, tail, 1}, tail_shape[4] = {1, 1, 1, tail};
  if (rows && be->fill_zero_4d(be->ctx, exec, p, row_strides, row_shape, 1)) return -1;
  return tail ? be->fill_zero_4d(be->ctx, exec, (char*)p + rows * row, tail_strides, tail_shape, 1) : 0;
}

void* kvci_allocator_take(kvci_allocator* a, const kvc_backend* be, const kvc_exec* exec, kvc_device device,
                          size_t bytes, int zeroed) {
  void* p = a->user.alloc(a->user.ctx, bytes, KVC_ALLOCATOR_ALIGNMENT, device, exec->stream);
  if (!p) return NULL;
  /* The allocator's memory is uninitialized; stores are handed out zeroed, as the backend's alloc_zeroed does,
     unless the caller writes every byte itself (a restore's, kvci_store_alloc_unset). */
  if (((uintptr_t)p & (KVC_ALLOCATOR_ALIGNMENT - 1)) || (zeroed && zero_bytes(be, exec, p, bytes)) ||
      record(a, p, bytes)) {
    a->user.free(a->user.ctx, p, bytes, device, exec->stream);
    return NULL;
  }
  return p;
}

int kvci_allocator_give(kvci_allocator* a, const kvc_exec* exec, kvc_device device, void* ptr) {
  size_t bytes = forget(a, ptr);
  if (bytes) a->user.free(a->user.ctx, ptr, bytes, device, exec->stream);
  return bytes != 0;
}
