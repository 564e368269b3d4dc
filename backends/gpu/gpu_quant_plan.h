/*
 * backends/gpu/gpu_quant_plan.h: the quantizer entries of the backend table
 * (quantize_groups, dequantize_groups, fp8_calibrate, fp8_round_trip) in the
 * form the GPU kernels run them: a job becomes a plan (a small struct the
 * kernels take by value) and a list of phases, each phase a number of
 * independent threads with no barrier between them (a phase that needs
 * another's results is the next launch). kvc_gpu_quant_thread and the other
 * *_thread functions below are the whole per-thread work, indexed by the
 * thread's global number only: a kernel runs them over a grid-stride loop,
 * and the CPU tests (tests/unit/gpu_quant) and the emulated device run the
 * same functions in a loop over the same numbers, so the arithmetic the
 * device runs is checked against the CPU backend bit for bit without a GPU.
 *
 * The arithmetic is backends/quant_math's, which the CPU backend uses too.
 * HQQ's solver is the CPU's (backends/cpu/quant_hqq.c) cut into phases:
 * start (per group: its values gathered in hqq's order, then the solver's
 * start), then 20 rounds of step (per value), means and error blocks (one
 * launch: per group, torch's sum of each group, beside the level-0 sums of
 * torch's cascade over the call's errors), error columns (the rest of the
 * cascade) and decide (per call: the early stop), and finish (per group:
 * codes, records, dequantized values). The last round only steps and takes
 * the means: its error would decide nothing (the CPU's loop ends there
 * anyway), so finish takes the zero points it just computed. Every call of
 * a job has its own early stop; the calls of a batch run side by side.
 *
 * Launches per batch of calls: 1 + 19 x 4 + 2 + 1 = 80 (61 when a call has
 * fewer than 8 values, which has no error columns), down from 103. What is
 * not fused, and why: step needs every group's zero point (a group's start
 * or means, another thread's); error columns need every level-0 block of
 * their column; decide needs all 32 columns of its call, and the next
 * step needs its decision. Fusing any of these into one launch would need
 * a grid-wide barrier (cooperative launches) or one thread doing many
 * threads' work in sequence (error columns and decide in one thread per
 * call would sum 32 x err_blocks blocks in a row: 8192 for a call of 128k
 * values), which costs more on the device than the launch it saves.
 */
#ifndef KVC_GPU_QUANT_PLAN_H
#define KVC_GPU_QUANT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gpu_plan.h"
#include "kvcache/quantized.h"
#include "quant_math/fp8.h"
#include "quant_math/quant_math.h"
#include "quant_math/torch_pow.h"
#include "quant_math/torch_sum.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The phases of the quantizer kernels (the `phase` argument of the *_thread functions). */
enum kvc_gpu_quant_phase {
  KVC_GQ_QUANTO = 0,     /* per group: quanto's scale, codes, record and dequantized values */
  KVC_GQ_HQQ_START,      /* per group: its values as float32 in hqq's order, then the solver's start; group 0 also
                            resets its call's state */
  KVC_GQ_HQQ_STEP,       /* per value: error and target under the current zero points */
  KVC_GQ_HQQ_MEANS,      /* per group: the next zero point, torch's mean of the group's targets; then, threads
                            past the batch's groups: per (call, column, block), level-0 sums of the cascade over
                            the call's errors (the two read what step wrote and write apart) */
  KVC_GQ_HQQ_ERR_COLUMNS,/* per (call, column): the rest of each column's cascade */
  KVC_GQ_HQQ_DECIDE,     /* per call: the mean error; the zero points move on; the early stop */
  KVC_GQ_HQQ_FINISH,     /* per group: codes, record and dequantized values */
  KVC_GQ_DEQUANT,        /* per run of KVC_GQ_RUN values of one group: dequantize_groups */
  KVC_GQ_FP8_AMAX,       /* per thread of KVC_GQ_AMAX_THREADS at most: partial amax and first NaN */
  KVC_GQ_FP8_SCALE,      /* one thread: the scale from the partials */
  KVC_GQ_FP8_ROUND_TRIP  /* per element */
};

