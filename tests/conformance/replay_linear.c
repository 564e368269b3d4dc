/*
 * replay_linear.c: the conformance operations of linear-attention layers
 * (recurrent conv and SSM states; spec A.9-A.11, C.13, C.14):
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
#include <inttypes.h>
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
  char* name = tok(r);
  int64_t maxlen = num(r), nl = num(r), sw = num(r), states = num(r), k = num(r);
  char* types = tok(r);
  static const struct {
    const char* name;
    kvc_preset preset;
  } presets[] = {{"dynamic", KVC_PRESET_DYNAMIC},
                 {"static", KVC_PRESET_STATIC},
                 {"mamba", KVC_PRESET_MAMBA},
                 {"hybrid_mamba", KVC_PRESET_HYBRID_MAMBA}};
  kvc_cache_options o;
  kvc_model_config cfg;
  kvc_layer_type lt[MAX_LAYERS];
  kvc_cache_options_init(&o);
  kvc_model_config_init(&cfg);
  o.preset = -1;
  for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
    if (is(name, presets[i].name)) o.preset = presets[i].preset;
  if (o.preset < 0) malformed(r, "unknown preset");
  if (nl < 1 || nl > MAX_LAYERS) malformed(r, "layer count");
  if (r->case_failed || r->malformed) return;
  if (types && !is(types, "-")) {
    if ((int64_t)strlen(types) != nl) {
      malformed(r, "layer_types length");
      return;
    }
    for (int64_t i = 0; i < nl; i++) {
      const char* letters = "fsclhw";
      const char* at = strchr(letters, types[i]);
      if (!at || !types[i]) {
        malformed(r, "unknown layer type letter");
        return;
      }
      lt[i] = KVC_LAYER_TYPE_FULL_ATTENTION + (kvc_layer_type)(at - letters);
    }
    cfg.layer_types = lt;
  }
  cfg.num_hidden_layers = (uint32_t)nl;
  cfg.sliding_window = sw;
  cfg.number_of_conv_states = (uint32_t)states;
  cfg.conv_kernel = k;
  o.config = &cfg;
  o.max_cache_len = maxlen;
  slot_clear(s);
  must(r, kvc_cache_create(&o, &s->cache), "kvc_cache_create");
}

static kvc_layer_kind linear_kind_of(replay* r, const char* t) {
  if (is(t, "l")) return KVC_LAYER_LINEAR;
  if (is(t, "ld")) return KVC_LAYER_LINEAR_DYNAMIC;
  if (is(t, "lds")) return KVC_LAYER_LINEAR_DYNAMIC_SLIDING;
  if (is(t, "ls")) return KVC_LAYER_LINEAR_STATIC;
  if (is(t, "lss")) return KVC_LAYER_LINEAR_STATIC_SLIDING;
  return kind_of(r, t);
}

static void op_llayout(replay* r) {
  int64_t si = num(r);
  vint n = {num(r), -1}; /* structure, not a corruptible expectation: the self-check must not desynchronize the parse */
  vint kinds[MAX_LAYERS], windows[MAX_LAYERS], maxlens[MAX_LAYERS], linear[MAX_LAYERS];
  if (n.v < 0 || n.v > MAX_LAYERS) {
    malformed(r, "layer count");
    return;
  }
  for (int64_t i = 0; i < n.v; i++) {
    kinds[i].v = linear_kind_of(r, tok(r));
    kinds[i].index = -1;
    windows[i] = expected_num(r);
    maxlens[i] = expected_num(r);
    linear[i] = expected_num(r);
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
    snprintf(what, sizeof(what), "layer %" PRId64 " kind", i);
    check_int(r, what, info.kind, kinds[i]);
    snprintf(what, sizeof(what), "layer %" PRId64 " window", i);
    check_int(r, what, info.window, windows[i]);
    snprintf(what, sizeof(what), "layer %" PRId64 " is_linear", i);
    check_int(r, what, info.is_linear, linear[i]);
    int64_t m = 0;
    if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return;
    snprintf(what, sizeof(what), "layer %" PRId64 " max_length", i);
    check_int(r, what, m, maxlens[i]);
  }
}

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
  char* p = tok(r);
  if (is(p, "p")) {
    int64_t n = num(r);
    if (n < 0 || n > 256) malformed(r, "position count");
    for (int64_t i = 0; i < n && i < 256; i++) pos[i] = num(r);
    o.cache_position = pos;
    o.cache_position_length = (uint32_t)n;
  } else if (!is(p, "-")) {
    malformed(r, "expected - or p");
  }
  outcome oc;
  parse_outcome(r, &oc);
  memset(&ret, 0, sizeof(ret));
  ret.unchecked = 1;
  if (oc.ok) parse_nd(r, &ret);
  if (x.ndim == 0 && !r->malformed) malformed(r, "conv needs an input");
  if (!r->case_failed && !r->malformed) {
    kvc_tensor out;
    memset(&out, 0, sizeof(out));
    kvc_error* e = kvc_cache_update_conv_state(cache_at(r, si), (uint32_t)layer, &x.view, &o, &out);
    if (check_outcome(r, e, &oc)) check_nd(r, "returned conv state", &out, &ret);
  }
  tensor_free(&x.t);
  tensor_free(&ret.t);
}

