/*
 * bench/bench_tier_keys.c: asking a tier which blocks it holds, by key,
 * against asking it through kvc_pool_match_prefix (docs/tiers.md, 'Blocks
 * by key, without a pool').
 *
 * A bfloat16 model of one layer, 8 KV heads of dim 128 and 512-token blocks:
 * 2 MiB per block, a prompt of 16 blocks (32 MiB). The blocks are stored by
 * key (kvc_tier_put_blocks, keys from kvc_pool_options_fingerprint and the
 * prompt's hash chain), then per repetition, alternated in one run:
 *   exists        kvc_tier_exists of the 16 keys (no value moved: a stat
 *                 per key on disk, one pipeline of EXISTS on Redis);
 *   get_blocks    kvc_tier_get_blocks of the 16 keys (values read, verified,
 *                 copied out);
 *   match_prefix  a pool with the tier matches the prompt after
 *                 kvc_pool_clear_cache: the 16 blocks fetched, verified and
 *                 copied into the pool, which is what a lookup costs today.
 * For the disk tier (a directory next to the results file) and a Redis tier
 * on a redis-server the bench starts on 127.0.0.1 (SKIPPED without one).
 * Medians over the repetitions after a warm-up.
 */
#define _GNU_SOURCE
#include "bench_common.h"
#include "redis_server.h"

enum { HEADS = 8, DIM = 128, BLOCK = 512, NBLOCKS = 16 };
#define TOKENS (NBLOCKS * BLOCK)

typedef struct model {
  kvc_pool_group_options g;
  kvc_pool_layer_options l;
  kvc_pool_options o;
  kvc_tier_key keys[NBLOCKS];
  size_t payload;
  uint32_t layers;
} model;

static void model_make(model* m, const int32_t* tok) {
  m->g = (kvc_pool_group_options)KVC_POOL_GROUP_OPTIONS_INIT;
  m->g.block_size = BLOCK;
  m->g.num_blocks = NBLOCKS + 2;
  m->l = (kvc_pool_layer_options)KVC_POOL_LAYER_OPTIONS_INIT;
  m->l.num_kv_heads = HEADS;
  m->l.key_head_dim = DIM;
  kvc_pool_options_init(&m->o);
  m->o.dtype = KVC_DTYPE_BFLOAT16;
  m->o.num_groups = 1;
  m->o.groups = &m->g;
  m->o.num_layers = 1;
  m->o.layers = &m->l;
  m->o.hash_seed = "bench_tier_keys";
  m->o.hash_seed_len = 15;
  bench_check(kvc_pool_options_block_payload(&m->o, 0, &m->payload, &m->layers), "block_payload");
  uint8_t root[32], hashes[NBLOCKS][32];
  size_t n = 0;
  bench_check(kvc_block_hash_root(m->o.hash_seed, m->o.hash_seed_len, NULL, 0, root), "hash_root");
  bench_check(kvc_block_hash_chain(root, tok, TOKENS, BLOCK, hashes, NBLOCKS, &n), "hash_chain");
  memset(m->keys, 0, sizeof m->keys);
  for (int i = 0; i < NBLOCKS; i++) {
    bench_check(kvc_pool_options_fingerprint(&m->o, m->keys[i].fingerprint), "fingerprint");
    memcpy(m->keys[i].block_hash, hashes[i], 32);
  }
}

typedef kvc_tier* (*tier_open)(const char* where);

static kvc_tier* open_disk(const char* dir) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  kvc_tier* t = NULL;
  bench_check(kvc_disk_tier_create(&o, &t), "kvc_disk_tier_create");
  return t;
}

static kvc_tier* open_redis(const char* seeds) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.cluster = KVC_REDIS_CLUSTER_OFF;
  o.command_timeout_ms = 2000;
  o.call_timeout_ms = 10000; /* 32 MiB over loopback on a loaded machine: a deadline, not a cap on the bench */
  kvc_tier* t = NULL;
  bench_check(kvc_redis_tier_create(&o, &t), "kvc_redis_tier_create");
  return t;
}

static double ms_since(double t0) { return (bench_now_ns() - t0) * 1e-6; }

