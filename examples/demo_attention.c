/*
 * examples/demo_attention.c: self- and cross-attention, through a cache or,
 * for the references, over plain arrays without any cache.
 *
 * Each decoding step, for each attention layer:
 *   1. kvc_cache_mask_sizes() says which key positions the next update will
 *      return (length and absolute offset of the first one);
 *   2. kvc_cache_update() stores the new keys/values and returns the views
 *      attention reads: no copies on our side;
 *   3. the mask follows the layer kind (kvc_cache_layer_info): full layers
 *      are causal, sliding layers see key positions > q - window, chunked
 *      layers see only their own chunk. Static layers return all their
 *      slots; those not written yet lie after the query, so the causal rule
 *      masks them. Sink layers return cache slots, and the model numbers
 *      its tokens by slot, so they are causal over slots.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

int key_visible(layer_mask m, int64_t key_pos, int64_t query_pos) {
  if (key_pos > query_pos) return 0; /* causal; also hides unwritten static slots */
  if (m.kind == MASK_SLIDING) return key_pos > query_pos - m.window;
  if (m.kind == MASK_CHUNKED) return key_pos / m.window == query_pos / m.window;
  return 1;
}

void attend(const float* q /* [N_HEADS][HEAD_DIM] */, const gathered* g, float* out) {
  for (int h = 0; h < N_HEADS; h++) {
    int kvh = h / (N_HEADS / N_KV_HEADS);
    float scores[MAX_LEN + ENC_LEN], max = -INFINITY, sum = 0.0f;
    for (int j = 0; j < g->count; j++) {
      float s = 0.0f;
      for (int d = 0; d < HEAD_DIM; d++) s += q[h * HEAD_DIM + d] * g->k[j][kvh][d];
      scores[j] = s / sqrtf((float)HEAD_DIM);
      if (scores[j] > max) max = scores[j];
    }
    for (int j = 0; j < g->count; j++) sum += scores[j] = expf(scores[j] - max);
    for (int d = 0; d < HEAD_DIM; d++) {
      float acc = 0.0f;
      for (int j = 0; j < g->count; j++) acc += scores[j] * g->v[j][kvh][d];
      out[h * HEAD_DIM + d] = acc / sum;
    }
  }
}

/* Element [0, head, pos, d] of a cache view, whatever its strides and dtype. */
static float view_at(const kvc_tensor* t, int head, int64_t pos, int d) {
  int64_t s1 = t->strides ? t->strides[1] : t->shape[2] * t->shape[3];
  int64_t s2 = t->strides ? t->strides[2] : t->shape[3];
  int64_t s3 = t->strides ? t->strides[3] : 1;
  const char* base = (const char*)t->data + t->byte_offset;
  int64_t i = head * s1 + pos * s2 + d * s3;
  if (t->dtype.bits == 32) return ((const float*)base)[i];
  uint32_t u = (uint32_t)((const uint16_t*)base)[i] << 16; /* bfloat16 */
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void gather_view(gathered* g, const kvc_kv* kv, int64_t j) {
  for (int h = 0; h < N_KV_HEADS; h++)
    for (int d = 0; d < HEAD_DIM; d++) {
      g->k[g->count][h][d] = view_at(&kv->key, h, j, d);
      g->v[g->count][h][d] = view_at(&kv->value, h, j, d);
    }
  g->count++;
}

/* The layer's mask, as the cache reports its kind. */
static layer_mask mask_of(const kvc_cache* cache, uint32_t layer) {
  kvc_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(kvc_cache_layer_info(cache, layer, &info), "kvc_cache_layer_info");
  layer_mask m = {MASK_FULL, 0};
  if (info.kind == KVC_LAYER_SINK) return m; /* its window is enforced by what it keeps */
  if (info.is_sliding) m = (layer_mask){info.is_chunked ? MASK_CHUNKED : MASK_SLIDING, info.window};
  return m;
}

/* A [1, heads, n, dim] tensor over rows laid out [n][heads][dim]: the
 * strides say so, and kvcache copies from them without a transpose here. */
static kvc_tensor kv_tensor(void* data, kvc_dtype dtype, int64_t* shape, int64_t* strides, int n) {
  shape[0] = 1, shape[1] = N_KV_HEADS, shape[2] = n, shape[3] = HEAD_DIM;
  strides[0] = (int64_t)n * KV_DIM, strides[1] = HEAD_DIM, strides[2] = KV_DIM, strides[3] = 1;
  kvc_tensor t = {data, {KVC_DEVICE_CPU, 0}, 4, kvc_dtype_to_data_type(dtype), shape, strides, 0};
  return t;
}

/*
 * The RoPE a sink row passes to kvc_cache_update so that kept keys are
 * re-rotated when they move to an earlier slot: the whole [position, dim]
 * table, or this call's rows as [1, n, dim] (SinkCache then builds its table
 * from the first calls, up to window_length rows).
 */
static void sink_rope_options(const run* r, const model* m, int n, int64_t pos0, kvc_update_options* o,
                              kvc_tensor* cos, kvc_tensor* sin, int64_t* shape) {
  int64_t first = rope_position(r, pos0);
  if (rope_position(r, pos0 + n - 1) != first + n - 1) {
    fprintf(stderr, "demo: a sink row fed %d tokens whose slots are not consecutive\n", n);
    exit(1);
  }
  int ndim = r->rope_pass == ROPE_TABLE_2D ? 2 : 3;
  if (ndim == 2)
    shape[0] = MAX_LEN, shape[1] = HEAD_DIM;
  else
    shape[0] = 1, shape[1] = n, shape[2] = HEAD_DIM;
  int64_t row = ndim == 2 ? 0 : first;
  /* borrowed for the call, only read */
  *cos = (kvc_tensor){(void*)m->rope_cos[row], {KVC_DEVICE_CPU, 0}, ndim, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32),
                      shape, NULL, 0};
  *sin = *cos;
  sin->data = (void*)m->rope_sin[row];
  o->rope_cos = cos;
  o->rope_sin = sin;
}