/* Values one dequantize thread writes (a 16-byte store of float16/bfloat16 where dst allows). */
#define KVC_GQ_RUN 8
/* Threads of fp8_calibrate's first phase at most. */
#define KVC_GQ_AMAX_THREADS 16384
/* Rounds of HQQ's solver, each four phases at most (the last two). */
#define KVC_GQ_HQQ_ROUNDS KVC_HQQ_ITERS

/* A call's solver state (HQQ). */
typedef struct kvc_gq_call {
  float best;   /* the lowest mean error so far */
  int32_t stop; /* the solver has stopped */
  int32_t cur;  /* z[cur] holds the current zero points */
  int32_t pad;
} kvc_gq_call;

/* A quantize job, or a batch of its calls (calls call0 .. call0 + calls - 1). */
typedef struct kvc_gpu_quant {
  int32_t hqq, nbits, dtype, by_column; /* by_column: HQQ axis 0 (groups are the columns of hqq's matrix) */
  int32_t src_aligned, dequant_aligned; /* element loads/stores allowed (else byte by byte) */
  int64_t group, ngroups, n;            /* values per group, groups per call, values per call */
  int64_t calls1;                       /* the job's calls[1] */
  int64_t call0, calls;                 /* this batch */
  const unsigned char* src;
  kvc_quant_span src_span;
  unsigned char* records; /* NULL: not kept */
  int64_t rec_call_strides[2], rec_stride;
  unsigned char* dequant; /* NULL: not asked for */
  kvc_quant_span dequant_span;
  /* HQQ's working memory, per call of the batch (kvc_gpu_quant_bind) */
  float *w, *err, *target, *s, *z[2], *colsum, *bsum;
  kvc_gq_call* state;
  int64_t err_quads, err_blocks; /* rows of 32 errors, and full level-0 blocks of them per column */
} kvc_gpu_quant;

/* A dequantize job. */
typedef struct kvc_gpu_dequant {
  int32_t hqq, nbits, dtype, dst_aligned;
  int64_t group, lo, hi, runs; /* runs: KVC_GQ_RUN-value runs per group */
  int64_t ngroups, calls1, total_groups;
  const unsigned char* records;
  int64_t rec_call_strides[2], rec_stride;
  unsigned char* dst;
  kvc_quant_span dst_span;
} kvc_gpu_dequant;

/* An FP8 calibration or round trip over a strided 4-D region. */
typedef struct kvc_gpu_fp8 {
  int32_t dtype, src_aligned, dst_aligned, pad;
  int64_t shape[4], ss[4], ds[4], count; /* count: elements */
  const unsigned char* src;
  unsigned char* dst;
  float scale;                /* round trip */
  int64_t amax_threads;
  float* partial_max;         /* [amax_threads] */
  int64_t* partial_nan;       /* [amax_threads]: the first NaN's element number, or -1 */
  float* scale_out;           /* one float */
} kvc_gpu_fp8;

/* ---- host planning (gpu_quant_plan.c) ---- */

/* One launch: `phase` over threads 0 .. threads - 1. */
typedef struct kvc_gq_launch {
  int32_t phase;
  int64_t threads;
} kvc_gq_launch;

/* Launches of one batch of a quantize plan, at most this many. */
#define KVC_GQ_MAX_LAUNCHES (2 + 4 * KVC_GQ_HQQ_ROUNDS)

/*
 * Fills *p from job (all calls, no working memory bound yet). Returns 0, 1
 * when there is nothing to do, KVC_BACKEND_UNSUPPORTED for a spec the
 * kernels do not run (a quantizer, nbits or dtype outside backend.h's), -1
 * for an invalid job.
 */
int kvc_gpu_quant_plan(kvc_gpu_quant* p, const kvc_quantize_job* job);
/* Bytes of working memory a batch of `calls` calls needs (0 for quanto). */
size_t kvc_gpu_quant_bytes(const kvc_gpu_quant* p, int64_t calls);
/* Calls of a batch that `bytes` of working memory holds (all of them for quanto; at least 0). */
int64_t kvc_gpu_quant_calls_in(const kvc_gpu_quant* p, size_t bytes);
/* Points the batch of calls call0 .. call0 + calls - 1 at working memory `mem` (kvc_gpu_quant_bytes(p, calls)). */
void kvc_gpu_quant_bind(kvc_gpu_quant* p, void* mem, int64_t call0, int64_t calls);
/* The launches of the bound batch, in order; returns their number. */
int kvc_gpu_quant_launches(const kvc_gpu_quant* p, kvc_gq_launch out[KVC_GQ_MAX_LAUNCHES]);

