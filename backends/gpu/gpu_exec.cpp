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
 * work on offloaded layers in place. Pinning is slow and unpinning
 * (cudaFreeHost) waits for the whole device, so neither belongs in a step:
 * host_free never waits and never unpins; it parks the buffer with one
 * event recorded on the compute stream, and host_alloc hands a parked
 * buffer of the request's size class (gpu_host_class.h) out again once its
 * event has passed. Buffers are unpinned by exec_close, by a pinned
 * allocation that fails (the idle ones, then it retries once), and past
 * KVC_GPU_HOST_KEEP_BYTES of idle buffers (the oldest idle ones: a cache
 * whose pinned footprint shrank by that much). Each buffer starts with a
 * small header holding its capacity and its event.
 *
 * While the compute stream is captured into a graph nothing is queried,
 * waited for or unpinned (each would invalidate the capture): a buffer
 * given back then belongs to the graph, whose replays may read it, and is
 * released only by exec_close; a new buffer is pinned in relaxed capture
 * mode; prefetches stay on the compute stream.
 *
 * The stream-ordered allocator's pool keeps up to KVC_GPU_POOL_KEEP_BYTES of
 * freed device memory instead of returning it to the driver at every
 * synchronisation (its release threshold is 0 by default, which makes each
 * step's scratch allocations map fresh memory); the last place of a device
 * to close trims the pool.
 */
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "gpu_host_class.h"
#include "gpu_internal.h"

/* Bytes before the caller's pointer: the header, padded to keep the caller's pointer 256-byte aligned. */
#define KVC_GPU_HOST_HEADER 256
/* Idle pinned bytes kept for reuse per cache; the oldest idle buffers are released past this. */
#define KVC_GPU_HOST_KEEP_BYTES ((size_t)1 << 30)
/* Freed device bytes the stream-ordered pool keeps (its release threshold, raised to this where lower). */
#define KVC_GPU_POOL_KEEP_BYTES ((uint64_t)1 << 30)
/* Devices whose open places are counted (the pool is trimmed when the last one closes); others never trim. */
#define KVC_GPU_COUNTED_DEVICES 64

/* What a pinned buffer's first bytes hold. */
typedef struct host_header {
  size_t capacity;
  gpuEvent_t done;
} host_header;
static_assert(sizeof(host_header) <= KVC_GPU_HOST_HEADER, "the header fits before the caller's pointer");

static std::atomic<int> open_places[KVC_GPU_COUNTED_DEVICES];

/* Raises the device pool's release threshold to KVC_GPU_POOL_KEEP_BYTES (never lowers one the caller set). */
static void keep_pool_memory(int device) {
  gpuMemPool_t pool;
  uint64_t threshold = 0;
  if (gpuDeviceGetMemPool(&pool, device) == gpuSuccess &&
      gpuMemPoolGetAttribute(pool, gpuMemPoolAttrReleaseThreshold, &threshold) == gpuSuccess &&
      threshold < KVC_GPU_POOL_KEEP_BYTES) {
    threshold = KVC_GPU_POOL_KEEP_BYTES;
    (void)gpuMemPoolSetAttribute(pool, gpuMemPoolAttrReleaseThreshold, &threshold);
  }
  (void)gpuGetLastError(); /* a pool that keeps nothing is slower, not wrong */
}

/* The last place of `device` closed: the pool gives what it keeps back to the driver. */
static void trim_pool(int device) {
  gpuMemPool_t pool;
  if (gpuDeviceGetMemPool(&pool, device) == gpuSuccess) (void)gpuMemPoolTrimTo(pool, 0);
  (void)gpuGetLastError();
}

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
  if (st->pools) keep_pool_memory(exec->device_id);
  if (gpu_check(gpuStreamCreateNonBlocking(&st->side)) || gpu_check(gpuEventCreateNoTiming(&st->to_side)) ||
      gpu_check(gpuEventCreateNoTiming(&st->to_compute)) || gpu_check(gpuEventCreateNoTiming(&st->handover))) {
    destroy_state(st);
    return -1;
  }
  exec->state = st;
  if (exec->device_id >= 0 && exec->device_id < KVC_GPU_COUNTED_DEVICES) open_places[exec->device_id]++;
  return 0;
}

/* Unpins a buffer (which waits for the device) after its event, if any, has passed. */
static void release_block(const gpu_host_block* b) {
  if (b->done) {
    gpu_check(gpuEventSynchronize(b->done));
    gpu_check(gpuEventDestroy(b->done));
  }
  gpu_check(gpuFreeHost(b->base));
}

/* 1 when the streams have passed everything issued before the buffer was given back. A query error is not
   "passed": the buffer stays parked (exec_close releases it), never reused on a guess. */
static int block_passed(const gpu_host_block* b) {
  if (b->captured) return 0;
  if (!b->done) return 1;
  const gpuError_t e = gpuEventQuery(b->done);
  if (e == gpuSuccess) return 1;
  (void)gpuGetLastError();
  return 0;
}

static void drop_block(gpu_state* st, size_t i) {
  st->freed_bytes -= st->freed[i].bytes;
  memmove(&st->freed[i], &st->freed[i + 1], (st->nfreed - i - 1) * sizeof(*st->freed));
  st->nfreed--;
}

/* Releases the oldest parked buffers that have passed while more than `keep` bytes are parked; 1 if any was. */
static int release_idle(gpu_state* st, size_t keep) {
  int released = 0;
  for (size_t i = 0; i < st->nfreed && st->freed_bytes > keep;) {
    if (!block_passed(&st->freed[i])) {
      i++;
      continue;
    }
    release_block(&st->freed[i]);
    drop_block(st, i);
    released = 1;
  }
  return released;
}

