/*
 * fuzz_pool.c: differential fuzzer of the paged KV pool (kvcache/pool.h)
 * through its public ABI only.
 *
 * The input bytes are decoded into a small pool (1-3 groups of full,
 * sliding, chunked and recurrent layers, block sizes 1-8, 1-15 usable
 * blocks, 1-3 layers of tiny heads, float32/float16/bfloat16, NHD or HND,
 * prefix caching on or off, an event queue of 0, 1-4 or 64 entries) and a
 * sequence of operations on up to six sequences: create (with or without a
 * salt), match_prefix (token streams drawn from three prompts, two sharing
 * a prefix, so that hits happen), reserve, write (random K/V per token and
 * layer, for several sequences at once, through the slot mapping, in
 * several memory layouts), the live recurrent state written in place,
 * commit, a serving step (reserve one token for every sequence, one write,
 * commit all), fork, truncate, pin, unpin_all, destroy, clear_cache,
 * blocks_needed (then the reserve it was asked about), events_pull, and
 * bad input on every entry point. Each operation runs on the library and on
 * the reference model of pool_model.c; after each one pool_checks.c
 * compares everything observable: the counters of every group, the
 * sequences' lengths, the block tables in both formats, every byte of
 * every block that holds data in both layouts, every sequence gathered,
 * the recurrent states, and the events when pulled. A failed call must
 * return the code the header names, and change nothing (its outputs and
 * every storage byte included). Any difference prints the trace of
 * operations and aborts, which libFuzzer reports as a crash. Leaks are
 * LeakSanitizer's.
 *
 * Without libFuzzer (KVC_FUZZ_STANDALONE) the same target replays files and
 * runs pseudo-random inputs (driver.c; -ops=N runs at least N operations)
 * and prints how often each operation succeeded and failed, and how often
 * the paths that matter ran (evictions, copy-on-write, out of blocks, window
 * frees, prefix hits, checkpoints, dropped events).
 */
#define _POSIX_C_SOURCE 200809L /* opendir and stat, for the standalone replay */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "kvcache/pool.h"

/* The build compiles one source per fuzz target (tests/fuzz/fuzz_<name>.c),
 * so the target's helpers are part of this translation unit. */
#include "op_stats.c"
#include "pool_checks.c"
#include "pool_model.c"
#include "reader.c"
#include "report.c"
#include "tensor_codec.c"

#define FUZZ_TARGET_NAME "fuzz_pool"
#include "driver.c"

#define ANY_ERROR (-1) /* a bad input the header names no code for: any error but INTERNAL */

/* ---------------------------------------------------------- statistics */

enum {
  OP_CREATE,
  OP_MATCH,
  OP_RESERVE,
  OP_WRITE,
  OP_STATE,
  OP_COMMIT,
  OP_STEP,
  OP_FORK,
  OP_TRUNCATE,
  OP_PIN,
  OP_UNPIN,
  OP_DESTROY,
  OP_CLEAR,
  OP_NEEDED,
  OP_PULL,
  OP_BAD,
  OP_COUNT
};

#ifdef KVC_FUZZ_STANDALONE /* the names are for the summary only */
static const char* const op_names[OP_COUNT] = {
    "sequence_create", "match_prefix", "reserve",     "write",         "recurrent state write", "commit",
    "step: its reserves, writes, commits",     "fork",        "truncate",      "sequence_pin",          "unpin_all",
    "sequence_destroy",                "clear_cache", "blocks_needed", "events_pull",           "bad input"};
#endif

/* How often each operation is drawn (out of the sum): the serving loop's calls most. */
static const uint8_t op_weights[OP_COUNT] = {6, 6, 12, 10, 3, 8, 8, 4, 5, 2, 1, 3, 1, 4, 3, 6};

_Static_assert(OP_COUNT <= OPS_MAX, "op_stats.c counts OPS_MAX operations");
static int draw_op(uint8_t b) { return ops_draw(op_weights, OP_COUNT, b); }

/* The paths the fuzzer means to reach, counted so that a run shows it reached them. */
enum {
  P_EVICT,
  P_COW,
  P_WINDOW_FREE,
  P_OOM_RESERVE,
  P_OOM_OTHER,
  P_MATCH_HIT,
  P_MATCH_TOKENS,
  P_CHECKPOINT,
  P_RESTORE,
  P_ROLLBACK_REFUSED,
  P_EVENTS,
  P_EVENTS_DROPPED,
  P_NEEDED_THEN_RESERVE,
  P_PINNED_KEPT,
  P_GATHER_MISSING,
  P_BAD_OPTIONS,
  P_SHARED_BUDGET,
  P_COW_IN_PLACE,
  P_DEDUP,
  P_CHECKPOINT_SKIPPED,
  P_CHECKPOINT_EVICTED,
  P_TRUNCATE_WINDOW,
  P_COUNT
};

#ifdef KVC_FUZZ_STANDALONE
static const char* const path_names[P_COUNT] = {
    "cached blocks evicted",
    "copy-on-write copies",
    "blocks freed by a window",
    "reserves out of blocks",
    "match/fork out of recurrent slots",
    "match_prefix hits",
    "tokens matched",
    "recurrent checkpoints stored",
    "recurrent states restored by truncate",
    "rollbacks refused (no checkpoint)",
    "events compared",
    "events dropped (queue full)",
    "blocks_needed followed by its reserve",
    "unreferenced pinned blocks (at checks)",
    "gathers refused (freed blocks)",
    "pools refused (bad options)",
    "pools on a shared budget",
    "copies that evicted their own source",
    "blocks of an already cached hash",
    "checkpoints skipped (no spare slot)",
    "checkpoints evicted",
    "truncates refused by a window"};
#endif

static unsigned long long g_path[P_COUNT];
#ifdef KVC_FUZZ_STANDALONE
static void print_summary(void) {
  ops_print_counts(op_names, OP_COUNT, 36);
  printf("%-36s %10s\n", "path", "count");
  for (int i = 0; i < P_COUNT; i++) printf("%-36s %10llu\n", path_names[i], g_path[i]);
}
#endif

/* --------------------------------------------------------------- calls */

static char g_last_message[200];

/* The code of a call; `want` is the code the model expects (ANY_ERROR: any but INTERNAL and OK). Every error
 * has a message; INTERNAL is always a finding. */
static kvc_code call_code(kvc_error* e, int want, const char* what) {
  kvc_code k = kvc_error_code(e);
  const char* msg = kvc_error_message(e);
  snprintf(g_last_message, sizeof g_last_message, "%s", e && msg ? msg : "");
  if (e && (!msg || !msg[0])) fail("%s: error %s has an empty message", what, kvc_code_name(k));
  if (k == KVC_ERROR_INTERNAL) fail("%s: returned INTERNAL (\"%s\")", what, msg);
  if (want == ANY_ERROR ? k == KVC_OK : k != (kvc_code)want)
    fail("%s: library returned %s (\"%s\"), the model expects %s", what, kvc_code_name(k), e && msg ? msg : "",
         want == ANY_ERROR ? "an error" : kvc_code_name((kvc_code)want));
  if (g_echo_trace && e) trace("      (%s)\n", g_last_message);
  kvc_error_destroy(e);
  return k;
}

static const char* code_str(int c) { return c == ANY_ERROR ? "an error" : kvc_code_name((kvc_code)c); }

/* Starts a library call: the model's clock, the operation count. */
static void begin(ctx* c) {
  pm_begin_call(&c->m);
  g_fuzz_ops++;
}

/* ---------------------------------------------------------- the pool */