/* Working memory for a batch of calls: KVC_GQ_BATCH_BYTES at most, unless one call needs more. */
#define KVC_GQ_BATCH_BYTES ((size_t)64 << 20)
/* Bytes to allocate for a plan whose job gave `given` bytes of scratch: 0 when the scratch holds every call (and
   always for quanto), else room for as many calls as KVC_GQ_BATCH_BYTES holds (at least those `given` holds). If
   that allocation fails, the job still runs in batches of the scratch it gave (one call always fits). */
size_t kvc_gpu_quant_want_bytes(const kvc_gpu_quant* p, size_t given);

/* A launch of a phase (the GPU's kernel, or the CPU's loop over the threads): 0 on success. */
typedef int (*kvc_gq_launcher)(void* ctx, const kvc_gpu_quant* p, const kvc_gq_launch* launch);
/* Runs a plan (kvc_gpu_quant_plan: all calls) in batches of what `bytes` of working memory at `mem` hold: binds
   each batch and launches its phases in order. 0, or the first failing launch's return (-1: no call fits). */
int kvc_gpu_quant_run(kvc_gpu_quant* p, void* mem, size_t bytes, kvc_gq_launcher launch, void* ctx);

/* Fills *p from a dequantize job: 0, 1 (nothing to do), KVC_BACKEND_UNSUPPORTED, or -1. Threads: p->total_groups
   * p->runs. */
int kvc_gpu_dequant_plan(kvc_gpu_dequant* p, const kvc_dequantize_job* job);

/* Fills *p for a region: 0, 1 (empty), KVC_BACKEND_UNSUPPORTED (a dtype) or -1. dst NULL for a calibration, whose
   partials and scale_out the caller then points at device memory of kvc_gpu_fp8_bytes(p) bytes (kvc_gpu_fp8_bind). */
int kvc_gpu_fp8_plan(kvc_gpu_fp8* p, const void* src, const int64_t ss[4], void* dst, const int64_t ds[4],
                     const int64_t shape[4], int32_t dtype, float scale);
size_t kvc_gpu_fp8_bytes(const kvc_gpu_fp8* p);
void kvc_gpu_fp8_bind(kvc_gpu_fp8* p, void* mem);

/* ---- the threads ---- */

KVC_GPU_HD size_t kvc_gq_elem(int32_t dtype) { return dtype == KVC_DTYPE_FLOAT32 ? 4 : 2; }

/* Element `at` of a buffer of dtype, by element loads when the buffer is aligned to its elements, else bytes. */
KVC_GPU_HD float kvc_gq_load(int32_t dtype, const unsigned char* base, int64_t at, int32_t aligned) {
  if (aligned) return kvci_load_f32((kvc_dtype)dtype, base, at);
  return kvc_qm_load_bytes((kvc_dtype)dtype, base + at * (int64_t)kvc_gq_elem(dtype));
}

KVC_GPU_HD void kvc_gq_store(int32_t dtype, unsigned char* base, int64_t at, int32_t aligned, float v) {
  if (aligned)
    kvci_store_f32((kvc_dtype)dtype, base, at, v);
  else
    kvc_qm_store_bytes((kvc_dtype)dtype, base + at * (int64_t)kvc_gq_elem(dtype), v);
}

/* Element offset of value 0 of group k of call c (c counted from call 0 of the job). */
KVC_GPU_HD int64_t kvc_gq_group_at(const kvc_quant_span* s, int64_t calls1, int64_t c, int64_t k) {
  const int64_t c0 = c / calls1, c1 = c - c0 * calls1, k0 = k / s->groups[1], k1 = k - k0 * s->groups[1];
  return c0 * s->call_strides[0] + c1 * s->call_strides[1] + k0 * s->group_strides[0] + k1 * s->group_strides[1];
}

KVC_GPU_HD int64_t kvc_gq_record_at(const int64_t call_strides[2], int64_t stride, int64_t calls1, int64_t c,
                                    int64_t k) {
  const int64_t c0 = c / calls1, c1 = c - c0 * calls1;
  return c0 * call_strides[0] + c1 * call_strides[1] + k * stride;
}