/*
 * StreamingLLM attention without a cache (the reference of the sink rows):
 * token t sees every token up to itself while t < window_length; afterwards
 * the first SINK_TOKENS tokens and the last window_length - SINK_TOKENS - 1
 * before it, plus itself. Each key is rotated straight to the slot it holds
 * in such a cache (`k` arrives unrotated), where the cache instead rotated it
 * once on entry and then back by one position at every shift
 * (docs/semantics.md, 'Sink layers').
 */
static void streaming_reference(run* r, const model* m, uint32_t layer, int n, int64_t pos0, const float* q,
                                const float* k, const float* v, float* out) {
  static gathered g;
  int64_t window = r->sink_window, recent = window - SINK_TOKENS - 1;
  memcpy(r->hist_k[layer][pos0], k, sizeof(float) * n * KV_DIM);
  memcpy(r->hist_v[layer][pos0], v, sizeof(float) * n * KV_DIM);
  for (int i = 0; i < n; i++) {
    int64_t t = pos0 + i;
    g.count = 0;
    for (int64_t p = 0; p <= t; p++) {
      int64_t slot = p;
      if (t >= window && p >= SINK_TOKENS) {
        if (p < t - recent) continue; /* evicted */
        slot = window - 1 - (t - p);
      }
      memcpy(g.k[g.count], r->hist_k[layer][p], sizeof g.k[0]);
      rope(m, &g.k[g.count][0][0], N_KV_HEADS, slot);
      memcpy(g.v[g.count], r->hist_v[layer][p], sizeof g.v[0]);
      g.count++;
    }
    attend(q + i * D_MODEL, &g, out + i * D_MODEL);
  }
}