void kvc_gpu_exec_close(void* ctx, kvc_exec* exec) {
  (void)ctx;
  gpu_state* st = gpu_state_of(exec);
  if (!st) return;
  gpu_device_scope scope(exec->device_id);
  for (size_t i = 0; i < st->nfreed; i++) release_block(&st->freed[i]);
  const int pools = st->pools;
  destroy_state(st);
  exec->state = NULL;
  if (exec->device_id >= 0 && exec->device_id < KVC_GPU_COUNTED_DEVICES && --open_places[exec->device_id] == 0 &&
      scope.ok && pools)
    trim_pool(exec->device_id);
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

/* 1 while the place's compute stream is being captured into a graph: no event query, synchronisation or unpinning
   then (each would invalidate the capture). */
static int capturing(const kvc_exec* exec) { return gpuStreamCapturing(gpu_stream_of(exec)); }

/* Pins a new mapped buffer; during a capture in relaxed capture mode, where the runtime allows the allocation. */
static gpuError_t pin_new(void** base, size_t bytes, int in_capture) {
  gpuStreamCaptureMode mode = gpuStreamCaptureModeRelaxed;
  if (in_capture) (void)gpuThreadExchangeStreamCaptureMode(&mode);
  const gpuError_t e = gpuHostAllocMapped(base, bytes);
  if (in_capture) (void)gpuThreadExchangeStreamCaptureMode(&mode);
  return e;
}

/*
 * A pinned, mapped buffer for `bytes`: a parked one of its class whose event has passed, else a new one. During a
 * capture no event is queried and nothing is unpinned: a new buffer, pinned in relaxed capture mode.
 */
static void* host_block(const kvc_exec* exec, size_t bytes) {
  const size_t cap = kvc_gpu_host_class(bytes);
  if (bytes == 0 || cap == 0 || cap > SIZE_MAX - KVC_GPU_HOST_HEADER) return NULL;
  gpu_state* st = gpu_state_of(exec);
  const int in_capture = capturing(exec);
  if (st && !in_capture) {
    for (size_t i = 0; i < st->nfreed; i++) {
      gpu_host_block* b = &st->freed[i];
      if (b->bytes == cap && block_passed(b)) {
        void* base = b->base;
        drop_block(st, i);
        return base;
      }
    }
  }
  void* base = NULL;
  gpuError_t e = pin_new(&base, cap + KVC_GPU_HOST_HEADER, in_capture);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    /* Pinned memory ran out: what this cache keeps idle goes back first, then one more try. */
    if (st && !in_capture && release_idle(st, 0)) e = pin_new(&base, cap + KVC_GPU_HOST_HEADER, 0);
    if (gpu_check(e)) return NULL;
  }
  const host_header h = {cap, NULL};
  memcpy(base, &h, sizeof h);
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
  void* p = kvc_gpu_host_alloc(ctx, exec, bytes);
  if (!p) return NULL;
  gpu_device_scope scope(exec->device_id);
  /* Zeroed in stream order, like device allocations: the host does not wait here (but the kernel writes every
     byte across the bus: an offload asks for host_alloc instead). */
  if (kvc_gpu_zero_on(gpu_stream_of(exec), p, bytes)) {
    kvc_gpu_host_free(ctx, exec, p); /* parked: nothing was issued that reads it */
    return NULL;
  }
  return p;
}

/* Parks a buffer with its event recorded after everything issued so far that may use it; 0, or -1 (not parked). */
static int park(void* ctx, const kvc_exec* exec, gpu_state* st, void* base, host_header* h) {
  gpu_host_block b = {base, h->capacity, h->done, 0};
  if (st->nfreed == st->cap_freed) {
    const size_t cap = st->cap_freed ? 2 * st->cap_freed : 16;
    gpu_host_block* grown = (gpu_host_block*)realloc(st->freed, cap * sizeof(*grown));
    if (!grown) return -1;
    st->freed = grown;
    st->cap_freed = cap;
  }
  gpuStream_t stream = gpu_stream_of(exec);
  if (capturing(exec)) {
    b.captured = 1; /* a replay of the graph may read it at any later time */
  } else {
    /* A prefetch may still read it on the side stream: the compute stream waits for the side stream first (as
       device frees do), so that one event on the compute stream covers both. */
    if (st->side_busy && kvc_gpu_tier_wait(ctx, exec)) return -1;
    if (!b.done && gpu_check(gpuEventCreateNoTiming(&b.done))) return -1;
    h->done = b.done;
    memcpy(base, h, sizeof *h);
    if (gpu_check(gpuEventRecord(b.done, stream))) return -1;
  }
  st->freed[st->nfreed++] = b;
  st->freed_bytes += b.bytes;
  return 0;
}

void kvc_gpu_host_free(void* ctx, const kvc_exec* exec, void* ptr) {
  if (!ptr) return;
  gpu_device_scope scope(exec->device_id);
  void* base = (char*)ptr - KVC_GPU_HOST_HEADER;
  host_header h;
  memcpy(&h, base, sizeof h);
  gpu_state* st = gpu_state_of(exec);
  if (st && scope.ok) {
    if (!park(ctx, exec, st, base, &h)) {
      if (st->freed_bytes > KVC_GPU_HOST_KEEP_BYTES && !capturing(exec)) release_idle(st, KVC_GPU_HOST_KEEP_BYTES);
      return;
    }
    /* Out of memory for the bookkeeping, or the event failed: wait for both streams instead, then release. */
    gpu_check(gpuStreamSynchronize(gpu_stream_of(exec)));
    gpu_check(gpuStreamSynchronize(st->side));
  }
  const gpu_host_block b = {base, h.capacity, h.done, 0};
  release_block(&b);
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
