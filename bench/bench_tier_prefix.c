/*
 * bench/bench_tier_prefix.c: what a prefix hit from a shared tier saves a new
 * request, against recomputing the prefix with the demo's tiny decoder
 * (examples/demo_model.c: 4 layers, d_model 64, 4 query heads, 2 KV heads of
 * dim 16, float32, one thread).
 *
 * For a shared prompt of N tokens (512 and 2048), the median time until a
 * new request has the prompt's K/V in a pool's blocks:
 *   recompute   the decoder's prefill of the N tokens (the demo's weights and
 *               math; causal attention with RoPE over the whole prompt), then
 *               kvc_pool_reserve/write/commit of its K/V;
 *   disk tier   a pool and disk tier opened on the directory another pool
 *               filled (a restart: the index rebuilt by scanning it; the open
 *               is not counted), then kvc_pool_match_prefix of the prompt plus
 *               a user turn: N tokens read, verified and copied in;
 *   redis tier  the same from a Redis tier on a redis-server of the bench's
 *               own (127.0.0.1, no persistence); SKIPPED, with the reason,
 *               without redis-server.
 * Each tier's first hit is checked to equal the recomputed K/V bit for bit.
 *
 * What the ratio means: recomputing costs what the model's forward costs
 * (grows with the weights per token, plus attention's N^2), fetching costs
 * the K/V bytes (2 x layers x kv_heads x head_dim x dtype per token). This
 * model has 1 KiB of K/V and ~0.23 MFLOP of projections per token, on one
 * CPU thread: its ratio is this model's, not a real model's (which computes
 * ~500x more per K/V byte, on faster hardware). The disk tier reads from the
 * page cache here (the files were just written): what a hit between
 * restarts costs while the machine has the memory.
 */
#define _GNU_SOURCE
#include "bench_common.h"
#include "demo.h"
#include "redis_server.h"

#include <math.h>

#define BLOCK 16
#define USER 7 /* tokens of the request's own turn after the shared prompt */
#define SEED "bench-tier-prefix-demo-model"

char* mkdtemp(char* template);

/* The prompt's K/V as the decoder writes it: [layer][token][kv_head][dim], keys rotated. */
typedef struct prefix_kv {
  int n;
  float* k;
  float* v;
} prefix_kv;

static float* kv_at(float* base, int n, int layer, int t) { return base + ((size_t)layer * n + t) * KV_DIM; }

/* RoPE angles of positions [0, n) (the demo's table stops at MAX_LEN): cos then sin, [pos][HEAD_DIM / 2]. */
static float* rope_table(int n) {
  float* tab = bench_alloc((size_t)n * HEAD_DIM * sizeof(float));
  for (int p = 0; p < n; p++)
    for (int i = 0; i < HEAD_DIM / 2; i++) {
      double angle = p * pow(10000.0, -2.0 * i / HEAD_DIM);
      tab[p * HEAD_DIM + i] = (float)cos(angle);
      tab[p * HEAD_DIM + HEAD_DIM / 2 + i] = (float)sin(angle);
    }
  return tab;
}

static void rotate(float* v, int heads, const float* angles) {
  for (int h = 0; h < heads; h++) {
    float* x = v + h * HEAD_DIM;
    for (int i = 0; i < HEAD_DIM / 2; i++) {
      float a = x[i], b = x[i + HEAD_DIM / 2], c = angles[i], s = angles[HEAD_DIM / 2 + i];
      x[i] = a * c - b * s;
      x[i + HEAD_DIM / 2] = b * c + a * s;
    }
  }
}

/* Causal GQA attention of token i's query heads over keys/values [0, i] of one layer. */
static void attend_causal(const float* q, const float* k, const float* v, int i, float* scores, float* out) {
  for (int h = 0; h < N_HEADS; h++) {
    int kvh = h / (N_HEADS / N_KV_HEADS);
    float max = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= i; j++) {
      float s = 0.0f;
      for (int d = 0; d < HEAD_DIM; d++) s += q[h * HEAD_DIM + d] * k[j * KV_DIM + kvh * HEAD_DIM + d];
      scores[j] = s / sqrtf((float)HEAD_DIM);
      if (scores[j] > max) max = scores[j];
    }
    for (int j = 0; j <= i; j++) sum += scores[j] = expf(scores[j] - max);
    for (int d = 0; d < HEAD_DIM; d++) {
      float acc = 0.0f;
      for (int j = 0; j <= i; j++) acc += scores[j] * v[j * KV_DIM + kvh * HEAD_DIM + d];
      out[h * HEAD_DIM + d] = acc / sum;
    }
  }
}

