/*
 * replay_core.c: the conformance operations every cache kind shares (spec
 * A.1-A.7, B, C): creation from options or tensors, layouts, updates, views,
 * queries, crop, batch operations, clone, early initialization, splits and
 * stacks, and encoder-decoder pairs. Each parses its line with the steps of
 * replay_engine.c; the format is in docs/conformance.md.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "replay.h"

static void op_create(replay* r) {
  slot* s = slot_at(r, num(r));
  optspec o;
  parse_options(r, &o);
  if (runnable(r)) create_in(r, s, &o.options);
}

static void op_tensors(replay* r) {
  slot* s = slot_at(r, num(r));
  optspec o;
  parse_options(r, &o);
  int64_t n = num(r);
  if (n < 1 || n > MAX_LAYERS) {
    malformed(r, "layer count");
    return;
  }
  vtensor ks[MAX_LAYERS], vs[MAX_LAYERS];
  kvc_tensor kt[MAX_LAYERS], vt[MAX_LAYERS];
  for (int64_t i = 0; i < n; i++) {
    parse_tensor(r, &ks[i]);
    parse_tensor(r, &vs[i]);
    kt[i] = ks[i].view;
    vt[i] = vs[i].view;
  }
  if (runnable(r)) {
    slot_clear(s);
    o.options.transformers_release = r->transformers_release;
    must(r, kvc_cache_create_from_tensors(&o.options, (uint32_t)n, kt, vt, &s->cache),
         "kvc_cache_create_from_tensors");
  }
  for (int64_t i = 0; i < n; i++) {
    tensor_free(&ks[i]);
    tensor_free(&vs[i]);
  }
}

static void op_layout(replay* r) { replay_layout(r, kind_of, 0); }

static void op_nlayers(replay* r) {
  int64_t si = num(r);
  vint n = expected_num(r);
  if (!runnable(r)) return;
  check_int(r, "number of layers", kvc_cache_num_layers(cache_at(r, si)), n);
}

static void op_update(replay* r) {
  int64_t si = num(r), layer = num(r);
  kv_update u;
  parse_kv_update(r, &u);
  int64_t pos[256];
  kvc_update_options uo;
  kvc_update_options_init(&uo);
  parse_positions(r, 1, pos, &uo.cache_position, &uo.cache_position_length);
  finish_kv_update(r, si, layer, &u, &uo);
}

static kvc_error* seq_length(replay* r, int64_t si, int64_t layer, int64_t* got) {
  return kvc_cache_seq_length(cache_at(r, si), (uint32_t)layer, got);
}
static kvc_error* max_length(replay* r, int64_t si, int64_t layer, int64_t* got) {
  return kvc_cache_max_length(cache_at(r, si), layer_or_all(layer), got);
}
static void op_seqlen(replay* r) { replay_layer_query(r, seq_length, "kvc_cache_seq_length", "seq_length"); }
static void op_maxlen(replay* r) { replay_layer_query(r, max_length, "kvc_cache_max_length", "max_length"); }

static void op_usable(replay* r) {
  int64_t si = num(r), new_len = num(r), layer = num(r);
  vint want = expected_num(r);
  if (!runnable(r)) return;
  int64_t got = -12345;
  if (must(r, kvc_cache_usable_length(cache_at(r, si), new_len, (uint32_t)layer, &got), "kvc_cache_usable_length"))
    check_int(r, "usable_length", got, want);
}

static void op_mask(replay* r) {
  int64_t si = num(r), q = num(r), layer = num(r);
  vint want_len = expected_num(r), want_off = expected_num(r);
  if (!runnable(r)) return;
  int64_t len = -12345, off = -12345;
  if (must(r, kvc_cache_mask_sizes(cache_at(r, si), q, (uint32_t)layer, &len, &off), "kvc_cache_mask_sizes")) {
    check_int(r, "mask kv_length", len, want_len);
    check_int(r, "mask kv_offset", off, want_off);
  }
}

static void op_view(replay* r, int cross) {
  int64_t si = num(r), layer = num(r);
  outcome o;
  vtensor k, v;
  parse_kv_result(r, &o, &k, &v);
  if (runnable(r)) {
    kvc_cache* c = cross ? kvc_encoder_decoder_cache_cross_attention(slot_at(r, si)->ed) : cache_at(r, si);
    kvc_kv out;
    memset(&out, 0, sizeof(out));
    check_kv_result(r, kvc_cache_layer_view(c, (uint32_t)layer, &out), &o, &out, &k, &v, "stored");
  }
  tensor_free(&k);
  tensor_free(&v);
}

/* `S X OUTCOME`: an operation with one integer argument, on a cache or an encoder-decoder pair. */
typedef kvc_error* (*cache_int_op)(kvc_cache* c, int64_t x);
typedef kvc_error* (*pair_int_op)(kvc_encoder_decoder_cache* ed, int64_t x);
static void op_with_int(replay* r, cache_int_op on_cache, pair_int_op on_pair) {
  int64_t si = num(r), x = num(r);
  outcome o;
  parse_outcome(r, &o);
  if (!runnable(r)) return;
  slot* s = slot_at(r, si);
  check_outcome(r, s->ed ? on_pair(s->ed, x) : on_cache(s->cache, x), &o);
}

