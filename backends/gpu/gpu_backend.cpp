/*
 * backends/gpu/gpu_backend.cpp: the backend table of core/backend.h on a
 * GPU, compiled as CUDA by nvcc (libkvcache-cuda.so) and as HIP by hipcc
 * (libkvcache-hip.so) from this one source through gpu_vendor.h.
 *
 * Every entry makes the place's device current for its duration and issues
 * its work on the place's stream without waiting for it. Runtime errors
 * become a non-zero return (or NULL); nothing here aborts or prints.
 *
 * Launches: copy_4d, fill_zero_4d: one kernel. copy_4d_batch: one kernel
 * for up to KVC_GPU_BATCH_CAP copies (CUDA: 292, so a step of up to 146
 * layers' K and V is one launch; HIP: 31, a 32-layer step is 3 launches).
 * copy_rows: one kernel per KVC_GPU_ROWS_CAP rows (CUDA: 4078, HIP: 431).
 * copy_rows_batch: one kernel for every job and row, by value or staged
 * (see its section below).
 * Copies that overlap themselves: the memmove kernel for a seq shift (the
 * window roll), else two copies through a stream-ordered scratch buffer.
 * Every launch's plan, and so its unit size, comes from gpu_plan.c, which
 * sees every address the kernel will form (copy_rows: kvc_gpu_plan_rows);
 * the emulated test device checks those plans with gpu_plan_walk.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_plan.h"
#include "gpu_probe.h"
#include "kernels_batch.cuh"
#include "kernels_copy.cuh"
#include "kernels_fill.cuh"
#include "kernels_rows.cuh"

/*
 * Bytes of kernel parameters one launch may take. CUDA 12.1 and newer allow
 * 32764 on Volta and later (every target built here). HIP 5.2 is held to
 * CUDA's classic 4 KiB, less room for the hidden arguments its runtime
 * appends to the kernel's own.
 */
#if defined(__HIPCC__)
#define KVC_GPU_PARAM_BYTES 3584
#else
#define KVC_GPU_PARAM_BYTES 32764
#endif
#define KVC_GPU_BATCH_CAP ((KVC_GPU_PARAM_BYTES - 8) / (int)sizeof(kvc_gpu_copy))
#define KVC_GPU_ROWS_CAP ((KVC_GPU_PARAM_BYTES - (int)sizeof(kvc_gpu_rows) - 8) / 8)
/* Blocks per launch: grids stride beyond it (HIP counts gridDim x blockDim in 32 bits). */
#define KVC_GPU_MAX_GRID (1u << 20)

static_assert(sizeof(kvc_gpu_copy) == 112, "kvc_gpu_copy is the batched kernel's descriptor: keep it compact");
static_assert(sizeof(gpu_batch_params<KVC_GPU_BATCH_CAP>) <= KVC_GPU_PARAM_BYTES, "batch parameters too large");
static_assert(sizeof(gpu_rows_params<KVC_GPU_ROWS_CAP>) <= KVC_GPU_PARAM_BYTES, "rows parameters too large");

static unsigned grid_for(uint32_t blocks) { return blocks < KVC_GPU_MAX_GRID ? blocks : KVC_GPU_MAX_GRID; }

static int any_empty(const int64_t shape[4]) { return !shape[0] || !shape[1] || !shape[2] || !shape[3]; }

/* ---- launches -------------------------------------------------------------- */

/* Launches plans[0, count) (first_block set, `blocks` in all) with the smallest parameter block that holds them. */
template <int N, bool FILL>
static int launch_batch_n(gpuStream_t stream, const kvc_gpu_copy* plans, int32_t count, uint32_t blocks) {
  gpu_batch_params<N> p;
  p.count = count;
  p.blocks = blocks;
  memcpy(p.plans, plans, sizeof(kvc_gpu_copy) * (size_t)count);
  KVC_GPU_LAUNCH(grid_for(blocks), KVC_GPU_BLOCK, stream, gpu_batch_kernel<N, FILL>)(p);
  return gpu_check_launch("gpu_batch_kernel launch");
}

