/*
 * demo: a tiny attention decoder that generates text greedily with every
 * cache kind kvcache offers, as an example of how a model uses the API.
 *
 * The model is deterministic (fixed-seed random weights, float32 math): a
 * 4-layer decoder with grouped-query attention (4 query heads share 2 KV
 * heads, head_dim 16), RoPE, RMSNorm and a SiLU MLP. Each decoding step, for
 * each layer:
 *
 *   1. kvc_cache_mask_sizes() says which key positions the next update will
 *      return (length and absolute offset of the first one);
 *   2. kvc_cache_update() stores the new keys/values and returns the views
 *      attention reads: no copies on our side;
 *   3. the mask follows the layer kind (kvc_cache_layer_info): full layers
 *      are causal, sliding layers see key positions > q - window, chunked
 *      layers see only their own chunk. Static layers return all their
 *      slots; those not written yet lie after the query, so the causal rule
 *      masks them.
 *
 * Every run is checked against a reference that keeps no cache at all and
 * recomputes attention over the whole history with the same masks: the
 * logits must agree bit for bit. The table also compares runs that must
 * agree with each other (a dynamic sliding cache and a static one of the same
 * window) and, for information, against full attention.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvcache.h"

#define VOCAB 64
#define D_MODEL 64
#define N_LAYERS 4
#define N_HEADS 4
#define N_KV_HEADS 2
#define HEAD_DIM 16
#define KV_DIM (N_KV_HEADS * HEAD_DIM)
#define D_FF 128
#define PROMPT_LEN 12
#define GEN_TOKENS 48
#define MAX_LEN (PROMPT_LEN + GEN_TOKENS) /* positions a run ever feeds */
#define WINDOW 8                          /* sliding window and chunk size */
#define ENC_LEN 10                        /* tokens of the fake encoder output */
#define REPEATS 5                         /* timed runs per cache; the best is shown */

static const int prompt[PROMPT_LEN] = {1, 7, 23, 42, 5, 17, 33, 60, 2, 9, 48, 31};

/* ------------------------------------------------------------------ model */

typedef struct layer_weights {
  float attn_norm[D_MODEL], wq[D_MODEL][D_MODEL], wk[KV_DIM][D_MODEL], wv[KV_DIM][D_MODEL];
  float wo[D_MODEL][D_MODEL];
  float cross_norm[D_MODEL], cq[D_MODEL][D_MODEL], ck[KV_DIM][D_MODEL], cv[KV_DIM][D_MODEL];
  float co[D_MODEL][D_MODEL];
  float mlp_norm[D_MODEL], w1[D_FF][D_MODEL], w2[D_MODEL][D_FF];
} layer_weights;

typedef struct model {
  float embed[VOCAB][D_MODEL];
  layer_weights layer[N_LAYERS];
  float final_norm[D_MODEL], lm_head[VOCAB][D_MODEL];
  float encoder_out[ENC_LEN][D_MODEL];
  float rope_cos[MAX_LEN][HEAD_DIM / 2], rope_sin[MAX_LEN][HEAD_DIM / 2];
} model;

static uint64_t rng_state = 0x5eed;

static float rand_uniform(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  uint64_t r = rng_state * UINT64_C(2685821657736338717);
  return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float* w, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) w[i] = rand_uniform() * scale;
}

#define FILL(arr, fan_in) fill(&(arr)[0][0], sizeof(arr) / sizeof(float), 1.7f / sqrtf((float)(fan_in)))