static void op_crop(replay* r) { op_with_int(r, kvc_cache_crop, kvc_encoder_decoder_cache_crop); }

static void op_record(replay* r) {
  int64_t si = num(r);
  if (!runnable(r)) return;
  must(r, kvc_cache_activate_past_recording(cache_at(r, si)), "kvc_cache_activate_past_recording");
}

/* reorder (beam search) and select: a list of batch indices, on a cache or an encoder-decoder pair. */
static void op_indices(replay* r, int select) {
  int64_t si = num(r), idx[64], n;
  if (!parse_indices(r, idx, &n)) return;
  outcome o;
  parse_outcome(r, &o);
  if (!runnable(r)) return;
  slot* s = slot_at(r, si);
  kvc_error* e;
  if (select)
    e = s->ed ? kvc_encoder_decoder_cache_batch_select_indices(s->ed, idx, (size_t)n)
              : kvc_cache_batch_select_indices(s->cache, idx, (size_t)n);
  else
    e = s->ed ? kvc_encoder_decoder_cache_reorder(s->ed, idx, (size_t)n) : kvc_cache_reorder(s->cache, idx, (size_t)n);
  check_outcome(r, e, &o);
}

static void op_reorder(replay* r) { op_indices(r, 0); }
static void op_select(replay* r) { op_indices(r, 1); }

static void op_repeat(replay* r) {
  op_with_int(r, kvc_cache_batch_repeat_interleave, kvc_encoder_decoder_cache_batch_repeat_interleave);
}

static void op_reset(replay* r) {
  int64_t si = num(r);
  if (!runnable(r)) return;
  slot* s = slot_at(r, si);
  must(r, s->ed ? kvc_encoder_decoder_cache_reset(s->ed) : kvc_cache_reset(s->cache), "reset");
}

static void op_clone(replay* r) {
  slot* d = slot_at(r, num(r));
  slot* s = slot_at(r, num(r));
  if (!runnable(r)) return;
  slot_clear(d);
  if (s->ed)
    must(r, kvc_encoder_decoder_cache_clone(s->ed, &d->ed), "kvc_encoder_decoder_cache_clone");
  else
    must(r, kvc_cache_clone(s->cache, &d->cache), "kvc_cache_clone");
}

static void op_drop(replay* r) {
  slot* s = slot_at(r, num(r));
  if (!runnable(r)) return;
  slot_clear(s);
}

static void op_early(replay* r) {
  int64_t si = num(r);
  kvc_init_options io;
  kvc_init_options_init(&io);
  io.batch_size = num(r);
  io.dtype = parse_dtype(r);
  int64_t heads[MAX_LAYERS], dims[MAX_LAYERS];
  char* form = tok(r);
  if (is(form, "u")) {
    io.num_kv_heads = num(r);
    io.k_head_dim = num(r);
  } else if (is(form, "l")) {
    int64_t n = num(r);
    if (n < 1 || n > MAX_LAYERS) {
      malformed(r, "layer count");
      return;
    }
    for (int64_t i = 0; i < n; i++) {
      heads[i] = num(r);
      dims[i] = num(r);
    }
    io.num_kv_heads = heads[0];
    io.k_head_dim = dims[0];
    io.num_kv_heads_per_layer = heads;
    io.head_dim_per_layer = dims;
  } else {
    malformed(r, "expected u or l");
  }
  if (!runnable(r)) return;
  must(r, kvc_cache_early_initialization(cache_at(r, si), &io), "kvc_cache_early_initialization");
}

/* The emptied slot that part i of a split goes to, or NULL when the line names fewer slots than parts. */
static slot* split_target(replay* r, const int64_t* dst, int64_t count, size_t i) {
  if ((int64_t)i >= count) return NULL;
  slot* d = slot_at(r, dst[i]);
  slot_clear(d);
  return d;
}