/*
 * A launch copies its whole parameter block, used or not, so the block is sized to the count: a 32-layer
 * decode step (64 copies) takes 7 KiB instead of the 32 KiB of KVC_GPU_BATCH_CAP plans (and the host
 * fills a smaller struct). Where the cap is below 64 (HIP), the step block is the cap's.
 */
static constexpr int kvc_gpu_batch_step = KVC_GPU_BATCH_CAP > 64 ? 64 : KVC_GPU_BATCH_CAP;
static int launch_batch(gpuStream_t stream, const kvc_gpu_copy* plans, int32_t count, uint32_t blocks) {
  if (count == 0 || blocks == 0) return 0;
  if (count == 1) return launch_batch_n<1, false>(stream, plans, count, blocks);
  if (count <= 8) return launch_batch_n<8, false>(stream, plans, count, blocks);
  if (count <= kvc_gpu_batch_step) return launch_batch_n<kvc_gpu_batch_step, false>(stream, plans, count, blocks);
  return launch_batch_n<KVC_GPU_BATCH_CAP, false>(stream, plans, count, blocks);
}

int kvc_gpu_copy_on(gpuStream_t stream, void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                    const int64_t shape[4], size_t elem) {
  kvc_gpu_copy plan;
  int rc = kvc_gpu_plan(&plan, dst, ds, src, ss, shape, elem, 0);
  if (rc) return rc > 0 ? 0 : -1;
  return launch_batch(stream, &plan, 1, kvc_gpu_plan_blocks(&plan));
}

static int launch_fill(gpuStream_t stream, const kvc_gpu_copy& plan) {
  return launch_batch_n<1, true>(stream, &plan, 1, kvc_gpu_plan_blocks(&plan));
}

static int zero_strided_on(gpuStream_t stream, void* dst, const int64_t st[4], const int64_t shape[4], size_t elem) {
  kvc_gpu_copy plan;
  int rc = kvc_gpu_plan(&plan, dst, st, NULL, NULL, shape, elem, 0);
  if (rc) return rc > 0 ? 0 : -1;
  return launch_fill(stream, plan);
}

int kvc_gpu_zero_on(gpuStream_t stream, void* dst, size_t bytes) {
  kvc_gpu_copy plans[2];
  int n = kvc_gpu_plan_zero_bytes(plans, dst, bytes);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++)
    if (launch_fill(stream, plans[i])) return -1;
  return 0;
}

/* A seq-axis move within each (b, h) plane of one buffer: memmove semantics (kernels_copy.cuh). */
static int launch_move(gpuStream_t stream, const kvc_gpu_copy& plan, int64_t shift) {
  int32_t chunk_rows;
  int staged;
  kvc_gpu_move_chunking(&plan, shift, &chunk_rows, &staged);
  int64_t planes = (int64_t)plan.n[0] * plan.n[1];
  unsigned grid = planes < (int64_t)KVC_GPU_MAX_GRID ? (unsigned)planes : KVC_GPU_MAX_GRID;
  KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_move_kernel)(plan, shift, chunk_rows, staged);
  return gpu_check_launch("gpu_move_kernel launch");
}

/* Any other overlapping copy: through a compact scratch buffer, freed in stream order. */
static int copy_via_scratch(const gpu_state* state, gpuStream_t stream, void* dst, const int64_t ds[4],
                            const void* src, const int64_t ss[4], const int64_t shape[4], size_t elem) {
  size_t bytes = elem;
  for (int i = 0; i < 4; i++) bytes *= (size_t)shape[i];
  void* tmp = NULL;
  if (gpu_check(state && state->pools ? gpuMallocAsync(&tmp, bytes, stream) : gpuMalloc(&tmp, bytes))) return -1;
  const int64_t ts[4] = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
  int rc = kvc_gpu_copy_on(stream, tmp, ts, src, ss, shape, elem);
  if (!rc) rc = kvc_gpu_copy_on(stream, dst, ds, tmp, ts, shape, elem);
  gpu_check(state && state->pools ? gpuFreeAsync(tmp, stream) : gpuFree(tmp));
  return rc;
}

/* ---- the table's entries ---------------------------------------------------- */

