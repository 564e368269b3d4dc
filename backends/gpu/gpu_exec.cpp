/*
 * backends/gpu/gpu_exec.cpp: places and the host tier of the GPU backend.
 *
 * A place (kvc_exec) runs on the caller's stream, the compute stream. Its
 * state adds a non-blocking side stream for prefetches and the events that
 * order the two: a prefetch waits for the work issued before it on the
 * compute stream; tier_wait makes the compute stream wait for the
 * prefetches. Offloads run on the compute stream itself, after the work
 * that wrote what they copy.
 *
 * The host tier is pinned host memory mapped into the device's address
 * space (one pointer for host and device: unified addressing), so kernels
 * work on offloaded layers in place. host_free never waits: a freed buffer
 * is parked with an event on each stream and released, or handed out again
 * by host_alloc_zeroed for the same size, once both have passed (pinned
 * allocations are slow; an offloading cache frees and allocates the same
 * sizes every step). Each buffer starts with a small header holding its
 * size, which host_free is not told.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

/* Bytes before the caller's pointer: the size, padded to keep the caller's pointer 256-byte aligned. */
#define KVC_GPU_HOST_HEADER 256
/* Idle pinned buffers kept for reuse per cache; older ones are released past this. */
#define KVC_GPU_IDLE_HOST_BLOCKS 64

static void destroy_state(gpu_state* st) {
  if (st->side) gpu_check(gpuStreamDestroy(st->side));
  if (st->to_side) gpu_check(gpuEventDestroy(st->to_side));
  if (st->to_compute) gpu_check(gpuEventDestroy(st->to_compute));
  if (st->handover) gpu_check(gpuEventDestroy(st->handover));
  free(st->freed);
  free(st);
}

int kvc_gpu_exec_open(void* ctx, kvc_exec* exec) {
  (void)ctx;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  /* A card the build left out fails here, at cache creation, with its architecture named, not at a launch. */
  if (kvc_gpu_check_image(exec->device_id)) return -1;
  gpu_state* st = (gpu_state*)calloc(1, sizeof(*st));
  if (!st) return -1;
  int pools = 0;
  if (gpuDeviceGetAttribute(&pools, gpuDevAttrMemoryPoolsSupported, exec->device_id) != gpuSuccess) {
    (void)gpuGetLastError();
    pools = 0;
  }
  st->pools = pools != 0;
  if (gpu_check(gpuStreamCreateNonBlocking(&st->side)) || gpu_check(gpuEventCreateNoTiming(&st->to_side)) ||
      gpu_check(gpuEventCreateNoTiming(&st->to_compute)) || gpu_check(gpuEventCreateNoTiming(&st->handover))) {
    destroy_state(st);
    return -1;
  }
  exec->state = st;
  return 0;
}

/* 1 when the block is idle: both events passed. Never asked during a capture (a query would invalidate it). */
static int events_passed(gpu_host_block* b) {
  if (b->captured) return 0;
  for (int i = 0; i < 2; i++) {
    if (!b->done[i]) continue;
    gpuError_t e = gpuEventQuery(b->done[i]);
    (void)gpuGetLastError();
    /* Only success means the streams passed: any error (an event recorded in a capture, a failed device) keeps the
       buffer parked, since work may still read it; exec_close releases it. */
    if (e != gpuSuccess) return 0;
    gpu_check(gpuEventDestroy(b->done[i]));
    b->done[i] = NULL;
  }
  return 1;
}

static void drop_block(gpu_state* st, size_t i) {
  memmove(&st->freed[i], &st->freed[i + 1], (st->nfreed - i - 1) * sizeof(*st->freed));
  st->nfreed--;
}

/* 1 while the place's compute stream is being captured into a graph: no event query or synchronisation then. */
static int capturing(const kvc_exec* exec) { return gpuStreamCapturing(gpu_stream_of(exec)); }

/* Marks parked buffers whose events passed idle, and releases the oldest idle ones past the limit. */
static void reap(gpu_state* st) {
  size_t idle = 0;
  for (size_t i = 0; i < st->nfreed; i++) idle += events_passed(&st->freed[i]);
  for (size_t i = 0; i < st->nfreed && idle > KVC_GPU_IDLE_HOST_BLOCKS;) {
    if (st->freed[i].done[0] || st->freed[i].done[1] || st->freed[i].captured) {
      i++;
      continue;
    }
    gpu_check(gpuFreeHost(st->freed[i].base));
    drop_block(st, i);
    idle--;
  }
}