static uint64_t splitmix(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static void gen_options(ctx* c) {
  reader* r = &c->r;
  kvc_pool_options_init(&c->o);
  uint32_t ng = 1 + rd(r) % PM_GROUPS;
  int has_rec = 0;
  for (uint32_t g = 0; g < ng; g++) {
    kvc_pool_group_options go = KVC_POOL_GROUP_OPTIONS_INIT;
    int k = rd(r) % 8;
    if (g == 0)
      go.kind = k < 5 ? KVC_POOL_GROUP_FULL : k < 6 ? KVC_POOL_GROUP_SLIDING : k < 7 ? KVC_POOL_GROUP_CHUNKED
                                                                               : KVC_POOL_GROUP_RECURRENT;
    else
      go.kind = k < 2 ? KVC_POOL_GROUP_FULL : k < 4 ? KVC_POOL_GROUP_SLIDING : k < 6 ? KVC_POOL_GROUP_CHUNKED
                                                                               : KVC_POOL_GROUP_RECURRENT;
    if (go.kind == KVC_POOL_GROUP_RECURRENT && has_rec) go.kind = KVC_POOL_GROUP_FULL;
    has_rec |= go.kind == KVC_POOL_GROUP_RECURRENT;
    static const uint32_t pow2[4] = {1, 2, 4, 8};
    int b = rd(r);
    go.block_size = b % 4 == 3 ? 1 + (uint32_t)(b >> 2) % PM_BS : pow2[(b >> 2) % 4];
    int nb = rd(r);
    go.num_blocks = go.kind == KVC_POOL_GROUP_RECURRENT ? 3 + nb % (PM_BLOCKS - 2)
                    : nb % 4 == 3                      ? 2 + nb % 4 /* very small: out of blocks at once */
                                                       : 5 + nb % (PM_BLOCKS - 4);
    if (go.kind == KVC_POOL_GROUP_SLIDING || go.kind == KVC_POOL_GROUP_CHUNKED) go.window = 1 + rd(r) % 12;
    c->go[g] = go;
  }
  uint32_t nl = ng + (uint32_t)(rd(r) % (PM_LAYERS - ng + 1));
  for (uint32_t l = 0; l < nl; l++) {
    kvc_pool_layer_options lo = KVC_POOL_LAYER_OPTIONS_INIT;
    lo.group = l < ng ? l : rd(r) % ng;
    lo.num_kv_heads = 1 + rd(r) % 2;
    if (c->go[lo.group].kind == KVC_POOL_GROUP_RECURRENT) {
      lo.key_head_dim = 1 + rd(r) % 2;
      lo.ssm_state_size = 1 + rd(r) % 2;
      lo.conv_dim = 1 + rd(r) % 2;
      lo.conv_kernel = 1 + rd(r) % 3;
    } else {
      lo.key_head_dim = 1 + rd(r) % 3;
      int v = rd(r) % 4;
      lo.value_head_dim = v == 0 ? 0 : (uint32_t)v;
    }
    c->lo[l] = lo;
  }
  static const kvc_dtype dtypes[4] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT32};
  c->o.dtype = dtypes[rd(r) % 4];
  c->o.num_groups = ng;
  c->o.groups = c->go;
  c->o.num_layers = nl;
  c->o.layers = c->lo;
  c->o.layout = rd(r) % 2 ? KVC_POOL_LAYOUT_HND : KVC_POOL_LAYOUT_NHD;
  size_t seed_len = rd(r) % 4;
  for (size_t k = 0; k < seed_len; k++) c->seed[k] = rd(r);
  c->o.hash_seed = seed_len ? c->seed : NULL;
  c->o.hash_seed_len = seed_len;
  c->o.enable_prefix_caching = rare(r, 8) ? 0 : 1;
  static const uint32_t caps[4] = {PM_EVENTS, 0, 2, PM_EVENTS};
  c->o.event_capacity = caps[rd(r) % 4];
  /*
   * One group on a shared budget of as many pages as it had blocks is the same pool to the model (one free list,
   * one LRU, the same ids), with its layers' K and V interleaved in pages: the views' block stride is a page.
   * pool.h: a page is the group's block, each layer's K and V rounded up to 16 bytes.
   */
  c->shared_nb = 0;
  if (ng == 1 && rd(r) % 4 == 0) {
    uint64_t page = 0;
    size_t es = pf_elem(c->o.dtype);
    for (uint32_t l = 0; l < nl; l++) {
      const kvc_pool_layer_options* lo = &c->lo[l];
      uint64_t k = c->go[0].kind == KVC_POOL_GROUP_RECURRENT
                       ? (uint64_t)lo->conv_dim * lo->conv_kernel
                       : (uint64_t)c->go[0].block_size * lo->num_kv_heads * lo->key_head_dim;
      uint64_t v = c->go[0].kind == KVC_POOL_GROUP_RECURRENT
                       ? (uint64_t)lo->num_kv_heads * lo->key_head_dim * lo->ssm_state_size
                       : (uint64_t)c->go[0].block_size * lo->num_kv_heads *
                             (lo->value_head_dim ? lo->value_head_dim : lo->key_head_dim);
      page += (k * es + 15) / 16 * 16 + (v * es + 15) / 16 * 16;
    }
    c->shared_nb = c->go[0].num_blocks;
    c->o.shared_budget_bytes = c->shared_nb * page + (uint64_t)rd(r) % page;
    c->go[0].num_blocks = 0;
  }
}

static void describe_pool(const ctx* c) {
  static const char* kinds[] = {"?", "full", "sliding", "chunked", "recurrent"};
  trace("pool: %s %s caching=%d events=%u seed=%zu bytes shared_budget_bytes=%llu (%u pages)\n",
        codec_dtype_name(c->o.dtype), c->o.layout ? "HND" : "NHD", c->o.enable_prefix_caching, c->o.event_capacity,
        c->o.hash_seed_len, (unsigned long long)c->o.shared_budget_bytes, c->shared_nb);
  for (uint32_t g = 0; g < c->o.num_groups; g++)
    trace("  group %u: %s block_size=%u num_blocks=%u window=%lld\n", g, kinds[c->go[g].kind], c->go[g].block_size,
          c->go[g].num_blocks, (long long)c->go[g].window);
  for (uint32_t l = 0; l < c->o.num_layers; l++)
    trace("  layer %u: group %u heads=%u k=%u v=%u conv=%ux%u state=%u\n", l, c->lo[l].group, c->lo[l].num_kv_heads,
          c->lo[l].key_head_dim, c->lo[l].value_head_dim, c->lo[l].conv_dim, c->lo[l].conv_kernel,
          c->lo[l].ssm_state_size);
}

/* One fault in valid options; the create must fail with the code and leave *out alone. */
static void create_with_bad_options(ctx* c) {
  kvc_pool_options o = c->o;
  kvc_pool_group_options go[PM_GROUPS];
  kvc_pool_layer_options lo[PM_LAYERS];
  memcpy(go, c->go, sizeof go);
  memcpy(lo, c->lo, sizeof lo);
  o.groups = go;
  o.layers = lo;
  int want = KVC_ERROR_INVALID_ARGUMENT;
  uint32_t g = rd(&c->r) % o.num_groups, l = rd(&c->r) % o.num_layers;
  int rec = go[lo[l].group].kind == KVC_POOL_GROUP_RECURRENT;
  int fault = rd(&c->r) % 20;
  const char* what = "?";
  switch (fault) {
    case 0: o.struct_size = 0, what = "struct_size 0"; break;
    case 1: o.dtype = KVC_DTYPE_UNSET, what = "dtype UNSET"; break;
    case 2: o.num_groups = 0, what = "num_groups 0"; break;
    case 3: o.groups = NULL, what = "groups NULL"; break;
    case 4: o.num_layers = 0, what = "num_layers 0"; break;
    case 5: o.layers = NULL, what = "layers NULL"; break;
    case 6: go[g].block_size = 0, what = "block_size 0"; break;
    case 7:
      /* With a shared budget a group's num_blocks must be 0 instead. */
      go[g].num_blocks = o.shared_budget_bytes ? 1 + rd(&c->r) % 5 : rd(&c->r) % 2;
      what = o.shared_budget_bytes ? "num_blocks set beside a shared budget" : "num_blocks below 2";
      break;
    case 8: go[g].kind = rd(&c->r) % 2 ? 0 : 9, what = "unknown group kind"; break;
    case 9:
      if (go[g].kind == KVC_POOL_GROUP_SLIDING || go[g].kind == KVC_POOL_GROUP_CHUNKED)
        go[g].window = rd(&c->r) % 2 ? 0 : -3, what = "window below 1";
      else
        go[g].window = 4, what = "window on a full or recurrent group";
      break;
    case 10: go[g].reserved = 1, what = "group reserved"; break;
    case 11: go[g].struct_size = 4, what = "group struct_size 4"; break;
    case 12: lo[l].group = o.num_groups + rd(&c->r) % 3, what = "layer group out of range"; break;
    case 13: lo[l].num_kv_heads = 0, what = "num_kv_heads 0"; break;
    case 14: lo[l].key_head_dim = 0, what = "key_head_dim 0"; break;
    case 15:
      if (rec)
        lo[l].value_head_dim = 2, what = "value_head_dim on a recurrent layer";
      else
        lo[l].conv_dim = 2, what = "conv_dim on an attention layer";
      break;
    case 16:
      if (rec)
        lo[l].conv_kernel = 0, what = "conv_kernel 0 on a recurrent layer";
      else
        lo[l].ssm_state_size = 1, what = "ssm_state_size on an attention layer";
      break;
    case 17: lo[l].reserved = 7, what = "layer reserved"; break;
    case 18: o.layout = 2 + rd(&c->r) % 3, what = "unknown layout"; break;
    default:
      if (!c->has_cuda) {
        o.device.device_type = KVC_DEVICE_CUDA, what = "a CUDA pool without CUDA";
        want = KVC_ERROR_NO_DEVICE;
      } else {
        o.hash_seed = NULL, o.hash_seed_len = 3, what = "hash_seed NULL with a length";
      }
      break;
  }
  trace("pool_create with %s -> %s\n", what, code_str(want));
  kvc_pool* out = (kvc_pool*)&out;
  begin(c);
  call_code(kvc_pool_create(&o, &out), want, "kvc_pool_create (bad options)");
  if (out != (kvc_pool*)&out) fail("kvc_pool_create with %s wrote *out", what);
  g_path[P_BAD_OPTIONS]++;
}