/*
 * No driver, no device, a driver older than the runtime: 0 devices, never a crash, and last_error says which
 * (gpu_probe.h), so that the core's "found no device" names the driver to install.
 */
static int gpu_device_count(void* ctx) {
  (void)ctx;
  int n = 0;
  gpuError_t e = gpuGetDeviceCount(&n);
  (void)gpuGetLastError();
  if (e == gpuSuccess && n > 0) return n;
  kvc_gpu_probe probe = {KVC_GPU_VENDOR, KVC_GPU_PROBE_NO_DEVICE, 0, KVC_GPU_RUNTIME_VERSION, NULL, NULL};
  if (e != gpuSuccess) {
    probe.error_name = gpuGetErrorName(e);
    probe.error_text = gpuGetErrorString(e);
    if (e == gpuErrorInsufficientDriver) {
      probe.status = KVC_GPU_PROBE_OLD_DRIVER;
      if (gpuDriverGetVersion(&probe.driver_version) != gpuSuccess) probe.driver_version = 0; /* no driver at all */
      (void)gpuGetLastError();
    } else if (e != gpuErrorNoDevice) {
      probe.status = KVC_GPU_PROBE_FAILED;
    }
  }
  char why[400];
  kvc_gpu_probe_why(why, sizeof why, &probe);
  kvc_gpu_note_text(why);
  return 0;
}

/* The architectures the plugin was compiled for (CMake passes them), for the no-image message. */
#ifndef KVC_GPU_TARGETS
#define KVC_GPU_TARGETS "unknown targets"
#endif

int kvc_gpu_check_image(int device) {
  gpuFuncAttributes attr;
  gpuError_t e = gpuFuncGetAttributes(&attr, (const void*)gpu_move_kernel);
  (void)gpuGetLastError();
  if (e == gpuSuccess) return 0;
  if (e != gpuErrorNoKernelImage && e != gpuErrorInvalidDeviceFunction) {
    kvc_gpu_note_error(e);
    return -1;
  }
  gpuDeviceProp prop;
  char arch[64] = "unknown";
  const char* name = NULL;
  if (gpuGetDeviceProperties(&prop, device) == gpuSuccess) {
#if defined(__HIPCC__)
    snprintf(arch, sizeof arch, "%s", prop.gcnArchName);
#else
    snprintf(arch, sizeof arch, "%d.%d", prop.major, prop.minor);
#endif
    name = prop.name;
  }
  (void)gpuGetLastError();
  char why[512];
  kvc_gpu_no_image_why(why, sizeof why, KVC_GPU_VENDOR, device, name, arch, KVC_GPU_TARGETS, gpuGetErrorName(e),
                       gpuGetErrorString(e));
  kvc_gpu_note_text(why);
  return -1;
}

/* Version 9: a store the core writes in full before it is read (a restore's or load's). */
static void* gpu_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok || bytes == 0) return NULL;
  const gpu_state* state = gpu_state_of(exec);
  void* p = NULL;
  if (gpu_check(state && state->pools ? gpuMallocAsync(&p, bytes, gpu_stream_of(exec)) : gpuMalloc(&p, bytes)))
    return NULL;
  return p;
}

static void* gpu_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  gpu_device_scope scope(exec->device_id);
  void* p = scope.ok ? gpu_alloc(ctx, exec, bytes) : NULL;
  if (!p) return NULL;
  const gpu_state* state = gpu_state_of(exec);
  gpuStream_t stream = gpu_stream_of(exec);
  if (gpu_check(gpuMemsetAsync(p, 0, bytes, stream))) {
    gpu_check(state && state->pools ? gpuFreeAsync(p, stream) : gpuFree(p));
    return NULL;
  }
  return p;
}

static void gpu_free(void* ctx, const kvc_exec* exec, void* ptr) {
  (void)ctx;
  if (!ptr) return;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return;
  const gpu_state* state = gpu_state_of(exec);
  /* A prefetch still writing into the buffer runs on the side stream: the free waits for it too. */
  if (state && kvc_gpu_tier_wait(ctx, exec)) return;
  /* Without the stream-ordered allocator (an old HIP runtime) the plain free waits for the device. */
  gpu_check(state && state->pools ? gpuFreeAsync(ptr, gpu_stream_of(exec)) : gpuFree(ptr));
}

