/*
 * backends/gpu/gpu_rope.cpp: the backend table's entries of sink layers
 * (version 4: rerotate_keys_4d, read_f32_4d; abi/backend/backend.h) on a
 * GPU. The arithmetic is gpu_rope.h's, the kernels kernels_rope.cuh's.
 *
 * rerotate_keys_4d's tables rcos/rsin are host memory that the core may
 * change once the call returns, so the kernel must never read them later:
 *  - tables that fit in one launch's parameters travel there by value (a
 *    decode step's shift of a short window; nothing to keep alive, and a
 *    graph capture records them with the launch);
 *  - larger ones are packed into a pinned host buffer (host_alloc, reused
 *    by size class), copied from there into a stream-ordered device buffer
 *    by one gpuMemcpyAsync, and read there by one launch; host_free parks
 *    the pinned buffer until the stream has passed the copy. (A copy from
 *    the caller's pageable memory would make the runtime stage it, and may
 *    make the host wait for the stream while it does);
 *  - while the stream is being captured into a graph (where a copy from
 *    pageable memory would be read at replay, long after the call), or when
 *    that buffer cannot be had, they go by value in as many launches as
 *    their rows need.
 * read_f32_4d converts into a device buffer, copies it back and waits for
 * the stream: a host synchronisation, which the contract allows (it only
 * records a sink cache's cos/sin table). Refused during a graph capture.
 */
#include <stdio.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_rope.h"
#include "kernels_rope.cuh"

/*
 * Bytes of kernel parameters one launch may take: CUDA 12.1+ on Volta and
 * later, 32764; HIP held to 4 KiB less its hidden arguments (the same
 * limits as the batched copies in gpu_backend.cpp).
 */
#if defined(__HIPCC__)
#define KVC_GPU_ROPE_PARAM_BYTES 3584
#else
#define KVC_GPU_ROPE_PARAM_BYTES 32764
#endif
/* Table values (cos and sin together) one launch carries: a small parameter block, and the largest. */
#define KVC_GPU_ROPE_SMALL 512
/* (an even count: the parameter block is padded to the 8-byte alignment of kvc_gpu_rope) */
#define KVC_GPU_ROPE_LARGE ((KVC_GPU_ROPE_PARAM_BYTES - (int)sizeof(kvc_gpu_rope)) / 8 * 2)

static_assert(sizeof(gpu_rope_params<KVC_GPU_ROPE_LARGE>) <= KVC_GPU_ROPE_PARAM_BYTES, "rope parameters too large");
static_assert(KVC_GPU_ROPE_F32 == KVC_DTYPE_FLOAT32 && KVC_GPU_ROPE_F16 == KVC_DTYPE_FLOAT16 &&
                  KVC_GPU_ROPE_BF16 == KVC_DTYPE_BFLOAT16,
              "gpu_rope.h names kvc_dtype's values");

/* Launches KERNEL<dtype, ...> for the runtime `dtype` (one of the three: checked by the entries). */
#define KVC_GPU_ROPE_DISPATCH(dtype, LAUNCH) \
  do {                                       \
    if ((dtype) == KVC_GPU_ROPE_F32) {       \
      LAUNCH(KVC_GPU_ROPE_F32);              \
    } else if ((dtype) == KVC_GPU_ROPE_F16) { \
      LAUNCH(KVC_GPU_ROPE_F16);              \
    } else {                                 \
      LAUNCH(KVC_GPU_ROPE_BF16);             \
    }                                        \
  } while (0)

static int rope_dtype_ok(kvc_dtype dtype) {
  return dtype == KVC_DTYPE_FLOAT32 || dtype == KVC_DTYPE_FLOAT16 || dtype == KVC_DTYPE_BFLOAT16;
}

/* Device scratch of `bytes` in stream order where the device has the stream-ordered allocator. */
static void* scratch_alloc(const kvc_exec* exec, size_t bytes) {
  const gpu_state* st = gpu_state_of(exec);
  void* p = NULL;
  if (gpu_check(st && st->pools ? gpuMallocAsync(&p, bytes, gpu_stream_of(exec)) : gpuMalloc(&p, bytes))) return NULL;
  return p;
}

static void scratch_free(const kvc_exec* exec, void* p) {
  const gpu_state* st = gpu_state_of(exec);
  gpu_check(st && st->pools ? gpuFreeAsync(p, gpu_stream_of(exec)) : gpuFree(p));
}

/* One launch with the tables [r.n[2]][r.dim] of cos and sin by value (2 * n[2] * dim <= N values). */
template <int N>
static int rerotate_inline(gpuStream_t stream, const kvc_gpu_rope& r, const float* rcos, const float* rsin) {
  gpu_rope_params<N> p;
  const size_t values = (size_t)r.n[2] * (size_t)r.dim;
  p.rope = r;
  memcpy(p.table, rcos, values * sizeof(float));
  memcpy(p.table + values, rsin, values * sizeof(float));
  const uint32_t grid = kvc_gpu_rope_grid(kvc_gpu_rope_items(&r));
#define KVC_LAUNCH(DT) KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_rerotate_inline_kernel<DT, N>)(p)
  KVC_GPU_ROPE_DISPATCH(r.dtype, KVC_LAUNCH);
#undef KVC_LAUNCH
  return gpu_check_launch("gpu_rerotate_inline_kernel launch");
}

