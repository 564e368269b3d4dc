/*
 * backends/cpu/torch_cpu_math.c: torch's CPU summation order and vectorized powf
 * (see torch_cpu_math.h) on the CPU: the arithmetic is backends/quant_math's;
 * this file adds the CPU's fast forms of it (32 columns of a cascade in one
 * pass, a copy of powf compiled for the FMA instruction).
 */
#include "torch_cpu_math.h"

#include "quant_math/torch_pow.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* out[c] = the cascade over rows i < nrows of x[i * row_stride + c * col_stride], c < ncols (<= 32): the
 * additions of kvc_qm_cascade_sum for each column, the columns side by side so that the loop vectorizes. */
static void cascade_columns(const float* x, int64_t row_stride, int64_t col_stride, int64_t ncols, int64_t nrows,
                            float* out) {
  kvc_qm_cascade level[KVC_TORCH_SUM_COLUMNS];
  float acc[KVC_TORCH_SUM_COLUMNS];
  for (int64_t c = 0; c < ncols; c++) kvc_qm_cascade_init(&level[c], nrows);
  const int64_t step = kvc_qm_cascade_step(&level[0]);
  int64_t i = 0;
  for (; i + step <= nrows; i += step) {
    for (int64_t c = 0; c < ncols; c++) acc[c] = 0.0f;
    for (int64_t j = i; j < i + step; j++)
      for (int64_t c = 0; c < ncols; c++) acc[c] += x[j * row_stride + c * col_stride];
    for (int64_t c = 0; c < ncols; c++) kvc_qm_cascade_push(&level[c], acc[c]);
  }
  for (int64_t c = 0; c < ncols; c++) acc[c] = 0.0f;
  for (; i < nrows; i++)
    for (int64_t c = 0; c < ncols; c++) acc[c] += x[i * row_stride + c * col_stride];
  for (int64_t c = 0; c < ncols; c++) out[c] = kvc_qm_cascade_end(&level[c], acc[c]);
}

float kvci_torch_sum_contiguous(const float* x, int64_t n) {
  if (n < KVC_TORCH_VEC_FLOATS) {
    float p[4];
    cascade_columns(x, 4, 1, 4, n / 4, p);
    return kvc_qm_sum_stored(kvc_qm_row_sum_finish(x, 1, n, p));
  }
  float p[KVC_TORCH_SUM_COLUMNS];
  cascade_columns(x, KVC_TORCH_SUM_COLUMNS, 1, KVC_TORCH_SUM_COLUMNS, n / KVC_TORCH_SUM_COLUMNS, p);
  return kvc_qm_sum_stored(kvc_qm_vector_row_finish(x, n, p));
}

float kvci_torch_sum_column(const float* x, int64_t rows, int64_t cols, int64_t col) {
  return kvc_qm_sum_column(x, rows, cols, col);
}

/* fmaf is a library call unless the compiler may use the FMA instruction:
 * on x86-64 a copy compiled for it runs where the CPU has it (same results,
 * twice as fast). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__FMA__)
__attribute__((target("fma"))) static float powf_vec_fma(float x, float y) { return kvc_qm_powf_vec(x, y); }
#define KVC_POWF_FMA_COPY 1
#endif

float kvci_torch_powf_vec(float x, float y) {
#ifdef KVC_POWF_FMA_COPY
  if (__builtin_cpu_supports("fma")) return powf_vec_fma(x, y);
#endif
  return kvc_qm_powf_vec(x, y);
}