static int gpu_copy_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                       const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)ctx;
  if (any_empty(shape)) return 0;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t stream = gpu_stream_of(exec);
  kvc_gpu_copy move;
  int64_t shift = 0;
  switch (kvc_gpu_copy_route(dst, ds, src, ss, shape, elem, &move, &shift)) {
    case KVC_GPU_ROUTE_NONE:
      return 0;
    case KVC_GPU_ROUTE_COPY:
      return kvc_gpu_copy_on(stream, dst, ds, src, ss, shape, elem);
    case KVC_GPU_ROUTE_MOVE:
      return launch_move(stream, move, shift);
    case KVC_GPU_ROUTE_SCRATCH:
      break;
  }
  return copy_via_scratch(gpu_state_of(exec), stream, dst, ds, src, ss, shape, elem);
}

static int gpu_fill_zero_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t st[4], const int64_t shape[4],
                            size_t elem) {
  (void)ctx;
  if (any_empty(shape)) return 0;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  return zero_strided_on(gpu_stream_of(exec), dst, st, shape, elem);
}

template <int N>
static int launch_rows_n(gpuStream_t stream, const kvc_gpu_rows& rows, const int64_t* dst_rows,
                         const int64_t* src_rows, int32_t count) {
  gpu_rows_params<N> p;
  p.rows = rows;
  p.count = count;
  for (int32_t i = 0; i < count; i++) {
    if (dst_rows[i] < 0 || dst_rows[i] > INT32_MAX || src_rows[i] < 0 || src_rows[i] > INT32_MAX) {
      char why[160];
      snprintf(why, sizeof why, "copy_rows: row pair (%lld, %lld) is outside 0..INT32_MAX, the kernel's row indices",
               (long long)dst_rows[i], (long long)src_rows[i]);
      kvc_gpu_note_text(why);
      return -1;
    }
    p.pairs[i][0] = (int32_t)dst_rows[i];
    p.pairs[i][1] = (int32_t)src_rows[i];
  }
  dim3 grid(grid_for(kvc_gpu_plan_blocks(&rows.plan)), (unsigned)count);
  KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_rows_kernel<N>)(p);
  return gpu_check_launch("gpu_rows_kernel launch");
}

static int gpu_copy_rows(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const int64_t* dst_rows,
                         const void* src, const int64_t ss[4], const int64_t* src_rows, int64_t count,
                         const int64_t row_shape[4], size_t elem) {
  (void)ctx;
  if (count < 0) return -1;
  const int64_t shape[4] = {1, row_shape[1], row_shape[2], row_shape[3]};
  if (count == 0 || any_empty(shape)) return 0;
  if (!dst_rows || !src_rows) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  /* The unit divides the batch-row strides too: each pair adds row x stride to every address. */
  kvc_gpu_rows rows;
  int rc = kvc_gpu_plan_rows(&rows, dst, ds, src, ss, row_shape, elem);
  if (rc) return rc > 0 ? 0 : -1;
  gpuStream_t stream = gpu_stream_of(exec);
  for (int64_t done = 0; done < count;) {
    int64_t left = count - done;
    int32_t n = left < KVC_GPU_ROWS_CAP ? (int32_t)left : KVC_GPU_ROWS_CAP;
    rc = n <= 16 ? launch_rows_n<16>(stream, rows, dst_rows + done, src_rows + done, n)
                 : launch_rows_n<KVC_GPU_ROWS_CAP>(stream, rows, dst_rows + done, src_rows + done, n);
    if (rc) return rc;
    done += n;
  }
  return 0;
}

/* ---- copy_rows_batch (version 6) ---------------------------------------------------- */

