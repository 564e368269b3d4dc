/*
 * backends/cpu/cpu_quant_ops.c: quantize_groups, dequantize_groups and the
 * FP8 entries of the backend table on host memory. Each walks the job's
 * affine spans and runs the quantizers of quantize.h / quant_fp8.h one call
 * at a time, exactly as the core called them before they moved behind the
 * table: a call's values are gathered as float32, quantized, packed into
 * records and, when asked, dequantized and scattered back in the dtype.
 */
#include "cpu_quant_ops.h"

#include <math.h>
#include <string.h>

#include "half.h"
#include "quant_fp8.h"
#include "quantize.h"

static size_t elem_of(kvc_dtype dt) { return dt == KVC_DTYPE_FLOAT32 ? 4 : 2; }

static kvc_quantizer_spec spec_of(const kvc_quant_spec* s) {
  kvc_quantizer_spec q;
  memset(&q, 0, sizeof q);
  q.quantizer = (kvc_quantizer)s->quantizer;
  q.nbits = s->nbits;
  q.dtype = (kvc_dtype)s->dtype;
  q.axis = s->axis;
  return q;
}

/* Element offset of value 0 of group k of call (c0, c1). */
static int64_t group_at(const kvc_quant_span* s, int64_t c0, int64_t c1, int64_t k) {
  return c0 * s->call_strides[0] + c1 * s->call_strides[1] + (k / s->groups[1]) * s->group_strides[0] +
         (k % s->groups[1]) * s->group_strides[1];
}

static void* take(char** at, size_t bytes) {
  void* p = *at;
  *at += (bytes + 63) & ~(size_t)63;
  return p;
}

int kvci_cpu_quantize_groups(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job) {
  (void)ctx;
  (void)exec;
  const kvc_quant_span* s = &job->src_span;
  const int64_t ng = s->groups[0] * s->groups[1], g = job->group, n = ng * g;
  if (s->calls[0] <= 0 || s->calls[1] <= 0 || ng <= 0 || g <= 0) return 0;
  if (!job->scratch || job->scratch_bytes < kvc_quantize_scratch_bytes(ng, g)) return -1;
  const kvc_quantizer_spec spec = spec_of(&job->spec);
  const kvc_dtype dt = spec.dtype;
  const size_t elem = elem_of(dt);
  char* at = (char*)job->scratch;
  float* x = (float*)take(&at, sizeof(float) * (size_t)n);
  float* work = (float*)take(&at, sizeof(float) * (size_t)(3 * n + 3 * ng));
  float* scale = (float*)take(&at, sizeof(float) * (size_t)ng);
  float* zero = (float*)take(&at, sizeof(float) * (size_t)ng);
  uint8_t* codes = (uint8_t*)take(&at, (size_t)n);
  const kvc_quant_span* d = &job->dequant_span;
  for (int64_t c0 = 0; c0 < s->calls[0]; c0++)
    for (int64_t c1 = 0; c1 < s->calls[1]; c1++) {
      for (int64_t k = 0; k < ng; k++) {
        const int64_t from = group_at(s, c0, c1, k);
        float* v = x + k * g;
        if (s->value_stride == 1)
          for (int64_t i = 0; i < g; i++) v[i] = kvci_load_f32(dt, job->src, from + i);
        else
          for (int64_t i = 0; i < g; i++) v[i] = kvci_load_f32(dt, job->src, from + i * s->value_stride);
      }
      if (kvci_quantize_groups_in(&spec, x, ng, g, codes, scale, zero, work)) return -1;
      if (job->records.base) {
        unsigned char* rec = (unsigned char*)job->records.base + c0 * job->records.call_strides[0] +
                             c1 * job->records.call_strides[1];
        for (int64_t k = 0; k < ng; k++, rec += job->records.record_stride) {
          kvci_store_f32_unaligned(dt, rec, scale[k]);
          kvci_store_f32_unaligned(dt, rec + elem, zero[k]);
          kvci_pack_codes(codes + k * g, g, spec.nbits, rec + 2 * elem);
        }
      }
      if (!job->dequant) continue;
      kvci_dequantize_groups(&spec, codes, scale, zero, ng, g, x);
      for (int64_t k = 0; k < ng; k++) {
        const int64_t to = group_at(d, c0, c1, k);
        const float* v = x + k * g;
        if (d->value_stride == 1)
          for (int64_t i = 0; i < g; i++) kvci_store_f32(dt, job->dequant, to + i, v[i]);
        else
          for (int64_t i = 0; i < g; i++) kvci_store_f32(dt, job->dequant, to + i * d->value_stride, v[i]);
      }
    }
  return 0;
}