static void pool_create(ctx* c) {
  gen_options(c);
  describe_pool(c);
  if (rare(&c->r, 6)) create_with_bad_options(c);
  begin(c);
  call_code(kvc_pool_create(&c->o, &c->pool), KVC_OK, "kvc_pool_create");
  pm_init(&c->m, &c->o);
  if (c->shared_nb) c->m.g[0].nb = c->shared_nb, g_path[P_SHARED_BUDGET]++; /* the model's blocks: the pages */
  for (uint32_t l = 0; l < c->m.nl; l++)
    if (pm_is_attention(&c->m, c->m.l[l].group))
      for (int lay = 0; lay < 2; lay++)
        call_code(kvc_pool_layer_storage(c->pool, l, lay, &c->storage[l][lay]), KVC_OK, "kvc_pool_layer_storage");
  /* Three prompts: 1 shares a prefix with 0, 2 is its own. */
  uint64_t x = rd(&c->r) | (uint64_t)rd(&c->r) << 8;
  int shared = (int)(splitmix(&x) % (PM_LEN / 2));
  for (int p = 0; p < PF_PROMPTS; p++)
    for (int k = 0; k <= PM_LEN; k++)
      c->prompt[p][k] = p == 1 && k < shared ? c->prompt[0][k] : (int32_t)(splitmix(&x) % PF_ALPHABET);
  c->next_nonce = 1;
}

/* ---------------------------------------------------------- choosing */

static int pick_used(ctx* c) {
  int start = rd(&c->r) % PM_SEQS;
  for (int k = 0; k < PM_SEQS; k++) {
    int i = (start + k) % PM_SEQS;
    if (c->m.s[i].used) return i;
  }
  return -1;
}

static int pick_free(ctx* c) {
  for (int i = 0; i < PM_SEQS; i++)
    if (!c->m.s[i].used) return i;
  return -1;
}

/* The next token of sequence i at position `pos`: its prompt's, now and then another. */
static int32_t next_token(ctx* c, int i, uint32_t pos) {
  if (rare(&c->r, 40)) return (int32_t)(rd(&c->r) % PF_ALPHABET);
  return c->prompt[c->prompt_of[i]][pos];
}

static uint32_t new_nonce(ctx* c) {
  uint32_t n = c->next_nonce++;
  if (c->next_nonce == PM_ZERO) c->next_nonce = 1;
  return n;
}

/* The library's padded table row of sequence i in group g (n entries). */
static void library_row(ctx* c, int i, uint32_t g, int32_t* row, uint32_t n) {
  kvc_pool_table t;
  const kvc_pool_sequence* s = c->h[i];
  call_code(kvc_pool_block_table(c->pool, &s, 1, g, KVC_POOL_TABLE_PADDED, &t), KVC_OK, "kvc_pool_block_table");
  if (t.table.ndim != 2 || t.table.shape[0] != 1 || t.table.shape[1] < n)
    fail("block table of s%d group %u: shape is not [1, >= %u]", i, g, n);
  for (uint32_t j = 0; j < n; j++) {
    int64_t idx[2] = {0, j};
    row[j] = (int32_t)pf_read(&t.table, idx);
  }
}

/* ------------------------------------------------------ sequence ops */

/* A new sequence; `salt_like` >= 0: with the salt of that sequence (a request of the same tenant). */
static void create_seq(ctx* c, int salt_like) {
  int i = pick_free(c);
  if (i < 0) return;
  static const char* salts[3] = {NULL, "tenant-a", "b"};
  int which = salt_like >= 0 ? c->salt_of[salt_like] : rd(&c->r) % 6 < 4 ? 0 : 1 + rd(&c->r) % 2;
  const char* salt = salts[which];
  c->salt_of[i] = which;
  kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  so.salt = salt;
  so.salt_len = salt ? strlen(salt) : 0;
  int null_opts = !salt && rd(&c->r) % 2;
  trace("s%d: sequence_create salt=%s%s\n", i, salt ? salt : "none", null_opts ? " (options NULL)" : "");
  begin(c);
  kvc_pool_sequence* out = NULL;
  count_result(call_code(kvc_pool_sequence_create(c->pool, null_opts ? NULL : &so, &out), KVC_OK,
                         "kvc_pool_sequence_create"));
  c->h[i] = out;
  c->prompt_of[i] = rd(&c->r) % PF_PROMPTS;
  pm_seq_create(&c->m, i, salt, so.salt_len);
}

static void op_create(ctx* c) { create_seq(c, -1); }

/* A new request: match_prefix on an empty sequence (a new one when none is empty, mostly with the salt and
 * prompt of a running one, so that it hits); now and then on one that is not empty. */
static void op_match(ctx* c) {
  int i = -1, like = pick_used(c);
  if (like >= 0 && rd(&c->r) % 4 == 0) like = -1;
  for (int k = 0; k < PM_SEQS; k++)
    if (c->m.s[k].used && c->m.s[k].len == 0) i = k;
  if (i < 0 && pick_free(c) >= 0) {
    i = pick_free(c);
    create_seq(c, like);
  }
  if (i < 0 || rare(&c->r, 16)) i = pick_used(c);
  if (i < 0) return;
  int p = like >= 0 ? c->prompt_of[like] : rd(&c->r) % PF_PROMPTS;
  size_t n = rd(&c->r) % 2 ? (size_t)(PM_LEN - rd(&c->r) % 8) : (size_t)(1 + rd(&c->r) % PM_LEN);
  int32_t tokens[PM_LEN];
  memcpy(tokens, c->prompt[p], n * sizeof *tokens);
  if (rare(&c->r, 5)) tokens[rd(&c->r) % n] = (int32_t)(rd(&c->r) % PF_ALPHABET);
  if (rare(&c->r, 16)) tokens[rd(&c->r) % n] = -1 - (int32_t)(rd(&c->r) % 3);
  uint64_t want_matched = 0;
  kvc_code want = pm_match(&c->m, i, tokens, n, &want_matched);
  trace("s%d: match_prefix prompt %d, %zu tokens -> %s, %llu matched\n", i, p, n, kvc_code_name(want),
        (unsigned long long)want_matched);
  begin(c);
  uint64_t matched = 777;
  kvc_code got = call_code(kvc_pool_match_prefix(c->h[i], tokens, n, &matched), want, "kvc_pool_match_prefix");
  count_result(got);
  if (got != KVC_OK) {
    if (matched != 777) fail("a failed match_prefix wrote *matched_tokens (%llu)", (unsigned long long)matched);
    if (want == KVC_ERROR_OUT_OF_MEMORY) g_path[P_OOM_OTHER]++;
    return;
  }
  if (matched != want_matched)
    fail("match_prefix matched %llu tokens, the model finds %llu", (unsigned long long)matched,
         (unsigned long long)want_matched);
  static int32_t rows[PM_GROUPS][PM_LEN];
  const int32_t* tables[PM_GROUPS];
  for (uint32_t g = 0; g < c->m.ng; g++) {
    tables[g] = rows[g];
    if (matched && pm_is_attention(&c->m, g)) library_row(c, i, g, rows[g], (uint32_t)(matched / c->m.g[g].bs));
  }
  char why[256];
  if (!pm_match_apply(&c->m, i, tokens, n, matched, tables, why, sizeof why)) fail("match_prefix: %s", why);
  c->prompt_of[i] = p;
  if (matched) {
    g_path[P_MATCH_HIT]++;
    g_path[P_MATCH_TOKENS] += matched;
  }
}

