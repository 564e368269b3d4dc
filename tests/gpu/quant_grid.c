/* tests/gpu/quant_grid.c: see quant_grid.h. */
#include "quant_grid.h"

#include <stdlib.h>

#include "gpu_quant_plan.h"

int kvc_grid_order;
long kvc_grid_launches;

/* Blocks of a launch at most (gpu_quant.cpp's KVC_GQ_MAX_GRID): threads past it stride. */
#define GRID_MAX_BLOCKS (1 << 20)

/* Thread (block, lane) of the grid runs t = block * KVC_GPU_BLOCK + lane, then t + the grid's width, ...: the
   grid-stride loop of gpu_quant_kernel. */
#define RUN_GRID(threads, CALL)                                                                        \
  do {                                                                                                 \
    const int64_t blocks_ = ((threads) + KVC_GPU_BLOCK - 1) / KVC_GPU_BLOCK;                            \
    const int64_t grid_ = blocks_ < GRID_MAX_BLOCKS ? blocks_ : GRID_MAX_BLOCKS;                        \
    const int64_t width_ = grid_ * KVC_GPU_BLOCK;                                                      \
    kvc_grid_launches++;                                                                               \
    for (int64_t i_ = 0; i_ < width_; i_++) {                                                          \
      const int64_t first_ = kvc_grid_order ? width_ - 1 - i_ : i_;                                    \
      for (int64_t t = first_; t < (threads); t += width_) CALL;                                       \
    }                                                                                                  \
  } while (0)

static int run_quant(void* ctx, const kvc_gpu_quant* p, const kvc_gq_launch* l) {
  (void)ctx;
  RUN_GRID(l->threads, kvc_gpu_quant_thread(p, l->phase, t));
  return 0;
}

int kvc_grid_quantize_groups(const kvc_quantize_job* job) {
  kvc_gpu_quant plan;
  int rc = kvc_gpu_quant_plan(&plan, job);
  if (rc) return rc > 0 && rc != KVC_BACKEND_UNSUPPORTED ? 0 : rc;
  const size_t want = kvc_gpu_quant_want_bytes(&plan, job->scratch_bytes);
  void* own = want ? malloc(want) : NULL;
  rc = own ? kvc_gpu_quant_run(&plan, own, want, run_quant, NULL)
           : kvc_gpu_quant_run(&plan, job->scratch, job->scratch_bytes, run_quant, NULL);
  free(own);
  return rc;
}

int kvc_grid_dequantize_groups(const kvc_dequantize_job* job) {
  kvc_gpu_dequant plan;
  int rc = kvc_gpu_dequant_plan(&plan, job);
  if (rc) return rc > 0 && rc != KVC_BACKEND_UNSUPPORTED ? 0 : rc;
  RUN_GRID(plan.total_groups * plan.runs, kvc_gpu_dequant_thread(&plan, t));
  return 0;
}

int kvc_grid_fp8_calibrate(const void* src, const int64_t st[4], const int64_t shape[4], int32_t dtype, float* scale) {
  kvc_gpu_fp8 plan;
  int rc = kvc_gpu_fp8_plan(&plan, src, st, NULL, NULL, shape, dtype, 0.0f);
  if (rc == 1) {
    *scale = kvci_fp8_scale(0.0f);
    return 0;
  }
  if (rc) return rc;
  void* mem = malloc(kvc_gpu_fp8_bytes(&plan));
  if (!mem) return -1;
  kvc_gpu_fp8_bind(&plan, mem);
  RUN_GRID(plan.amax_threads, kvc_gpu_fp8_thread(&plan, KVC_GQ_FP8_AMAX, t));
  RUN_GRID(1, kvc_gpu_fp8_thread(&plan, KVC_GQ_FP8_SCALE, t));
  *scale = *plan.scale_out;
  free(mem);
  return 0;
}

int kvc_grid_fp8_round_trip(void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                            const int64_t shape[4], int32_t dtype, float scale) {
  kvc_gpu_fp8 plan;
  int rc = kvc_gpu_fp8_plan(&plan, src, ss, dst, ds, shape, dtype, scale);
  if (rc) return rc == 1 ? 0 : rc;
  RUN_GRID(plan.count, kvc_gpu_fp8_thread(&plan, KVC_GQ_FP8_ROUND_TRIP, t));
  return 0;
}
