/*
 * replay_assisted.c: the conformance operations of what assisted and
 * speculative decoding ask of a cache (transformers 5.14-5.24; generate.py's
 * v5_queries and v5_static_crop families):
 *
 *   rcreate S RULE OPTS     kvc_cache_create with OPTS as for `create` and query_offset_rule
 *                           RULE: `mtp` (MtpCache) or `dflash` (DFlashCache)
 *   accepted S N OUTCOME    kvc_cache_set_previous_accepted_tokens
 *   qoffset S L N           kvc_cache_query_offset (get_query_offset)
 *   croppable S L N         kvc_cache_is_croppable (L = -1: KVC_ALL_LAYERS, the cache's)
 *   bsize S OUTCOME [N]     kvc_cache_batch_size (Cache.batch_size)
 *   dcrop S X DIFF tf TFOUT N c1..cN kv OUTCOME N k1..kN
 *                           a crop where kvcache deliberately differs from transformers:
 *                           DIFF is the number of the difference in
 *                           docs/differences-from-transformers.md; `tf` records what
 *                           transformers did (TFOUT `ok` or `raise:CLASS`, then every layer's
 *                           counter after the call: documentation, not checked, but it must
 *                           differ from the kv part); `kv` is what kvcache must do: the outcome
 *                           of kvc_cache_crop and every layer's kvc_cache_seq_length after it
 *
 * A dcrop naming a difference this table does not know is a malformed file, so
 * a difference can only enter the vectors by being listed here and documented.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "replay.h"

/* The differences a dcrop may name: 61 (static sliding window moved: kvcache refuses),
 * 62 (static layers: positive crop is the legacy length, a crop past the start stops at 0). */
static int known_crop_difference(int64_t d) { return d == 61 || d == 62; }

static void op_rcreate(replay* r) {
  slot* s = slot_at(r, num(r));
  char* rule = tok(r);
  optspec o;
  parse_options(r, &o);
  if (is(rule, "mtp"))
    o.options.query_offset_rule = KVC_QUERY_OFFSET_MTP;
  else if (is(rule, "dflash"))
    o.options.query_offset_rule = KVC_QUERY_OFFSET_DFLASH;
  else
    malformed(r, "query offset rule");
  if (runnable(r)) create_in(r, s, &o.options);
}

static void op_accepted(replay* r) {
  int64_t si = num(r), n = num(r);
  outcome o;
  parse_outcome(r, &o);
  if (runnable(r)) check_outcome(r, kvc_cache_set_previous_accepted_tokens(cache_at(r, si), n), &o);
}

static kvc_error* query_offset(replay* r, int64_t si, int64_t layer, int64_t* got) {
  return kvc_cache_query_offset(cache_at(r, si), (uint32_t)layer, got);
}
static kvc_error* is_croppable(replay* r, int64_t si, int64_t layer, int64_t* got) {
  uint8_t v = 2;
  kvc_error* e = kvc_cache_is_croppable(cache_at(r, si), layer_or_all(layer), &v);
  *got = v;
  return e;
}
static void op_qoffset(replay* r) { replay_layer_query(r, query_offset, "kvc_cache_query_offset", "query_offset"); }
static void op_croppable(replay* r) { replay_layer_query(r, is_croppable, "kvc_cache_is_croppable", "is_croppable"); }

static void op_bsize(replay* r) {
  int64_t si = num(r);
  outcome o;
  vint want = parse_outcome_num(r, &o);
  if (!runnable(r)) return;
  int64_t got = -12345;
  if (check_outcome(r, kvc_cache_batch_size(cache_at(r, si), &got), &o) && o.ok) check_int(r, "batch_size", got, want);
}

/* `N c1..cN`: counters; returns N (-1 and the file malformed when out of range). */
static int64_t parse_counters(replay* r, vint* out, int expected) {
  int64_t n = layer_count(r);
  for (int64_t i = 0; i < n; i++) {
    if (expected)
      out[i] = expected_num(r);
    else
      out[i].v = num(r), out[i].index = -1;
  }
  return n;
}

static void op_dcrop(replay* r) {
  int64_t si = num(r), x = num(r), diff = num(r);
  if (!known_crop_difference(diff)) malformed(r, "dcrop names a difference the replay does not know");
  if (!is(tok(r), "tf")) malformed(r, "expected tf");
  char tf_outcome[64];
  snprintf(tf_outcome, sizeof(tf_outcome), "%s", r->malformed ? "" : tok(r));
  vint tf[MAX_LAYERS], kv[MAX_LAYERS];
  int64_t ntf = parse_counters(r, tf, 0);
  if (!is(tok(r), "kv")) malformed(r, "expected kv");
  outcome o;
  parse_outcome(r, &o);
  int64_t nkv = parse_counters(r, kv, 1);
  if (r->malformed) return;
  /* A recorded difference must be one: transformers' result is not kvcache's. */
  int same = ntf == nkv && (strcmp(tf_outcome, "ok") == 0) == (o.ok != 0);
  for (int64_t i = 0; same && i < nkv; i++) same = tf[i].v == kv[i].v;
  if (same) {
    malformed(r, "dcrop records no difference");
    return;
  }
  if (!runnable(r)) return;
  slot* s = slot_at(r, si);
  kvc_cache* c = cache_at(r, si);
  if (!check_outcome(r, kvc_cache_crop(s->cache, x), &o)) return;
  check_int(r, "number of layers", kvc_cache_num_layers(c), (vint){nkv, -1});
  for (int64_t i = 0; i < nkv && runnable(r); i++) {
    int64_t got = -12345;
    if (must(r, kvc_cache_seq_length(c, (uint32_t)i, &got), "kvc_cache_seq_length"))
      check_layer_int(r, i, "seq_length after the crop", got, kv[i]);
  }
}

const replay_op replay_ops_assisted[] = {{"rcreate", op_rcreate},   {"accepted", op_accepted}, {"qoffset", op_qoffset},
                                         {"croppable", op_croppable}, {"bsize", op_bsize},      {"dcrop", op_dcrop},
                                         {NULL, NULL}};
