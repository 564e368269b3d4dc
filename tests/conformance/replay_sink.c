/*
 * replay_sink.c: the conformance operations of SinkCache (transformers 4.52,
 * spec C.6):
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
  if (r->case_failed || r->malformed) return;
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
  slot_clear(s);
  must(r, kvc_cache_create(&o, &s->cache), "kvc_cache_create");
}

static void op_slayout(replay* r) {
  int64_t si = num(r);
  /* The count shapes the rest of the operation, so it is read as structure (the self-check never corrupts it). */
  vint n = {num(r), -1};
  vint windows[MAX_LAYERS], sinks[MAX_LAYERS], maxlens[MAX_LAYERS];
  if (n.v < 0 || n.v > MAX_LAYERS) {
    malformed(r, "layer count");
    return;
  }
  for (int64_t i = 0; i < n.v; i++) {
    windows[i] = expected_num(r);
    sinks[i] = expected_num(r);
    maxlens[i] = expected_num(r);
  }
  if (r->case_failed || r->malformed) return;
  kvc_cache* c = cache_at(r, si);
  check_int(r, "number of layers", kvc_cache_num_layers(c), n);
  for (int64_t i = 0; i < n.v && !r->case_failed; i++) {
    kvc_layer_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    if (!must(r, kvc_cache_layer_info(c, (uint32_t)i, &info), "kvc_cache_layer_info")) return;
    char what[64];
    if (info.kind != KVC_LAYER_SINK || !info.is_sliding || info.capacity != info.window) {
      fail(r, "layer %lld: kind %d, is_sliding %d, capacity %lld; expected a sink layer (%d), is_sliding 1, capacity = "
              "window %lld",
           (long long)i, (int)info.kind, (int)info.is_sliding, (long long)info.capacity, (int)KVC_LAYER_SINK,
           (long long)info.window);
      return;
    }
    snprintf(what, sizeof(what), "layer %lld window", (long long)i);
    check_int(r, what, info.window, windows[i]);
    snprintf(what, sizeof(what), "layer %lld num_sink_tokens", (long long)i);
    check_int(r, what, info.num_sink_tokens, sinks[i]);
    int64_t m = 0;
    if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return;
    snprintf(what, sizeof(what), "layer %lld max_length", (long long)i);
    check_int(r, what, m, maxlens[i]);
  }
}

/* A RoPE cos or sin given as a 4-D `x` tensor [1, B, SEQ, DIM], passed with `ndim` dimensions. */
static void rope_view(vtensor* t, int ndim) {
  t->view.ndim = ndim;
  t->view.shape = t->shape + (4 - ndim);
}

static void op_supdate(replay* r) {
  int64_t si = num(r), layer = num(r);
  vtensor k, v, cos, sin, rk, rv;
  memset(&cos, 0, sizeof(cos));
  memset(&sin, 0, sizeof(sin));
  memset(&rk, 0, sizeof(rk));
  memset(&rv, 0, sizeof(rv));
  parse_tensor(r, &k);
  parse_tensor(r, &v);
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
  outcome o;
  parse_outcome(r, &o);
  if (o.ok) {
    parse_tensor(r, &rk);
    parse_tensor(r, &rv);
  }
  if (!r->case_failed && !r->malformed) {
    kvc_kv out;
    memset(&out, 0, sizeof(out));
    kvc_error* e = kvc_cache_update(cache_at(r, si), (uint32_t)layer, &k.view, &v.view, &uo, &out);
    if (check_outcome(r, e, &o) && check_tensor(r, "returned keys", &out.key, &rk))
      check_tensor(r, "returned values", &out.value, &rv);
  }
  tensor_free(&k);
  tensor_free(&v);
  tensor_free(&cos);
  tensor_free(&sin);
  tensor_free(&rk);
  tensor_free(&rv);
}

const replay_op replay_ops_sink[] = {
    {"screate", op_screate}, {"slayout", op_slayout}, {"supdate", op_supdate}, {NULL, NULL}};