/*
 * The batch's planned form (gpu_plan.h, kvc_gpu_rows_batch: the jobs, then
 * their index lists as int32) is what the kernel reads. The descriptors and
 * index arrays the caller passes are host memory it may reuse as soon as
 * the call returns, so the kernel never reads them there:
 *  - a planned batch that fits one launch's parameters travels by value:
 *    nothing allocated, nothing kept alive. Jobs that share their index
 *    arrays (the K and V of every layer of a group share the slot mapping)
 *    share one copy, so on CUDA a decode step of 2 x 80 layers x 256 tokens
 *    (~26 KiB) is one launch by value;
 *  - a larger one (prefills, thousands of tokens; on HIP most batches) is
 *    staged: packed into a pinned host buffer, copied on the stream into a
 *    stream-ordered device buffer, and read from there by the one launch.
 *    Pinned, because a copy from pageable memory may make the host wait for
 *    the stream while the runtime stages it, and a serving loop's host runs
 *    ahead of its device; host_free parks the pinned buffer until the stream
 *    has passed the copy, and hands it out again for a later batch of the
 *    same size class (powers of two, so steps of varying sizes reuse it);
 *  - while the stream is captured into a graph (a staged copy would be read
 *    at every replay, from a buffer reused long before), or when staging
 *    fails, by value in as many launches as the parameters need.
 */
#define KVC_GPU_ROWS_BATCH_BYTES ((KVC_GPU_PARAM_BYTES - 8) / 8 * 8)
/* The smaller by-value launch: a short step's batch does not copy a full 32 KiB parameter block. */
#define KVC_GPU_ROWS_BATCH_SMALL (KVC_GPU_ROWS_BATCH_BYTES < 4096 ? KVC_GPU_ROWS_BATCH_BYTES : 4096)
/* Pinned staging buffers come in sizes 2^k from 64 KiB. */
#define KVC_GPU_ROWS_STAGE_MIN ((size_t)1 << 16)

static_assert(sizeof(kvc_gpu_rows_job) == 152, "kvc_gpu_rows_job is the rows batch kernel's descriptor: keep it compact");
static_assert(sizeof(gpu_rows_batch_params<KVC_GPU_ROWS_BATCH_BYTES>) <= KVC_GPU_PARAM_BYTES,
              "rows batch parameters too large");

template <int BYTES>
static int launch_rows_batch_inline_n(gpuStream_t stream, const kvc_gpu_rows_batch& b) {
  gpu_rows_batch_params<BYTES> p;
  p.njobs = b.njobs;
  p.blocks = b.blocks;
  memcpy(p.area, b.area, b.bytes);
  KVC_GPU_LAUNCH(grid_for(b.blocks), KVC_GPU_BLOCK, stream, gpu_rows_batch_inline_kernel<BYTES>)(p);
  return gpu_check_launch("gpu_rows_batch_inline_kernel launch");
}

static int launch_rows_batch_inline(gpuStream_t stream, const kvc_gpu_rows_batch& b) {
  if (b.bytes <= KVC_GPU_ROWS_BATCH_SMALL) return launch_rows_batch_inline_n<KVC_GPU_ROWS_BATCH_SMALL>(stream, b);
  return launch_rows_batch_inline_n<KVC_GPU_ROWS_BATCH_BYTES>(stream, b);
}

/* The staged launch; -1 before anything was issued when a buffer cannot be had (the caller goes by value). */
static int launch_rows_batch_staged(void* ctx, const kvc_exec* exec, const kvc_gpu_rows_batch& b) {
  size_t stage = KVC_GPU_ROWS_STAGE_MIN;
  while (stage < b.bytes) stage *= 2;
  void* host = kvc_gpu_host_alloc(ctx, exec, stage);
  if (!host) return -1;
  memcpy(host, b.area, b.bytes);
  const gpu_state* state = gpu_state_of(exec);
  gpuStream_t stream = gpu_stream_of(exec);
  const int pools = state && state->pools;
  void* dev = NULL;
  if (gpu_check(pools ? gpuMallocAsync(&dev, b.bytes, stream) : gpuMalloc(&dev, b.bytes))) {
    kvc_gpu_host_free(ctx, exec, host);
    return -1;
  }
  int rc = gpu_check(gpuMemcpyAsync(dev, host, b.bytes, gpuMemcpyDefault, stream));
  if (!rc) {
    KVC_GPU_LAUNCH(grid_for(b.blocks), KVC_GPU_BLOCK, stream, gpu_rows_batch_kernel)
    ((const kvc_gpu_rows_job*)dev, b.njobs, b.blocks);
    rc = gpu_check_launch("gpu_rows_batch_kernel launch");
  }
  gpu_check(pools ? gpuFreeAsync(dev, stream) : gpuFree(dev));
  kvc_gpu_host_free(ctx, exec, host); /* parked until the stream has passed the copy */
  return rc ? 1 : 0; /* 1: work may have been issued; not retried */
}

