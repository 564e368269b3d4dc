/*
 * backends/cpu/torch_cpu_math.h: float32 arithmetic whose rounding depends on how
 * torch's CPU kernels are written, reproduced so that the HQQ quantizer
 * gets the bits hqq gets (docs/semantics.md, 'HQQ quantizer'). The
 * arithmetic itself is shared with the GPU kernels (backends/quant_math:
 * torch_sum.h, torch_pow.h); these are the CPU's fast entry points to it.
 *
 * Only a single thread's order is reproduced: torch splits a whole-tensor
 * sum of 32768 or more elements between its threads. AVX-512 builds of
 * torch use 16 lanes and may differ in the last bit. torch's vectorized pow
 * is SLEEF's powf, while the tail a vector does not cover goes through the
 * C library's double pow.
 */
#ifndef KVC_CPU_TORCH_CPU_MATH_H
#define KVC_CPU_TORCH_CPU_MATH_H

#include <stdint.h>

#include "quant_math/torch_sum.h"

/* torch's sum of n contiguous floats: a whole contiguous tensor, or one row
 * of a reduction over the last dimension. */
float kvci_torch_sum_contiguous(const float* x, int64_t n);

/* torch's sum of column `col` of a row-major [rows][cols] matrix `x`, when
 * reducing over the first dimension. */
float kvci_torch_sum_column(const float* x, int64_t rows, int64_t cols, int64_t col);

/* x^y as torch's vectorized pow computes it for float32 (kvc_qm_powf_vec), for x >= 0 (or NaN) and any y that is
 * not an integer; on x86-64 through a copy compiled for the FMA instruction where the CPU has it. */
float kvci_torch_powf_vec(float x, float y);

#endif /* KVC_CPU_TORCH_CPU_MATH_H */