/* Reserves n tokens of sequence i (the model decides the code) and checks the slot mapping. */
static kvc_code do_reserve(ctx* c, int i, size_t n) {
  int32_t tokens[PM_LEN] = {0};
  for (size_t k = 0; k < n; k++) tokens[k] = next_token(c, i, c->m.s[i].len + (uint32_t)k);
  uint32_t oom_group = 0;
  kvc_code want = pm_reserve(&c->m, i, tokens, n, &oom_group);
  trace("s%d: reserve %zu tokens (length %u) -> %s\n", i, n, c->m.s[i].len, kvc_code_name(want));
  int64_t slots[PM_GROUPS * PM_LEN];
  for (size_t k = 0; k < c->m.ng * n; k++) slots[k] = 0x7777;
  uint64_t evictions = 0;
  for (uint32_t g = 0; g < c->m.ng; g++) evictions += c->m.evictions[g];
  begin(c);
  kvc_code got = call_code(kvc_pool_reserve(c->h[i], tokens, n, slots), want, "kvc_pool_reserve");
  if (got != KVC_OK) {
    for (size_t k = 0; k < c->m.ng * n; k++)
      if (slots[k] != 0x7777) fail("a failed reserve wrote slot_mapping[%zu]", k);
    char gs[32];
    snprintf(gs, sizeof gs, "%u", oom_group);
    if (!strstr(g_last_message, "group") || !strstr(g_last_message, gs))
      fail("the out-of-blocks message \"%s\" does not name group %u", g_last_message, oom_group);
    g_path[P_OOM_RESERVE]++;
    return got;
  }
  /* What the model will see copied and freed, for the statistics. */
  const pm_seq* s = &c->m.s[i];
  for (uint32_t g = 0; g < c->m.ng; g++) {
    if (!pm_is_attention(&c->m, g)) continue;
    const pm_group* G = &c->m.g[g];
    uint32_t last = s->len % G->bs ? s->table[g][s->len / G->bs] : 0;
    if (last && (c->m.b[g][last].ref > 1 || c->m.b[g][last].cached)) g_path[P_COW]++;
    uint64_t start = pm_window_start(G, s->committed);
    for (uint32_t b = 0; b < pm_table_len(&c->m, s, g); b++)
      if (s->table[g][b] && left_window(G, b, start)) g_path[P_WINDOW_FREE]++;
  }
  char why[256];
  if (!pm_reserve_apply(&c->m, i, tokens, n, slots, why, sizeof why)) fail("reserve of s%d: %s", i, why);
  for (uint32_t g = 0; g < c->m.ng; g++) evictions -= c->m.evictions[g];
  g_path[P_EVICT] += (uint64_t)-evictions;
  return got;
}

/* The tokens of a prompt's prefill (a chunk of it): up to about half of what the smallest attention group holds,
 * so that a few requests fit and the pool still runs out of blocks now and then. */
static size_t prefill_size(ctx* c) {
  uint32_t cap = PM_LEN;
  for (uint32_t g = 0; g < c->m.ng; g++)
    if (c->m.g[g].kind == KVC_POOL_GROUP_FULL && (c->m.g[g].nb - 1) * c->m.g[g].bs < cap)
      cap = (c->m.g[g].nb - 1) * c->m.g[g].bs;
  return 1 + rd(&c->r) % (cap / 2 + 1);
}

static void op_reserve(ctx* c) {
  int i = pick_used(c);
  if (i < 0) return;
  size_t n = c->m.s[i].len < 8 ? prefill_size(c) : rare(&c->r, 4) ? 1 + rd(&c->r) % 12u : 1 + rd(&c->r) % 4u;
  size_t room = PM_LEN - c->m.s[i].len;
  if (n > room) n = room;
  if (!n) return;
  count_result(do_reserve(c, i, n));
}

/* ---------------------------------------------------------- writes */

/* A [T, H, D] input tensor in one of several memory layouts. */
typedef struct in3 {
  kvc_tensor t;
  int64_t shape[3], strides[3];
  unsigned char* mem;
} in3;

static void in3_make(ctx* c, in3* x, kvc_dtype dtype, int64_t T, int64_t H, int64_t D) {
  memset(x, 0, sizeof *x);
  int layout = rd(&c->r) % 4;
  size_t es = pf_elem(dtype);
  x->shape[0] = T;
  x->shape[1] = H;
  x->shape[2] = D;
  int64_t pad = layout == 3 ? 2 : 1;
  if (layout == 2) { /* [H, T, D] in memory */
    x->strides[0] = D;
    x->strides[1] = T * D;
  } else {
    x->strides[0] = H * D * pad;
    x->strides[1] = D * pad;
  }
  x->strides[2] = pad;
  size_t n = (size_t)(T * H * D * pad * pad * pad + 4);
  x->mem = calloc(n, es);
  if (!x->mem) abort();
  x->t.data = x->mem;
  x->t.device.device_type = KVC_DEVICE_CPU;
  x->t.ndim = 3;
  x->t.dtype = codec_data_type(dtype);
  x->t.shape = x->shape;
  x->t.strides = layout == 0 ? NULL : x->strides;
  x->t.byte_offset = layout == 3 ? 2 * es : 0;
}

/* Fills token t of x with the bits of `nonce`. */
static void in3_fill(in3* x, int64_t t, uint32_t nonce, int kv, kvc_dtype dtype) {
  for (int64_t h = 0; h < x->shape[1]; h++)
    for (int64_t d = 0; d < x->shape[2]; d++) {
      int64_t idx[3] = {t, h, d};
      pf_write_elem(&x->t, idx, pf_bits(nonce, h * x->shape[2] + d, kv, dtype));
    }
}

enum {
  WF_NONE,
  WF_SLOT_RANGE,
  WF_SLOT_NEG,
  WF_NUM_LAYERS,
  WF_DTYPE,
  WF_HEADS,
  WF_DIM,
  WF_TOKENS,
  WF_NDIM,
  WF_DEVICE,
  WF_NULL_KEYS,
  WF_NULL_MAP,
  WF_NULL_DATA,
  WF_NULL_POOL,
  WF_SLOT_NULL_BLOCK,
  WF_SLOT_UNHELD,
  WF_SLOT_TWICE,
  WF_COUNT
};

static const char* const wf_names[WF_COUNT] = {"none",         "slot out of range", "slot below -1", "num_layers",
                                               "dtype",        "heads",             "head_dim",      "tokens",
                                               "ndim",         "device",            "keys NULL",     "slot_mapping NULL",
                                               "data NULL",    "pool NULL",         "slot in the null block",
                                               "slot of a block nobody holds", "a slot twice"};

/*
 * One kvc_pool_write for the pending tokens of the sequences `seqs` (a
 * token's block in a group is written only when the sequence holds it alone
 * and uncached: "a block is written only by a sequence that holds its only
 * reference and while it is not cached"), with padding tokens (-1) now and
 * then, and one fault when `fault`.
 */
