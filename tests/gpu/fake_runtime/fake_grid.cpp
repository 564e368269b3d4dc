/*
 * tests/gpu/fake_runtime/fake_grid.cpp: a kernel's grid run on the host.
 *
 * Blocks run one after another, last to first (a GPU promises no order, so a
 * result that depended on one would show). A block's threads run in one
 * fiber, one after another, until a thread calls __syncthreads: that thread
 * waits there (its fiber parked) and the next thread starts in a new fiber;
 * once every thread of the block has reached the barrier or returned, the
 * parked threads go on in turn to the next barrier. So a kernel without
 * barriers costs one fiber switch per block, and one with barriers gets
 * CUDA's semantics: no thread passes a barrier before all have reached it.
 *
 * Fibers are ucontext stacks of our own, announced to AddressSanitizer
 * (__sanitizer_start_switch_fiber) so that it follows the switches.
 * A fiber's stack is reused for later blocks, fresh each time (makecontext).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <vector>

#include "fake_cuda_runtime.h"
#include "fake_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KVC_FAKE_ASAN 1
#else
#define KVC_FAKE_ASAN 0
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local uint3 blockDim;
thread_local uint3 gridDim;

namespace {

/* A simulated thread's frames are a few kernel functions deep (larger under ASan); mapped lazily. */
constexpr size_t kStackBytes = 128 * 1024;

struct fiber {
  ucontext_t ctx;
  void* stack = nullptr;
  uint3 tid = {0, 0, 0};
  bool waiting = false; /* parked at a barrier */
  bool done = false;
  void* asan_fake_stack = nullptr;
};

struct block_run {
  const std::function<void()>* body;
  uint32_t nthreads;
  uint32_t next; /* the next thread to start */
  uint3 dim;
  ucontext_t sched;
  fiber* current;
  const void* sched_bottom;
  size_t sched_size;
  void* sched_fake_stack;
};

thread_local block_run* running;

/* The launching thread's idle fibers, unmapped when the thread ends. */
struct fiber_pool {
  std::vector<fiber*> idle;
  ~fiber_pool() {
    for (fiber* f : idle) {
      munmap(f->stack, kStackBytes);
      delete f;
    }
  }
};
thread_local fiber_pool pool;

uint3 thread_index(uint32_t t, uint3 dim) {
  uint3 i;
  i.x = t % dim.x;
  i.y = t / dim.x % dim.y;
  i.z = t / (dim.x * dim.y);
  return i;
}

/* Scheduler -> fiber, and back when the fiber parks or finishes. */
void switch_to(block_run* r, fiber* f) {
  r->current = f;
#if KVC_FAKE_ASAN
  __sanitizer_start_switch_fiber(&r->sched_fake_stack, f->stack, kStackBytes);
#endif
  if (swapcontext(&r->sched, &f->ctx) != 0) abort();
#if KVC_FAKE_ASAN
  __sanitizer_finish_switch_fiber(r->sched_fake_stack, nullptr, nullptr);
#endif
}

/*
 * Fiber -> scheduler; returns when the scheduler resumes this fiber. A finished fiber keeps its ASan fake stack
 * for its next thread (the pool reuses fibers): one per fiber, not one per block.
 */
void back_to_scheduler(block_run* r, fiber* me) {
#if KVC_FAKE_ASAN
  __sanitizer_start_switch_fiber(&me->asan_fake_stack, r->sched_bottom, r->sched_size);
#endif
  if (swapcontext(&me->ctx, &r->sched) != 0) abort();
#if KVC_FAKE_ASAN
  __sanitizer_finish_switch_fiber(me->asan_fake_stack, &r->sched_bottom, &r->sched_size);
#endif
}

void fiber_main() {
  block_run* r = running;
  fiber* me = r->current;
#if KVC_FAKE_ASAN
  __sanitizer_finish_switch_fiber(me->asan_fake_stack, &r->sched_bottom, &r->sched_size);
#endif
  while (r->next < r->nthreads) {
    me->tid = thread_index(r->next++, r->dim);
    threadIdx = me->tid;
    (*r->body)();
  }
  me->done = true;
  back_to_scheduler(r, me);
  abort(); /* a finished fiber is never resumed */
}

fiber* fresh_fiber() {
  fiber* f;
  if (!pool.idle.empty()) {
    f = pool.idle.back();
    pool.idle.pop_back();
  } else {
    f = new fiber();
    f->stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->stack == MAP_FAILED) {
      fprintf(stderr, "kvc fake gpu: cannot map a fiber stack\n");
      abort();
    }
  }
#if KVC_FAKE_ASAN
  __asan_unpoison_memory_region(f->stack, kStackBytes); /* frames a parked fiber left behind */
#endif
  f->waiting = f->done = false;
  if (getcontext(&f->ctx) != 0) abort();
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = kStackBytes;
  f->ctx.uc_link = nullptr;
  makecontext(&f->ctx, fiber_main, 0);
  return f;
}

void run_block(block_run* r) {
  std::vector<fiber*> started;
  while (r->next < r->nthreads) {
    fiber* f = fresh_fiber();
    started.push_back(f);
    switch_to(r, f);
  }
  /* Every thread has started; the ones not done wait at a barrier: release it until all are done. */
  for (;;) {
    std::vector<fiber*> parked;
    for (fiber* f : started)
      if (!f->done && f->waiting) parked.push_back(f);
    if (parked.empty()) break;
    for (fiber* f : parked) {
      f->waiting = false;
      switch_to(r, f);
    }
  }
  for (fiber* f : started) pool.idle.push_back(f);
}

} /* namespace */

void __syncthreads() {
  block_run* r = running;
  fiber* me = r->current;
  const uint3 mine = threadIdx;
  me->waiting = true;
  back_to_scheduler(r, me);
  threadIdx = mine;
}

namespace kvc_fake {

void run_grid(dim3 grid, dim3 block, const std::function<void()>& thread) {
  block_run r;
  r.body = &thread;
  r.nthreads = block.x * block.y * block.z;
  r.dim = {block.x, block.y, block.z};
  blockDim = r.dim;
  gridDim = {grid.x, grid.y, grid.z};
  block_run* outer = running;
  running = &r;
  const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
  for (uint64_t b = blocks; b-- > 0;) {
    blockIdx = {(uint32_t)(b % grid.x), (uint32_t)(b / grid.x % grid.y), (uint32_t)(b / ((uint64_t)grid.x * grid.y))};
    r.next = 0;
    run_block(&r);
  }
  running = outer;
}

} /* namespace kvc_fake */