static void op_rec(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  ndtensor x, ret;
  parse_nd(r, &x);
  outcome oc;
  parse_outcome(r, &oc);
  memset(&ret, 0, sizeof(ret));
  ret.unchecked = 1;
  if (oc.ok) parse_nd(r, &ret);
  if (x.ndim == 0 && !r->malformed) malformed(r, "rec needs an input");
  if (!r->case_failed && !r->malformed) {
    kvc_tensor out;
    memset(&out, 0, sizeof(out));
    kvc_error* e = kvc_cache_update_recurrent_state(cache_at(r, si), (uint32_t)layer, (uint32_t)state, &x.view, &out);
    if (check_outcome(r, e, &oc)) check_nd(r, "returned recurrent state", &out, &ret);
  }
  tensor_free(&x.t);
  tensor_free(&ret.t);
}

static void op_state(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  ndtensor cv, rv;
  parse_nd(r, &cv);
  parse_nd(r, &rv);
  if (!r->case_failed && !r->malformed) {
    kvc_tensor a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (must(r, kvc_cache_state_view(cache_at(r, si), (uint32_t)layer, (uint32_t)state, &a, &b),
             "kvc_cache_state_view") &&
        check_nd(r, "conv state", &a, &cv))
      check_nd(r, "recurrent state", &b, &rv);
  }
  tensor_free(&cv.t);
  tensor_free(&rv.t);
}

static void op_hasprev(replay* r) {
  int64_t si = num(r), layer = num(r), state = num(r);
  outcome oc;
  parse_outcome(r, &oc);
  vint want = {0, -1};
  if (oc.ok) want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int got = -1;
  if (check_outcome(r, kvc_cache_has_previous_state(cache_at(r, si), (int32_t)layer, (int32_t)state, &got), &oc))
    check_int(r, "has_previous_state", got, want);
}

/* ------------------------------------------------------------------ queries */

static void op_lseqlen(replay* r) {
  int64_t si = num(r), layer = num(r);
  outcome oc;
  parse_outcome(r, &oc);
  vint want = {0, -1};
  if (oc.ok) want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int64_t got = -12345;
  if (check_outcome(r, kvc_cache_seq_length(cache_at(r, si), (uint32_t)layer, &got), &oc))
    check_int(r, "seq_length", got, want);
}

static void op_lmask(replay* r) {
  int64_t si = num(r), q = num(r), layer = num(r);
  outcome oc;
  parse_outcome(r, &oc);
  vint len = {0, -1}, off = {0, -1};
  if (oc.ok) {
    len = expected_num(r);
    off = expected_num(r);
  }
  if (r->case_failed || r->malformed) return;
  int64_t l = -12345, o = -12345;
  if (check_outcome(r, kvc_cache_mask_sizes(cache_at(r, si), q, (uint32_t)layer, &l, &o), &oc)) {
    check_int(r, "mask kv_length", l, len);
    check_int(r, "mask kv_offset", o, off);
  }
}

const replay_op replay_ops_linear[] = {{"lcreate", op_lcreate}, {"llayout", op_llayout}, {"conv", op_conv},
                                       {"rec", op_rec},         {"state", op_state},     {"hasprev", op_hasprev},
                                       {"lseqlen", op_lseqlen}, {"lmask", op_lmask},     {NULL, NULL}};
