/*
 * arena_allocator.h: a kvc_allocator over one static arena, for the tests of
 * caller-provided storage (kvcache/allocator.h). It counts what it hands out
 * and gets back, checks that every free names a live allocation with the
 * bytes and device it was asked for, and refuses allocations once a budget
 * is spent (the out-of-memory sweeps). Bump allocation: freed bytes are not
 * reused, which keeps the arena's bookkeeping out of the way of what the
 * tests check; ARENA_BYTES bounds what one test may allocate in all.
 */
#ifndef KVC_TESTS_ARENA_ALLOCATOR_H
#define KVC_TESTS_ARENA_ALLOCATOR_H

#include <stdint.h>
#include <string.h>

#include "kvcache.h"
#include "test_util.h"

#define ARENA_BYTES ((size_t)16 << 20)
#define ARENA_MAX_LIVE 512

typedef struct arena_allocation {
  void* ptr;
  size_t bytes;
  kvc_device device;
} arena_allocation;

typedef struct arena {
  size_t used;                 /* bump offset */
  long budget;                 /* allocations still granted; -1 = all */
  long allocs, frees, refused;
  long bad_frees;              /* frees of unknown pointers or with other bytes/device than asked */
  long bad_alignment;          /* alignments that are not the documented KVC_ALLOCATOR_ALIGNMENT */
  size_t live_bytes;
  long live_count;
  arena_allocation live[ARENA_MAX_LIVE];
  int misalign;                /* hand out pointers 8 bytes off the asked alignment */
  long releases;               /* calls of release: once per successful create or load, after the last owner */
  long live_at_release;        /* allocations still live when release came (must be 0) */
} arena;

static _Alignas(4096) unsigned char arena_memory[ARENA_BYTES];

static TU_UNUSED void* arena_alloc(void* ctx, size_t bytes, size_t alignment, kvc_device device, void* stream) {
  arena* a = (arena*)ctx;
  (void)stream;
  if (alignment != KVC_ALLOCATOR_ALIGNMENT) a->bad_alignment++;
  if (a->budget == 0) {
    a->refused++;
    return NULL;
  }
  size_t at = (a->used + alignment - 1) & ~(alignment - 1);
  if (a->misalign) at += 8;
  if (bytes > ARENA_BYTES - at || a->live_count == ARENA_MAX_LIVE) {
    a->refused++;
    return NULL;
  }
  if (a->budget > 0) a->budget--;
  /* Garbage, not zeros: the library must zero what it hands out. */
  memset(arena_memory + at, 0xA5, bytes);
  a->used = at + bytes;
  a->allocs++;
  a->live_bytes += bytes;
  a->live[a->live_count++] = (arena_allocation){arena_memory + at, bytes, device};
  return arena_memory + at;
}

static TU_UNUSED void arena_free(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream) {
  arena* a = (arena*)ctx;
  (void)stream;
  a->frees++;
  for (long i = 0; i < a->live_count; i++) {
    arena_allocation* x = &a->live[i];
    if (x->ptr != ptr) continue;
    if (x->bytes != bytes || x->device.device_type != device.device_type || x->device.device_id != device.device_id)
      a->bad_frees++;
    a->live_bytes -= x->bytes;
    *x = a->live[--a->live_count];
    return;
  }
  a->bad_frees++;
}

static TU_UNUSED void arena_release(void* ctx) {
  arena* a = (arena*)ctx;
  a->releases++;
  a->live_at_release += a->live_count;
}

/* A fresh arena (all allocations granted) and an allocator over it. */
static TU_UNUSED kvc_allocator arena_start(arena* a) {
  memset(a, 0, sizeof *a);
  a->budget = -1;
  kvc_allocator al = KVC_ALLOCATOR_INIT;
  al.ctx = a;
  al.alloc = arena_alloc;
  al.free = arena_free;
  al.release = arena_release;
  return al;
}

/* Whether [p, p + bytes) lies inside the arena. */
static TU_UNUSED int arena_holds(const void* p, size_t bytes) {
  const unsigned char* c = (const unsigned char*)p;
  return c >= arena_memory && bytes <= ARENA_BYTES && c <= arena_memory + ARENA_BYTES - bytes;
}

/* Whether every element of the tensor `t` (any strides) lies inside the arena. */
static TU_UNUSED int arena_holds_tensor(const kvc_tensor* t) {
  size_t elem = (size_t)t->dtype.bits / 8u, last = 0, stride = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    size_t st = t->strides ? (size_t)t->strides[i] : stride;
    if (t->shape[i] == 0) return arena_holds((const unsigned char*)t->data + t->byte_offset, 0);
    last += (size_t)(t->shape[i] - 1) * st;
    stride *= (size_t)t->shape[i];
  }
  return arena_holds((const unsigned char*)t->data + t->byte_offset, (last + 1) * elem);
}

/* Checks that everything the library took from the arena came back, each free matching its allocation. */
static TU_UNUSED void arena_check_all_returned(const arena* a) {
  CHECK_EQ_I64(a->live_count, 0);
  CHECK_EQ_U64(a->live_bytes, 0);
  CHECK_EQ_I64(a->frees, a->allocs);
  CHECK_EQ_I64(a->bad_frees, 0);
  CHECK_EQ_I64(a->bad_alignment, 0);
}

#endif /* KVC_TESTS_ARENA_ALLOCATOR_H */
