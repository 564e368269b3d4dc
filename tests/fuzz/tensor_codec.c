/*
 * tensor_codec.c: see tensor_codec.h.
 */
#include "tensor_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t codec_dtype_size(kvc_dtype dtype) {
  return dtype == KVC_DTYPE_FLOAT16 || dtype == KVC_DTYPE_BFLOAT16 ? 2 : 4;
}

kvc_data_type codec_data_type(kvc_dtype dtype) {
  kvc_data_type t = {KVC_TYPE_CODE_FLOAT, 32, 1};
  if (dtype == KVC_DTYPE_UNSET) t.code = KVC_TYPE_CODE_INT; /* stands for any type kvcache cannot store */
  if (dtype == KVC_DTYPE_FLOAT16) t.bits = 16;
  if (dtype == KVC_DTYPE_BFLOAT16) {
    t.code = KVC_TYPE_CODE_BFLOAT;
    t.bits = 16;
  }
  return t;
}

const char* codec_dtype_name(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_FLOAT32: return "f32";
    case KVC_DTYPE_FLOAT16: return "f16";
    case KVC_DTYPE_BFLOAT16: return "bf16";
    case KVC_DTYPE_UNSET: return "int32";
    default: return "?";
  }
}

static uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

uint32_t codec_bits(uint32_t tok, int64_t d, int is_value, kvc_dtype dtype) {
  return codec_bits_ranged(tok, d, is_value, dtype, 0);
}

uint32_t codec_bits_ranged(uint32_t tok, int64_t d, int is_value, kvc_dtype dtype, int narrow) {
  if (tok == 0) return 0;
  uint32_t h = mix32(tok * 0x9E3779B1U ^ mix32((uint32_t)d * 2U + (uint32_t)(is_value != 0)));
  uint32_t e = mix32(h);
  if (narrow) {
    switch (dtype) { /* 10 exponents from -6 (biased: float16 by 15, the others by 127) */
      case KVC_DTYPE_FLOAT16: return (h & 0x83FFU) | ((9U + e % 10U) << 10);
      case KVC_DTYPE_BFLOAT16: return (h & 0x807FU) | ((121U + e % 10U) << 7);
      default: return (h & 0x807FFFFFU) | ((121U + e % 10U) << 23);
    }
  }
  switch (dtype) {
    case KVC_DTYPE_FLOAT16: return (h & 0x83FFU) | ((1U + e % 30U) << 10);   /* exponent 1..30 */
    case KVC_DTYPE_BFLOAT16: return (h & 0x807FU) | ((1U + e % 254U) << 7); /* exponent 1..254 */
    default: return (h & 0x807FFFFFU) | ((1U + e % 254U) << 23);           /* exponent 1..254 */
  }
}

static void put_bits(unsigned char* p, uint32_t bits, size_t es) {
  if (es == 4) {
    memcpy(p, &bits, 4);
  } else {
    uint16_t b = (uint16_t)bits;
    memcpy(p, &b, 2);
  }
}

uint32_t codec_get_bits(const unsigned char* p, size_t es) {
  if (es == 4) {
    uint32_t b;
    memcpy(&b, p, 4);
    return b;
  }
  uint16_t b;
  memcpy(&b, p, 2);
  return b;
}

static uint32_t token_at(const ref_grid* g, int64_t b, int64_t h, int64_t s) {
  if (b < g->B && h < g->H && s < g->L) return g->tok[(b * g->H + h) * g->L + s];
  return 0x7fffffffU; /* only malformed inputs reach this; the library must reject them */
}

static void layout_strides(int layout, const int64_t* sh, int64_t* st, int64_t* offset) {
  int64_t B = sh[0], H = sh[1], S = sh[2], D = sh[3];
  (void)B;
  *offset = 0;
  st[3] = 1;
  st[2] = D;
  st[1] = S * D;
  st[0] = H * S * D;
  switch (layout) {
    case LAYOUT_SEQ_MAJOR:
      st[1] = D;
      st[2] = H * D;
      st[0] = S * H * D;
      break;
    case LAYOUT_PADDED:
      st[2] = D + 1;
      st[1] = S * (D + 1) + 3;
      st[0] = H * st[1] + 5;
      *offset = 7;
      break;
    case LAYOUT_INNER_STRIDE:
      st[3] = 2;
      st[2] = 2 * D;
      st[1] = 2 * S * D;
      st[0] = 2 * H * S * D;
      break;
    case LAYOUT_BCAST_BATCH: st[0] = 0; break;
    case LAYOUT_BCAST_HEADS:
      st[1] = 0;
      st[0] = S * D;
      break;
    default: break;
  }
}