static void do_write(ctx* c, const int* seqs, int nseq, int fault) {
  pool_model* m = &c->m;
  int who[PM_SEQS * PM_LEN + 4];
  uint32_t pos[PM_SEQS * PM_LEN + 4];
  int64_t T = 0;
  for (int k = 0; k < nseq; k++) {
    const pm_seq* s = &m->s[seqs[k]];
    uint32_t from = s->committed;
    if (s->len > from && rd(&c->r) % 4 == 0) from += rd(&c->r) % (s->len - from);
    for (uint32_t p = from; p < s->len; p++) {
      if (rare(&c->r, 8)) {
        who[T] = -1;
        pos[T++] = 0;
      }
      who[T] = seqs[k];
      pos[T++] = p;
    }
  }
  if (T == 0 || rare(&c->r, 10)) {
    who[T] = -1;
    pos[T++] = 0;
  }
  static int64_t slots[PM_GROUPS * (PM_SEQS * PM_LEN + 4)];
  static uint32_t nonce[PM_SEQS * PM_LEN + 4][PM_LAYERS];
  int64_t some_slot = -1;
  uint32_t some_group = 0;
  int64_t some_token = 0;
  for (uint32_t g = 0; g < m->ng; g++)
    for (int64_t t = 0; t < T; t++) {
      int64_t v = -1;
      if (who[t] >= 0 && pm_writable(m, who[t], g, pos[t]))
        v = (int64_t)m->s[who[t]].table[g][pos[t] / m->g[g].bs] * m->g[g].bs + pos[t] % m->g[g].bs;
      slots[g * T + t] = v;
      if (v >= 0) some_slot = v, some_group = g, some_token = t;
    }
  in3 keys[PM_LAYERS + 1], values[PM_LAYERS + 1];
  kvc_tensor kt[PM_LAYERS + 1], vt[PM_LAYERS + 1];
  memset(keys, 0, sizeof keys);
  memset(values, 0, sizeof values);
  memset(kt, 0, sizeof kt);
  memset(vt, 0, sizeof vt);
  uint32_t att[PM_LAYERS], natt = 0;
  for (uint32_t l = 0; l < m->nl; l++) {
    if (!pm_is_attention(m, m->l[l].group)) continue; /* "recurrent layers' entries ignored, may be zeroed" */
    att[natt++] = l;
    const pm_layer* L = &m->l[l];
    in3_make(c, &keys[l], m->dtype, T, L->H, L->Dk);
    in3_make(c, &values[l], m->dtype, T, L->H, L->Dv);
    for (int64_t t = 0; t < T; t++) {
      nonce[t][l] = new_nonce(c);
      in3_fill(&keys[l], t, nonce[t][l], 0, m->dtype);
      in3_fill(&values[l], t, nonce[t][l], 1, m->dtype);
    }
    kt[l] = keys[l].t;
    vt[l] = values[l].t;
  }
  /* One fault, where it applies. */
  int want = KVC_OK;
  uint32_t nl = m->nl;
  const kvc_tensor* kp = kt;
  const int64_t* mp = slots;
  kvc_pool* pool = c->pool;
  uint32_t fl = natt ? att[rd(&c->r) % natt] : 0;
  if (fault && natt) {
    fault = 1 + rd(&c->r) % (WF_COUNT - 1);
    want = KVC_ERROR_INVALID_ARGUMENT;
    switch (fault) {
      case WF_SLOT_RANGE:
      case WF_SLOT_NEG:
        if (some_slot < 0) {
          fault = WF_NULL_MAP, mp = NULL;
          break;
        }
        slots[some_group * T + some_token] = fault == WF_SLOT_NEG
                                                 ? -2 - rd(&c->r) % 3
                                                 : (int64_t)m->g[some_group].nb * m->g[some_group].bs + rd(&c->r) % 3;
        break;
      case WF_NUM_LAYERS: nl = rd(&c->r) % 2 ? nl + 1 : nl - 1; break;
      case WF_DTYPE:
        kt[fl].dtype = codec_data_type(m->dtype == KVC_DTYPE_FLOAT32 ? KVC_DTYPE_FLOAT16 : KVC_DTYPE_FLOAT32);
        want = KVC_ERROR_DTYPE_MISMATCH;
        break;
      case WF_HEADS: keys[fl].shape[1]++, want = KVC_ERROR_SHAPE_MISMATCH; break;
      case WF_DIM: values[fl].shape[2]++, vt[fl].shape = values[fl].shape, want = KVC_ERROR_SHAPE_MISMATCH; break;
      case WF_TOKENS: keys[fl].shape[0]++, want = KVC_ERROR_SHAPE_MISMATCH; break;
      case WF_NDIM: kt[fl].ndim = 2, want = KVC_ERROR_SHAPE_MISMATCH; break;
      case WF_DEVICE: kt[fl].device.device_type = KVC_DEVICE_CUDA, want = KVC_ERROR_DEVICE_MISMATCH; break;
      case WF_NULL_KEYS: kp = NULL; break;
      case WF_NULL_MAP: mp = NULL; break;
      case WF_NULL_DATA: kt[fl].data = NULL; break;
      case WF_SLOT_NULL_BLOCK:
      case WF_SLOT_UNHELD:
      case WF_SLOT_TWICE: {
        /* "a slot ... in the null block, in a block no sequence holds, or twice in one group" */
        uint32_t g = m->l[fl].group, x = 0;
        for (uint32_t b = 1; b < m->g[g].nb && fault == WF_SLOT_UNHELD; b++)
          if (!m->b[g][b].ref) x = b;
        int64_t t = rd(&c->r) % T;
        if (fault == WF_SLOT_NULL_BLOCK) {
          slots[g * T + t] = rd(&c->r) % m->g[g].bs;
        } else if (fault == WF_SLOT_UNHELD && x) {
          slots[g * T + t] = (int64_t)x * m->g[g].bs + rd(&c->r) % m->g[g].bs;
        } else if (fault == WF_SLOT_TWICE && T > 1 && some_slot >= 0 && some_group == g) {
          slots[g * T + (some_token + 1 + rd(&c->r) % (T - 1)) % T] = some_slot;
        } else {
          fault = WF_NULL_POOL, pool = NULL;
        }
        break;
      }
      default: pool = NULL; break;
    }
    /* Shapes grown for a fault must still fit the memory: the fault is the shape, not an overrun. */
    if (fault == WF_HEADS || fault == WF_TOKENS || fault == WF_DIM) {
      in3* x = fault == WF_DIM ? &values[fl] : &keys[fl];
      size_t es = pf_elem(m->dtype);
      size_t n = (size_t)(x->shape[0] * x->shape[1] * x->shape[2]) * 8 + 16;
      unsigned char* big = calloc(n, es);
      if (!big) abort();
      free(x->mem);
      x->mem = big;
      x->t.data = big;
      x->t.strides = NULL;
      x->t.byte_offset = 0;
      if (fault == WF_DIM) vt[fl] = x->t;
      else kt[fl] = x->t;
    }
  } else {
    fault = WF_NONE;
  }
  trace("write %lld tokens of %d sequences%s%s -> %s\n", (long long)T, nseq, fault ? ", fault: " : "",
        fault ? wf_names[fault] : "", code_str(want));
  storage_snap snap;
  if (fault) snap_storage(c, &snap);
  begin(c);
  kvc_code got = call_code(kvc_pool_write(pool, kp, vt, nl, mp, (size_t)T), want, "kvc_pool_write");
  if (fault) check_storage_unchanged(c, &snap, "kvc_pool_write");
  if (got == KVC_OK)
    for (uint32_t g = 0; g < m->ng; g++)
      for (int64_t t = 0; t < T; t++)
        if (slots[g * T + t] >= 0)
          for (uint32_t l = 0; l < m->nl; l++)
            if (m->l[l].group == g) pm_write(m, who[t], pos[t], l, nonce[t][l]);
  for (uint32_t l = 0; l <= PM_LAYERS; l++) {
    free(keys[l].mem);
    free(values[l].mem);
  }
  count_result(got);
}

static void op_write(ctx* c, int fault) {
  int seqs[3], n = 0, want = 1 + rd(&c->r) % 3;
  for (int k = 0; k < PM_SEQS && n < want; k++) {
    int i = (k + rd(&c->r)) % PM_SEQS;
    int dup = 0;
    for (int a = 0; a < n; a++) dup |= seqs[a] == i;
    if (c->m.s[i].used && !dup) seqs[n++] = i;
  }
  do_write(c, seqs, n, fault);
}

/* The live recurrent state of a sequence, written in place through its views. */
static void op_state(ctx* c) {
  pool_model* m = &c->m;
  int i = pick_used(c);
  if (i < 0) return;
  for (uint32_t l = 0; l < m->nl; l++) {
    uint32_t g = m->l[l].group;
    if (pm_is_attention(m, g) || !m->s[i].live[g]) continue;
    trace("s%d: write the recurrent state of layer %u\n", i, l);
    kvc_tensor conv, ssm;
    begin(c);
    count_result(call_code(kvc_pool_recurrent_state(c->h[i], l, &conv, &ssm), KVC_OK, "kvc_pool_recurrent_state"));
    uint32_t nonce = new_nonce(c);
    const pm_layer* L = &m->l[l];
    for (int64_t a = 0; a < L->C; a++)
      for (int64_t b = 0; b < L->K; b++) {
        int64_t idx[3] = {0, a, b};
        pf_write_elem(&conv, idx, pf_bits(nonce, a * L->K + b, 0, m->dtype));
      }
    for (int64_t h = 0; h < L->H; h++)
      for (int64_t d = 0; d < L->Dk; d++)
        for (int64_t n = 0; n < L->N; n++) {
          int64_t idx[4] = {0, h, d, n};
          pf_write_elem(&ssm, idx, pf_bits(nonce, (h * L->Dk + d) * L->N + n, 1, m->dtype));
        }
    pm_state_write(m, i, l, nonce);
  }
}

static void do_commit(ctx* c, int i) {
  trace("s%d: commit (length %u, committed %u)\n", i, c->m.s[i].len, c->m.s[i].committed);
  begin(c);
  count_result(call_code(kvc_pool_commit(c->h[i]), KVC_OK, "kvc_pool_commit"));
  uint64_t cps = 0;
  for (uint32_t g = 0; g < c->m.ng; g++)
    if (!pm_is_attention(&c->m, g))
      for (uint32_t x = 1; x < c->m.g[g].nb; x++) cps += c->m.b[g][x].cached;
  pm_commit(&c->m, i);
  for (uint32_t g = 0; g < c->m.ng; g++)
    if (!pm_is_attention(&c->m, g))
      for (uint32_t x = 1; x < c->m.g[g].nb; x++) cps -= c->m.b[g][x].cached;
  g_path[P_CHECKPOINT] += (uint64_t)-cps;
}

