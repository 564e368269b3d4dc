/*
 * backends/gpu/gpu_quant_plan.c: the host side of the quantizer kernels
 * (gpu_quant_plan.h): jobs checked and turned into plans, HQQ's working
 * memory laid out per batch of calls, and each batch's launches listed.
 * Plain C: the GPU backend (gpu_quant.cpp), the emulated device and the CPU
 * tests all plan with it.
 */
#include "gpu_quant_plan.h"

#include <string.h>

/* Working arrays start 16 bytes apart: kvc_quantize_scratch_bytes, sized for one call, then always holds one. */
static size_t round16(size_t b) { return (b + 15) & ~(size_t)15; }

static int spec_supported(const kvc_quant_spec* s) {
  if (s->dtype != KVC_DTYPE_FLOAT32 && s->dtype != KVC_DTYPE_FLOAT16 && s->dtype != KVC_DTYPE_BFLOAT16) return 0;
  if (s->quantizer == KVC_QUANTIZER_QUANTO) return s->nbits == 2 || s->nbits == 4;
  if (s->quantizer == KVC_QUANTIZER_HQQ) return s->nbits >= 1 && s->nbits <= 8;
  return 0;
}

/* 1 when a buffer of dtype at `p` may be read by element loads (its spans' strides are in elements). */
static int32_t elem_aligned(const void* p, int32_t dtype) { return ((uintptr_t)p % kvc_gq_elem(dtype)) == 0; }

int kvc_gpu_quant_plan(kvc_gpu_quant* p, const kvc_quantize_job* job) {
  memset(p, 0, sizeof *p);
  const kvc_quant_span* s = &job->src_span;
  if (s->calls[0] < 0 || s->calls[1] < 0 || s->groups[0] < 0 || s->groups[1] < 0 || job->group < 0) return -1;
  const int64_t ng = s->groups[0] * s->groups[1];
  if (s->calls[0] == 0 || s->calls[1] == 0 || ng == 0 || job->group == 0) return 1;
  if (!spec_supported(&job->spec)) return KVC_BACKEND_UNSUPPORTED;
  if (!job->src) return -1;
  p->hqq = job->spec.quantizer == KVC_QUANTIZER_HQQ;
  p->nbits = job->spec.nbits;
  p->dtype = job->spec.dtype;
  p->by_column = p->hqq && job->spec.axis == 0;
  p->group = job->group;
  p->ngroups = ng;
  p->n = ng * job->group;
  p->calls1 = s->calls[1];
  p->calls = s->calls[0] * s->calls[1];
  p->src = (const unsigned char*)job->src;
  p->src_span = *s;
  p->src_aligned = elem_aligned(job->src, p->dtype);
  p->records = (unsigned char*)job->records.base;
  p->rec_call_strides[0] = job->records.call_strides[0];
  p->rec_call_strides[1] = job->records.call_strides[1];
  p->rec_stride = job->records.record_stride;
  p->dequant = (unsigned char*)job->dequant;
  p->dequant_span = job->dequant_span;
  p->dequant_aligned = elem_aligned(job->dequant, p->dtype);
  p->err_quads = p->n / KVC_TORCH_SUM_COLUMNS;
  p->err_blocks = p->err_quads / kvc_gq_err_step(p);
  return 0;
}

/* The working arrays of a batch of `calls` calls, in order: w, err, target (n each), s, z[0], z[1] (ngroups
   each), colsum (32), bsum (32 * err_blocks), floats per call; then the calls' states. */
static size_t hqq_layout(const kvc_gpu_quant* p, int64_t calls, size_t at[8]) {
  const size_t c = (size_t)calls, f = sizeof(float);
  const size_t bytes[8] = {c * (size_t)p->n * f, c * (size_t)p->n * f, c * (size_t)p->n * f,
                           c * (size_t)p->ngroups * f, c * (size_t)p->ngroups * f, c * (size_t)p->ngroups * f,
                           c * KVC_TORCH_SUM_COLUMNS * f, c * KVC_TORCH_SUM_COLUMNS * (size_t)p->err_blocks * f};
  size_t total = 0;
  for (int i = 0; i < 8; i++) {
    at[i] = total;
    total += round16(bytes[i]);
  }
  return total + c * sizeof(kvc_gq_call);
}