/* The demo decoder's prefill of tok[0, n): every layer's K/V into kv (the logits are not needed). */
static void prefill(const model* m, const float* rope_tab, const int32_t* tok, prefix_kv* kv) {
  int n = kv->n;
  float* x = bench_alloc((size_t)n * D_MODEL * sizeof(float));
  float* q = bench_alloc((size_t)n * D_MODEL * sizeof(float));
  float* scores = bench_alloc((size_t)n * sizeof(float));
  float h[D_MODEL], att[D_MODEL], tmp[D_MODEL], up[D_FF];
  for (int i = 0; i < n; i++) memcpy(x + (size_t)i * D_MODEL, m->embed[tok[i]], sizeof h);
  for (int l = 0; l < N_LAYERS; l++) {
    const layer_weights* w = &m->layer[l];
    float *k = kv_at(kv->k, n, l, 0), *v = kv_at(kv->v, n, l, 0);
    for (int i = 0; i < n; i++) {
      rmsnorm(x + (size_t)i * D_MODEL, w->attn_norm, h);
      matvec(&w->wq[0][0], h, D_MODEL, D_MODEL, q + (size_t)i * D_MODEL);
      matvec(&w->wk[0][0], h, KV_DIM, D_MODEL, k + (size_t)i * KV_DIM);
      matvec(&w->wv[0][0], h, KV_DIM, D_MODEL, v + (size_t)i * KV_DIM);
      rotate(q + (size_t)i * D_MODEL, N_HEADS, rope_tab + (size_t)i * HEAD_DIM);
      rotate(k + (size_t)i * KV_DIM, N_KV_HEADS, rope_tab + (size_t)i * HEAD_DIM);
    }
    for (int i = 0; i < n; i++) {
      float* xi = x + (size_t)i * D_MODEL;
      attend_causal(q + (size_t)i * D_MODEL, k, v, i, scores, att);
      matvec(&w->wo[0][0], att, D_MODEL, D_MODEL, tmp);
      for (int d = 0; d < D_MODEL; d++) xi[d] += tmp[d];
      rmsnorm(xi, w->mlp_norm, h);
      matvec(&w->w1[0][0], h, D_FF, D_MODEL, up);
      for (int j = 0; j < D_FF; j++) up[j] = silu(up[j]);
      matvec(&w->w2[0][0], up, D_MODEL, D_FF, tmp);
      for (int d = 0; d < D_MODEL; d++) xi[d] += tmp[d];
    }
  }
  free(x), free(q), free(scores);
}

static kvc_tensor f32_tensor(float* data, int64_t* shape, int ndim) {
  kvc_tensor t = bench_tensor_bf16(data, shape);
  t.ndim = ndim;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  return t;
}

/* A float32 pool of the decoder's shape with room for one prompt; with `tier` (taken) added WRITE_ON_COMMIT. */
static kvc_pool* make_pool(int n, kvc_tier* tier) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  kvc_pool_layer_options one = KVC_POOL_LAYER_OPTIONS_INIT, l[N_LAYERS];
  kvc_pool_options o;
  kvc_pool_options_init(&o);
  g.block_size = BLOCK, g.num_blocks = (uint32_t)(n / BLOCK + 4); /* the prompt, the user turn and spare */
  one.num_kv_heads = N_KV_HEADS, one.key_head_dim = HEAD_DIM;
  for (int i = 0; i < N_LAYERS; i++) l[i] = one;
  o.dtype = KVC_DTYPE_FLOAT32, o.num_groups = 1, o.groups = &g, o.num_layers = N_LAYERS, o.layers = l;
  o.hash_seed = SEED, o.hash_seed_len = strlen(SEED); /* the model's identity: every pool here is one model */
  kvc_pool* p = NULL;
  bench_check(kvc_pool_create(&o, &p), "kvc_pool_create");
  if (tier) bench_check(kvc_pool_add_tier(p, tier, KVC_TIER_WRITE_ON_COMMIT), "kvc_pool_add_tier");
  return p;
}

/* Stores the prompt's K/V in a new sequence of `p` and commits it (its blocks become cached, and go to tiers). */
static void store(kvc_pool* p, const int32_t* tok, prefix_kv* kv) {
  int n = kv->n;
  kvc_pool_sequence* s = NULL;
  bench_check(kvc_pool_sequence_create(p, NULL, &s), "kvc_pool_sequence_create");
  int64_t* slots = bench_alloc((size_t)n * sizeof(int64_t));
  bench_check(kvc_pool_reserve(s, tok, (size_t)n, slots), "kvc_pool_reserve");
  int64_t shape[3] = {n, N_KV_HEADS, HEAD_DIM};
  kvc_tensor k[N_LAYERS], v[N_LAYERS];
  for (int l = 0; l < N_LAYERS; l++) {
    k[l] = f32_tensor(kv_at(kv->k, n, l, 0), shape, 3);
    v[l] = f32_tensor(kv_at(kv->v, n, l, 0), shape, 3);
  }
  bench_check(kvc_pool_write(p, k, v, N_LAYERS, slots, (size_t)n), "kvc_pool_write");
  bench_check(kvc_pool_commit(s), "kvc_pool_commit");
  kvc_pool_sequence_destroy(s);
  free(slots);
}