/* hqq's index of value j of group k in a call: its matrix is [groups][group] (axis 1) or [group][groups]. */
KVC_GPU_HD int64_t kvc_gq_hqq_index(const kvc_gpu_quant* p, int64_t k, int64_t j) {
  return p->by_column ? j * p->ngroups + k : k * p->group + j;
}

/* Writes group k of call c (global): its record from scale and zero (floats exact in the dtype) and the codes
   code_of(j), and its dequantized values. */
#define KVC_GQ_EMIT_GROUP(p, c, k, scale, zero, CODE_OF_J)                                                         \
  do {                                                                                                            \
    const kvc_dtype dt_ = (kvc_dtype)(p)->dtype;                                                                  \
    const int64_t elem_ = (int64_t)kvc_gq_elem((p)->dtype);                                                       \
    kvc_qm_packer pk_;                                                                                            \
    pk_.out = NULL;                                                                                               \
    pk_.acc = 0;                                                                                                  \
    pk_.held = 0;                                                                                                 \
    if ((p)->records) {                                                                                           \
      unsigned char* rec_ =                                                                                       \
          (p)->records + kvc_gq_record_at((p)->rec_call_strides, (p)->rec_stride, (p)->calls1, (c), (k));         \
      kvc_qm_store_bytes(dt_, rec_, (scale));                                                                     \
      kvc_qm_store_bytes(dt_, rec_ + elem_, (zero));                                                              \
      pk_.out = rec_ + 2 * elem_;                                                                                 \
    }                                                                                                             \
    const int64_t to_ = (p)->dequant ? kvc_gq_group_at(&(p)->dequant_span, (p)->calls1, (c), (k)) : 0;            \
    for (int64_t j = 0; j < (p)->group; j++) {                                                                    \
      const uint8_t code_ = (CODE_OF_J);                                                                          \
      if (pk_.out) kvc_qm_pack(&pk_, code_, (p)->nbits);                                                          \
      if ((p)->dequant)                                                                                           \
        kvc_gq_store((p)->dtype, (p)->dequant, to_ + j * (p)->dequant_span.value_stride, (p)->dequant_aligned,    \
                     kvc_qm_value((p)->hqq, dt_, (scale), (zero), code_));                                        \
    }                                                                                                             \
    if (pk_.out) kvc_qm_pack_end(&pk_);                                                                           \
  } while (0)

/* quanto, group t of the batch: reads its values twice (min/max, then codes), so an in-place dequantization
   overwrites each value after its last read. */
KVC_GPU_HD void kvc_gq_quanto(const kvc_gpu_quant* p, int64_t t) {
  const int64_t c = p->call0 + t / p->ngroups, k = t % p->ngroups;
  const kvc_dtype dt = (kvc_dtype)p->dtype;
  const int64_t from = kvc_gq_group_at(&p->src_span, p->calls1, c, k), vs = p->src_span.value_stride;
  const float max_code = kvci_quant_max_code(p->nbits);
  float lo = kvc_gq_load(p->dtype, p->src, from, p->src_aligned), hi = lo;
  for (int64_t j = 1; j < p->group; j++) kvc_qm_min_max(kvc_gq_load(p->dtype, p->src, from + j * vs, p->src_aligned), &lo, &hi);
  const float s = kvc_qm_quanto_scale(dt, lo, hi, max_code), shift = -lo;
  KVC_GQ_EMIT_GROUP(p, c, k, s, shift,
                    kvc_qm_quanto_code(dt, kvc_gq_load(p->dtype, p->src, from + j * vs, p->src_aligned), s, shift,
                                       max_code));
}

/* HQQ, group t of the batch: its values as float32 at their places in hqq's order, their range, the start. */
KVC_GPU_HD void kvc_gq_hqq_start(const kvc_gpu_quant* p, int64_t t) {
  const int64_t b = t / p->ngroups, k = t - b * p->ngroups;
  float* w = p->w + b * p->n;
  const int64_t from = kvc_gq_group_at(&p->src_span, p->calls1, p->call0 + b, k), vs = p->src_span.value_stride;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t j = 0; j < p->group; j++) {
    const float v = kvc_gq_load(p->dtype, p->src, from + j * vs, p->src_aligned);
    w[kvc_gq_hqq_index(p, k, j)] = v;
    if (j == 0)
      lo = hi = v;
    else
      kvc_qm_min_max(v, &lo, &hi);
  }
  kvc_qm_hqq_start(lo, hi, kvci_quant_max_code(p->nbits), &p->s[t], &p->z[0][t]);
  if (k == 0) {
    p->state[b].best = INFINITY;
    p->state[b].stop = 0;
    p->state[b].cur = 0;
  }
}