/* The three timings of one tier kind, `reps` each; 0 on success. */
static int measure(const char* name, tier_open open, const char* where, const model* m, const int32_t* tok,
                   int reps, bench_results* res) {
  kvc_tier* keys_tier = open(where); /* a scheduler's: no pool */
  uint8_t* data = bench_alloc((size_t)NBLOCKS * m->payload);
  bench_fill_bf16((uint16_t*)data, (size_t)NBLOCKS * m->payload / 2, 7);
  const void* in[NBLOCKS];
  void* out[NBLOCKS];
  uint8_t* back = bench_alloc((size_t)NBLOCKS * m->payload);
  for (int i = 0; i < NBLOCKS; i++) in[i] = data + (size_t)i * m->payload, out[i] = back + (size_t)i * m->payload;
  size_t n = 0;
  bench_check(kvc_tier_put_blocks(keys_tier, m->keys, NBLOCKS, m->payload, m->layers, in, &n), "put_blocks");
  kvc_pool* pool = NULL;
  bench_check(kvc_pool_create(&m->o, &pool), "kvc_pool_create");
  bench_check(kvc_pool_add_tier(pool, open(where), KVC_TIER_WRITE_ON_EVICT), "kvc_pool_add_tier");
  double *ex = bench_alloc(reps * sizeof(double)), *get = bench_alloc(reps * sizeof(double));
  double* match = bench_alloc(reps * sizeof(double));
  int bad = n != NBLOCKS;
  for (int r = -1; r < reps && !bad; r++) {
    uint8_t found[NBLOCKS];
    double t0 = bench_now_ns();
    bench_check(kvc_tier_exists(keys_tier, m->keys, NBLOCKS, found, &n), "exists");
    double e_ms = ms_since(t0);
    bad |= n != NBLOCKS;
    t0 = bench_now_ns();
    bench_check(kvc_tier_get_blocks(keys_tier, m->keys, NBLOCKS, m->payload, m->layers, out, found, &n), "get");
    double g_ms = ms_since(t0);
    bad |= n != NBLOCKS || memcmp(data, back, (size_t)NBLOCKS * m->payload) != 0;
    bench_check(kvc_pool_clear_cache(pool), "clear_cache");
    kvc_pool_sequence* s = NULL;
    bench_check(kvc_pool_sequence_create(pool, NULL, &s), "sequence");
    uint64_t matched = 0;
    t0 = bench_now_ns();
    bench_check(kvc_pool_match_prefix(s, tok, TOKENS + 1, &matched), "match_prefix"); /* one token computed */
    double m_ms = ms_since(t0);
    kvc_pool_sequence_destroy(s);
    bad |= matched != (uint64_t)TOKENS;
    if (r >= 0) ex[r] = e_ms, get[r] = g_ms, match[r] = m_ms;
  }
  if (bad) fprintf(stderr, "bench_tier_keys: %s: a block was not found or came back wrong\n", name);
  if (!bad) {
    bench_stats se = bench_summarize(ex, (size_t)reps), sg = bench_summarize(get, (size_t)reps);
    bench_stats sm = bench_summarize(match, (size_t)reps);
    printf("  %-6s exists %8.3f ms  get_blocks %8.3f ms  match_prefix %8.3f ms  (medians of %d; match/exists "
           "%.0fx)\n", name, se.median, sg.median, sm.median, reps, sm.median / se.median);
    bench_add(res, "tier_keys", name, "exists_16x2MiB_ms", se.median, "ms");
    bench_add(res, "tier_keys", name, "get_blocks_16x2MiB_ms", sg.median, "ms");
    bench_add(res, "tier_keys", name, "match_prefix_16x2MiB_ms", sm.median, "ms");
    bench_add(res, "tier_keys", name, "match_prefix_over_exists", sm.median / se.median, "ratio");
  }
  kvc_pool_destroy(pool);
  kvc_tier_destroy(keys_tier);
  free(data), free(back), free(ex), free(get), free(match);
  return bad;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 9;
  static bench_results res;
  char dir[1000];
  const char* slash = strrchr(args.json_path, '/');
  int base = slash ? (int)(slash - args.json_path) : 0;
  if (base > 900) base = 900;
  snprintf(dir, sizeof dir, "%.*s%stier-keys-bench-XXXXXX", base, args.json_path, slash ? "/" : "");
  if (bench_make_parent_dirs(dir) != 0 || !mkdtemp(dir)) {
    fprintf(stderr, "bench_tier_keys: cannot make a directory like %s\n", dir);
    return 1;
  }
  int32_t* tok = bench_alloc((TOKENS + 1) * sizeof(int32_t));
  for (int i = 0; i <= TOKENS; i++) tok[i] = (int32_t)(i * 7919 % 50000);
  static model m;
  model_make(&m, tok);
  printf("bench_tier_keys: kvcache %s, %d blocks of %.1f MiB, %d alternated repetitions\n", kvc_version_string(),
         NBLOCKS, m.payload / 1048576.0, reps);
  int bad = measure("disk", open_disk, dir, &m, tok, reps, &res);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%.1000s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_tier_keys: could not remove %s\n", dir);
  rs_server server = {0};
  if (!rs_on_path("redis-server") || !rs_on_path("redis-cli"))
    printf("  redis: SKIPPED: redis-server is not installed (scripts/setup.sh installs it)\n");
  else if (rs_start(&server, 0) != 0)
    printf("  redis: SKIPPED: redis-server did not start\n");
  else {
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
    bad |= measure("redis", open_redis, seeds, &m, tok, reps, &res);
    rs_stop(&server);
  }
  free(tok);
  bench_write_json(args.json_path, &res);
  return bad;
}