/* Elements of the matched prefix of `s` whose gathered K/V differ from the recomputed kv. */
static long mismatches(kvc_pool_sequence* s, const prefix_kv* kv) {
  int n = kv->n;
  int64_t shape[4] = {1, N_KV_HEADS, n, HEAD_DIM};
  float* kb = bench_alloc((size_t)n * KV_DIM * sizeof(float));
  float* vb = bench_alloc((size_t)n * KV_DIM * sizeof(float));
  long bad = 0;
  for (int l = 0; l < N_LAYERS; l++) {
    kvc_tensor k = f32_tensor(kb, shape, 4), v = f32_tensor(vb, shape, 4);
    bench_check(kvc_pool_gather(s, (uint32_t)l, &k, &v), "kvc_pool_gather");
    for (int h = 0; h < N_KV_HEADS; h++)
      for (int t = 0; t < n; t++)
        for (int d = 0; d < HEAD_DIM; d++) {
          size_t at = ((size_t)h * n + t) * HEAD_DIM + d, ref = (size_t)h * HEAD_DIM + d;
          bad += kb[at] != kv_at(kv->k, n, l, t)[ref];
          bad += vb[at] != kv_at(kv->v, n, l, t)[ref];
        }
  }
  free(kb), free(vb);
  return bad;
}

typedef kvc_tier* (*open_tier_fn)(const char* where);

static kvc_tier* open_disk(const char* dir) {
  kvc_disk_tier_options d = KVC_DISK_TIER_OPTIONS_INIT;
  d.directory = dir;
  d.max_bytes = (uint64_t)1 << 30;
  kvc_tier* t = NULL;
  bench_check(kvc_disk_tier_create(&d, &t), "kvc_disk_tier_create");
  return t;
}

static kvc_tier* open_redis(const char* seeds) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.command_timeout_ms = 10000;
  kvc_tier* t = NULL;
  bench_check(kvc_redis_tier_create(&o, &t), "kvc_redis_tier_create");
  return t;
}

/*
 * One timed hit: a new pool on a tier opened at `where` (not timed), then
 * kvc_pool_match_prefix of the prompt plus the user turn (timed, ns). Checks
 * that all N tokens matched and, when `verify`, that they equal kv.
 */
static double tier_hit(open_tier_fn open, const char* where, const int32_t* request, prefix_kv* kv, int verify,
                       const char* name) {
  kvc_pool* p = make_pool(kv->n, open(where));
  kvc_pool_sequence* s = NULL;
  bench_check(kvc_pool_sequence_create(p, NULL, &s), "kvc_pool_sequence_create");
  uint64_t matched = 0;
  double t0 = bench_now_ns();
  bench_check(kvc_pool_match_prefix(s, request, (size_t)kv->n + USER, &matched), "kvc_pool_match_prefix");
  double ns = bench_now_ns() - t0;
  long bad = verify ? mismatches(s, kv) : 0;
  if (matched != (uint64_t)kv->n || bad) {
    fprintf(stderr, "bench_tier_prefix: %s: matched %llu of %d tokens, %ld values differ from recomputing\n", name,
            (unsigned long long)matched, kv->n, bad);
    exit(1);
  }
  kvc_pool_destroy(p);
  return ns;
}