KVC_GPU_HD void kvc_gq_hqq_step(const kvc_gpu_quant* p, int64_t t) {
  const int64_t b = t / p->n, i = t - b * p->n;
  const kvc_gq_call st = p->state[b];
  if (st.stop) return;
  const int64_t k = b * p->ngroups + (p->by_column ? i % p->ngroups : i / p->group);
  const float w = p->w[t], s = p->s[k], z = p->z[st.cur][k];
  float q;
  const float d = kvc_qm_hqq_error(w, s, z, kvci_quant_max_code(p->nbits), &q);
  const float a = fabsf(d);
  /* torch's pow: vector lanes up to the last whole loop step of 16, the double pow after */
  const float pw = i < p->n - p->n % KVC_TORCH_LOOP_FLOATS ? kvc_qm_powf_vec(a, (float)KVC_HQQ_POW_EXPONENT)
                                                             : kvc_qm_pow_tail(a);
  p->err[t] = a;
  p->target[t] = kvc_qm_hqq_target(w, s, q, d, a, pw);
}

KVC_GPU_HD void kvc_gq_hqq_err_blocks(const kvc_gpu_quant* p, int64_t t);

KVC_GPU_HD void kvc_gq_hqq_means(const kvc_gpu_quant* p, int64_t t) {
  if (t >= p->calls * p->ngroups) {
    kvc_gq_hqq_err_blocks(p, t - p->calls * p->ngroups);
    return;
  }
  const int64_t b = t / p->ngroups, k = t - b * p->ngroups;
  const kvc_gq_call st = p->state[b];
  if (st.stop) return;
  const float* target = p->target + b * p->n;
  const float sum = p->by_column ? kvc_qm_sum_column(target, p->group, p->ngroups, k)
                                 : kvc_qm_sum_contiguous(target + k * p->group, p->group);
  p->z[1 - st.cur][t] = sum / (float)p->group;
}

/* The cascade of column `col` of a call's errors (rows of 32): blocks of 2^power rows. */
KVC_GPU_HD int64_t kvc_gq_err_step(const kvc_gpu_quant* p) {
  kvc_qm_cascade c;
  kvc_qm_cascade_init(&c, p->err_quads);
  return kvc_qm_cascade_step(&c);
}

KVC_GPU_HD void kvc_gq_hqq_err_blocks(const kvc_gpu_quant* p, int64_t t) {
  const int64_t per_call = KVC_TORCH_SUM_COLUMNS * p->err_blocks, b = t / per_call, r = t - b * per_call;
  if (p->state[b].stop) return;
  const int64_t col = r / p->err_blocks, blk = r - col * p->err_blocks, step = kvc_gq_err_step(p);
  const float* x = p->err + b * p->n + blk * step * KVC_TORCH_SUM_COLUMNS + col;
  p->bsum[t] = kvc_qm_block_sum(x, KVC_TORCH_SUM_COLUMNS, step);
}

KVC_GPU_HD void kvc_gq_hqq_err_columns(const kvc_gpu_quant* p, int64_t t) {
  const int64_t b = t / KVC_TORCH_SUM_COLUMNS, col = t - b * KVC_TORCH_SUM_COLUMNS;
  if (p->state[b].stop) return;
  kvc_qm_cascade c;
  kvc_qm_cascade_init(&c, p->err_quads);
  const int64_t step = kvc_qm_cascade_step(&c);
  const float* blocks = p->bsum + t * p->err_blocks;
  for (int64_t i = 0; i < p->err_blocks; i++) kvc_qm_cascade_push(&c, blocks[i]);
  const float* x = p->err + b * p->n + p->err_blocks * step * KVC_TORCH_SUM_COLUMNS + col;
  p->colsum[t] = kvc_qm_cascade_end(&c, kvc_qm_block_sum(x, KVC_TORCH_SUM_COLUMNS, p->err_quads - p->err_blocks * step));
}