static void op_commit(ctx* c) {
  int i = pick_used(c);
  if (i >= 0) do_commit(c, i);
}

/* A serving step: one more token for every sequence that has room, one write for all of them, commit all. */
static void op_step(ctx* c) {
  int seqs[PM_SEQS], n = 0;
  trace("step\n");
  for (int i = 0; i < PM_SEQS; i++) {
    const pm_seq* s = &c->m.s[i];
    if (!s->used || s->len >= PM_LEN) continue;
    size_t more = 1; /* decoding; a new request prefills */
    if (s->len == 0) more = prefill_size(c);
    if (s->len > s->committed || do_reserve(c, i, more) == KVC_OK) {
      seqs[n++] = i;
    } else if (rd(&c->r) % 2) { /* out of blocks: the scheduler preempts the request */
      trace("s%d: preempted\n", i);
      begin(c);
      kvc_pool_sequence_destroy(c->h[i]);
      c->h[i] = NULL;
      pm_seq_destroy(&c->m, i);
    }
  }
  if (n) do_write(c, seqs, n, 0);
  for (int k = 0; k < n; k++) do_commit(c, seqs[k]);
  count_result(KVC_OK);
}

static void op_fork(ctx* c) {
  int i = pick_used(c), j = pick_free(c);
  if (i < 0 || j < 0) return;
  kvc_code want = pm_fork(&c->m, i, j);
  trace("s%d: fork into s%d -> %s\n", i, j, kvc_code_name(want));
  begin(c);
  kvc_pool_sequence* out = (kvc_pool_sequence*)&out;
  kvc_code got = call_code(kvc_pool_fork(c->h[i], &out), want, "kvc_pool_fork");
  count_result(got);
  if (got != KVC_OK) {
    if (out != (kvc_pool_sequence*)&out) fail("a failed fork wrote *out");
    g_path[P_OOM_OTHER]++;
    return;
  }
  c->h[j] = out;
  c->prompt_of[j] = rd(&c->r) % 2 ? c->prompt_of[i] : (int)(rd(&c->r) % PF_PROMPTS);
}

static void op_truncate(ctx* c) {
  int i = pick_used(c);
  if (i < 0) return;
  uint32_t len = c->m.s[i].len;
  uint64_t n;
  switch (rd(&c->r) % 5) {
    case 0: n = len; break;
    case 1: n = len > 3 ? len - 1 - rd(&c->r) % 3 : 0; break;
    case 2: n = len + 1 + rd(&c->r) % 3; break;
    case 3: n = c->m.s[i].committed; break;
    default: n = len ? rd(&c->r) % (len + 1) : 0; break;
  }
  uint32_t committed = c->m.s[i].committed;
  kvc_code want = pm_truncate(&c->m, i, n);
  trace("s%d: truncate to %llu (length %u, committed %u) -> %s\n", i, (unsigned long long)n, len, committed,
        kvc_code_name(want));
  begin(c);
  count_result(call_code(kvc_pool_truncate(c->h[i], n), want, "kvc_pool_truncate"));
  if (want == KVC_OK && n < len)
    for (uint32_t g = 0; g < c->m.ng; g++)
      if (!pm_is_attention(&c->m, g) && c->m.s[i].live[g] && n) g_path[P_RESTORE]++;
}

static void op_pin(ctx* c) {
  int i = pick_used(c);
  if (i < 0) return;
  trace("s%d: sequence_pin\n", i);
  begin(c);
  count_result(call_code(kvc_pool_sequence_pin(c->h[i]), KVC_OK, "kvc_pool_sequence_pin"));
  pm_pin(&c->m, i);
}

static void op_unpin(ctx* c) {
  /* Checkpoints unpinned together are equally recent, and which of them goes first is the library's choice,
   * which the model cannot see (recurrent slots have no table): such a pool is not unpinned. */
  for (uint32_t g = 0; g < c->m.ng; g++) {
    int n = 0;
    for (uint32_t x = 1; !pm_is_attention(&c->m, g) && x < c->m.g[g].nb; x++)
      n += c->m.b[g][x].pinned && !c->m.b[g][x].ref;
    if (n > 1) return;
  }
  trace("unpin_all\n");
  begin(c);
  count_result(call_code(kvc_pool_unpin_all(c->pool), KVC_OK, "kvc_pool_unpin_all"));
  pm_unpin_all(&c->m);
}

static void op_destroy(ctx* c) {
  int i = pick_used(c);
  if (i < 0) return;
  trace("s%d: sequence_destroy\n", i);
  begin(c);
  kvc_pool_sequence_destroy(c->h[i]);
  c->h[i] = NULL;
  pm_seq_destroy(&c->m, i);
  count_result(KVC_OK);
}

static void op_clear(ctx* c) {
  trace("clear_cache\n");
  begin(c);
  count_result(call_code(kvc_pool_clear_cache(c->pool), KVC_OK, "kvc_pool_clear_cache"));
  pm_clear_cache(&c->m);
}

/* blocks_needed for 1-3 sequences; with one, then the reserve it asked about: out of blocks exactly when some
 * group needs more than its free + cached blocks ("Compare with kvc_pool_stats' free_blocks + cached_blocks"). */
static void op_needed(ctx* c) {
  int seqs[3], n = 0, want_n = 1 + rd(&c->r) % 3;
  uint64_t more[3];
  for (int k = 0; k < PM_SEQS && n < want_n; k++) {
    int i = (k + rd(&c->r)) % PM_SEQS;
    int dup = 0;
    for (int a = 0; a < n; a++) dup |= seqs[a] == i;
    if (!c->m.s[i].used || dup || c->m.s[i].len >= PM_LEN) continue;
    uint64_t room = PM_LEN - c->m.s[i].len;
    more[n] = rare(&c->r, 8) ? 0 : 1 + rd(&c->r) % (room < 6 ? room : 6); /* "A new_tokens[i] of 0 counts nothing" */
    seqs[n++] = i;
  }
  if (!n) return;
  const kvc_pool_sequence* hs[3];
  for (int k = 0; k < n; k++) hs[k] = c->h[seqs[k]];
  uint64_t want[PM_GROUPS], got[PM_GROUPS];
  pm_blocks_needed(&c->m, seqs, more, (size_t)n, want);
  trace("blocks_needed of %d sequences (s%d +%llu ...) -> [%llu %llu %llu]\n", n, seqs[0],
        (unsigned long long)more[0], (unsigned long long)want[0], (unsigned long long)(c->m.ng > 1 ? want[1] : 0),
        (unsigned long long)(c->m.ng > 2 ? want[2] : 0));
  begin(c);
  count_result(
      call_code(kvc_pool_blocks_needed(c->pool, hs, more, (size_t)n, got), KVC_OK, "kvc_pool_blocks_needed"));
  for (uint32_t g = 0; g < c->m.ng; g++)
    if (got[g] != want[g])
      fail("blocks_needed: group %u needs %llu blocks, the model says %llu", g, (unsigned long long)got[g],
           (unsigned long long)want[g]);
  if (rd(&c->r) % 2) return;
  /* "exactly: reserving them in that order succeeds when each group's entry is at most kvc_pool_stats'
   * free_blocks + cached_blocks": the reserves, in order, until one fails. */
  int short_of_blocks = 0;
  uint32_t short_group = 0;
  for (uint32_t g = 0; g < c->m.ng; g++) {
    kvc_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    call_code(kvc_pool_stats_get(c->pool, g, &st), KVC_OK, "kvc_pool_stats_get");
    if (got[g] > st.free_blocks + st.cached_blocks && !short_of_blocks) short_of_blocks = 1, short_group = g;
  }
  int failed = -1;
  for (int k = 0; k < n && failed < 0; k++)
    if (more[k] && do_reserve(c, seqs[k], (size_t)more[k]) != KVC_OK) failed = k;
  if ((failed >= 0) != short_of_blocks) {
    if (short_of_blocks)
      fail("blocks_needed of %d sequences: group %u needs %llu, more than its free + cached blocks, yet reserving "
           "them in order succeeded",
           n, short_group, (unsigned long long)got[short_group]);
    fail("blocks_needed of %d sequences: every group's entry is at most its free + cached blocks, yet reserving "
         "them in order failed at sequence %d (s%d, +%llu tokens): \"%s\"",
         n, failed, seqs[failed], (unsigned long long)more[failed], g_last_message);
  }
  g_path[P_NEEDED_THEN_RESERVE]++;
}