int kvci_cpu_dequantize_groups(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job) {
  (void)ctx;
  (void)exec;
  const kvc_quant_span* d = &job->dst_span;
  const int64_t ng = d->groups[0] * d->groups[1];
  if (d->calls[0] <= 0 || d->calls[1] <= 0 || ng <= 0 || job->hi <= job->lo) return 0;
  const kvc_quantizer_spec spec = spec_of(&job->spec);
  const size_t elem = elem_of(spec.dtype);
  for (int64_t c0 = 0; c0 < d->calls[0]; c0++)
    for (int64_t c1 = 0; c1 < d->calls[1]; c1++) {
      const unsigned char* rec = (const unsigned char*)job->records.base + c0 * job->records.call_strides[0] +
                                 c1 * job->records.call_strides[1];
      const kvc_packed_groups src = {rec + 2 * elem, rec, rec + elem, job->records.record_stride, ng, job->group};
      const kvc_dequant_dst out = {(unsigned char*)job->dst + group_at(d, c0, c1, 0) * (int64_t)elem, d->groups[1],
                                   d->group_strides[0], d->group_strides[1], d->value_stride};
      kvci_dequantize_packed(&spec, &src, job->lo, job->hi, &out);
    }
  return 0;
}

/* The element offset of (b, h, s, d) in a tensor with `strides`. */
static int64_t at4(const int64_t st[4], int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * st[0] + h * st[1] + s * st[2] + d * st[3];
}

/* torch's t.abs().amax() of a strided region: exact; a NaN anywhere gives NaN. */
int kvci_cpu_fp8_calibrate(void* ctx, const kvc_exec* exec, const void* src, const int64_t st[4],
                           const int64_t shape[4], int32_t dtype, float* scale) {
  (void)ctx;
  (void)exec;
  const kvc_dtype dt = (kvc_dtype)dtype;
  float m = 0.0f;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < shape[3]; d++) {
          float a = fabsf(kvci_load_f32(dt, src, at4(st, b, h, s, d)));
          if (isnan(a)) {
            *scale = kvci_fp8_scale(a);
            return 0;
          }
          if (a > m) m = a;
        }
  *scale = kvci_fp8_scale(m);
  return 0;
}

int kvci_cpu_fp8_round_trip(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                            const int64_t ss[4], const int64_t shape[4], int32_t dtype, float scale) {
  (void)ctx;
  (void)exec;
  const kvc_dtype dt = (kvc_dtype)dtype;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < shape[3]; d++) {
          const float v = kvci_load_f32(dt, src, at4(ss, b, h, s, d));
          kvci_store_f32(dt, dst, at4(ds, b, h, s, d), kvc_qm_fp8_round_trip(v, scale));
        }
  return 0;
}

/* A pool's fp8 write: every element of each job's rows through the e4m3fn encoder (row_shape[0] is 1). */
int kvci_cpu_fp8_encode_rows(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, const float* scales,
                             int32_t count, int32_t dtype) {
  (void)ctx;
  (void)exec;
  const kvc_dtype dt = (kvc_dtype)dtype;
  for (int32_t j = 0; j < count; j++) {
    const kvc_copy_rows_job* x = &jobs[j];
    uint8_t* dst = (uint8_t*)x->dst;
    for (int64_t r = 0; r < x->count; r++)
      for (int64_t h = 0; h < x->row_shape[1]; h++)
        for (int64_t s = 0; s < x->row_shape[2]; s++)
          for (int64_t d = 0; d < x->row_shape[3]; d++) {
            const float v = kvci_load_f32(dt, x->src, at4(x->src_strides, x->src_rows[r], h, s, d));
            dst[at4(x->dst_strides, x->dst_rows[r], h, s, d)] = kvci_fp8_e4m3fn_from_f32(v / scales[j]);
          }
  }
  return 0;
}

/* A pool's fp8 gather: codes decoded and scaled, rounded once to `dtype`. */
int kvci_cpu_fp8_decode_4d(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, const float* scales,
                           int32_t count, int32_t dtype) {
  (void)ctx;
  (void)exec;
  const kvc_dtype dt = (kvc_dtype)dtype;
  for (int32_t j = 0; j < count; j++) {
    const kvc_copy_4d* c = &copies[j];
    const uint8_t* src = (const uint8_t*)c->src;
    for (int64_t b = 0; b < c->shape[0]; b++)
      for (int64_t h = 0; h < c->shape[1]; h++)
        for (int64_t s = 0; s < c->shape[2]; s++)
          for (int64_t d = 0; d < c->shape[3]; d++) {
            const float v = kvci_fp8_e4m3fn_to_f32(src[at4(c->src_strides, b, h, s, d)]);
            kvci_store_f32(dt, c->dst, at4(c->dst_strides, b, h, s, d), v != v ? v : v * scales[j]); /* as round_trip */
          }
  }
  return 0;
}