/*
 * By value in as many launches as needed: jobs cut into pieces of at most
 * `per_piece` pairs, pieces gathered while their planned size (a bound: a
 * job and two index lists each) fits one parameter block.
 */
static int rows_batch_in_parts(gpuStream_t stream, const kvc_copy_rows_job* jobs, int32_t count) {
  enum { max_pieces = KVC_GPU_ROWS_BATCH_BYTES / (int)sizeof(kvc_gpu_rows_job) };
  const size_t job_bytes = sizeof(kvc_gpu_rows_job);
  const int64_t per_piece = (int64_t)((KVC_GPU_ROWS_BATCH_BYTES - job_bytes) / (2 * sizeof(int32_t)));
  kvc_copy_rows_job pieces[max_pieces];
  int32_t n = 0;
  size_t used = 0;
  for (int32_t i = 0; i <= count; i++) {
    const kvc_copy_rows_job* c = i < count ? &jobs[i] : NULL;
    int64_t start = 0;
    do {
      const int64_t take = c ? (c->count - start < per_piece ? c->count - start : per_piece) : 0;
      const size_t need = job_bytes + 2 * sizeof(int32_t) * (size_t)take;
      if (n > 0 && (!c || n == max_pieces || used + need > KVC_GPU_ROWS_BATCH_BYTES)) {
        kvc_gpu_rows_batch b;
        if (kvc_gpu_plan_rows_batch(&b, pieces, n)) return -1;
        int rc = b.njobs ? launch_rows_batch_inline(stream, b) : 0;
        kvc_gpu_rows_batch_free(&b);
        if (rc) return -1;
        n = 0;
        used = 0;
      }
      if (!c || take == 0) break;
      pieces[n] = *c;
      pieces[n].dst_rows = c->dst_rows + start;
      pieces[n].src_rows = c->src_rows + start;
      pieces[n].count = take;
      n++;
      used += need;
      start += take;
    } while (start < c->count);
  }
  return 0;
}

static int gpu_copy_rows_batch(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, int32_t count) {
  if (count < 0 || (count > 0 && !jobs)) return -1;
  if (count == 0) return 0;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  kvc_gpu_rows_batch b;
  if (kvc_gpu_plan_rows_batch(&b, jobs, count)) return -1; /* refused before anything was issued */
  gpuStream_t stream = gpu_stream_of(exec);
  int rc = 0;
  if (b.njobs == 0) {
    rc = 0;
  } else if (b.bytes <= KVC_GPU_ROWS_BATCH_BYTES) {
    rc = launch_rows_batch_inline(stream, b);
  } else {
    rc = gpuStreamCapturing(stream) ? -1 : launch_rows_batch_staged(ctx, exec, b);
    if (rc < 0 && (rc = rows_batch_in_parts(stream, jobs, count)) == 0) kvc_gpu_forget_error();
  }
  kvc_gpu_rows_batch_free(&b);
  return rc ? -1 : 0;
}