KVC_GPU_HD void kvc_gq_hqq_decide(const kvc_gpu_quant* p, int64_t b) {
  kvc_gq_call* st = &p->state[b];
  if (st->stop) return;
  const float* err = p->err + b * p->n;
  float sum;
  if (p->n < KVC_TORCH_VEC_FLOATS) {
    sum = kvc_qm_sum_contiguous(err, p->n);
  } else {
    float cols[KVC_TORCH_SUM_COLUMNS];
    for (int c = 0; c < KVC_TORCH_SUM_COLUMNS; c++) cols[c] = p->colsum[b * KVC_TORCH_SUM_COLUMNS + c];
    sum = kvc_qm_sum_stored(kvc_qm_vector_row_finish(err, p->n, cols));
  }
  const float mean = sum / (float)p->n;
  st->cur = 1 - st->cur; /* the zero points just computed are kept, even when the error stopped falling */
  if (!(mean < st->best))
    st->stop = 1;
  else
    st->best = mean;
}

/* The last round decides nothing (kvc_gpu_quant_launches): a call still running keeps the zero points its means
   just computed, z[1 - cur], as decide would have made them current. */
KVC_GPU_HD void kvc_gq_hqq_finish(const kvc_gpu_quant* p, int64_t t) {
  const int64_t b = t / p->ngroups, k = t - b * p->ngroups;
  const float* w = p->w + b * p->n;
  const kvc_gq_call st = p->state[b];
  const float s = p->s[t], z = p->z[st.stop ? st.cur : 1 - st.cur][t], max_code = kvci_quant_max_code(p->nbits);
  const float scale = kvc_qm_hqq_scale((kvc_dtype)p->dtype, s), zero = kvci_round_to((kvc_dtype)p->dtype, z);
  KVC_GQ_EMIT_GROUP(p, p->call0 + b, k, scale, zero,
                    kvci_quant_code(kvc_qm_hqq_rounded(w[kvc_gq_hqq_index(p, k, j)], s, z, max_code), max_code));
}

/* Thread t of a quantize phase. */
KVC_GPU_HD void kvc_gpu_quant_thread(const kvc_gpu_quant* p, int32_t phase, int64_t t) {
  switch (phase) {
    case KVC_GQ_QUANTO: kvc_gq_quanto(p, t); break;
    case KVC_GQ_HQQ_START: kvc_gq_hqq_start(p, t); break;
    case KVC_GQ_HQQ_STEP: kvc_gq_hqq_step(p, t); break;
    case KVC_GQ_HQQ_MEANS: kvc_gq_hqq_means(p, t); break;
    case KVC_GQ_HQQ_ERR_COLUMNS: kvc_gq_hqq_err_columns(p, t); break;
    case KVC_GQ_HQQ_DECIDE: kvc_gq_hqq_decide(p, t); break;
    case KVC_GQ_HQQ_FINISH: kvc_gq_hqq_finish(p, t); break;
    default: break;
  }
}

/*
 * Thread t of dequantize_groups: values lo + r * RUN .. of group g, t = g * runs + r. Consecutive threads write
 * consecutive runs of a group, so a warp's stores are contiguous where dst is; a whole run to an aligned
 * contiguous dst is one wide store on the device.
 */
