/*
 * tests/gpu/emulated_alignment.c: the CUDA/HIP backend's plans for each
 * operation (the decisions of backends/gpu/gpu_backend.cpp, made by the
 * same plain-C functions), checked by the kernels' address walk. See
 * emulated_alignment.h.
 */
#include "emulated_alignment.h"

#include <stdio.h>
#include <stdlib.h>

#include "emulated_device.h"
#include "gpu_plan_walk.h"

/* A check's reason, then the verdict: which kernel, and that reason. */
static char reason[384], why[512];

/* Where gpuMallocAsync would put copy_via_scratch's buffer: only its alignment (256 bytes) matters here. */
#define SCRATCH_BASE ((void*)(uintptr_t)256)

/* The test hook KVC_EMULATED_FORGE_UNIT: the plan claims another unit than the planner chose. */
static kvc_gpu_copy* forged(kvc_gpu_copy* p) {
  const char* unit = getenv(KVC_EMULATED_FORGE_UNIT_ENV);
  if (unit && *unit) p->unit = (int32_t)strtol(unit, NULL, 10);
  return p;
}

/* "what: reason", or NULL when rc is 0 (rc and reason from a kvc_gpu_check_* call). */
static const char* verdict(int rc, const char* what) {
  if (!rc) return NULL;
  snprintf(why, sizeof why, "%s: %s", what, reason);
  return why;
}

const char* emulated_plans_copy(void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                                const int64_t shape[4], size_t elem) {
  kvc_gpu_copy plan;
  if (kvc_gpu_plan(&plan, dst, ds, src, ss, shape, elem, 0)) return NULL; /* nothing to do, or refused */
  return verdict(kvc_gpu_check_plan(forged(&plan), reason, sizeof reason), "the copy kernel");
}

const char* emulated_plans_copy_4d(void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                                   const int64_t shape[4], size_t elem) {
  kvc_gpu_copy move;
  int64_t shift = 0;
  switch (kvc_gpu_copy_route(dst, ds, src, ss, shape, elem, &move, &shift)) {
    case KVC_GPU_ROUTE_NONE:
      return NULL;
    case KVC_GPU_ROUTE_COPY:
      return emulated_plans_copy(dst, ds, src, ss, shape, elem);
    case KVC_GPU_ROUTE_MOVE:
      return verdict(kvc_gpu_check_move(forged(&move), shift, reason, sizeof reason), "the move kernel");
    case KVC_GPU_ROUTE_SCRATCH:
      break;
  }
  const int64_t ts[4] = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
  const char* bad = emulated_plans_copy(SCRATCH_BASE, ts, src, ss, shape, elem);
  return bad ? bad : emulated_plans_copy(dst, ds, SCRATCH_BASE, ts, shape, elem);
}

const char* emulated_plans_fill(void* dst, const int64_t st[4], const int64_t shape[4], size_t elem) {
  kvc_gpu_copy plan;
  if (kvc_gpu_plan(&plan, dst, st, NULL, NULL, shape, elem, 0)) return NULL;
  return verdict(kvc_gpu_check_plan(forged(&plan), reason, sizeof reason), "the fill kernel");
}

const char* emulated_plans_rows(void* dst, const int64_t ds[4], const int64_t* dst_rows, const void* src,
                                const int64_t ss[4], const int64_t* src_rows, int64_t count,
                                const int64_t row_shape[4], size_t elem, int blind) {
  for (int64_t i = 0; i < count; i++)
    if (dst_rows[i] < 0 || dst_rows[i] > INT32_MAX || src_rows[i] < 0 || src_rows[i] > INT32_MAX)
      return NULL; /* the backend refuses such indices before it launches */
  kvc_gpu_rows rows;
  if (kvc_gpu_plan_rows(&rows, dst, ds, src, ss, row_shape, elem)) return NULL;
  if (blind) { /* the plan of row 0 alone, as before the fix: its unit never saw the batch-row strides */
    const int64_t one_row[4] = {1, row_shape[1], row_shape[2], row_shape[3]};
    kvc_gpu_plan(&rows.plan, dst, ds, src, ss, one_row, elem, 0);
  }
  forged(&rows.plan);
  return verdict(kvc_gpu_check_rows(&rows, dst_rows, src_rows, count, reason, sizeof reason), "the rows kernel");
}

const char* emulated_plans_batch(const kvc_copy_4d* copies, int32_t count) {
  kvc_gpu_copy* plans = (kvc_gpu_copy*)malloc(sizeof(kvc_gpu_copy) * (size_t)(count > 0 ? count : 1));
  if (!plans) return "out of host memory for the batch's plans";
  int32_t n = 0;
  uint32_t blocks = 0;
  const char* bad = NULL;
  for (int32_t i = 0; i < count && !bad; i++) {
    const kvc_copy_4d* c = &copies[i];
    /* As gpu_copy_4d_batch: a copy that overlaps itself runs as copy_4d, the others in one launch. */
    if (kvc_gpu_ranges_overlap(c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size)) {
      bad = emulated_plans_copy_4d(c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size);
      continue;
    }
    if (kvc_gpu_plan(&plans[n], c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size, 0)) continue;
    forged(&plans[n]);
    uint32_t b = kvc_gpu_plan_blocks(&plans[n]);
    if (b > UINT32_MAX - blocks) { /* the backend launches what it has and starts a new batch */
      bad = verdict(kvc_gpu_check_batch(plans, n, blocks, reason, sizeof reason), "the batch kernel");
      plans[0] = plans[n];
      n = 0;
      blocks = 0;
    }
    plans[n].first_block = blocks;
    blocks += b;
    n++;
  }
  if (!bad) bad = verdict(kvc_gpu_check_batch(plans, n, blocks, reason, sizeof reason), "the batch kernel");
  free(plans);
  return bad;
}

const char* emulated_plans_rows_batch(const kvc_copy_rows_job* jobs, int32_t count, kvc_gpu_rows_batch* batch,
                                      int* refused) {
  *refused = kvc_gpu_plan_rows_batch(batch, jobs, count) != 0;
  if (*refused) return NULL;
  for (int32_t i = 0; i < batch->njobs; i++) forged(&batch->jobs[i].rows.plan);
  return verdict(kvc_gpu_check_rows_batch(batch, reason, sizeof reason), "the rows batch kernel");
}