static void remove_tree(const char* dir) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%.1100s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_tier_prefix: could not remove %s\n", dir);
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 9;
  static bench_results res;
  static model m;
  model_init(&m);
  char dir[1000];
  const char* slash = strrchr(args.json_path, '/');
  int base = slash ? (int)(slash - args.json_path) : 0;
  if (base > 900) base = 900;
  snprintf(dir, sizeof dir, "%.*s%stier-prefix-bench-XXXXXX", base, args.json_path, slash ? "/" : "");
  if (bench_make_parent_dirs(dir) != 0 || !mkdtemp(dir)) {
    fprintf(stderr, "bench_tier_prefix: cannot make a directory like %s\n", dir);
    return 1;
  }
  rs_server server = {0};
  char seeds[32] = "";
  const char* redis_skip = NULL;
  if (!rs_on_path("redis-server") || !rs_on_path("redis-cli"))
    redis_skip = "redis-server is not installed (scripts/setup.sh installs it)";
  else if (rs_start(&server, 0) != 0)
    redis_skip = "redis-server did not start";
  else
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
  printf("bench_tier_prefix: kvcache %s, the demo decoder (%d layers, d_model %d, %d KV heads of %d, float32: "
         "%d bytes of K/V per token), %d-token blocks, %d reps, medians\n",
         kvc_version_string(), N_LAYERS, D_MODEL, N_KV_HEADS, HEAD_DIM, 2 * N_LAYERS * KV_DIM * 4, BLOCK, reps);
  if (redis_skip) printf("  redis tier: SKIPPED: %s\n", redis_skip);

  static const int sizes[2] = {512, 2048};
  for (int si = 0; si < 2; si++) {
    int n = sizes[si];
    int32_t* request = bench_alloc((size_t)(n + USER) * sizeof(int32_t));
    for (int i = 0; i < n + USER; i++) request[i] = i < n ? (i * 37 + 11) % VOCAB : (i * 13 + 5) % VOCAB;
    float* rope_tab = rope_table(n);
    prefix_kv kv = {n, bench_alloc((size_t)N_LAYERS * n * KV_DIM * sizeof(float)),
                    bench_alloc((size_t)N_LAYERS * n * KV_DIM * sizeof(float))};
    /* The tiers are filled once, by a pool that computed the prompt (as the first serving process would). */
    prefill(&m, rope_tab, request, &kv);
    kvc_pool* filler = make_pool(n, open_disk(dir));
    store(filler, request, &kv);
    kvc_pool_destroy(filler);
    if (!redis_skip) {
      filler = make_pool(n, open_redis(seeds));
      store(filler, request, &kv);
      kvc_pool_destroy(filler);
    }
    double* t[3];
    for (int k = 0; k < 3; k++) t[k] = bench_alloc((size_t)reps * sizeof(double));
    for (int r = -1; r < reps; r++) { /* r = -1: a warm-up that also checks each tier's bytes */
      kvc_pool* p = make_pool(n, NULL);
      double t0 = bench_now_ns();
      prefill(&m, rope_tab, request, &kv);
      store(p, request, &kv);
      double recompute = bench_now_ns() - t0;
      kvc_pool_destroy(p);
      double disk = tier_hit(open_disk, dir, request, &kv, r < 0, "disk tier");
      double redis = redis_skip ? 0 : tier_hit(open_redis, seeds, request, &kv, r < 0, "redis tier");
      if (r >= 0) t[0][r] = recompute * 1e-6, t[1][r] = disk * 1e-6, t[2][r] = redis * 1e-6;
    }
    double med[3];
    for (int k = 0; k < 3; k++) med[k] = bench_summarize(t[k], (size_t)reps).median;
    char metric[48];
    snprintf(metric, sizeof metric, "prefix_%d_ms", n);
    bench_add(&res, "tier_prefix", "recompute", metric, med[0], "ms");
    bench_add(&res, "tier_prefix", "disk-tier", metric, med[1], "ms");
    printf("  prompt of %4d tokens (%.2f MiB of K/V): recompute %8.3f ms, disk tier hit %7.3f ms (recompute / disk "
           "%6.1fx)",
           n, n * 2.0 * N_LAYERS * KV_DIM * 4 / 1048576.0, med[0], med[1], med[0] / med[1]);
    snprintf(metric, sizeof metric, "recompute_over_disk_%d", n);
    bench_add(&res, "tier_prefix", "disk-tier", metric, med[0] / med[1], "ratio");
    if (!redis_skip) {
      snprintf(metric, sizeof metric, "prefix_%d_ms", n);
      bench_add(&res, "tier_prefix", "redis-tier", metric, med[2], "ms");
      snprintf(metric, sizeof metric, "recompute_over_redis_%d", n);
      bench_add(&res, "tier_prefix", "redis-tier", metric, med[0] / med[2], "ratio");
      printf(", redis tier hit %7.3f ms (recompute / redis %6.1fx)", med[2], med[0] / med[2]);
    }
    printf("\n");
    for (int k = 0; k < 3; k++) free(t[k]);
    free(request), free(rope_tab), free(kv.k), free(kv.v);
  }
  printf("  What the ratio means: recomputing costs the model's forward (weights x tokens, plus attention's N^2),\n"
         "  a tier hit costs the K/V bytes. This decoder does ~0.23 MFLOP of projections and MLP per token for 1 KiB\n"
         "  of K/V, on one CPU thread; an 8B Llama-class model does ~16 GFLOP per token for 128 KiB (bf16), ~500x\n"
         "  more compute per byte, on hardware that also computes far faster. Read the ratio as this model's on\n"
         "  this machine, not as a prediction for a real model: there, tier cost scales with K/V bytes and\n"
         "  recompute cost with model size.\n");
  if (!redis_skip) rs_stop(&server);
  remove_tree(dir);
  bench_write_json(args.json_path, &res);
  return 0;
}