size_t kvc_gpu_quant_bytes(const kvc_gpu_quant* p, int64_t calls) {
  size_t at[8];
  return p->hqq ? hqq_layout(p, calls, at) : 0;
}

int64_t kvc_gpu_quant_calls_in(const kvc_gpu_quant* p, size_t bytes) {
  if (!p->hqq) return p->calls;
  /* Every call adds the same bytes, rounding aside: the first guess is at most one too many. */
  const size_t one = kvc_gpu_quant_bytes(p, 1);
  int64_t n = (int64_t)(bytes / (one ? one : 1));
  if (n > p->calls) n = p->calls;
  while (n > 0 && kvc_gpu_quant_bytes(p, n) > bytes) n--;
  return n;
}

void kvc_gpu_quant_bind(kvc_gpu_quant* p, void* mem, int64_t call0, int64_t calls) {
  p->call0 = call0;
  p->calls = calls;
  if (!p->hqq) return;
  size_t at[8];
  const size_t total = hqq_layout(p, calls, at);
  char* m = (char*)mem;
  p->w = (float*)(m + at[0]);
  p->err = (float*)(m + at[1]);
  p->target = (float*)(m + at[2]);
  p->s = (float*)(m + at[3]);
  p->z[0] = (float*)(m + at[4]);
  p->z[1] = (float*)(m + at[5]);
  p->colsum = (float*)(m + at[6]);
  p->bsum = (float*)(m + at[7]);
  p->state = (kvc_gq_call*)(m + total - (size_t)calls * sizeof(kvc_gq_call));
}

static int add(kvc_gq_launch* out, int n, int32_t phase, int64_t threads) {
  out[n].phase = phase;
  out[n].threads = threads;
  return n + 1;
}

int kvc_gpu_quant_launches(const kvc_gpu_quant* p, kvc_gq_launch out[KVC_GQ_MAX_LAUNCHES]) {
  const int64_t values = p->calls * p->n, groups = p->calls * p->ngroups;
  if (!p->hqq) return add(out, 0, KVC_GQ_QUANTO, groups);
  const int64_t blocks = p->calls * KVC_TORCH_SUM_COLUMNS * p->err_blocks;
  int n = add(out, 0, KVC_GQ_HQQ_START, groups);
  /* Every round is launched: a stopped call's threads return at once (the early stop is decided on the device,
     so that nothing waits for the host). The last round's error would decide nothing: step and means only. */
  for (int r = 0; r < KVC_GQ_HQQ_ROUNDS; r++) {
    const int last = r == KVC_GQ_HQQ_ROUNDS - 1;
    n = add(out, n, KVC_GQ_HQQ_STEP, values);
    n = add(out, n, KVC_GQ_HQQ_MEANS, groups + (last ? 0 : blocks));
    if (last) break;
    if (p->n >= KVC_TORCH_VEC_FLOATS) n = add(out, n, KVC_GQ_HQQ_ERR_COLUMNS, p->calls * KVC_TORCH_SUM_COLUMNS);
    n = add(out, n, KVC_GQ_HQQ_DECIDE, p->calls);
  }
  return add(out, n, KVC_GQ_HQQ_FINISH, groups);
}

size_t kvc_gpu_quant_want_bytes(const kvc_gpu_quant* p, size_t given) {
  if (!p->hqq || kvc_gpu_quant_bytes(p, p->calls) <= given) return 0;
  int64_t calls = kvc_gpu_quant_calls_in(p, KVC_GQ_BATCH_BYTES);
  if (calls < 1) calls = 1;
  const size_t want = kvc_gpu_quant_bytes(p, calls);
  return want > given ? want : 0;
}