static int gpu_copy_4d_batch(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, int32_t count) {
  if (count < 0 || (count > 0 && !copies)) return -1;
  if (count == 0) return 0;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t stream = gpu_stream_of(exec);
  kvc_gpu_copy plans[KVC_GPU_BATCH_CAP];
  int32_t n = 0;
  uint32_t blocks = 0;
  for (int32_t i = 0; i < count; i++) {
    const kvc_copy_4d* c = &copies[i];
    if (any_empty(c->shape)) continue;
    /* core/backend.h promises no overlap within a batch; one that does anyway still moves like memmove. */
    if (kvc_gpu_ranges_overlap(c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size)) {
      if (gpu_copy_4d(ctx, exec, c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size)) return -1;
      continue;
    }
    kvc_gpu_copy plan;
    int rc = kvc_gpu_plan(&plan, c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size, 0);
    if (rc < 0) return -1;
    if (rc > 0) continue;
    uint32_t b = kvc_gpu_plan_blocks(&plan);
    if (n == KVC_GPU_BATCH_CAP || b > UINT32_MAX - blocks) {
      if (launch_batch(stream, plans, n, blocks)) return -1;
      n = 0;
      blocks = 0;
    }
    plan.first_block = blocks;
    plans[n++] = plan;
    blocks += b;
  }
  return launch_batch(stream, plans, n, blocks);
}

static thread_local char last_error[512];

void kvc_gpu_note_error_of(gpuError_t e, const char* what) {
  snprintf(last_error, sizeof last_error, "%s failed: %s (%s)", what, gpuGetErrorName(e), gpuGetErrorString(e));
}

void kvc_gpu_note_error(gpuError_t e) { kvc_gpu_note_error_of(e, kvc_gpu_failed_call()); }

void kvc_gpu_forget_error(void) { last_error[0] = '\0'; }

void kvc_gpu_note_text(const char* text) { snprintf(last_error, sizeof last_error, "%s", text); }

const char* kvc_gpu_last_error(void* ctx) {
  (void)ctx;
  static thread_local char handed[sizeof last_error];
  if (!last_error[0]) return NULL;
  memcpy(handed, last_error, sizeof handed);
  last_error[0] = '\0';
  return handed;
}

static const kvc_backend gpu_backend = {
    sizeof(kvc_backend),
    KVC_BACKEND_API_VERSION,
    KVC_GPU_VENDOR, /* name: "cuda" or "hip" */
#if defined(__HIPCC__)
    KVC_DEVICE_ROCM,
#else
    KVC_DEVICE_CUDA,
#endif
    NULL, /* ctx */
    gpu_device_count,
    kvc_gpu_exec_open,
    kvc_gpu_exec_close,
    kvc_gpu_exec_set_stream,
    gpu_alloc_zeroed,
    gpu_free,
    gpu_copy_4d,
    gpu_fill_zero_4d,
    gpu_copy_rows,
    kvc_gpu_host_alloc_zeroed,
    kvc_gpu_host_free,
    kvc_gpu_copy_tier_4d,
    kvc_gpu_tier_wait,
    gpu_copy_4d_batch,
    /* Version 4: sink layers (gpu_rope.cpp). */
    kvc_gpu_rerotate_keys_4d,
    kvc_gpu_read_f32_4d,
    /* Version 4: quantized layers (gpu_quant.cpp). */
    kvc_gpu_quantize_groups,
    kvc_gpu_dequantize_groups,
    kvc_gpu_fp8_calibrate,
    kvc_gpu_fp8_round_trip,
    /* Version 5: the pinned store an offload fills is not zeroed across the bus first. */
    kvc_gpu_host_alloc,
    /* Version 6: the pool's step write, one launch. */
    gpu_copy_rows_batch,
    /* Version 7: the vendor's words for a failed call. */
    kvc_gpu_last_error,
    /* Version 8: no fp8 pool kernels yet: the core refuses fp8 pools on this backend (UNSUPPORTED). */
    NULL,
    NULL,
    /* Version 9: restores and loads fill their stores without a memset first. */
    gpu_alloc,
};

#if defined(KVC_GPU_LINKED)
/* KVC_LINK_BACKEND: this backend is part of libkvcache itself; core/registry.c asks for it by this name. */
extern "C" const kvc_backend* kvci_linked_backend(void) { return &gpu_backend; }
#else
/*
 * The plugin's one export. The table is returned whatever version the core
 * asks for: core/registry.c compares the versions and, on a mismatch, says
 * which versions the plugin and the core speak.
 */
extern "C" __attribute__((visibility("default"))) const kvc_backend* kvc_backend_entry(uint32_t api_version) {
  (void)api_version;
  return &gpu_backend;
}
#endif