void kvc_gpu_exec_close(void* ctx, kvc_exec* exec) {
  (void)ctx;
  gpu_state* st = gpu_state_of(exec);
  if (!st) return;
  gpu_device_scope scope(exec->device_id);
  for (size_t i = 0; i < st->nfreed; i++) {
    gpu_host_block* b = &st->freed[i];
    for (int k = 0; k < 2; k++)
      if (b->done[k]) {
        gpu_check(gpuEventSynchronize(b->done[k]));
        gpu_check(gpuEventDestroy(b->done[k]));
      }
    gpu_check(gpuFreeHost(b->base));
  }
  destroy_state(st);
  exec->state = NULL;
}

int kvc_gpu_exec_set_stream(void* ctx, kvc_exec* exec, void* stream) {
  (void)ctx;
  gpu_state* st = gpu_state_of(exec);
  if (!st) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  if (gpu_check(gpuEventRecord(st->handover, gpu_stream_of(exec))) ||
      gpu_check(gpuStreamWaitEvent((gpuStream_t)stream, st->handover)))
    return -1;
  exec->stream = stream;
  return 0;
}

/*
 * A pinned, mapped buffer of `bytes`: a parked one of the same size whose streams have passed it, else a new one.
 * During a capture no event is queried (only buffers already known idle are reused), and the allocation runs in
 * relaxed capture mode, where the runtime allows it.
 */
static void* host_block(const kvc_exec* exec, size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - KVC_GPU_HOST_HEADER) return NULL;
  gpu_state* st = gpu_state_of(exec);
  const int in_capture = capturing(exec);
  if (st) {
    if (!in_capture) reap(st);
    for (size_t i = 0; i < st->nfreed; i++) {
      gpu_host_block* b = &st->freed[i];
      if (b->bytes == bytes && !b->done[0] && !b->done[1] && !b->captured) {
        void* base = b->base;
        drop_block(st, i);
        return base;
      }
    }
  }
  void* base = NULL;
  gpuStreamCaptureMode mode = gpuStreamCaptureModeRelaxed;
  if (in_capture) (void)gpuThreadExchangeStreamCaptureMode(&mode);
  const int failed = gpu_check(gpuHostAllocMapped(&base, bytes + KVC_GPU_HOST_HEADER));
  if (in_capture) (void)gpuThreadExchangeStreamCaptureMode(&mode);
  if (failed) return NULL;
  memcpy(base, &bytes, sizeof bytes);
  return base;
}

void* kvc_gpu_host_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return NULL;
  void* base = host_block(exec, bytes);
  return base ? (char*)base + KVC_GPU_HOST_HEADER : NULL;
}

void* kvc_gpu_host_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return NULL;
  void* base = host_block(exec, bytes);
  if (!base) return NULL;
  char* p = (char*)base + KVC_GPU_HOST_HEADER;
  /* Zeroed in stream order, like device allocations: the host does not wait here (but the kernel writes every
     byte across the bus: an offload asks for host_alloc instead). */
  if (kvc_gpu_zero_on(gpu_stream_of(exec), p, bytes)) {
    gpu_check(gpuFreeHost(base));
    return NULL;
  }
  return p;
}

void kvc_gpu_host_free(void* ctx, const kvc_exec* exec, void* ptr) {
  (void)ctx;
  if (!ptr) return;
  gpu_device_scope scope(exec->device_id);
  void* base = (char*)ptr - KVC_GPU_HOST_HEADER;
  gpu_state* st = gpu_state_of(exec);
  if (st && scope.ok) {
    gpu_host_block b;
    memcpy(&b.bytes, base, sizeof b.bytes);
    b.base = base;
    b.done[0] = b.done[1] = NULL;
    b.captured = capturing(exec);
    int parked = 0;
    if (st->nfreed == st->cap_freed) {
      size_t cap = st->cap_freed ? 2 * st->cap_freed : 16;
      gpu_host_block* grown = (gpu_host_block*)realloc(st->freed, cap * sizeof(*grown));
      if (grown) {
        st->freed = grown;
        st->cap_freed = cap;
      }
    }
    if (st->nfreed < st->cap_freed && b.captured) { /* the graph's: no events, never reused */
      st->freed[st->nfreed++] = b;
      return;
    }
    if (st->nfreed < st->cap_freed && !gpu_check(gpuEventCreateNoTiming(&b.done[0])) &&
        !gpu_check(gpuEventCreateNoTiming(&b.done[1])) && !gpu_check(gpuEventRecord(b.done[0], gpu_stream_of(exec))) &&
        !gpu_check(gpuEventRecord(b.done[1], st->side))) {
      st->freed[st->nfreed++] = b;
      parked = 1;
    }
    if (parked) {
      reap(st);
      return;
    }
    for (int k = 0; k < 2; k++)
      if (b.done[k]) gpu_check(gpuEventDestroy(b.done[k]));
    /* Out of memory for the bookkeeping: wait for both streams instead, then release. */
    gpu_check(gpuStreamSynchronize(gpu_stream_of(exec)));
    gpu_check(gpuStreamSynchronize(st->side));
  }
  gpu_check(gpuFreeHost(base));
}

