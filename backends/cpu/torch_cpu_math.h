/*
 * backends/cpu/torch_cpu_math.h: float32 arithmetic whose rounding depends on how
 * torch's CPU kernels are written, reproduced so that the HQQ quantizer
 * gets the bits hqq gets (docs/semantics.md, 'HQQ quantizer').
 *
 * Float addition is not associative, so a sum's last bits depend on its
 * order: torch sums with a cascade of partial sums over 8-float vectors
 * (AVX2 and the generic vector width; AVX-512 builds use 16 lanes and may
 * differ in the last bit). Only a single thread's order is reproduced: torch
 * splits a whole-tensor sum of 32768 or more elements between its threads.
 * torch's vectorized pow is SLEEF's powf (1-ulp accurate, fused
 * multiply-adds on AVX2), while the tail a vector does not cover goes through
 * the C library's double pow: both are reproduced, the first here.
 */
#ifndef KVC_CPU_TORCH_CPU_MATH_H
#define KVC_CPU_TORCH_CPU_MATH_H

#include <stdint.h>

/* Floats in one torch CPU vector, and in one step of its element-wise loops. */
#define KVC_TORCH_VEC_FLOATS 8
#define KVC_TORCH_LOOP_FLOATS (2 * KVC_TORCH_VEC_FLOATS)

/* torch's sum of n contiguous floats: a whole contiguous tensor, or one row
 * of a reduction over the last dimension. */
float kvci_torch_sum_contiguous(const float* x, int64_t n);

/* torch's sum of column `col` of a row-major [rows][cols] matrix `x`, when
 * reducing over the first dimension. */
float kvci_torch_sum_column(const float* x, int64_t rows, int64_t cols, int64_t col);

/* x^y as torch's vectorized pow computes it for float32 (SLEEF's powf,
 * 1-ulp, with fused multiply-adds), for x >= 0 (or NaN) and any y that is
 * not an integer. */
float kvci_torch_powf_vec(float x, float y);

#endif /* KVC_CPU_TORCH_CPU_MATH_H */