static void op_split(replay* r) {
  int64_t si = num(r), full = num(r), size = num(r), count, dst[MAX_SLOTS];
  if (!parse_list(r, dst, &count, MAX_SLOTS, "split count") || !runnable(r)) return;
  slot* s = slot_at(r, si);
  size_t got = 0;
  if (s->ed) {
    kvc_encoder_decoder_cache* out[MAX_SLOTS];
    if (!must(r, kvc_encoder_decoder_cache_batch_split(s->ed, full, size, out, MAX_SLOTS, &got),
              "kvc_encoder_decoder_cache_batch_split"))
      return;
    for (size_t i = 0; i < got; i++) {
      slot* d = split_target(r, dst, count, i);
      if (d) d->ed = out[i];
      else kvc_encoder_decoder_cache_destroy(out[i]);
    }
  } else {
    kvc_cache* out[MAX_SLOTS];
    if (!must(r, kvc_cache_batch_split(s->cache, full, size, out, MAX_SLOTS, &got), "kvc_cache_batch_split"))
      return;
    for (size_t i = 0; i < got; i++) {
      slot* d = split_target(r, dst, count, i);
      if (d) d->cache = out[i];
      else kvc_cache_destroy(out[i]);
    }
  }
  vint want = {count, -1};
  check_int(r, "number of splits", (int64_t)got, want);
}

static void op_stack(replay* r) {
  int64_t di = num(r), n, src[MAX_SLOTS];
  if (!parse_list(r, src, &n, MAX_SLOTS, "split count") || !runnable(r)) return;
  slot* d = slot_at(r, di);
  if (slot_at(r, src[0])->ed) {
    const kvc_encoder_decoder_cache* parts[MAX_SLOTS];
    for (int64_t i = 0; i < n; i++) parts[i] = slot_at(r, src[i])->ed;
    kvc_encoder_decoder_cache* out = NULL;
    if (must(r, kvc_encoder_decoder_cache_from_batch_splits(parts, (size_t)n, &out),
             "kvc_encoder_decoder_cache_from_batch_splits")) {
      slot_clear(d);
      d->ed = out;
    }
  } else {
    const kvc_cache* parts[MAX_SLOTS];
    for (int64_t i = 0; i < n; i++) parts[i] = slot_at(r, src[i])->cache;
    kvc_cache* out = NULL;
    if (must(r, kvc_cache_from_batch_splits(parts, (size_t)n, &out), "kvc_cache_from_batch_splits")) {
      slot_clear(d);
      d->cache = out;
    }
  }
}

static void op_edcreate(replay* r) {
  slot* e = slot_at(r, num(r));
  slot* a = slot_at(r, num(r));
  slot* x = slot_at(r, num(r));
  if (!runnable(r)) return;
  kvc_encoder_decoder_cache* ed = NULL;
  if (!must(r, kvc_encoder_decoder_cache_create(a->cache, x->cache, &ed), "kvc_encoder_decoder_cache_create"))
    return;
  a->cache = x->cache = NULL; /* owned by the pair now */
  slot_clear(e);
  e->ed = ed;
}

static void op_cross(replay* r) {
  int64_t si = num(r), layer = num(r);
  kv_update u;
  parse_kv_update(r, &u);
  parse_kv_result(r, &u.o, &u.rk, &u.rv);
  if (runnable(r))
    check_kv_result(r,
                    kvc_encoder_decoder_cache_update_cross(slot_at(r, si)->ed, (uint32_t)layer,
                                                           u.k.kind == T_DATA ? &u.k.view : NULL,
                                                           u.v.kind == T_DATA ? &u.v.view : NULL, &u.out),
                    &u.o, &u.out, &u.rk, &u.rv, "cross");
  kv_update_free(&u);
}

static kvc_error* is_updated(replay* r, int64_t si, int64_t layer, int64_t* got) {
  int32_t v = -1;
  kvc_error* e = kvc_encoder_decoder_cache_is_updated(slot_at(r, si)->ed, (uint32_t)layer, &v);
  *got = v;
  return e;
}
static void op_isupd(replay* r) {
  replay_layer_query(r, is_updated, "kvc_encoder_decoder_cache_is_updated", "is_updated");
}

/* ------------------------------------------------------------------ files */

static void op_view_self(replay* r) { op_view(r, 0); }
static void op_view_cross(replay* r) { op_view(r, 1); }

const replay_op replay_ops_core[] = {
    {"create", op_create}, {"tensors", op_tensors},   {"layout", op_layout}, {"nlayers", op_nlayers},
    {"update", op_update}, {"seqlen", op_seqlen},     {"maxlen", op_maxlen}, {"mask", op_mask},
    {"usable", op_usable}, {"view", op_view_self},    {"xview", op_view_cross}, {"crop", op_crop},
    {"record", op_record}, {"reorder", op_reorder},   {"repeat", op_repeat}, {"select", op_select},
    {"reset", op_reset},   {"clone", op_clone},       {"drop", op_drop},     {"early", op_early},
    {"split", op_split},   {"stack", op_stack},       {"edcreate", op_edcreate}, {"cross", op_cross},
    {"isupd", op_isupd},   {NULL, NULL}};