void self_attention(run* r, const model* m, uint32_t layer, int n, int64_t pos0, const float* q, float* k, float* v,
                    float* out) {
  static gathered g;
  if (!r->cache && r->sink_window) {
    streaming_reference(r, m, layer, n, pos0, q, k, v, out);
    return;
  }
  for (int i = 0; i < n; i++) rope(m, k + i * KV_DIM, N_KV_HEADS, rope_position(r, pos0 + i));
  if (r->dtype == KVC_DTYPE_BFLOAT16) /* what the cache will hold, for the reference too */
    for (int i = 0; i < n * KV_DIM; i++) k[i] = bf16_round(k[i]), v[i] = bf16_round(v[i]);

  if (r->pool) { /* continuous batching: the pool holds the history */
    pool_self_attention(r, layer, n, pos0, q, k, v, out);
    return;
  }

  if (!r->cache) { /* reference: append to the history, attend over all of it */
    memcpy(r->hist_k[layer][pos0], k, sizeof(float) * n * KV_DIM);
    memcpy(r->hist_v[layer][pos0], v, sizeof(float) * n * KV_DIM);
    for (int i = 0; i < n; i++) {
      g.count = 0;
      for (int64_t p = 0; p < pos0 + n; p++) {
        if (!key_visible(r->masks[layer], p, pos0 + i)) continue;
        memcpy(g.k[g.count], r->hist_k[layer][p], sizeof g.k[0]);
        memcpy(g.v[g.count], r->hist_v[layer][p], sizeof g.v[0]);
        g.count++;
      }
      attend(q + i * D_MODEL, &g, out + i * D_MODEL);
    }
    return;
  }

  /* 1. which absolute positions the update will hand back */
  int64_t kv_length, kv_offset;
  check(kvc_cache_mask_sizes(r->cache, n, layer, &kv_length, &kv_offset), "kvc_cache_mask_sizes");

  /* 2. store the new tokens and get the views to attend over */
  uint16_t kb[MAX_LEN * KV_DIM], vb[MAX_LEN * KV_DIM];
  void *kdata = k, *vdata = v;
  if (r->dtype == KVC_DTYPE_BFLOAT16) {
    for (int i = 0; i < n * KV_DIM; i++) {
      uint32_t uk, uv;
      memcpy(&uk, &k[i], 4), memcpy(&uv, &v[i], 4);
      kb[i] = (uint16_t)(uk >> 16), vb[i] = (uint16_t)(uv >> 16); /* exact: already rounded */
    }
    kdata = kb, vdata = vb;
  }
  int64_t ks[4], kst[4], vs[4], vst[4], rope_shape[3];
  kvc_tensor kt = kv_tensor(kdata, r->dtype, ks, kst, n), vt = kv_tensor(vdata, r->dtype, vs, vst, n);
  kvc_update_options opt = KVC_UPDATE_OPTIONS_INIT;
  kvc_tensor cos, sin;
  if (r->rope_pass != ROPE_NOT_PASSED) sink_rope_options(r, m, n, pos0, &opt, &cos, &sin, rope_shape);
  kvc_kv kv;
  check(kvc_cache_update(r->cache, layer, &kt, &vt, &opt, &kv), "kvc_cache_update");
  if (kv.key.shape[2] != kv_length) {
    fprintf(stderr, "demo: layer %u returned %lld keys, but kvc_cache_mask_sizes said %lld\n", layer,
            (long long)kv.key.shape[2], (long long)kv_length);
    exit(1);
  }

  /* 3. view slot j holds position kv_offset + j */
  layer_mask mask = mask_of(r->cache, layer);
  for (int i = 0; i < n; i++) {
    g.count = 0;
    for (int64_t j = 0; j < kv_length; j++)
      if (key_visible(mask, kv_offset + j, rope_position(r, pos0 + i))) gather_view(&g, &kv, j);
    attend(q + i * D_MODEL, &g, out + i * D_MODEL);
  }
}

/* Cross-attention over the encoder output. Its K/V are projected once, at the
 * first step, and afterwards read back from the EncoderDecoderCache. */
void cross_attention(run* r, const model* m, uint32_t layer, int n, const float* q, float* out) {
  static gathered g;
  static float ek[ENC_LEN][KV_DIM], ev[ENC_LEN][KV_DIM];
  int32_t updated = 0;
  if (r->encdec) check(kvc_encoder_decoder_cache_is_updated(r->encdec, layer, &updated), "is_updated");
  if (!updated)
    for (int t = 0; t < ENC_LEN; t++) {
      matvec(&m->layer[layer].ck[0][0], m->encoder_out[t], KV_DIM, D_MODEL, ek[t]);
      matvec(&m->layer[layer].cv[0][0], m->encoder_out[t], KV_DIM, D_MODEL, ev[t]);
    }
  g.count = 0;
  if (r->encdec) {
    int64_t ks[4], kst[4], vs[4], vst[4];
    kvc_tensor kt = kv_tensor(ek, KVC_DTYPE_FLOAT32, ks, kst, ENC_LEN);
    kvc_tensor vt = kv_tensor(ev, KVC_DTYPE_FLOAT32, vs, vst, ENC_LEN);
    kvc_kv kv;
    check(kvc_encoder_decoder_cache_update_cross(r->encdec, layer, updated ? NULL : &kt, updated ? NULL : &vt,
                                                 &kv),
          "kvc_encoder_decoder_cache_update_cross");
    for (int64_t j = 0; j < kv.key.shape[2]; j++) gather_view(&g, &kv, j);
  } else {
    for (int t = 0; t < ENC_LEN; t++, g.count++) {
      memcpy(g.k[t], ek[t], sizeof g.k[0]);
      memcpy(g.v[t], ev[t], sizeof g.v[0]);
    }
  }
  for (int i = 0; i < n; i++) attend(q + i * D_MODEL, &g, out + i * D_MODEL);
}
