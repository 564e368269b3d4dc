/*
 * tests/gpu/quant_grid.h: the GPU backend's quantizer entries run on the CPU
 * as the device runs them: the same plans (backends/gpu/gpu_quant_plan.c),
 * the same launches in the same order, and for each launch every thread of
 * the grid (KVC_GPU_BLOCK-thread blocks over the grid-stride loop of
 * kernels_quant.cuh) running the same per-thread function on host memory.
 * The emulated device serves its quantizer entries with these, and
 * tests/unit/gpu_quant compares them with the CPU backend's entries.
 *
 * Within a launch the threads of a GPU run in no set order; kvc_grid_order
 * picks the order the CPU runs them in (forward, or backward to show that no
 * thread depends on another of its launch).
 */
#ifndef KVC_TESTS_GPU_QUANT_GRID_H
#define KVC_TESTS_GPU_QUANT_GRID_H

#include "backend.h"

/* 0: blocks and threads in increasing order; 1: decreasing. */
extern int kvc_grid_order;
/* Launches run since the process started (every phase of every job). */
extern long kvc_grid_launches;

/* The entries with host pointers; the job's scratch is used as the device uses it (its own when too small). */
int kvc_grid_quantize_groups(const kvc_quantize_job* job);
int kvc_grid_dequantize_groups(const kvc_dequantize_job* job);
int kvc_grid_fp8_calibrate(const void* src, const int64_t strides[4], const int64_t shape[4], int32_t dtype,
                           float* scale);
int kvc_grid_fp8_round_trip(void* dst, const int64_t dst_strides[4], const void* src, const int64_t src_strides[4],
                            const int64_t shape[4], int32_t dtype, float scale);

#endif /* KVC_TESTS_GPU_QUANT_GRID_H */
