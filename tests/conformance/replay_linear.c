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

/* An N-D tensor of the vector file. */
typedef struct ndtensor {
  int unchecked;
  int ndim; /* 0: no tensor */
  vtensor t;
  kvc_tensor view; /* the input descriptor: t's data with ndim dimensions */
} ndtensor;

static void parse_nd(replay* r, ndtensor* x) {
  memset(x, 0, sizeof(*x));
  char* t = tok(r);
  if (is(t, "-")) {
    x->unchecked = 1;
    return;
  }
  x->ndim = t ? atoi(t) : 0;
  if (x->ndim == 0) return;
  if (x->ndim < 1 || x->ndim > 4) {
    malformed(r, "a state tensor has 1 to 4 dimensions");
    return;
  }
  parse_tensor(r, &x->t);
  for (int d = x->ndim; d < 4 && !r->malformed; d++)
    if (x->t.kind != T_NONE && x->t.shape[d] != 1) malformed(r, "padding dimensions of a state tensor must be 1");
  x->view = x->t.view;
  x->view.ndim = x->ndim;
  x->view.shape = x->t.shape;
}

/* Compares a returned state view with the expected N-D tensor through a 4-D descriptor of the same memory. */
static int check_nd(replay* r, const char* what, const kvc_tensor* got, const ndtensor* exp) {
  if (exp->unchecked) return 1;
  if (exp->ndim == 0) {
    if (got->ndim != 0 || got->data != NULL) {
      fail(r, "%s: expected no tensor (never written), got %d dimensions", what, (int)got->ndim);
      return 0;
    }
    return 1;
  }
  if (got->ndim != exp->ndim) {
    fail(r, "%s: expected %d dimensions, got %d", what, exp->ndim, (int)got->ndim);
    return 0;
  }
  int64_t shape[4], strides[4], st = 1; /* padding dims have size 1: compact strides stay compact */
  for (int d = 3; d >= 0; d--) {
    shape[d] = d < got->ndim ? got->shape[d] : 1;
    strides[d] = d < got->ndim && got->strides ? got->strides[d] : st;
    st *= shape[d];
  }
  kvc_tensor v4 = *got;
  v4.ndim = 4;
  v4.shape = shape;
  v4.strides = strides;
  return check_tensor(r, what, &v4, &exp->t);
}

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

/* OUTCOME [RET] after the input X of a state update: RET is "not checked" when absent, and X must be a tensor. */
static void parse_state_result(replay* r, const ndtensor* x, const char* op, outcome* oc, ndtensor* ret) {
  parse_outcome(r, oc);
  memset(ret, 0, sizeof(*ret));
  ret->unchecked = 1;
  if (oc->ok) parse_nd(r, ret);
  if (x->ndim == 0 && !r->malformed) {
    char what[48];
    snprintf(what, sizeof(what), "%s needs an input", op);
    malformed(r, what);
  }
}

/* Checks a state update's outcome (consuming e), then the state it returned. */
static void check_state_result(replay* r, kvc_error* e, const outcome* oc, const kvc_tensor* out, const ndtensor* ret,
                               const char* what) {
  if (check_outcome(r, e, oc)) check_nd(r, what, out, ret);
}

static void free_nd(ndtensor* a, ndtensor* b) {
  tensor_free(&a->t);
  tensor_free(&b->t);
}

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
  parse_state_result(r, &x, "conv", &oc, &ret);
  kvc_tensor out;
  memset(&out, 0, sizeof(out));
  if (runnable(r))
    check_state_result(r, kvc_cache_update_conv_state(cache_at(r, si), (uint32_t)layer, &x.view, &o, &out), &oc,
                       &out, &ret, "returned conv state");
  free_nd(&x, &ret);
}

static void op_rec(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  ndtensor x, ret;
  parse_nd(r, &x);
  outcome oc;
  parse_state_result(r, &x, "rec", &oc, &ret);
  kvc_tensor out;
  memset(&out, 0, sizeof(out));
  if (runnable(r))
    check_state_result(r,
                       kvc_cache_update_recurrent_state(cache_at(r, si), (uint32_t)layer, (uint32_t)state, &x.view,
                                                        &out),
                       &oc, &out, &ret, "returned recurrent state");
  free_nd(&x, &ret);
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
  free_nd(&cv, &rv);
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
