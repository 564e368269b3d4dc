/*
 * backends/gpu/gpu_quant.cpp: the quantizer entries of the backend table
 * (quantize_groups, dequantize_groups, fp8_calibrate, fp8_round_trip) on a
 * GPU. Each plans its job with gpu_quant_plan.c and launches the phases of
 * the plan on the place's stream, one kernel per phase
 * (kernels_quant.cuh). Only fp8_calibrate waits for the stream: its scale
 * is host memory (backend.h).
 *
 * Launches: dequantize_groups and fp8_round_trip one; quanto one; HQQ 80
 * per batch of calls (1 + 19 rounds of 4 + a last round of 2 + 1; 61 for
 * calls of fewer than 8 values: gpu_quant_plan.h says what is fused and
 * why not more; the early stop is decided on the device: stopped calls'
 * threads return at once); fp8_calibrate two.
 */
#include "gpu_internal.h"
#include "gpu_quant_plan.h"
#include "kernels_quant.cuh"

/* Blocks per launch at most: the kernels stride beyond it. */
#define KVC_GQ_MAX_GRID (1u << 20)

template <typename P>
static int launch_phase(gpuStream_t stream, const P& p, int32_t phase, int64_t threads) {
  if (threads <= 0) return 0;
  const int64_t blocks = (threads + KVC_GPU_BLOCK - 1) / KVC_GPU_BLOCK;
  const unsigned grid = blocks < (int64_t)KVC_GQ_MAX_GRID ? (unsigned)blocks : KVC_GQ_MAX_GRID;
  KVC_GPU_LAUNCH(grid, KVC_GPU_BLOCK, stream, gpu_quant_kernel<P>)(p, phase, threads);
  return gpu_check_launch("gpu_quant_kernel launch");
}

static int launch_quant(void* ctx, const kvc_gpu_quant* p, const kvc_gq_launch* l) {
  return launch_phase(*(gpuStream_t*)ctx, *p, l->phase, l->threads);
}

/* Device memory for a job's working arrays, stream-ordered where the device has pools. */
static void* work_alloc(const gpu_state* state, gpuStream_t stream, size_t bytes) {
  void* p = NULL;
  if (gpu_check(state && state->pools ? gpuMallocAsync(&p, bytes, stream) : gpuMalloc(&p, bytes))) return NULL;
  return p;
}

static void work_free(const gpu_state* state, gpuStream_t stream, void* p) {
  if (p) gpu_check(state && state->pools ? gpuFreeAsync(p, stream) : gpuFree(p));
}

int kvc_gpu_quantize_groups(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job) {
  (void)ctx;
  if (!job) return -1;
  kvc_gpu_quant plan;
  int rc = kvc_gpu_quant_plan(&plan, job);
  if (rc) return rc > 0 && rc != KVC_BACKEND_UNSUPPORTED ? 0 : rc;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t stream = gpu_stream_of(exec);
  const gpu_state* state = gpu_state_of(exec);
  /* The job's scratch holds one call; more calls at once run in memory of our own when it can be had. */
  const size_t want = kvc_gpu_quant_want_bytes(&plan, job->scratch_bytes);
  void* own = want ? work_alloc(state, stream, want) : NULL;
  rc = own ? kvc_gpu_quant_run(&plan, own, want, launch_quant, &stream)
           : kvc_gpu_quant_run(&plan, job->scratch, job->scratch_bytes, launch_quant, &stream);
  work_free(state, stream, own);
  return rc;
}

int kvc_gpu_dequantize_groups(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job) {
  (void)ctx;
  if (!job) return -1;
  kvc_gpu_dequant plan;
  int rc = kvc_gpu_dequant_plan(&plan, job);
  if (rc) return rc > 0 && rc != KVC_BACKEND_UNSUPPORTED ? 0 : rc;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  return launch_phase(gpu_stream_of(exec), plan, KVC_GQ_DEQUANT, plan.total_groups * plan.runs);
}

int kvc_gpu_fp8_calibrate(void* ctx, const kvc_exec* exec, const void* src, const int64_t st[4],
                          const int64_t shape[4], int32_t dtype, float* scale) {
  (void)ctx;
  if (!scale) return -1;
  kvc_gpu_fp8 plan;
  int rc = kvc_gpu_fp8_plan(&plan, src, st, NULL, NULL, shape, dtype, 0.0f);
  if (rc == 1) { /* no elements: amax 0 (the core never calibrates on an empty tensor) */
    *scale = kvci_fp8_scale(0.0f);
    return 0;
  }
  if (rc) return rc;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  gpuStream_t stream = gpu_stream_of(exec);
  if (gpuStreamCapturing(stream)) { /* the scale is read on the host: a wait a graph capture cannot hold */
    kvc_gpu_note_text("fp8_calibrate waits for the stream to read its scale, which a stream being captured into a "
                      "graph cannot do: calibrate (the layer's first update) before the capture");
    return -1;
  }
  const gpu_state* state = gpu_state_of(exec);
  void* mem = work_alloc(state, stream, kvc_gpu_fp8_bytes(&plan));
  if (!mem) return -1;
  kvc_gpu_fp8_bind(&plan, mem);
  rc = launch_phase(stream, plan, KVC_GQ_FP8_AMAX, plan.amax_threads);
  if (!rc) rc = launch_phase(stream, plan, KVC_GQ_FP8_SCALE, 1);
  if (!rc) rc = gpu_check(gpuMemcpyAsync(scale, plan.scale_out, sizeof(float), gpuMemcpyDeviceToHost, stream));
  work_free(state, stream, mem);
  if (!rc) rc = gpu_check(gpuStreamSynchronize(stream));
  return rc;
}

int kvc_gpu_fp8_round_trip(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                           const int64_t ss[4], const int64_t shape[4], int32_t dtype, float scale) {
  (void)ctx;
  kvc_gpu_fp8 plan;
  int rc = kvc_gpu_fp8_plan(&plan, src, ss, dst, ds, shape, dtype, scale);
  if (rc) return rc == 1 ? 0 : rc;
  if (!dst) return -1;
  gpu_device_scope scope(exec->device_id);
  if (!scope.ok) return -1;
  return launch_phase(gpu_stream_of(exec), plan, KVC_GQ_FP8_ROUND_TRIP, plan.count);
}
