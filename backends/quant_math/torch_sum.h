/*
 * backends/quant_math/torch_sum.h: torch's CPU summation order for float32
 * (the HQQ solver's per-group means and its call-wide mean error decide the
 * zero points and the early stop, so their last bits matter), as pieces the
 * CPU backend (backends/cpu/torch_cpu_math.c) and the GPU kernels share.
 *
 * Float addition is not associative: torch sums with a cascade of partial
 * sums over 8-float vectors (AVX2 and the generic vector width). One column
 * of the cascade over `nrows` rows: full blocks of 2^power rows are summed
 * from 0 (level 0), and each block sum goes up through three levels of
 * partial sums (kvc_qm_cascade_push), the rows after the last full block
 * are summed from 0, and the levels are added to that at the end. The
 * columns of a cascade are independent, so the CPU sums 32 at a time in one
 * pass and a GPU sums its blocks in parallel, with the same additions in the
 * same order.
 */
#ifndef KVC_QUANT_MATH_TORCH_SUM_H
#define KVC_QUANT_MATH_TORCH_SUM_H

#include <stdint.h>

#include "quant_math.h"

/* Floats in one torch CPU vector, and in one step of its element-wise loops. */
#define KVC_TORCH_VEC_FLOATS 8
#define KVC_TORCH_LOOP_FLOATS (2 * KVC_TORCH_VEC_FLOATS)
/* Columns of the vectorized row sum: four vectors. */
#define KVC_TORCH_SUM_COLUMNS (4 * KVC_TORCH_VEC_FLOATS)

/* The levels above level 0 of one column's cascade. */
typedef struct kvc_qm_cascade {
  float acc[3];
  int64_t blocks; /* full blocks pushed */
  int32_t power;  /* a block is 2^power rows */
} kvc_qm_cascade;

/* power = max(4, ceil(log2(nrows)) / 4). */
KVC_QM_FN void kvc_qm_cascade_init(kvc_qm_cascade* c, int64_t nrows) {
  int32_t log2 = 1;
  if (nrows > 2) {
    uint64_t v = (uint64_t)nrows - 1;
    int32_t bit = 63;
    while (!(v >> bit)) bit--;
    log2 = bit + 1;
  }
  c->power = log2 / 4 < 4 ? 4 : log2 / 4;
  c->acc[0] = c->acc[1] = c->acc[2] = 0.0f;
  c->blocks = 0;
}

KVC_QM_FN int64_t kvc_qm_cascade_step(const kvc_qm_cascade* c) { return (int64_t)1 << c->power; }

/* The level-0 sum of the next full block goes up: into level 1, which goes into level 2 every 2^power blocks,
   which goes into level 3 every 2^(2 power) blocks. */
KVC_QM_FN void kvc_qm_cascade_push(kvc_qm_cascade* c, float block) {
  const int64_t mask = kvc_qm_cascade_step(c) - 1;
  c->acc[0] += block;
  c->blocks++;
  if ((c->blocks & mask) != 0) return;
  c->acc[1] += c->acc[0];
  c->acc[0] = 0.0f;
  if (((c->blocks >> c->power) & mask) != 0) return;
  c->acc[2] += c->acc[1];
  c->acc[1] = 0.0f;
}

/* The column's sum: `tail` (the rows after the last full block, summed from 0) plus the levels. */
KVC_QM_FN float kvc_qm_cascade_end(const kvc_qm_cascade* c, float tail) {
  tail += c->acc[0];
  tail += c->acc[1];
  tail += c->acc[2];
  return tail;
}

/* 0 + x[0] + x[stride] + ... + x[(n - 1) * stride], in order: a level-0 block, or a cascade's tail. */
KVC_QM_FN float kvc_qm_block_sum(const float* x, int64_t stride, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; i++) s += x[i * stride];
  return s;
}

