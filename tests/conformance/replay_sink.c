/*
 * replay_sink.c: the conformance operations of SinkCache (transformers 4.52,
 * docs/semantics.md, 'Sink layers'):
 *
 *   screate S WL NSINK NLAYERS        kvc_cache_create with KVC_PRESET_SINK (NLAYERS 0: no config, lazy)
 *   slayout S N (WINDOW NSINK MAXLEN)xN   layer count; each layer a SINK layer with that window and
 *                                     num_sink_tokens, is_sliding set, capacity = window (SinkCache's
 *                                     is_sliding and window_length), and kvc_cache_max_length
 *   supdate S L K V ROPE OUTCOME [RK RV]  kvc_cache_update with ROPE `-` (no RoPE) or
 *                                     `r NDIM PARTIAL COS SIN`: rope_cos/rope_sin of NDIM dimensions
 *                                     (2: [seq, dim], 3: [batch, seq, dim]) and partial_rotation_size
 *                                     PARTIAL; COS and SIN are written as `x DT 1 B SEQ DIM HEX`
 *                                     (B = 1 for NDIM 2), the exact values the model passed.
 *
 * Queries, views, reorder, clone and the refused operations use the core
 * operations of replay.c.
 */
#include <stdio.h>
#include <string.h>

#include "replay.h"

static void op_screate(replay* r) {
  slot* s = slot_at(r, num(r));
  int64_t window = num(r), sinks = num(r), layers = num(r);
  if (!runnable(r)) return;
  kvc_cache_options o;
  kvc_model_config cfg;
  kvc_cache_options_init(&o);
  kvc_model_config_init(&cfg);
  o.preset = KVC_PRESET_SINK;
  o.window_length = window;
  o.num_sink_tokens = sinks;
  if (layers > 0) {
    cfg.num_hidden_layers = (uint32_t)layers;
    o.config = &cfg;
  }
  create_in(r, s, &o);
}

typedef struct sink_rows {
  vint windows[MAX_LAYERS], sinks[MAX_LAYERS], maxlens[MAX_LAYERS];
} sink_rows;

static int sink_row(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg) {
  const sink_rows* x = arg;
  if (info->kind != KVC_LAYER_SINK || !info->is_sliding || info->capacity != info->window) {
    fail(r, "layer %lld: kind %d, is_sliding %d, capacity %lld; expected a sink layer (%d), is_sliding 1, capacity = "
            "window %lld",
         (long long)i, (int)info->kind, (int)info->is_sliding, (long long)info->capacity, (int)KVC_LAYER_SINK,
         (long long)info->window);
    return 0;
  }
  check_layer_int(r, i, "window", info->window, x->windows[i]);
  check_layer_int(r, i, "num_sink_tokens", info->num_sink_tokens, x->sinks[i]);
  return check_layer_max_length(r, c, i, x->maxlens[i]);
}

static void op_slayout(replay* r) {
  int64_t si = num(r);
  int64_t count;
  vint n = expected_layer_count(r, &count);
  sink_rows x;
  for (int64_t i = 0; i < count; i++) {
    x.windows[i] = expected_num(r);
    x.sinks[i] = expected_num(r);
    x.maxlens[i] = expected_num(r);
  }
  each_layer(r, si, n, sink_row, &x);
}

/* A RoPE cos or sin given as a 4-D `x` tensor [1, B, SEQ, DIM], passed with `ndim` dimensions. */
static void rope_view(vtensor* t, int ndim) {
  t->view.ndim = ndim;
  t->view.shape = t->shape + (4 - ndim);
}

static void op_supdate(replay* r) {
  int64_t si = num(r), layer = num(r);
  vtensor cos, sin;
  memset(&cos, 0, sizeof(cos));
  memset(&sin, 0, sizeof(sin));
  kv_update u;
  parse_kv_update(r, &u);
  kvc_update_options uo;
  kvc_update_options_init(&uo);
  char* t = tok(r);
  if (is(t, "r")) {
    int64_t ndim = num(r);
    uo.partial_rotation_size = num(r);
    parse_tensor(r, &cos);
    parse_tensor(r, &sin);
    if ((ndim != 2 && ndim != 3) || cos.kind != T_DATA || sin.kind != T_DATA ||
        (ndim == 2 && (cos.shape[1] != 1 || sin.shape[1] != 1)) || cos.shape[0] != 1 || sin.shape[0] != 1) {
      malformed(r, "RoPE tensors: r 2|3 PARTIAL x DT 1 B SEQ DIM HEX (twice; B = 1 for 2 dimensions)");
    } else {
      rope_view(&cos, (int)ndim);
      rope_view(&sin, (int)ndim);
      uo.rope_cos = &cos.view;
      uo.rope_sin = &sin.view;
    }
  } else if (!is(t, "-")) {
    malformed(r, "expected - or r");
  }
  finish_kv_update(r, si, layer, &u, &uo);
  tensor_free(&cos);
  tensor_free(&sin);
}

const replay_op replay_ops_sink[] = {
    {"screate", op_screate}, {"slayout", op_slayout}, {"supdate", op_supdate}, {NULL, NULL}};
