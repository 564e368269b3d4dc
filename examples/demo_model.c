/*
 * examples/demo_model.c: the demo's decoder. Deterministic (fixed-seed
 * random weights, float32 math): embeddings, then per layer a token mixer
 * (attention with RoPE and GQA, or the Mamba-like mixer), optional
 * cross-attention and a SiLU MLP, each behind an RMSNorm and a residual; a
 * final norm and the LM head.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

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

static void mamba_init(mamba_weights* w) {
  for (int i = 0; i < D_MODEL; i++) w->norm[i] = 1.0f;
  FILL(w->in_x, D_MODEL); FILL(w->in_gate, D_MODEL); FILL(w->conv_w, CONV_K); FILL(w->out, D_INNER);
  fill(w->conv_b, D_INNER, 0.1f);
  for (int c = 0; c < D_INNER; c++)
    for (int s = 0; s < D_STATE; s++) w->decay[c][s] = 0.5f + 0.45f * rand_uniform(); /* in (0, 1): stable */
  FILL(w->in_b, 1); FILL(w->out_c, D_STATE);
  fill(w->skip, D_INNER, 0.5f);
}

void model_init(model* m) {
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
      m->rope_cos[p][i] = m->rope_cos[p][i + HEAD_DIM / 2] = (float)cos(angle);
      m->rope_sin[p][i] = m->rope_sin[p][i + HEAD_DIM / 2] = (float)sin(angle);
    }
  /* Drawn last, so the attention weights are the same whether or not a row uses these. */
  for (int l = 0; l < N_LAYERS; l++) mamba_init(&m->mamba[l]);
}

void matvec(const float* w, const float* x, int rows, int cols, float* y) {
  for (int r = 0; r < rows; r++) {
    float acc = 0.0f;
    for (int c = 0; c < cols; c++) acc += w[r * cols + c] * x[c];
    y[r] = acc;
  }
}

void rmsnorm(const float* x, const float* weight, float* y) {
  float ss = 0.0f;
  for (int i = 0; i < D_MODEL; i++) ss += x[i] * x[i];
  float inv = 1.0f / sqrtf(ss / D_MODEL + 1e-6f);
  for (int i = 0; i < D_MODEL; i++) y[i] = x[i] * inv * weight[i];
}

float silu(float x) { return x / (1.0f + expf(-x)); }

void rope(const model* m, float* v, int heads, int64_t pos) {
  for (int h = 0; h < heads; h++) {
    float* x = v + h * HEAD_DIM;
    for (int i = 0; i < HEAD_DIM / 2; i++) {
      float a = x[i], b = x[i + HEAD_DIM / 2], c = m->rope_cos[pos][i], s = m->rope_sin[pos][i];
      x[i] = a * c - b * s;
      x[i + HEAD_DIM / 2] = b * c + a * s;
    }
  }
}

float bf16_round(float f) { /* round to nearest even, as torch does */
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

void check(kvc_error* err, const char* what) {
  if (!err) return;
  fprintf(stderr, "demo: %s: %s\n", what, kvc_error_message(err));
  kvc_error_destroy(err);
  exit(1);
}

/*
 * A sink cache holds at most window_length tokens and the model numbers them
 * by cache slot (StreamingLLM): token t lands in slot t until the window is
 * full, and every later token in the last slot, window_length - 1.
 */
int64_t rope_position(const run* r, int64_t t) {
  return r->sink_window && t >= r->sink_window ? r->sink_window - 1 : t;
}

void forward(run* r, const model* m, const int* tokens, int n, int64_t pos0, float* logits) {
  static float x[MAX_LEN][D_MODEL], h[MAX_LEN][D_MODEL], q[MAX_LEN][D_MODEL], att[MAX_LEN][D_MODEL];
  static float k[MAX_LEN][KV_DIM], v[MAX_LEN][KV_DIM];
  float tmp[D_FF];
  for (int i = 0; i < n; i++) memcpy(x[i], m->embed[tokens[i]], sizeof x[i]);
  for (uint32_t l = 0; l < N_LAYERS; l++) {
    const layer_weights* w = &m->layer[l];
    if (r->mix[l] == MIX_MAMBA) {
      mamba_mixer(r, m, l, n, pos0, &x[0][0]);
    } else {
      for (int i = 0; i < n; i++) {
        rmsnorm(x[i], w->attn_norm, h[i]);
        matvec(&w->wq[0][0], h[i], D_MODEL, D_MODEL, q[i]);
        matvec(&w->wk[0][0], h[i], KV_DIM, D_MODEL, k[i]);
        matvec(&w->wv[0][0], h[i], KV_DIM, D_MODEL, v[i]);
        rope(m, q[i], N_HEADS, rope_position(r, pos0 + i));
      }
      self_attention(r, m, l, n, pos0, &q[0][0], &k[0][0], &v[0][0], &att[0][0]);
      for (int i = 0; i < n; i++) {
        matvec(&w->wo[0][0], att[i], D_MODEL, D_MODEL, tmp);
        for (int d = 0; d < D_MODEL; d++) x[i][d] += tmp[d];
      }
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
      for (int j = 0; j < D_FF; j++) up[j] = silu(up[j]);
      matvec(&w->w2[0][0], up, D_MODEL, D_FF, tmp);
      for (int d = 0; d < D_MODEL; d++) x[i][d] += tmp[d];
    }
  }
  rmsnorm(x[n - 1], m->final_norm, h[0]);
  matvec(&m->lm_head[0][0], h[0], VOCAB, D_MODEL, logits);
}
