/*
 * replay_linear.c: the conformance operations of linear-attention layers
 * (recurrent conv and SSM states; docs/semantics.md, 'Linear-attention layers', 'Legacy Mamba caches', 'Layer types and presets' and 'The cache as a whole'):
 *
 *   lcreate S PRESET MAXLEN NL SW NSTATES K TYPES
 *        kvc_cache_create with PRESET dynamic | static | mamba | hybrid_mamba, a config of NL layers,
 *        sliding_window SW, number_of_conv_states NSTATES, conv_kernel K (0: absent) and TYPES a string
 *        of f s c l h w (full, sliding, chunked, linear_attention, hybrid, hybrid_sliding) or `-`
 *   llayout S N (KIND WINDOW MAXLEN LINEAR)xN
 *        layer count; each layer's kind (d ds dc s ss sc, and l ld lds ls lss for LINEAR and its hybrids
 *        with dynamic, dynamic sliding, static and static sliding attention), window,
 *        kvc_cache_max_length and is_linear (transformers' Cache.is_linear)
 *   conv S L I K X POS OUTCOME [RET]
 *        kvc_cache_update_conv_state of X on layer L, state_index I, conv_kernel_size K (0: not passed),
 *        POS `-` or `p N p1..pN` (the legacy cache_position protocol); RET the returned view
 *   rec S L I X OUTCOME [RET]          kvc_cache_update_recurrent_state
 *   state S L I CONV REC               kvc_cache_state_view: both states of pair I
 *   hasprev S L I OUTCOME [V]          kvc_cache_has_previous_state (L -1: KVC_ALL_LAYERS, I -1: all states)
 *   lseqlen S L OUTCOME [N]            kvc_cache_seq_length, which may refuse on linear layers
 *   lmask S Q L OUTCOME [LEN OFF]      kvc_cache_mask_sizes, likewise
 *
 * States are N-D: X, RET, CONV and REC are written NDIM followed by a 4-D
 * tensor token (replay.h) of the N-D shape padded with trailing 1s; NDIM 0
 * means "no tensor" (a state never written: data NULL, ndim 0) and `-` alone
 * means "not checked" (what transformers holds there is not kvcache's to
 * mirror, e.g. legacy caches' pre-allocated zeros).
 *
 * K/V updates, views, crop, reorder, reset, clone, record, early and maxlen
 * use the core operations of replay.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* ------------------------------------------------------------------ creation */

static void op_lcreate(replay* r) {
  slot* s = slot_at(r, num(r));
  kvc_cache_options o;
  kvc_model_config cfg;
  kvc_layer_type lt[MAX_LAYERS];
  kvc_cache_options_init(&o);
  kvc_model_config_init(&cfg);
  o.preset = preset_of(r, tok(r), PRESETS_LINEAR);
  o.max_cache_len = num(r);
  int64_t nl = num(r);
  cfg.sliding_window = num(r);
  cfg.number_of_conv_states = (uint32_t)num(r);
  cfg.conv_kernel = num(r);
  if (nl < 1 || nl > MAX_LAYERS) malformed(r, "layer count");
  cfg.num_hidden_layers = (uint32_t)nl;
  parse_layer_types(r, "fsclhw", &cfg, lt);
  o.config = &cfg;
  if (runnable(r)) create_in(r, s, &o);
}

static kvc_layer_kind linear_kind_of(replay* r, const char* t) {
  if (is(t, "l")) return KVC_LAYER_LINEAR;
  if (is(t, "ld")) return KVC_LAYER_LINEAR_DYNAMIC;
  if (is(t, "lds")) return KVC_LAYER_LINEAR_DYNAMIC_SLIDING;
  if (is(t, "ls")) return KVC_LAYER_LINEAR_STATIC;
  if (is(t, "lss")) return KVC_LAYER_LINEAR_STATIC_SLIDING;
  return kind_of(r, t);
}

static void op_llayout(replay* r) { replay_layout(r, linear_kind_of, 1); }

/* ------------------------------------------------------------------ states */

static void op_conv(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r), k = num(r);
  ndtensor x, ret;
  parse_nd(r, &x);
  int64_t pos[256];
  kvc_conv_update_options o;
  kvc_conv_update_options_init(&o);
  o.state_index = (uint32_t)state;
  o.conv_kernel_size = k;
  parse_positions(r, 0, pos, &o.cache_position, &o.cache_position_length);
  outcome oc;
  parse_nd_result(r, &x, "conv", &oc, &ret);
  kvc_tensor out;
  memset(&out, 0, sizeof(out));
  if (runnable(r))
    check_nd_result(r, kvc_cache_update_conv_state(cache_at(r, si), (uint32_t)layer, &x.view, &o, &out), &oc, &out,
                    &ret, "returned conv state");
  nd_free(&x, &ret);
}

typedef struct rec_target {
  uint32_t layer, state;
} rec_target;

static kvc_error* call_rec(kvc_cache* c, const kvc_tensor* x, kvc_tensor* out, const void* arg) {
  const rec_target* t = arg;
  return kvc_cache_update_recurrent_state(c, t->layer, t->state, x, out);
}

static void op_rec(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  rec_target t = {(uint32_t)layer, (uint32_t)state};
  replay_nd_update(r, si, "rec", "returned recurrent state", call_rec, &t);
}

static void op_state(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  ndtensor cv, rv;
  parse_nd(r, &cv);
  parse_nd(r, &rv);
  if (runnable(r)) {
    kvc_tensor a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (must(r, kvc_cache_state_view(cache_at(r, si), (uint32_t)layer, (uint32_t)state, &a, &b),
             "kvc_cache_state_view") &&
        check_nd(r, "conv state", &a, &cv))
      check_nd(r, "recurrent state", &b, &rv);
  }
  nd_free(&cv, &rv);
}

static void op_hasprev(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  outcome oc;
  vint want = parse_outcome_num(r, &oc);
  if (!runnable(r)) return;
  int got = -1;
  if (check_outcome(r, kvc_cache_has_previous_state(cache_at(r, si), (int32_t)layer, (int32_t)state, &got), &oc))
    check_int(r, "has_previous_state", got, want);
}

/* ------------------------------------------------------------------ queries */

static void op_lseqlen(replay* r) {
  int64_t si = num(r), layer = num(r);
  outcome oc;
  vint want = parse_outcome_num(r, &oc);
  if (!runnable(r)) return;
  int64_t got = -12345;
  if (check_outcome(r, kvc_cache_seq_length(cache_at(r, si), (uint32_t)layer, &got), &oc))
    check_int(r, "seq_length", got, want);
}

static void op_lmask(replay* r) {
  int64_t si = num(r), q = num(r), layer = num(r);
  outcome oc;
  vint len = parse_outcome_num(r, &oc), off = {0, -1};
  if (oc.ok) off = expected_num(r);
  if (!runnable(r)) return;
  int64_t l = -12345, o = -12345;
  if (check_outcome(r, kvc_cache_mask_sizes(cache_at(r, si), q, (uint32_t)layer, &l, &o), &oc)) {
    check_int(r, "mask kv_length", l, len);
    check_int(r, "mask kv_offset", o, off);
  }
}

const replay_op replay_ops_linear[] = {{"lcreate", op_lcreate}, {"llayout", op_llayout}, {"conv", op_conv},
                                       {"rec", op_rec},         {"state", op_state},     {"hasprev", op_hasprev},
                                       {"lseqlen", op_lseqlen}, {"lmask", op_lmask},     {NULL, NULL}};