int kvc_gpu_quant_run(kvc_gpu_quant* p, void* mem, size_t bytes, kvc_gq_launcher launch, void* ctx) {
  const int64_t total = p->calls, per = kvc_gpu_quant_calls_in(p, bytes);
  if (per < 1) return -1;
  kvc_gq_launch l[KVC_GQ_MAX_LAUNCHES];
  for (int64_t c0 = 0; c0 < total; c0 += per) {
    kvc_gpu_quant_bind(p, mem, c0, total - c0 < per ? total - c0 : per);
    const int n = kvc_gpu_quant_launches(p, l);
    for (int i = 0; i < n; i++) {
      const int rc = launch(ctx, p, &l[i]);
      if (rc) return rc;
    }
  }
  return 0;
}

int kvc_gpu_dequant_plan(kvc_gpu_dequant* p, const kvc_dequantize_job* job) {
  memset(p, 0, sizeof *p);
  const kvc_quant_span* d = &job->dst_span;
  if (d->calls[0] < 0 || d->calls[1] < 0 || d->groups[0] < 0 || d->groups[1] < 0 || job->lo < 0 ||
      job->hi > job->group || job->lo > job->hi)
    return -1;
  const int64_t ng = d->groups[0] * d->groups[1];
  if (d->calls[0] == 0 || d->calls[1] == 0 || ng == 0 || job->hi == job->lo) return 1;
  if (!spec_supported(&job->spec)) return KVC_BACKEND_UNSUPPORTED;
  if (!job->records.base || !job->dst) return -1;
  p->hqq = job->spec.quantizer == KVC_QUANTIZER_HQQ;
  p->nbits = job->spec.nbits;
  p->dtype = job->spec.dtype;
  p->dst_aligned = elem_aligned(job->dst, p->dtype);
  p->group = job->group;
  p->lo = job->lo;
  p->hi = job->hi;
  p->runs = (job->hi - job->lo + KVC_GQ_RUN - 1) / KVC_GQ_RUN;
  p->ngroups = ng;
  p->calls1 = d->calls[1];
  p->total_groups = d->calls[0] * d->calls[1] * ng;
  p->records = (const unsigned char*)job->records.base;
  p->rec_call_strides[0] = job->records.call_strides[0];
  p->rec_call_strides[1] = job->records.call_strides[1];
  p->rec_stride = job->records.record_stride;
  p->dst = (unsigned char*)job->dst;
  p->dst_span = *d;
  return 0;
}

int kvc_gpu_fp8_plan(kvc_gpu_fp8* p, const void* src, const int64_t ss[4], void* dst, const int64_t ds[4],
                     const int64_t shape[4], int32_t dtype, float scale) {
  memset(p, 0, sizeof *p);
  int64_t count = 1;
  for (int i = 0; i < 4; i++) {
    if (shape[i] < 0) return -1;
    count *= shape[i];
  }
  if (count == 0) return 1;
  if (dtype != KVC_DTYPE_FLOAT32 && dtype != KVC_DTYPE_FLOAT16 && dtype != KVC_DTYPE_BFLOAT16)
    return KVC_BACKEND_UNSUPPORTED;
  if (!src) return -1;
  p->dtype = dtype;
  p->count = count;
  memcpy(p->shape, shape, sizeof p->shape);
  memcpy(p->ss, ss, sizeof p->ss);
  if (ds) memcpy(p->ds, ds, sizeof p->ds);
  p->src = (const unsigned char*)src;
  p->dst = (unsigned char*)dst;
  p->src_aligned = elem_aligned(src, dtype);
  p->dst_aligned = elem_aligned(dst, dtype);
  p->scale = scale;
  p->amax_threads = count < KVC_GQ_AMAX_THREADS ? count : KVC_GQ_AMAX_THREADS;
  return 0;
}

size_t kvc_gpu_fp8_bytes(const kvc_gpu_fp8* p) {
  return round16((size_t)p->amax_threads * sizeof(int64_t)) + round16((size_t)p->amax_threads * sizeof(float)) +
         sizeof(float);
}

void kvc_gpu_fp8_bind(kvc_gpu_fp8* p, void* mem) {
  char* m = (char*)mem;
  p->partial_nan = (int64_t*)m;
  m += round16((size_t)p->amax_threads * sizeof(int64_t));
  p->partial_max = (float*)m;
  m += round16((size_t)p->amax_threads * sizeof(float));
  p->scale_out = (float*)m;
}