static int rerotate_by_value(gpuStream_t stream, const kvc_gpu_rope& r, const float* rcos, const float* rsin) {
  if (2 * (int64_t)r.n[2] * r.dim <= KVC_GPU_ROPE_SMALL)
    return rerotate_inline<KVC_GPU_ROPE_SMALL>(stream, r, rcos, rsin);
  return rerotate_inline<KVC_GPU_ROPE_LARGE>(stream, r, rcos, rsin);
}

/* By value, as many seq rows per launch as the parameters hold (-1 when not even one row's tables fit). */
static int rerotate_in_chunks(gpuStream_t stream, const kvc_gpu_rope& r, const float* rcos, const float* rsin) {
  const int32_t rows_per = (int32_t)(KVC_GPU_ROPE_LARGE / (2 * (int64_t)r.dim));
  if (rows_per < 1) {
    char why[200];
    snprintf(why, sizeof why, "rerotate_keys_4d: head_dim %d: one row of cos and sin (%lld floats) exceeds a "
             "launch's %d, and the tables could not be uploaded", (int)r.dim, 2 * (long long)r.dim,
             (int)KVC_GPU_ROPE_LARGE);
    kvc_gpu_note_text(why);
    return -1;
  }
  for (int32_t j0 = 0; j0 < r.n[2]; j0 += rows_per) {
    kvc_gpu_rope part = kvc_gpu_rope_rows(&r, j0, r.n[2] - j0 < rows_per ? r.n[2] - j0 : rows_per);
    const int64_t at = (int64_t)j0 * r.dim;
    if (rerotate_by_value(stream, part, rcos + at, rsin + at)) return -1;
  }
  return 0;
}

/* The tables staged in pinned memory, copied to a device buffer in stream order, then one launch. -1 before
   anything ran on failure (the caller goes by value). */
static int rerotate_uploaded(void* ctx, const kvc_exec* exec, const kvc_gpu_rope& r, const float* rcos,
                             const float* rsin) {
  gpuStream_t stream = gpu_stream_of(exec);
  const size_t values = (size_t)r.n[2] * (size_t)r.dim, bytes = values * sizeof(float);
  float* staged = (float*)kvc_gpu_host_alloc(ctx, exec, 2 * bytes);
  if (!staged) return -1;
  float* table = (float*)scratch_alloc(exec, 2 * bytes);
  if (!table) {
    kvc_gpu_host_free(ctx, exec, staged);
    return -1;
  }
  memcpy(staged, rcos, bytes);
  memcpy(staged + values, rsin, bytes);
  int rc = gpu_check(gpuMemcpyAsync(table, staged, 2 * bytes, gpuMemcpyDefault, stream));
  if (!rc) {
    const uint32_t grid = kvc_gpu_rope_grid(kvc_gpu_rope_items(&r));
    const float* c = table;
    const float* s = table + values;
#define KVC_LAUNCH(DT) KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_rerotate_kernel<DT>)(r, c, s)
    KVC_GPU_ROPE_DISPATCH(r.dtype, KVC_LAUNCH);
#undef KVC_LAUNCH
    rc = gpu_check_launch("gpu_rerotate_kernel launch");
  }
  scratch_free(exec, table);
  kvc_gpu_host_free(ctx, exec, staged); /* parked until the stream has passed the copy */
  return rc ? -1 : 0;
}

int kvc_gpu_rerotate_keys_4d(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t st[4],
                             const int64_t shape[4], const float* rcos, const float* rsin) {
  if (!rope_dtype_ok(dtype)) return -1;
  int ok = kvc_gpu_rope_extents(shape);
  if (ok <= 0) return ok;
  if (st[3] != 1 || !keys || !rcos || !rsin) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  const kvc_gpu_rope r = kvc_gpu_rope_of(dtype, keys, st, shape);
  gpuStream_t stream = gpu_stream_of(exec);
  if (2 * shape[2] * shape[3] <= KVC_GPU_ROPE_LARGE) return rerotate_by_value(stream, r, rcos, rsin);
  if (!gpuStreamCapturing(stream) && !rerotate_uploaded(ctx, exec, r, rcos, rsin)) return 0;
  const int rc = rerotate_in_chunks(stream, r, rcos, rsin);
  if (rc == 0) kvc_gpu_forget_error(); /* the upload's failure, if any, was recovered from */
  return rc;
}

int kvc_gpu_read_f32_4d(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                        const int64_t ss[4], const int64_t shape[4]) {
  (void)ctx;
  if (!rope_dtype_ok(dtype)) return -1;
  int ok = kvc_gpu_rope_extents(shape);
  if (ok <= 0) return ok;
  if (!dst || !src) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t stream = gpu_stream_of(exec);
  if (gpuStreamCapturing(stream)) return -1; /* it waits for the stream: impossible inside a graph capture */
  const kvc_gpu_read p = kvc_gpu_read_of(dtype, src, ss, shape);
  const int64_t items = kvc_gpu_read_items(&p);
  const size_t bytes = (size_t)items * sizeof(float);
  uint32_t* out = (uint32_t*)scratch_alloc(exec, bytes);
  if (!out) return -1;
  const uint32_t grid = kvc_gpu_rope_grid(items);
#define KVC_LAUNCH(DT) KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_read_f32_kernel<DT>)(p, out)
  KVC_GPU_ROPE_DISPATCH(dtype, KVC_LAUNCH);
#undef KVC_LAUNCH
  int rc = gpu_check_launch("gpu_read_f32_kernel launch") || gpu_check(gpuMemcpyAsync(dst, out, bytes, gpuMemcpyDefault, stream));
  scratch_free(exec, out);
  if (gpu_check(gpuStreamSynchronize(stream))) rc = 1;
  return rc ? -1 : 0;
}