/*
 * The tier copy on the copy engines: one 2-D copy (rows = the (b, h)
 * planes, each one contiguous run) or one per batch entry. 1 when the copy
 * does not have that form (the caller runs a kernel), 0 done, -1 error.
 */
static int tier_memcpy(gpuStream_t stream, void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                       const int64_t shape[4], size_t elem) {
  if (shape[3] > 1 && (ds[3] != 1 || ss[3] != 1)) return 1;
  if (shape[2] > 1 && (ds[2] != shape[3] || ss[2] != shape[3])) return 1;
  const int64_t e = (int64_t)elem;
  const int64_t width = shape[2] * shape[3] * e;
  int64_t rows, dpitch, spitch, outer;
  if (shape[1] == 1) {
    rows = shape[0];
    dpitch = ds[0] * e;
    spitch = ss[0] * e;
    outer = 1;
  } else if (shape[0] == 1 || (ds[0] == shape[1] * ds[1] && ss[0] == shape[1] * ss[1])) {
    rows = shape[0] * shape[1];
    dpitch = ds[1] * e;
    spitch = ss[1] * e;
    outer = 1;
  } else {
    rows = shape[1];
    dpitch = ds[1] * e;
    spitch = ss[1] * e;
    outer = shape[0];
  }
  if (rows == 1) dpitch = spitch = width;
  if (dpitch < width || spitch < width || outer > 64) return 1;
  for (int64_t o = 0; o < outer; o++) {
    char* d = (char*)dst + o * ds[0] * e;
    const char* s = (const char*)src + o * ss[0] * e;
    if (gpu_check(gpuMemcpy2DAsync(d, (size_t)dpitch, s, (size_t)spitch, (size_t)width, (size_t)rows,
                                   gpuMemcpyDefault, stream)))
      return -1;
  }
  return 0;
}

int kvc_gpu_copy_tier_4d(void* ctx, const kvc_exec* exec, int to_host, void* dst, const int64_t ds[4],
                         const void* src, const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)ctx;
  if (!shape[0] || !shape[1] || !shape[2] || !shape[3]) return 0;
  gpu_state* st = gpu_state_of(exec);
  if (!st) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t on = gpu_stream_of(exec);
  /* A prefetch: beside the compute stream, after what was issued on it. Not while the compute stream is captured
     into a graph: the side stream would join the capture, and the capture could not end before the next update's
     tier_wait joined it back; in a graph the copy is one more node on the compute stream. */
  if (!to_host && !capturing(exec)) {
    if (gpu_check(gpuEventRecord(st->to_side, on)) || gpu_check(gpuStreamWaitEvent(st->side, st->to_side))) return -1;
    on = st->side;
    st->side_busy = 1;
  }
  int rc = tier_memcpy(on, dst, ds, src, ss, shape, elem);
  if (rc > 0) rc = kvc_gpu_copy_on(on, dst, ds, src, ss, shape, elem);
  return rc;
}

int kvc_gpu_tier_wait(void* ctx, const kvc_exec* exec) {
  (void)ctx;
  gpu_state* st = gpu_state_of(exec);
  if (!st) return -1;
  if (!st->side_busy) return 0;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  if (gpu_check(gpuEventRecord(st->to_compute, st->side)) ||
      gpu_check(gpuStreamWaitEvent(gpu_stream_of(exec), st->to_compute)))
    return -1;
  st->side_busy = 0;
  return 0;
}
