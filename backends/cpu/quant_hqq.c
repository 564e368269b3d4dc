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
#include "torch_cpu_math.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

enum { HQQ_ITERS = 20 };
static const float HQQ_SHRINK = 0.1f; /* 1 / beta, beta = 10; kappa is unused by the solver transformers gets */

/* |x|^(lp - 1) with lp = 0.7 as torch computes it: vector lanes in float,
 * the tail of the loop a vector does not cover in double, with the exponent
 * Python computed (0.7 - 1 = -0.30000000000000004). */
static float shrink_pow(float a, int vector_lane) {
  return vector_lane ? kvci_torch_powf_vec(a, (float)(0.7 - 1.0)) : (float)pow((double)a, 0.7 - 1.0);
}

static float clamp_code(float v, float max_code) { /* torch.clamp: NaN stays, -0 stays */
  if (v < 0.0f) return 0.0f;
  if (v > max_code) return max_code;
  return v;
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
    float t = w * s;
    t = t + z;
    const float q = clamp_code(kvci_round_half_even(t), max_code);
    float r = q - z;
    r = r / s;
    const float d = w - r;
    const float a = fabsf(d);
    h->err[i] = a;
    float shrunk = HQQ_SHRINK * shrink_pow(a, i < vector_end);
    shrunk = a - shrunk;
    if (shrunk < 0.0f) shrunk = 0.0f;
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    const float e = shrunk * sign;
    float target = w - e;
    target = target * s;
    h->target[i] = q - target;
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
    for (int64_t i = 1; i < group; i++) {
      if (v[i] < lo) lo = v[i];
      if (v[i] > hi) hi = v[i];
    }
    /* s = (2^b - 1) / (max - min), which torch computes as a reciprocal times 2^b - 1 */
    const float range = hi - lo;
    float s = 1.0f / range;
    s = s * max_code;
    if (fabsf(range) <= 1e-4f) s = 1.0f;
    if (s > 2e4f) s = 2e4f;
    const float neg = -lo;
    h.s[k] = s;
    h.z[k] = neg * s;
  }

  float best = INFINITY;
  for (int it = 0; it < HQQ_ITERS; it++) {
    const float err = solver_step(&h, max_code);
    float* t = h.z;
    h.z = h.z_next;
    h.z_next = t;
    if (!(err < best)) break;
    best = err;
  }

  for (int64_t i = 0; i < h.n; i++) {
    const int64_t k = group_of(&h, i);
    float t = h.w[i] * h.s[k];
    t = t + h.z[k];
    const float q = clamp_code(kvci_round_half_even(t), max_code);
    const int64_t at = h.by_column ? k * group + i / h.cols : i;
    codes[at] = kvci_quant_code(q, max_code);
  }
  for (int64_t k = 0; k < ngroups; k++) {
    scale[k] = kvci_round_to(spec->dtype, 1.0f / h.s[k]);
    zero[k] = kvci_round_to(spec->dtype, h.z[k]);
  }
  free(buf);
  return 0;
}

/* (code - zero) * scale, each operation rounded to dt (hqq dequantizes in the cache's dtype). */
static inline float hqq_value(kvc_dtype dt, float s, float z, uint8_t code) {
  float shifted = kvci_round_to(dt, (float)code - z);
  return kvci_round_to(dt, shifted * s);
}

static inline void hqq_group(kvc_dtype dt, const uint8_t* q, float s, float z, int64_t group, float* o) {
  for (int64_t i = 0; i < group; i++) o[i] = hqq_value(dt, s, z, q[i]);
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