static void model_init(model* m) {
  fill(&m->embed[0][0], sizeof m->embed / sizeof(float), 1.0f);
  for (int l = 0; l < N_LAYERS; l++) {
    layer_weights* w = &m->layer[l];
    for (int i = 0; i < D_MODEL; i++) w->attn_norm[i] = w->cross_norm[i] = w->mlp_norm[i] = 1.0f;
    FILL(w->wq, D_MODEL); FILL(w->wk, D_MODEL); FILL(w->wv, D_MODEL); FILL(w->wo, D_MODEL);
    FILL(w->cq, D_MODEL); FILL(w->ck, D_MODEL); FILL(w->cv, D_MODEL); FILL(w->co, D_MODEL);
    FILL(w->w1, D_MODEL); FILL(w->w2, D_FF);
  }
  for (int i = 0; i < D_MODEL; i++) m->final_norm[i] = 1.0f;
  FILL(m->lm_head, D_MODEL);
  fill(&m->encoder_out[0][0], sizeof m->encoder_out / sizeof(float), 1.0f);
  for (int p = 0; p < MAX_LEN; p++)
    for (int i = 0; i < HEAD_DIM / 2; i++) {
      double angle = p * pow(10000.0, -2.0 * i / HEAD_DIM);
      m->rope_cos[p][i] = (float)cos(angle);
      m->rope_sin[p][i] = (float)sin(angle);
    }
}

static void matvec(const float* w, const float* x, int rows, int cols, float* y) {
  for (int r = 0; r < rows; r++) {
    float acc = 0.0f;
    for (int c = 0; c < cols; c++) acc += w[r * cols + c] * x[c];
    y[r] = acc;
  }
}

static void rmsnorm(const float* x, const float* weight, float* y) {
  float ss = 0.0f;
  for (int i = 0; i < D_MODEL; i++) ss += x[i] * x[i];
  float inv = 1.0f / sqrtf(ss / D_MODEL + 1e-6f);
  for (int i = 0; i < D_MODEL; i++) y[i] = x[i] * inv * weight[i];
}

/* Rotates each head's halves (transformers' rotate_half convention). */
static void rope(const model* m, float* v, int heads, int64_t pos) {
  for (int h = 0; h < heads; h++) {
    float* x = v + h * HEAD_DIM;
    for (int i = 0; i < HEAD_DIM / 2; i++) {
      float a = x[i], b = x[i + HEAD_DIM / 2], c = m->rope_cos[pos][i], s = m->rope_sin[pos][i];
      x[i] = a * c - b * s;
      x[i + HEAD_DIM / 2] = b * c + a * s;
    }
  }
}