/* One column's cascade over x[i * stride], i < nrows, by one thread. */
KVC_QM_FN float kvc_qm_cascade_sum(const float* x, int64_t stride, int64_t nrows) {
  kvc_qm_cascade c;
  kvc_qm_cascade_init(&c, nrows);
  const int64_t step = kvc_qm_cascade_step(&c);
  int64_t i = 0;
  for (; i + step <= nrows; i += step) kvc_qm_cascade_push(&c, kvc_qm_block_sum(x + i * stride, stride, step));
  return kvc_qm_cascade_end(&c, kvc_qm_block_sum(x + i * stride, stride, nrows - i));
}

/* torch's scalar row sum of n values `stride` apart, given p[k] = the cascade of elements 4i + k over the n / 4
   whole quads: the leftover elements go into partial 0, then the partials are added. */
KVC_QM_FN float kvc_qm_row_sum_finish(const float* x, int64_t stride, int64_t n, float p[4]) {
  for (int64_t i = n / 4 * 4; i < n; i++) p[0] += x[i * stride];
  p[0] += p[1];
  p[0] += p[2];
  p[0] += p[3];
  return p[0];
}

KVC_QM_FN float kvc_qm_row_sum(const float* x, int64_t stride, int64_t n) {
  float p[4];
  for (int k = 0; k < 4; k++) p[k] = kvc_qm_cascade_sum(x + k * stride, 4 * stride, n / 4);
  return kvc_qm_row_sum_finish(x, stride, n, p);
}

/* The vectorized row sum of n contiguous floats, given p[c] = the cascade of column c (< 32) over the n / 32 whole
   rows of four vectors: the leftover vectors into the first vector's lanes, the four vectors added lane-wise,
   then the scalar tail and the lanes. */
KVC_QM_FN float kvc_qm_vector_row_finish(const float* x, int64_t n, float p[KVC_TORCH_SUM_COLUMNS]) {
  enum { V = KVC_TORCH_VEC_FLOATS };
  const int64_t nvec = n / V;
  for (int64_t r = nvec / 4 * 4; r < nvec; r++)
    for (int l = 0; l < V; l++) p[l] += x[r * V + l];
  for (int k = 1; k < 4; k++)
    for (int l = 0; l < V; l++) p[l] += p[k * V + l];
  float acc = 0.0f;
  for (int64_t i = nvec * V; i < n; i++) acc += x[i];
  for (int l = 0; l < V; l++) acc += p[l];
  return acc;
}

/* torch adds each sum into an output it filled with zeros: -0 becomes +0. */
KVC_QM_FN float kvc_qm_sum_stored(float sum) { return 0.0f + sum; }

/* torch's sum of n contiguous floats (a whole contiguous tensor, or one row of a reduction over the last
   dimension), by one thread. */
KVC_QM_FN float kvc_qm_sum_contiguous(const float* x, int64_t n) {
  if (n < KVC_TORCH_VEC_FLOATS) return kvc_qm_sum_stored(kvc_qm_row_sum(x, 1, n));
  float p[KVC_TORCH_SUM_COLUMNS];
  for (int c = 0; c < KVC_TORCH_SUM_COLUMNS; c++)
    p[c] = kvc_qm_cascade_sum(x + c, KVC_TORCH_SUM_COLUMNS, n / KVC_TORCH_SUM_COLUMNS);
  return kvc_qm_sum_stored(kvc_qm_vector_row_finish(x, n, p));
}

/* torch's sum of column `col` of a row-major [rows][cols] matrix when reducing over the first dimension: columns
   in whole blocks (4 vectors wide when a row holds a vector, else 4 floats) by one cascade down the rows, the rest
   by the interleaved row sum; a single column is a contiguous sum (torch drops the unit dimension). */
KVC_QM_FN float kvc_qm_sum_column(const float* x, int64_t rows, int64_t cols, int64_t col) {
  if (cols == 1) return kvc_qm_sum_contiguous(x, rows);
  const int64_t block = cols >= KVC_TORCH_VEC_FLOATS ? KVC_TORCH_SUM_COLUMNS : 4;
  const float sum = col < cols / block * block ? kvc_qm_cascade_sum(x + col, cols, rows)
                                               : kvc_qm_row_sum(x + col, cols, rows);
  return kvc_qm_sum_stored(sum);
}

#endif /* KVC_QUANT_MATH_TORCH_SUM_H */