void codec_broadcast_tokens(ref_grid* g, int layout) {
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->H; h++)
      for (int64_t s = 0; s < g->L; s++) {
        int64_t sb = layout == LAYOUT_BCAST_BATCH ? 0 : b, sh = layout == LAYOUT_BCAST_HEADS ? 0 : h;
        g->tok[(b * g->H + h) * g->L + s] = g->tok[(sb * g->H + sh) * g->L + s];
      }
}

void codec_build_kv(codec_tensor* kt, codec_tensor* vt, ref_tensor* k, ref_tensor* v, const int64_t ks[4],
                    const int64_t vs[4], ref_grid* tok, int64_t L, uint32_t* next_tok, int faulty, int lk, int lv,
                    int narrow) {
  memcpy(k->shape, ks, 4 * sizeof(int64_t));
  memcpy(v->shape, vs, 4 * sizeof(int64_t));
  if (k->ndim == 3) k->shape[3] = 0;
  tok->B = ks[0];
  tok->H = ks[1];
  tok->L = L;
  size_t n = (size_t)(ks[0] * ks[1] * L);
  tok->tok = calloc(n ? n : 1, sizeof(uint32_t));
  if (!tok->tok) abort();
  for (size_t i = 0; i < n; i++) tok->tok[i] = ++*next_tok;
  if (faulty) lk = lv = LAYOUT_COMPACT;
  if (lk == LAYOUT_BCAST_BATCH || lk == LAYOUT_BCAST_HEADS) codec_broadcast_tokens(tok, lk);
  if (lv == LAYOUT_BCAST_BATCH || lv == LAYOUT_BCAST_HEADS) codec_broadcast_tokens(tok, lv);
  codec_build_ranged(kt, k, tok, 0, lk, narrow);
  codec_build_ranged(vt, v, tok, 1, lv, narrow);
}

void codec_build(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int is_value, int layout) {
  codec_build_ranged(out, desc, tok, is_value, layout, 0);
}

void codec_build_ranged(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int is_value, int layout,
                        int narrow) {
  memset(out, 0, sizeof *out);
  size_t es = codec_dtype_size(desc->dtype);
  int32_t nd = desc->ndim;
  int64_t sh[4] = {1, 1, 1, 1}, st[4], offset = 0;
  for (int i = 0; i < nd && i < 4; i++) sh[i] = desc->shape[i];
  if (nd != 4) layout = LAYOUT_COMPACT;
  layout_strides(layout, sh, st, &offset);
  int64_t span = 1;
  for (int i = 0; i < 4; i++) span += sh[i] > 0 ? (sh[i] - 1) * st[i] : 0;
  size_t bytes = (size_t)(offset + span) * es;
  out->mem = malloc(bytes);
  if (!out->mem) abort();
  memset(out->mem, 0xFF, bytes); /* gaps hold NaN bits: reading one shows up as a mismatch */
  for (int64_t b = 0; b < sh[0]; b++)
    for (int64_t h = 0; h < sh[1]; h++)
      for (int64_t s = 0; s < sh[2]; s++)
        for (int64_t d = 0; d < sh[3]; d++) {
          int64_t e = offset + b * st[0] + h * st[1] + s * st[2] + d * st[3];
          put_bits(out->mem + (size_t)e * es,
                   codec_bits_ranged(token_at(tok, b, h, s), d, is_value, desc->dtype, narrow), es);
        }
  for (int i = 0; i < 4; i++) {
    out->shape[i] = desc->shape[i];
    out->strides[i] = st[i];
  }
  out->t.data = desc->no_data ? NULL : out->mem;
  out->t.device.device_type = desc->on_cpu ? KVC_DEVICE_CPU : KVC_DEVICE_CUDA;
  out->t.device.device_id = 0;
  out->t.ndim = nd;
  out->t.dtype = codec_data_type(desc->dtype);
  out->t.shape = out->shape;
  out->t.strides = layout == LAYOUT_COMPACT ? NULL : out->strides;
  out->t.byte_offset = (uint64_t)offset * es;
}