static void op_pull(ctx* c) {
  size_t cap = rd(&c->r) % 3 ? (size_t)(rd(&c->r) % 5) : PM_EVENTS;
  trace("events_pull capacity %zu\n", cap);
  begin(c);
  /* The vLLM form's size query walks whatever the queue holds now (runs of chains, removals, clears) and takes
     nothing, so the model's queue still matches the pull below. */
  kvc_pool_vllm_batch_options vo = KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  vo.int_hashes = (int32_t)(rd(&c->r) % 2);
  size_t vsize = 0;
  expect_code(kvc_pool_events_pull_vllm(c->pool, &vo, NULL, 0, &vsize), KVC_OK, "kvc_pool_events_pull_vllm");
  if (vsize < 12) fail("kvc_pool_events_pull_vllm's size query gave %zu bytes; an empty batch takes 12", vsize);
  check_events_pull(c, cap);
  count_result(KVC_OK);
}

/* --------------------------------------------------------- bad input */

/* One bad call on one entry point: the code the header names (or any error where it names none), out
 * parameters untouched, every storage byte unchanged (the checks after it compare the rest). */
static void op_bad(ctx* c) {
  pool_model* m = &c->m;
  int i = pick_used(c);
  int which = rd(&c->r) % 41;
  int want = ANY_ERROR;
  kvc_error* e = NULL;
  char what[96];
  storage_snap snap;
  snap_storage(c, &snap);
  int32_t tok[4] = {0, 1, 2, 3};
  int64_t slots[PM_GROUPS * 4];
  uint64_t u64 = 777, out[PM_GROUPS];
  kvc_pool_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  kvc_pool_sequence* seq_out = (kvc_pool_sequence*)&seq_out;
  kvc_pool_table table;
  kvc_kv kv;
  uint32_t rec_layer = m->nl, att_layer = m->nl, rec_group = m->ng;
  for (uint32_t l = 0; l < m->nl; l++) {
    if (pm_is_attention(m, m->l[l].group)) att_layer = l;
    else rec_layer = l, rec_group = m->l[l].group;
  }
  const kvc_pool_sequence* hs[2] = {i >= 0 ? c->h[i] : NULL, c->other_seq};
  begin(c);
  switch (which) {
    case 0:
      snprintf(what, sizeof what, "stats_get group %u", m->ng);
      want = KVC_ERROR_OUT_OF_RANGE, e = kvc_pool_stats_get(c->pool, m->ng + rd(&c->r) % 3, &st);
      break;
    case 1: snprintf(what, sizeof what, "stats_get out NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_stats_get(c->pool, 0, NULL);
      break;
    case 2: snprintf(what, sizeof what, "stats_get struct_size 0"), want = KVC_ERROR_INVALID_ARGUMENT;
      st.struct_size = 0, e = kvc_pool_stats_get(c->pool, 0, &st);
      break;
    case 3: snprintf(what, sizeof what, "stats_get pool NULL"), e = kvc_pool_stats_get(NULL, 0, &st); break;
    case 4: snprintf(what, sizeof what, "sequence_create out NULL");
      e = kvc_pool_sequence_create(c->pool, NULL, NULL);
      break;
    case 5: {
      kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
      so.struct_size = rd(&c->r) % 2 ? 0 : 4;
      snprintf(what, sizeof what, "sequence_create options struct_size %u", so.struct_size);
      e = kvc_pool_sequence_create(c->pool, &so, &seq_out);
      break;
    }
    case 6: {
      kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
      so.salt_len = 3;
      snprintf(what, sizeof what, "sequence_create salt NULL with salt_len 3");
      e = kvc_pool_sequence_create(c->pool, &so, &seq_out);
      break;
    }
    case 7: snprintf(what, sizeof what, "sequence_create pool NULL"), e = kvc_pool_sequence_create(NULL, NULL, &seq_out);
      break;
    case 8: snprintf(what, sizeof what, "match_prefix sequence NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_match_prefix(NULL, tok, 4, &u64);
      break;
    case 9:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: match_prefix tokens NULL", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_match_prefix(c->h[i], NULL, 4, &u64);
      break;
    case 10:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: match_prefix matched_tokens NULL", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_match_prefix(c->h[i], tok, 4, NULL);
      break;
    case 11: snprintf(what, sizeof what, "reserve sequence NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_reserve(NULL, tok, 1, slots);
      break;
    case 12:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: reserve 0 tokens", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_reserve(c->h[i], tok, 0, slots);
      break;
    case 13:
      if (i < 0 || m->s[i].len + 4 > PM_LEN) goto none;
      tok[rd(&c->r) % 4] = INT32_MIN + rd(&c->r) % 2;
      snprintf(what, sizeof what, "s%d: reserve a negative token", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_reserve(c->h[i], tok, 4, slots);
      break;
    case 14:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: reserve tokens NULL", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_reserve(c->h[i], NULL, 2, slots);
      break;
    case 15:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: reserve slot_mapping NULL", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_reserve(c->h[i], tok, 2, NULL);
      break;
    case 16: snprintf(what, sizeof what, "commit NULL"), e = kvc_pool_commit(NULL); break;
    case 17: snprintf(what, sizeof what, "fork NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_fork(NULL, &seq_out);
      break;
    case 18:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: fork out NULL", i), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_fork(c->h[i], NULL);
      break;
    case 19: snprintf(what, sizeof what, "truncate NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_truncate(NULL, 0);
      break;
    case 20:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "s%d: truncate past the length", i), want = KVC_ERROR_OUT_OF_RANGE;
      e = kvc_pool_truncate(c->h[i], rd(&c->r) % 2 ? UINT64_MAX : (uint64_t)m->s[i].len + 1);
      break;
    case 21: snprintf(what, sizeof what, "sequence_pin NULL"), e = kvc_pool_sequence_pin(NULL); break;
    case 22: snprintf(what, sizeof what, "unpin_all NULL"), e = kvc_pool_unpin_all(NULL); break;
    case 23: snprintf(what, sizeof what, "clear_cache NULL"), e = kvc_pool_clear_cache(NULL); break;
    case 24: {
      uint64_t more = 1;
      int k = rd(&c->r) % 6;
      if (k >= 3 && i < 0) goto none;
      snprintf(what, sizeof what, "blocks_needed with %s",
               k == 0 ? "pool NULL" : k == 1 ? "sequences NULL" : k == 2 ? "a NULL sequence"
               : k == 3 ? "new_tokens NULL" : k == 4 ? "blocks_needed NULL" : "a sequence of another pool");
      const kvc_pool_sequence* one[1] = {k == 2 ? NULL : k == 5 ? c->other_seq : hs[0]};
      e = kvc_pool_blocks_needed(k == 0 ? NULL : c->pool, k == 1 ? NULL : one, k == 3 ? NULL : &more, 1,
                                 k == 4 ? NULL : out);
      break;
    }
    case 25:
      if (att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "layer_storage layer %u", m->nl), want = KVC_ERROR_OUT_OF_RANGE;
      e = kvc_pool_layer_storage(c->pool, m->nl + rd(&c->r) % 3, KVC_POOL_LAYOUT_NHD, &kv);
      break;
    case 26:
      if (rec_layer == m->nl) goto none;
      snprintf(what, sizeof what, "layer_storage of recurrent layer %u", rec_layer), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_layer_storage(c->pool, rec_layer, KVC_POOL_LAYOUT_NHD, &kv);
      break;
    case 27:
      if (att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "layer_storage layout 2"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_layer_storage(c->pool, att_layer, 2 + rd(&c->r) % 3, &kv);
      break;
    case 28:
      if (i < 0) goto none;
      snprintf(what, sizeof what, "block_table group %u", m->ng), want = KVC_ERROR_OUT_OF_RANGE;
      e = kvc_pool_block_table(c->pool, hs, 1, m->ng + rd(&c->r) % 3, KVC_POOL_TABLE_PADDED, &table);
      break;
    case 29:
      if (i < 0 || rec_group == m->ng) goto none;
      snprintf(what, sizeof what, "block_table of recurrent group %u", rec_group), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_block_table(c->pool, hs, 1, rec_group, KVC_POOL_TABLE_CSR, &table);
      break;
    case 30:
      if (i < 0 || att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "block_table format 2");
      e = kvc_pool_block_table(c->pool, hs, 1, m->l[att_layer].group, 2 + rd(&c->r) % 5, &table);
      break;
    case 31:
      if (att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "block_table sequences NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_block_table(c->pool, NULL, 1, m->l[att_layer].group, KVC_POOL_TABLE_PADDED, &table);
      break;
    case 32:
      if (i < 0 || att_layer == m->nl || !c->other_seq) goto none;
      snprintf(what, sizeof what, "block_table with a sequence of another pool"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_block_table(c->pool, hs, 2, m->l[att_layer].group, KVC_POOL_TABLE_PADDED, &table);
      break;
    case 33:
      if (i < 0 || att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "block_table out NULL"), want = KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_block_table(c->pool, hs, 1, m->l[att_layer].group, KVC_POOL_TABLE_PADDED, NULL);
      break;
    case 34: {
      if (i < 0) goto none;
      int k = rd(&c->r) % 4;
      uint32_t l = k == 0 ? m->nl : k == 1 ? rec_layer : att_layer;
      if (l == m->nl && k) goto none;
      const pm_layer* L = &m->l[l < m->nl ? l : 0];
      out4 ko, vo;
      out4_make(&ko, m->dtype, L->H ? L->H : 1, m->s[i].len + (k == 2), L->Dk ? L->Dk : 1, 0);
      out4_make(&vo, m->dtype, L->H ? L->H : 1, m->s[i].len, L->Dv ? L->Dv : 1, 0);
      snprintf(what, sizeof what, "s%d: gather %s", i,
               k == 0 ? "layer out of range" : k == 1 ? "a recurrent layer" : k == 2 ? "into too many tokens"
                                                                                  : "keys NULL");
      e = kvc_pool_gather(c->h[i], l, k == 3 ? NULL : &ko.t, &vo.t);
      free(ko.mem);
      free(vo.mem);
      break;
    }
    case 35: {
      if (i < 0) goto none;
      kvc_tensor cs, ss;
      int k = rd(&c->r) % 2;
      if (!k && att_layer == m->nl) goto none;
      snprintf(what, sizeof what, "s%d: recurrent_state of %s", i, k ? "a layer out of range" : "an attention layer");
      want = k ? KVC_ERROR_OUT_OF_RANGE : KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_recurrent_state(c->h[i], k ? m->nl + rd(&c->r) % 3 : att_layer, &cs, &ss);
      break;
    }
    case 36: {
      kvc_pool_event ev[2];
      size_t count = 999;
      int k = rd(&c->r) % 3;
      snprintf(what, sizeof what, "events_pull %s",
               k == 0 ? "events NULL" : k == 1 ? "count NULL" : "pool NULL");
      e = kvc_pool_events_pull(k == 2 ? NULL : c->pool, k == 0 ? NULL : ev, 2, k == 1 ? NULL : &count);
      break;
    }
    case 38: {
      /* "with kvc_cache_set_stream's rules": a CPU pool accepts only NULL. */
      int k = rd(&c->r) % 3;
      snprintf(what, sizeof what, "set_stream %s", k == 0 ? "pool NULL" : k == 1 ? "a stream on a CPU pool" : "NULL");
      want = k == 2 ? KVC_OK : KVC_ERROR_INVALID_ARGUMENT;
      e = kvc_pool_set_stream(k == 0 ? NULL : c->pool, k == 1 ? (void*)&k : NULL);
      break;
    }
    case 37:
      /* Entry points without an error: NULL is accepted. */
      snprintf(what, sizeof what, "destroy NULL, length NULL, committed NULL, options_init NULL");
      kvc_pool_sequence_destroy(NULL);
      kvc_pool_destroy(NULL);
      kvc_pool_options_init(NULL);
      if (kvc_pool_sequence_length(NULL) || kvc_pool_sequence_committed(NULL))
        fail("length or committed of a NULL sequence is not 0");
      want = KVC_OK;
      break;
    default:
      if (!c->m.nl) goto none;
      trace("write with a fault:\n");
      op_write(c, 1);
      check_storage_unchanged(c, &snap, "kvc_pool_write");
      return;
  }
  trace("bad input: %s -> %s\n", what, code_str(want));
  count_result(call_code(e, want, what));
  if (u64 != 777) fail("%s wrote *matched_tokens", what);
  if (seq_out != (kvc_pool_sequence*)&seq_out) fail("%s wrote *out", what);
  check_storage_unchanged(c, &snap, what);
  return;
none:
  check_storage_unchanged(c, &snap, "no bad call");
}

/* ------------------------------------------------------------- input */

static void run_op(ctx* c, int op) {
  g_op = op;
  switch (op) {
    case OP_CREATE: op_create(c); break;
    case OP_MATCH: op_match(c); break;
    case OP_RESERVE: op_reserve(c); break;
    case OP_WRITE: op_write(c, 0); break;
    case OP_STATE: op_state(c); break;
    case OP_COMMIT: op_commit(c); break;
    case OP_STEP: op_step(c); break;
    case OP_FORK: op_fork(c); break;
    case OP_TRUNCATE: op_truncate(c); break;
    case OP_PIN: op_pin(c); break;
    case OP_UNPIN: op_unpin(c); break;
    case OP_DESTROY: op_destroy(c); break;
    case OP_CLEAR: op_clear(c); break;
    case OP_NEEDED: op_needed(c); break;
    case OP_PULL: op_pull(c); break;
    default: op_bad(c); break;
  }
}

/* A second pool with one sequence, for "a sequence of another pool". */
static void other_pool_create(ctx* c) {
  kvc_pool_group_options go = KVC_POOL_GROUP_OPTIONS_INIT;
  go.block_size = 1;
  go.num_blocks = 2;
  kvc_pool_layer_options lo = KVC_POOL_LAYER_OPTIONS_INIT;
  lo.num_kv_heads = lo.key_head_dim = 1;
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT32;
  o.num_groups = o.num_layers = 1;
  o.groups = &go;
  o.layers = &lo;
  call_code(kvc_pool_create(&o, &c->other), KVC_OK, "kvc_pool_create (the other pool)");
  call_code(kvc_pool_sequence_create(c->other, NULL, &c->other_seq), KVC_OK, "kvc_pool_sequence_create (other)");
}

static void finish(ctx* c) {
  /* Every event still queued, compared. */
  trace("events_pull (the rest)\n");
  begin(c);
  check_events_pull(c, PM_EVENTS);
  if (c->npending || c->nmpending) fail("events of an unfinished call remain after the last pull");
  /* "a pool still holding sequences frees them too": now and then it does. */
  if (rd(&c->r) % 2)
    for (int i = 0; i < PM_SEQS; i++)
      if (c->m.s[i].used) kvc_pool_sequence_destroy(c->h[i]);
  kvc_pool_destroy(c->pool);
  kvc_pool_sequence_destroy(c->other_seq);
  kvc_pool_destroy(c->other);
}

static void count_paths(const ctx* c) {
  for (uint32_t g = 0; g < c->m.ng; g++)
    for (uint32_t x = 1; x < c->m.g[g].nb; x++) g_path[P_PINNED_KEPT] += c->m.b[g][x].pinned && !c->m.b[g][x].ref;
}

/* What the checks and the model counted during the input. */
static void count_input(const ctx* c) {
  g_path[P_EVENTS] += c->events_compared;
  g_path[P_EVENTS_DROPPED] += c->m.dropped;
  g_path[P_GATHER_MISSING] += c->gathers_refused;
  g_path[P_COW_IN_PLACE] += c->m.n_cow_in_place;
  g_path[P_DEDUP] += c->m.n_dedup;
  g_path[P_CHECKPOINT_SKIPPED] += c->m.n_checkpoint_skipped;
  g_path[P_CHECKPOINT_EVICTED] += c->m.n_checkpoint_evicted;
  g_path[P_TRUNCATE_WINDOW] += c->m.n_truncate_window_refused;
  g_path[P_ROLLBACK_REFUSED] += c->m.n_rollback_refused;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ctx c;
  FUZZ_START_INPUT(c, data, size);
  g_fail_title = "kvcache pool fuzzer: the library and the reference model disagree";
#ifdef KVC_FUZZ_STANDALONE
  g_fuzz_summary = print_summary;
#endif
  pool_create(&c);
  if (rare(&c.r, 4)) other_pool_create(&c);
  check_all(&c);
  for (int ops = 0; ops < PF_MAX_OPS && c.r.i < c.r.n; ops++) {
    run_op(&c, draw_op(rd(&c.r)));
    check_all(&c);
    count_paths(&c);
  }
  finish(&c);
  count_input(&c);
  return 0;
}
