/*
 * examples/demo_mamba.c: a small Mamba-like token mixer, the layer the
 * recurrent rows put in place of attention.
 *
 * Per token: u = W_x h and a gate z = W_z h from the normed input h; a causal
 * depthwise conv over the last CONV_K values of u per channel, then SiLU
 * (v); a diagonal linear recurrence per channel, s = decay * s + b * v with
 * D_STATE values of s per channel, read out as y = skip * v + sum(c * s);
 * the output W_out (y * silu(z)) is added to the residual stream.
 *
 * With a cache, the conv's left context comes from
 * kvc_cache_update_conv_state, which returns the stored columns followed by
 * the new ones (the first call: the new ones, left-padded with zeros to
 * CONV_K), and s is read from the layer's recurrent state and written back
 * with kvc_cache_update_recurrent_state. Without a cache the mixer sees the
 * whole sequence from its first token, with zeros before it and s = 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

/* Element [0, i, j] of a 3-D float32 view, whatever its strides. */
static float at3(const kvc_tensor* t, int64_t i, int64_t j) {
  int64_t s1 = t->strides ? t->strides[1] : t->shape[2];
  int64_t s2 = t->strides ? t->strides[2] : 1;
  return ((const float*)((const char*)t->data + t->byte_offset))[i * s1 + j * s2];
}

void mamba_mixer(run* r, const model* m, uint32_t layer, int n, int64_t pos0, float* x) {
  const mamba_weights* w = &m->mamba[layer];
  static float h[MAX_LEN][D_MODEL], u[MAX_LEN][D_INNER], gate[MAX_LEN][D_INNER];
  static float cols[MAX_LEN + CONV_K][D_INNER]; /* the conv's inputs, oldest first */
  static float s[D_INNER][D_STATE];
  for (int i = 0; i < n; i++) {
    rmsnorm(x + i * D_MODEL, w->norm, h[i]);
    matvec(&w->in_x[0][0], h[i], D_INNER, D_MODEL, u[i]);
    matvec(&w->in_gate[0][0], h[i], D_INNER, D_MODEL, gate[i]);
  }

  int64_t ncols = n;
  if (r->cache) {
    /* u as [batch 1, channels, n]: time last, as conv states are laid out */
    int64_t shape[3] = {1, D_INNER, n}, strides[3] = {(int64_t)n * D_INNER, 1, D_INNER};
    kvc_tensor ut = {u, {KVC_DEVICE_CPU, 0}, 3, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32), shape, strides, 0};
    kvc_tensor full, prev;
    check(kvc_cache_update_conv_state(r->cache, layer, &ut, NULL, &full), "kvc_cache_update_conv_state");
    ncols = full.shape[2];
    for (int64_t j = 0; j < ncols; j++)
      for (int c = 0; c < D_INNER; c++) cols[j][c] = at3(&full, c, j);
    check(kvc_cache_state_view(r->cache, layer, 0, NULL, &prev), "kvc_cache_state_view");
    for (int c = 0; c < D_INNER; c++) /* not allocated before the first update: zeros */
      for (int k = 0; k < D_STATE; k++) s[c][k] = prev.data ? at3(&prev, c, k) : 0.0f;
  } else {
    if (pos0 != 0) {
      fprintf(stderr, "demo: without a cache the Mamba-like mixer recomputes from the first token\n");
      exit(1);
    }
    memcpy(cols, u, sizeof(float) * n * D_INNER);
    memset(s, 0, sizeof s);
  }

  for (int i = 0; i < n; i++) {
    int64_t col = ncols - n + i; /* this token's column */
    float y[D_INNER], o[D_MODEL];
    for (int c = 0; c < D_INNER; c++) {
      float acc = w->conv_b[c];
      for (int k = 0; k < CONV_K; k++) {
        int64_t j = col - (CONV_K - 1) + k;
        acc += w->conv_w[c][k] * (j < 0 ? 0.0f : cols[j][c]); /* the same product as a zero-padded column */
      }
      float v = silu(acc), out = w->skip[c] * v;
      for (int k = 0; k < D_STATE; k++) {
        s[c][k] = w->decay[c][k] * s[c][k] + w->in_b[c][k] * v;
        out += w->out_c[c][k] * s[c][k];
      }
      y[c] = out * silu(gate[i][c]);
    }
    matvec(&w->out[0][0], y, D_MODEL, D_INNER, o);
    for (int d = 0; d < D_MODEL; d++) x[i * D_MODEL + d] += o[d];
  }

  if (r->cache) {
    int64_t shape[3] = {1, D_INNER, D_STATE};
    kvc_tensor st = {s, {KVC_DEVICE_CPU, 0}, 3, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32), shape, NULL, 0};
    check(kvc_cache_update_recurrent_state(r->cache, layer, 0, &st, NULL), "kvc_cache_update_recurrent_state");
  }
}