KVC_GPU_HD void kvc_gpu_dequant_thread(const kvc_gpu_dequant* p, int64_t t) {
  const int64_t g = t / p->runs, r = t - g * p->runs, c = g / p->ngroups, k = g - c * p->ngroups;
  const kvc_dtype dt = (kvc_dtype)p->dtype;
  const int64_t elem = (int64_t)kvc_gq_elem(p->dtype);
  const unsigned char* rec = p->records + kvc_gq_record_at(p->rec_call_strides, p->rec_stride, p->calls1, c, k);
  const float scale = kvc_qm_load_bytes(dt, rec), zero = kvc_qm_load_bytes(dt, rec + elem);
  const int64_t i0 = p->lo + r * KVC_GQ_RUN, i1 = i0 + KVC_GQ_RUN < p->hi ? i0 + KVC_GQ_RUN : p->hi;
  const int64_t vs = p->dst_span.value_stride;
  const int64_t at = kvc_gq_group_at(&p->dst_span, p->calls1, c, k) + (i0 - p->lo) * vs;
  float v[KVC_GQ_RUN];
  for (int64_t i = i0; i < i1; i++) v[i - i0] = kvc_qm_value(p->hqq, dt, scale, zero, kvc_qm_code_at(rec + 2 * elem, i, p->nbits));
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  unsigned char* out = p->dst + at * elem;
  if (i1 - i0 == KVC_GQ_RUN && vs == 1 && ((uintptr_t)out & 15) == 0) {
    if (elem == 2) {
      uint32_t h[KVC_GQ_RUN / 2];
      for (int j = 0; j < KVC_GQ_RUN / 2; j++) {
        const uint32_t a = dt == KVC_DTYPE_FLOAT16 ? kvci_f32_to_f16(v[2 * j]) : kvci_f32_to_bf16(v[2 * j]);
        const uint32_t b = dt == KVC_DTYPE_FLOAT16 ? kvci_f32_to_f16(v[2 * j + 1]) : kvci_f32_to_bf16(v[2 * j + 1]);
        h[j] = a | b << 16;
      }
      *(uint4*)out = make_uint4(h[0], h[1], h[2], h[3]);
    } else {
      ((float4*)out)[0] = make_float4(v[0], v[1], v[2], v[3]);
      ((float4*)out)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    return;
  }
#endif
  for (int64_t i = i0; i < i1; i++) kvc_gq_store(p->dtype, p->dst, at + (i - i0) * vs, p->dst_aligned, v[i - i0]);
}

/* Element number e of a 4-D region (row-major over shape) as an element offset under strides st. */
KVC_GPU_HD int64_t kvc_gq_offset4(const int64_t shape[4], const int64_t st[4], int64_t e) {
  const int64_t d = e % shape[3], r2 = e / shape[3], s = r2 % shape[2], r1 = r2 / shape[2], h = r1 % shape[1],
                b = r1 / shape[1];
  return b * st[0] + h * st[1] + s * st[2] + d * st[3];
}

/* Thread t of an FP8 phase. */
KVC_GPU_HD void kvc_gpu_fp8_thread(const kvc_gpu_fp8* p, int32_t phase, int64_t t) {
  if (phase == KVC_GQ_FP8_AMAX) {
    /* |x|'s maximum is exact in any order; a NaN makes the scale the first NaN's (its payload travels), so each
       thread keeps the first NaN of its elements, which come in increasing order */
    float m = 0.0f;
    int64_t nan_at = -1;
    for (int64_t e = t; e < p->count; e += p->amax_threads) {
      const float a = fabsf(kvc_gq_load(p->dtype, p->src, kvc_gq_offset4(p->shape, p->ss, e), p->src_aligned));
      if (a != a) {
        nan_at = e;
        break;
      }
      if (a > m) m = a;
    }
    p->partial_max[t] = m;
    p->partial_nan[t] = nan_at;
  } else if (phase == KVC_GQ_FP8_SCALE) {
    float m = 0.0f;
    int64_t nan_at = -1;
    for (int64_t i = 0; i < p->amax_threads; i++) {
      if (p->partial_nan[i] >= 0 && (nan_at < 0 || p->partial_nan[i] < nan_at)) nan_at = p->partial_nan[i];
      if (p->partial_max[i] > m) m = p->partial_max[i];
    }
    if (nan_at >= 0) m = fabsf(kvc_gq_load(p->dtype, p->src, kvc_gq_offset4(p->shape, p->ss, nan_at), p->src_aligned));
    *p->scale_out = kvci_fp8_scale(m);
  } else if (phase == KVC_GQ_FP8_ROUND_TRIP) {
    const float v = kvc_gq_load(p->dtype, p->src, kvc_gq_offset4(p->shape, p->ss, t), p->src_aligned);
    kvc_gq_store(p->dtype, p->dst, kvc_gq_offset4(p->shape, p->ds, t), p->dst_aligned, kvc_qm_fp8_round_trip(v, p->scale));
  }
}

#ifdef __cplusplus
}
#endif

#endif /* KVC_GPU_QUANT_PLAN_H */