void codec_build_indexer(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int layout) {
  ref_tensor d4 = *desc;
  d4.ndim = 4;
  const int64_t shape4[4] = {desc->shape[0], 1, desc->shape[1], desc->shape[2]};
  memcpy(d4.shape, shape4, sizeof shape4);
  codec_build(out, &d4, tok, 0, layout);
  if (desc->ndim != 3) return;
  int64_t st[3] = {out->strides[0], out->strides[2], out->strides[3]};
  out->t.ndim = 3;
  for (int i = 0; i < 3; i++) {
    out->shape[i] = desc->shape[i];
    out->strides[i] = st[i];
  }
}

void codec_free(codec_tensor* t) {
  free(t->mem);
  memset(t, 0, sizeof *t);
}

#define WHY(...)                               \
  do {                                         \
    snprintf(why, why_size, __VA_ARGS__);      \
    return 0;                                  \
  } while (0)

int codec_check_view(const kvc_tensor* v, const ref_grid* want, int64_t D, kvc_dtype dtype, int is_value,
                     char* why, size_t why_size) {
  const char* kv = is_value ? "value" : "key";
  if (v->device.device_type != KVC_DEVICE_CPU || v->device.device_id != 0)
    WHY("%s view on device (%d, %d), want CPU 0", kv, v->device.device_type, v->device.device_id);
  if (v->ndim != 4) WHY("%s view has ndim %d, want 4", kv, v->ndim);
  kvc_data_type dt = codec_data_type(dtype);
  if (v->dtype.code != dt.code || v->dtype.bits != dt.bits || v->dtype.lanes != dt.lanes)
    WHY("%s view dtype {%u,%u,%u}, want {%u,%u,%u}", kv, v->dtype.code, v->dtype.bits, v->dtype.lanes, dt.code,
        dt.bits, dt.lanes);
  if (!v->shape) WHY("%s view has no shape", kv);
  int64_t want_shape[4] = {want->B, want->H, want->L, D};
  for (int i = 0; i < 4; i++)
    if (v->shape[i] != want_shape[i])
      WHY("%s view shape [%lld,%lld,%lld,%lld], want [%lld,%lld,%lld,%lld]", kv, (long long)v->shape[0],
          (long long)v->shape[1], (long long)v->shape[2], (long long)v->shape[3], (long long)want->B,
          (long long)want->H, (long long)want->L, (long long)D);
  int64_t st[4] = {want->H * want->L * D, want->L * D, D, 1};
  if (v->strides) {
    for (int i = 0; i < 4; i++) st[i] = v->strides[i];
    if (D > 1 && st[3] != 1) WHY("%s view head_dim stride %lld, the header promises 1", kv, (long long)st[3]);
  }
  if (want->B * want->H * want->L * D == 0) return 1;
  if (!v->data) WHY("%s view of %lld tokens has data NULL", kv, (long long)want->L);
  size_t es = codec_dtype_size(dtype);
  const unsigned char* base = (const unsigned char*)v->data + v->byte_offset;
  for (int64_t b = 0; b < want->B; b++)
    for (int64_t h = 0; h < want->H; h++)
      for (int64_t l = 0; l < want->L; l++)
        for (int64_t d = 0; d < D; d++) {
          int64_t e = b * st[0] + h * st[1] + l * st[2] + d * st[3];
          uint32_t tok = want->tok[(b * want->H + h) * want->L + l];
          uint32_t got = codec_get_bits(base + e * (int64_t)es, es), exp = codec_bits(tok, d, is_value, dtype);
          if (got != exp)
            WHY("%s view [b=%lld,h=%lld,pos=%lld,d=%lld] has bits 0x%x, want 0x%x (token %u%s)", kv,
                (long long)b, (long long)h, (long long)l, (long long)d, got, exp, tok, tok ? "" : ", a zero slot");
        }
  return 1;
}

int codec_check_indexer_view(const kvc_tensor* v, const ref_grid* want, int64_t D, kvc_dtype dtype, char* why,
                             size_t why_size) {
  if (v->ndim != 3) WHY("indexer view has ndim %d, want 3", v->ndim);
  if (!v->shape) WHY("indexer view has no shape");
  int64_t shape[4] = {v->shape[0], 1, v->shape[1], v->shape[2]};
  int64_t compact[3] = {v->shape[1] * v->shape[2], v->shape[2], 1};
  const int64_t* st3 = v->strides ? v->strides : compact;
  int64_t strides[4] = {st3[0], 0, st3[1], st3[2]}; /* one head: its stride is never used */
  kvc_tensor v4 = *v;
  v4.ndim = 4;
  v4.shape = shape;
  v4.strides = strides;
  return codec_check_view(&v4, want, D, dtype, 0, why, why_size);
}