static float bf16_round(float f) { /* round to nearest even, as torch does */
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------------------------- attention */

typedef enum { MASK_FULL, MASK_SLIDING, MASK_CHUNKED } mask_kind;
typedef struct layer_mask {
  mask_kind kind;
  int64_t window; /* sliding window or chunk size */
} layer_mask;

static int key_visible(layer_mask m, int64_t key_pos, int64_t query_pos) {
  if (key_pos > query_pos) return 0; /* causal; also hides unwritten static slots */
  if (m.kind == MASK_SLIDING) return key_pos > query_pos - m.window;
  if (m.kind == MASK_CHUNKED) return key_pos / m.window == query_pos / m.window;
  return 1;
}

/* The keys and values one query may see, gathered in position order. Both
 * the cache runs and the cache-free reference gather first and then call the
 * same kernel, so equal inputs give bit-identical logits. */
typedef struct gathered {
  int count;
  float k[MAX_LEN + ENC_LEN][N_KV_HEADS][HEAD_DIM], v[MAX_LEN + ENC_LEN][N_KV_HEADS][HEAD_DIM];
} gathered;

static void attend(const float* q /* [N_HEADS][HEAD_DIM] */, const gathered* g, float* out) {
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

/* ------------------------------------------------------------------- runs */

/* Where a run keeps its keys and values: a kvcache cache (optionally the
 * self-attention half of an EncoderDecoderCache), or, for the reference, a
 * plain array of every position's keys and values and no cache. */
typedef struct run {
  kvc_cache* cache;
  kvc_encoder_decoder_cache* encdec;
  kvc_dtype dtype;                 /* storage: KVC_DTYPE_FLOAT32 or KVC_DTYPE_BFLOAT16 */
  int cross;                       /* the model has cross-attention over the encoder output */
  layer_mask masks[N_LAYERS];      /* reference only: the mask of each layer */
  float hist_k[N_LAYERS][MAX_LEN][N_KV_HEADS][HEAD_DIM], hist_v[N_LAYERS][MAX_LEN][N_KV_HEADS][HEAD_DIM];
} run;

static void check(kvc_error* err, const char* what) {
  if (!err) return;
  fprintf(stderr, "demo: %s: %s\n", what, kvc_error_message(err));
  kvc_error_destroy(err);
  exit(1);
}

/* The layer's mask, as the cache reports its kind. */
static layer_mask mask_of(const kvc_cache* cache, uint32_t layer) {
  kvc_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(kvc_cache_layer_info(cache, layer, &info), "kvc_cache_layer_info");
  layer_mask m = {MASK_FULL, 0};
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

/* Self-attention of `n` new tokens at positions pos0.. for one layer. */
static void self_attention(run* r, uint32_t layer, int n, int64_t pos0, const float* q, float* k, float* v,
                           float* out) {
  static gathered g;
  if (r->dtype == KVC_DTYPE_BFLOAT16) /* what the cache will hold, for the reference too */
    for (int i = 0; i < n * KV_DIM; i++) k[i] = bf16_round(k[i]), v[i] = bf16_round(v[i]);

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
  int64_t ks[4], kst[4], vs[4], vst[4];
  kvc_tensor kt = kv_tensor(kdata, r->dtype, ks, kst, n), vt = kv_tensor(vdata, r->dtype, vs, vst, n);
  kvc_kv kv;
  check(kvc_cache_update(r->cache, layer, &kt, &vt, NULL, &kv), "kvc_cache_update");
  if (kv.key.shape[2] != kv_length) {
    fprintf(stderr, "demo: layer %u returned %lld keys, but kvc_cache_mask_sizes said %lld\n", layer,
            (long long)kv.key.shape[2], (long long)kv_length);
    exit(1);
  }

  /* 3. view slot j holds absolute position kv_offset + j */
  layer_mask m = mask_of(r->cache, layer);
  for (int i = 0; i < n; i++) {
    g.count = 0;
    for (int64_t j = 0; j < kv_length; j++)
      if (key_visible(m, kv_offset + j, pos0 + i)) gather_view(&g, &kv, j);
    attend(q + i * D_MODEL, &g, out + i * D_MODEL);
  }
}

/* Cross-attention over the encoder output. Its K/V are projected once, at the
 * first step, and afterwards read back from the EncoderDecoderCache. */
static void cross_attention(run* r, const model* m, uint32_t layer, int n, const float* q, float* out) {
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

/* Runs `n` tokens at positions pos0.. through the model; logits of the last. */
static void forward(run* r, const model* m, const int* tokens, int n, int64_t pos0, float* logits) {
  static float x[MAX_LEN][D_MODEL], h[MAX_LEN][D_MODEL], q[MAX_LEN][D_MODEL], att[MAX_LEN][D_MODEL];
  static float k[MAX_LEN][KV_DIM], v[MAX_LEN][KV_DIM];
  float tmp[D_FF];
  for (int i = 0; i < n; i++) memcpy(x[i], m->embed[tokens[i]], sizeof x[i]);
  for (uint32_t l = 0; l < N_LAYERS; l++) {
    const layer_weights* w = &m->layer[l];
    for (int i = 0; i < n; i++) {
      rmsnorm(x[i], w->attn_norm, h[i]);
      matvec(&w->wq[0][0], h[i], D_MODEL, D_MODEL, q[i]);
      matvec(&w->wk[0][0], h[i], KV_DIM, D_MODEL, k[i]);
      matvec(&w->wv[0][0], h[i], KV_DIM, D_MODEL, v[i]);
      rope(m, q[i], N_HEADS, pos0 + i);
      rope(m, k[i], N_KV_HEADS, pos0 + i);
    }
    self_attention(r, l, n, pos0, &q[0][0], &k[0][0], &v[0][0], &att[0][0]);
    for (int i = 0; i < n; i++) {
      matvec(&w->wo[0][0], att[i], D_MODEL, D_MODEL, tmp);
      for (int d = 0; d < D_MODEL; d++) x[i][d] += tmp[d];
    }
    if (r->cross) {
      for (int i = 0; i < n; i++) {
        rmsnorm(x[i], w->cross_norm, h[i]);
        matvec(&w->cq[0][0], h[i], D_MODEL, D_MODEL, q[i]);
      }
      cross_attention(r, m, l, n, &q[0][0], &att[0][0]);
      for (int i = 0; i < n; i++) {
        matvec(&w->co[0][0], att[i], D_MODEL, D_MODEL, tmp);
        for (int d = 0; d < D_MODEL; d++) x[i][d] += tmp[d];
      }
    }
    for (int i = 0; i < n; i++) {
      float up[D_FF];
      rmsnorm(x[i], w->mlp_norm, h[i]);
      matvec(&w->w1[0][0], h[i], D_FF, D_MODEL, up);
      for (int j = 0; j < D_FF; j++) up[j] = up[j] / (1.0f + expf(-up[j])); /* SiLU */
      matvec(&w->w2[0][0], up, D_MODEL, D_FF, tmp);
      for (int d = 0; d < D_MODEL; d++) x[i][d] += tmp[d];
    }
  }
  rmsnorm(x[n - 1], m->final_norm, h[0]);
  matvec(&m->lm_head[0][0], h[0], VOCAB, D_MODEL, logits);
}

typedef struct result {
  int tokens[GEN_TOKENS];
  float logits[GEN_TOKENS][VOCAB];
  double seconds;
  uint64_t kv_bytes;
} result;

static int argmax(const float* v) {
  int best = 0;
  for (int i = 1; i < VOCAB; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

/* Prefill the prompt in one call, then decode one token at a time. */
static void generate(run* r, const model* m, result* out) {
  forward(r, m, prompt, PROMPT_LEN, 0, out->logits[0]);
  out->tokens[0] = argmax(out->logits[0]);
  for (int t = 1; t < GEN_TOKENS; t++) {
    forward(r, m, &out->tokens[t - 1], 1, PROMPT_LEN + t - 1, out->logits[t]);
    out->tokens[t] = argmax(out->logits[t]);
  }
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t bytes_reserved(const kvc_cache* cache) {
  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  check(kvc_cache_memory(cache, &mem), "kvc_cache_memory");
  return mem.bytes_reserved;
}

/* --------------------------------------------------- the caches, by kind */

static const kvc_layer_type sss_f[N_LAYERS] = {KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
                                               KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};

static kvc_cache* create(kvc_preset preset, const kvc_model_config* config, int64_t max_cache_len) {
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = preset;
  opt.config = config;
  opt.max_cache_len = max_cache_len;
  kvc_cache* cache = NULL;
  check(kvc_cache_create(&opt, &cache), "kvc_cache_create");
  return cache;
}

/* DynamicCache(): no layers until the first update creates them. */
static kvc_cache* make_dynamic(void) { return create(KVC_PRESET_DYNAMIC, NULL, 0); }

/* DynamicCache(config=...) with layer_types: sliding layers keep window-1 tokens. */
static kvc_cache* make_dynamic_sliding(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  cfg.layer_types = sss_f;
  cfg.sliding_window = WINDOW;
  return create(KVC_PRESET_DYNAMIC, &cfg, 0);
}

/* StaticCache(config, max_cache_len): fixed buffers, allocated at the first update. */
static kvc_cache* make_static(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  return create(KVC_PRESET_STATIC, &cfg, MAX_LEN);
}

/* SlidingWindowCache: every layer a fixed ring of `window` slots. */
static kvc_cache* make_sliding_window(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  cfg.sliding_window = WINDOW;
  return create(KVC_PRESET_SLIDING_WINDOW, &cfg, MAX_LEN);
}

/* HybridCache (Gemma 2/3): every 4th layer full attention, the rest sliding. */
static kvc_cache* make_hybrid(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  cfg.sliding_window = WINDOW;
  cfg.sliding_window_pattern = 4;
  return create(KVC_PRESET_HYBRID, &cfg, MAX_LEN);
}

/* HybridChunkedCache (Llama 4): every 4th layer full attention, the rest chunked. */
static kvc_cache* make_hybrid_chunked(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  cfg.attention_chunk_size = WINDOW;
  cfg.sliding_window_pattern = 4;
  return create(KVC_PRESET_HYBRID_CHUNKED, &cfg, MAX_LEN);
}

/* A custom cache, layer by layer: three growing chunked layers and a full one. */
static kvc_cache* make_custom_chunked(void) {
  kvc_layer_options layers[N_LAYERS];
  for (int l = 0; l < N_LAYERS; l++) {
    kvc_layer_options_init(&layers[l]);
    layers[l].kind = l < 3 ? KVC_LAYER_DYNAMIC_CHUNKED : KVC_LAYER_DYNAMIC;
    layers[l].window = l < 3 ? WINDOW : 0;
  }
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_CUSTOM;
  opt.num_layers = N_LAYERS;
  opt.layers = layers;
  kvc_cache* cache = NULL;
  check(kvc_cache_create(&opt, &cache), "kvc_cache_create (custom)");
  return cache;
}

/* ------------------------------------------------------------------ table */

#define MF {MASK_FULL, 0}
#define MS {MASK_SLIDING, WINDOW}
#define MC {MASK_CHUNKED, WINDOW}

typedef struct row {
  const char* name;
  const char* layers;
  kvc_cache* (*make)(void); /* NULL: EncoderDecoderCache of two lazy DynamicCaches */
  kvc_dtype dtype;
  int cross;
  int compare_to;           /* row index that must match exactly; -1: the cache-free reference */
  layer_mask masks[N_LAYERS];
} row;

static const row rows[] = {
    {"DynamicCache (lazy)", "F F F F", make_dynamic, KVC_DTYPE_FLOAT32, 0, -1, {MF, MF, MF, MF}},
    {"DynamicCache (config, sliding)", "S S S F", make_dynamic_sliding, KVC_DTYPE_FLOAT32, 0, 4, {MS, MS, MS, MF}},
    {"StaticCache", "F F F F", make_static, KVC_DTYPE_FLOAT32, 0, 0, {MF, MF, MF, MF}},
    {"SlidingWindowCache", "S S S S", make_sliding_window, KVC_DTYPE_FLOAT32, 0, -1, {MS, MS, MS, MS}},
    {"HybridCache", "S S S F", make_hybrid, KVC_DTYPE_FLOAT32, 0, 1, {MS, MS, MS, MF}},
    {"HybridChunkedCache", "C C C F", make_hybrid_chunked, KVC_DTYPE_FLOAT32, 0, 6, {MC, MC, MC, MF}},
    {"custom (dynamic chunked)", "C C C F", make_custom_chunked, KVC_DTYPE_FLOAT32, 0, 5, {MC, MC, MC, MF}},
    {"EncoderDecoderCache", "F F F F +x", NULL, KVC_DTYPE_FLOAT32, 1, -1, {MF, MF, MF, MF}},
    {"DynamicCache (lazy), bf16 K/V", "F F F F", make_dynamic, KVC_DTYPE_BFLOAT16, 0, -1, {MF, MF, MF, MF}},
};
#define NROWS (sizeof rows / sizeof rows[0])

/* One generation with a fresh cache of this row's kind. */
static void run_cache(const row* spec, const model* m, run* r, result* out) {
  memset(r, 0, sizeof *r);
  r->dtype = spec->dtype;
  r->cross = spec->cross;
  if (spec->make) {
    r->cache = spec->make();
  } else {
    kvc_cache* self = make_dynamic();
    kvc_cache* cross = make_dynamic();
    kvc_error* err = kvc_encoder_decoder_cache_create(self, cross, &r->encdec);
    if (err) kvc_cache_destroy(self), kvc_cache_destroy(cross);
    check(err, "kvc_encoder_decoder_cache_create");
    r->cache = kvc_encoder_decoder_cache_self_attention(r->encdec);
  }
  double t0 = now_s();
  generate(r, m, out);
  out->seconds = now_s() - t0;
  if (r->encdec) {
    out->kv_bytes = bytes_reserved(r->cache) + bytes_reserved(kvc_encoder_decoder_cache_cross_attention(r->encdec));
    kvc_encoder_decoder_cache_destroy(r->encdec);
  } else {
    out->kv_bytes = bytes_reserved(r->cache);
    kvc_cache_destroy(r->cache);
  }
}

static void run_reference(const row* spec, const model* m, run* r, result* out) {
  memset(r, 0, sizeof *r);
  r->dtype = spec->dtype;
  r->cross = spec->cross;
  memcpy(r->masks, spec->masks, sizeof r->masks);
  generate(r, m, out);
}

static float max_abs_diff(const result* a, const result* b) {
  float d = 0.0f;
  for (int t = 0; t < GEN_TOKENS; t++)
    for (int i = 0; i < VOCAB; i++) d = fmaxf(d, fabsf(a->logits[t][i] - b->logits[t][i]));
  return d;
}

int main(void) {
  static model m;
  static run r;
  static result res[NROWS], ref[NROWS], scratch;
  model_init(&m);

  printf("kvcache %s demo: %d-layer decoder, %d query / %d KV heads (GQA), head_dim %d, d_model %d, vocab %d\n",
         kvc_version_string(), N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, D_MODEL, VOCAB);
  printf("prompt of %d tokens, %d tokens generated greedily; sliding window = chunk size = %d\n", PROMPT_LEN,
         GEN_TOKENS, WINDOW);
  printf("layers: F full attention, S sliding window, C chunked, +x cross-attention over %d encoder states\n\n",
         ENC_LEN);

  int failures = 0;
  for (size_t i = 0; i < NROWS; i++) {
    run_cache(&rows[i], &m, &r, &res[i]);
    for (int k = 1; k < REPEATS; k++) { /* same work again: keep the best time */
      run_cache(&rows[i], &m, &r, &scratch);
      if (scratch.seconds < res[i].seconds) res[i].seconds = scratch.seconds;
      if (max_abs_diff(&scratch, &res[i]) != 0.0f) failures++;
    }
    run_reference(&rows[i], &m, &r, &ref[i]);
    if (max_abs_diff(&res[i], &ref[i]) != 0.0f) {
      printf("MISMATCH: %s differs from the cache-free reference with the same masks by %g\n", rows[i].name,
             max_abs_diff(&res[i], &ref[i]));
      failures++;
    }
  }

  printf("%-2s %-30s %-10s %9s %9s  %-36s %11s %14s\n", "#", "cache", "layers", "tok/s", "KV bytes",
         "compared to", "max|dlogit|", "vs full attn");
  for (size_t i = 0; i < NROWS; i++) {
    char against[64], vs_full[24];
    float d;
    if (rows[i].compare_to < 0) {
      snprintf(against, sizeof against, "no-cache recompute, same masks");
      d = max_abs_diff(&res[i], &ref[i]);
    } else {
      snprintf(against, sizeof against, "#%d %s", rows[i].compare_to, rows[rows[i].compare_to].name);
      d = max_abs_diff(&res[i], &res[rows[i].compare_to]);
    }
    if (d != 0.0f) failures++;
    if (rows[i].cross)
      snprintf(vs_full, sizeof vs_full, "other model");
    else
      snprintf(vs_full, sizeof vs_full, "%.3g", max_abs_diff(&res[i], &res[0]));
    printf("%-2zu %-30s %-10s %9.0f %9llu  %-36s %11.3g %14s\n", i, rows[i].name, rows[i].layers,
           GEN_TOKENS / res[i].seconds, (unsigned long long)res[i].kv_bytes, against, d, vs_full);
  }

  printf("\ntokens of #0:");
  for (int t = 0; t < GEN_TOKENS; t++) printf(" %d", res[0].tokens[t]);
  printf("\n\nEvery run was also checked against a recompute without any cache using the same masks.\n");
  if (failures) {
    printf("FAILED: %d comparison(s) that must be exact were not\n", failures);
    return 1;
  }
  printf("All exact comparisons hold (max|dlogit| = 0). \"vs full attn\" shows what windows and bf16 change.\n");
  return 0;
}
