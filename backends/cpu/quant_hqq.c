/*
 * backends/cpu/quant_hqq.c: HQQ's quantizer (hqq.core.quantize.Quantizer.quantize
 * with transformers' arguments: channel-wise groups, optimize=True,
 * round_zero=False; docs/semantics.md, 'HQQ quantizer'). hqq computes in float32 on CPU and keeps
 * scale and zero point in the cache's dtype.
 *
 * The zero point is refined by hqq's proximal solver: per iteration the
 * codes and the dequantized values under the current zero point, the error
 * shrunk towards 0 under an L^0.7 norm, and a new zero point from the mean
 * of (codes - (W - shrunk error) * s) over each group. The loop stops as soon
 * as the mean absolute error over the whole call does not decrease, keeping
 * the zero point computed in that last iteration.
 *
 * The result is bit-exact only if every float operation rounds as torch's:
 * the work runs over the tensor in hqq's own memory order ([groups][G] for
 * axis 1, [G][groups] for axis 0), the sums follow torch's order and the pow
 * is torch's (torch_cpu_math.h).
 */
#include <math.h>
#include <stdlib.h>

#include "half.h"
#include "quantize.h"
#include "quant_math/torch_pow.h"
#include "torch_cpu_math.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* |x|^(lp - 1) with lp = 0.7 as torch computes it: vector lanes in float,
 * the tail of the loop a vector does not cover in double, with the exponent
 * Python computed (0.7 - 1 = -0.30000000000000004). */
static float shrink_pow(float a, int vector_lane) {
  return vector_lane ? kvci_torch_powf_vec(a, (float)KVC_HQQ_POW_EXPONENT) : kvc_qm_pow_tail(a);
}

typedef struct hqq_work {
  const float* w;   /* the values in hqq's order: rows x cols */
  int64_t rows, cols, n;
  int by_column;    /* axis 0: groups are the columns */
  float *s, *z, *z_next; /* per group: inverse scale, zero point, the next zero point */
  float *err, *target;   /* per value: |W - W_r| and W_q - (W - W_e) * s */
} hqq_work;

static int64_t group_of(const hqq_work* h, int64_t i) { return h->by_column ? i % h->cols : i / h->cols; }

/* One solver step with the current zero points: the error (returned) and the next zero points. */
static float solver_step(hqq_work* h, float max_code) {
  const int64_t vector_end = h->n - h->n % KVC_TORCH_LOOP_FLOATS;
  for (int64_t i = 0; i < h->n; i++) {
    const int64_t k = group_of(h, i);
    const float w = h->w[i], s = h->s[k], z = h->z[k];
    float q;
    const float d = kvc_qm_hqq_error(w, s, z, max_code, &q);
    const float a = fabsf(d);
    h->err[i] = a;
    h->target[i] = kvc_qm_hqq_target(w, s, q, d, a, shrink_pow(a, i < vector_end));
  }
  const int64_t groups = h->by_column ? h->cols : h->rows, group = h->by_column ? h->rows : h->cols;
  for (int64_t k = 0; k < groups; k++) {
    float sum = h->by_column ? kvci_torch_sum_column(h->target, h->rows, h->cols, k)
                             : kvci_torch_sum_contiguous(h->target + k * h->cols, h->cols);
    h->z_next[k] = sum / (float)group;
  }
  return kvci_torch_sum_contiguous(h->err, h->n) / (float)h->n;
}

int kvci_hqq_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group, uint8_t* codes,
                     float* scale, float* zero, float* work) {
  hqq_work h;
  h.n = ngroups * group;
  h.by_column = spec->axis == 0;
  h.rows = h.by_column ? group : ngroups;
  h.cols = h.by_column ? ngroups : group;
  /* A device-style caller gives the memory (allocated before anything is written); the others let us allocate. */
  float* buf = work ? NULL
                    : (float*)malloc(((size_t)(h.by_column ? 3 : 2) * (size_t)h.n + 3 * (size_t)ngroups) * sizeof(float));
  if (!work && !buf) return -1;
  h.err = work ? work : buf;
  h.target = h.err + h.n;
  h.s = h.target + h.n;
  h.z = h.s + ngroups;
  h.z_next = h.z + ngroups;
  if (h.by_column) {
    float* t = h.z_next + ngroups;
    for (int64_t k = 0; k < ngroups; k++)
      for (int64_t i = 0; i < group; i++) t[i * ngroups + k] = x[k * group + i];
    h.w = t;
  } else {
    h.w = x;
  }

  const float max_code = kvci_quant_max_code(spec->nbits);
  for (int64_t k = 0; k < ngroups; k++) {
    const float* v = x + k * group;
    float lo = v[0], hi = v[0];
    for (int64_t i = 1; i < group; i++) kvc_qm_min_max(v[i], &lo, &hi);
    kvc_qm_hqq_start(lo, hi, max_code, &h.s[k], &h.z[k]);
  }

  float best = INFINITY;
  for (int it = 0; it < KVC_HQQ_ITERS; it++) {
    const float err = solver_step(&h, max_code);
    float* t = h.z;
    h.z = h.z_next;
    h.z_next = t;
    if (!(err < best)) break;
    best = err;
  }

  for (int64_t i = 0; i < h.n; i++) {
    const int64_t k = group_of(&h, i);
    const float q = kvc_qm_hqq_rounded(h.w[i], h.s[k], h.z[k], max_code);
    const int64_t at = h.by_column ? k * group + i / h.cols : i;
    codes[at] = kvci_quant_code(q, max_code);
  }
  for (int64_t k = 0; k < ngroups; k++) {
    scale[k] = kvc_qm_hqq_scale(spec->dtype, h.s[k]);
    zero[k] = kvci_round_to(spec->dtype, h.z[k]);
  }
  free(buf);
  return 0;
}

static inline void hqq_group(kvc_dtype dt, const uint8_t* q, float s, float z, int64_t group, float* o) {
  for (int64_t i = 0; i < group; i++) o[i] = kvc_qm_hqq_value(dt, s, z, q[i]);
}

void kvci_hqq_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale, const float* zero,
                        int64_t ngroups, int64_t group, float* out) {
  const kvc_dtype dt = spec->dtype;
  for (int64_t k = 0; k < ngroups; k++) {
    const uint8_t* q = codes + k * group;
    float* o = out + k * group;
    KVC_WITH_CONST_DTYPE(dt, hqq_group, q, scale[k], zero[k], group, o);
  }
}
