/*
 * bench_pool: the paged pool (kvcache/pool.h) on the CPU, as a serving
 * loop's scheduler and its decode step use it.
 *
 *   pool_schedule  the host cost of scheduling one decode step of 256
 *                  running sequences, in steady state: the finished
 *                  sequences leave (kvc_pool_sequence_destroy, their blocks
 *                  stay cached), as many requests arrive
 *                  (kvc_pool_sequence_create + kvc_pool_match_prefix: most
 *                  begin with a 512-token system prompt, the rest of the
 *                  prompt is reserved), every other sequence reserves one
 *                  token, and all commit (full blocks are hashed and
 *                  cached). Prompts of 16-111 tokens after the system
 *                  prompt (one in ten has none: 128-255 tokens of its own),
 *                  64-191 tokens generated, so about 2 sequences leave per
 *                  step. The pool is sized so that the cache fills and LRU
 *                  eviction runs in steady state. Two models: Llama-like
 *                  (one full-attention group) and hybrid (a full group and a
 *                  sliding group of window 128, gpt-oss-like). Reported: the
 *                  median over the measured steps of every run of the whole
 *                  step, and of each part, and the cost of one block's
 *                  hash (kvc_block_hash), which most of a step is: an
 *                  arrival hashes its prompt's blocks up to the first miss,
 *                  a commit every block that filled. Timed apart, outside
 *                  the step: admission (kvc_pool_blocks_needed for the 256
 *                  sequences' tokens of the step) and the block tables
 *                  (kvc_pool_block_table, padded, every group). The
 *                  storage's shape does not enter (no step copies K/V
 *                  bytes: nothing forks, a match ends on a block boundary),
 *                  so the pools are small.
 *   pool_partial   the memory lost to partial blocks, measured at every step
 *                  of the same runs from the block tables
 *                  (kvc_pool_block_table): per sequence and group, the token
 *                  slots of the blocks it holds minus the tokens they hold;
 *                  the goal is less than one block.
 *   pool_fork      kvc_pool_fork of a 2k-token sequence (Llama-3-8B-like
 *                  storage: 32 layers, 8 KV heads, head_dim 128, bf16),
 *                  median ns per fork; and the first token a fork reserves
 *                  when the shared last block is partial (copy-on-write of
 *                  that block in every layer).
 *   pool_write     one decode step's K/V (256 sequences x 1 token x 32 layers
 *                  x K and V, 8 heads x 128, bf16 and fp16: 32 MiB) written
 *                  through the slot mapping by one kvc_pool_write, and by 32
 *                  kvc_pool_write_layer calls (the forward pass's order; the
 *                  steps alternate two mappings so each step's first layer
 *                  checks its mapping), against
 *                  two memcpy rooflines of the same bytes in the same run,
 *                  alternated: 64 contiguous memcpys of 512 KiB, one per
 *                  layer and K/V, into one buffer (the software floor), and
 *                  one memcpy per token row to the very slots the pool
 *                  writes (what the scattered destination costs the memory
 *                  system). The write is checked against the source. Wall
 *                  time as everywhere, and this thread's CPU time beside it:
 *                  a step write takes milliseconds, long enough for other
 *                  processes to take the core in the middle of it on a busy
 *                  machine, which inflates wall-clock medians but not CPU
 *                  time.
 *
 * Results go to results.json like the other benchmarks.
 */
#include "bench_pool_common.h"

/* ---------------------------------------------------------------- common */

static kvc_pool_stats stats_of(const kvc_pool* pool, uint32_t group) {
  kvc_pool_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  bench_check(kvc_pool_stats_get(pool, group, &s), "kvc_pool_stats_get");
  return s;
}

/* A pool of `num_groups` groups (group 0 full, group 1 sliding of `window`), every group's blocks of
   `block_size` tokens, `layers` layers of `heads` x `head_dim` spread over the groups. */
static kvc_pool* make_pool(kvc_dtype dtype, uint32_t num_groups, uint32_t block_size, uint32_t num_blocks,
                           int64_t window, uint32_t layers, uint32_t heads, uint32_t head_dim) {
  kvc_pool_group_options groups[2];
  for (uint32_t g = 0; g < num_groups; g++) {
    kvc_pool_group_options o = KVC_POOL_GROUP_OPTIONS_INIT;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    if (g == 1) {
      o.kind = KVC_POOL_GROUP_SLIDING;
      o.window = window;
    }
    groups[g] = o;
  }
  kvc_pool_layer_options* lo = bench_alloc(layers * sizeof *lo);
  for (uint32_t l = 0; l < layers; l++) {
    kvc_pool_layer_options o = KVC_POOL_LAYER_OPTIONS_INIT;
    o.group = num_groups == 2 && l % 4 != 3 ? 1 : 0; /* hybrid: 3 sliding layers per full one */
    o.num_kv_heads = heads;
    o.key_head_dim = head_dim;
    lo[l] = o;
  }
  static const char seed[] = "bench_pool";
  kvc_pool_options opt = KVC_POOL_OPTIONS_INIT;
  opt.dtype = dtype;
  opt.num_groups = num_groups;
  opt.groups = groups;
  opt.num_layers = layers;
  opt.layers = lo;
  opt.hash_seed = seed;
  opt.hash_seed_len = sizeof seed - 1;
  kvc_pool* pool = NULL;
  bench_check(kvc_pool_create(&opt, &pool), "kvc_pool_create");
  free(lo);
  return pool;
}

/* ------------------------------------------------------------- schedule */

#define SCHED_SEQS 256
#define SCHED_BLOCK 16
#define SCHED_SYSTEM 512     /* the shared system prompt: 32 blocks */
#define SCHED_WINDOW 128     /* the hybrid model's sliding window */
#define SCHED_MAX_TOKENS 1024
#define SCHED_WARMUP 512     /* steps before measuring: lengths mix, the cache fills, eviction starts */
#define SCHED_MEASURED 512   /* steps measured per run */
#define SCHED_PARTS 6        /* release, match (with create), reserve, commit: the step; admission, tables */
#define SCHED_STEP_PARTS 4   /* the parts summed into the step */

typedef struct sched_seq {
  kvc_pool_sequence* seq;
  int32_t tokens[SCHED_MAX_TOKENS];
  int prompt, total; /* prompt tokens; prompt + generated tokens when it finishes */
  int fed;           /* tokens reserved */
} sched_seq;

typedef struct sched_result {
  double* step_ns;                 /* [runs * SCHED_MEASURED] */
  double* part_ns[SCHED_PARTS];
  size_t samples;
  uint64_t arrivals, evictions, matched_tokens, prompt_tokens;
  /* partial blocks, per group: */
  uint64_t waste_max[2], waste_sum[2], slots_sum[2], holders[2];
  int64_t held_max[2];             /* blocks a sequence holds in the group, at most */
} sched_result;

static const char* const part_names[SCHED_PARTS] = {"release", "match", "reserve", "commit", "admission",
                                                     "tables"};

static uint64_t sched_rng = 0x5c4ed;

static int sched_rand(int bound) { return (int)(bench_rand(&sched_rng) % (uint64_t)bound); }

static void new_request(sched_seq* s, const int32_t* system) {
  int own = sched_rand(10) == 0;
  int prompt = own ? 128 + sched_rand(128) : SCHED_SYSTEM + 16 + sched_rand(96);
  if (!own) memcpy(s->tokens, system, sizeof(int32_t) * SCHED_SYSTEM);
  for (int t = own ? 0 : SCHED_SYSTEM; t < prompt; t++) s->tokens[t] = 1 + sched_rand(32000);
  s->prompt = prompt;
  s->total = prompt + 64 + sched_rand(128);
  /* The tokens a sequence will generate are drawn now: the step itself does no work of ours. */
  for (int t = prompt; t < s->total; t++) s->tokens[t] = 1 + sched_rand(32000);
}

/* Waste of partial blocks, from the padded block tables: slots held minus tokens held, per sequence and group.
   Returns the ns the tables took (what the step's attention kernels would be handed). */
static double measure_partial(kvc_pool* pool, uint32_t num_groups, sched_seq* seqs, sched_result* res) {
  const kvc_pool_sequence* handles[SCHED_SEQS];
  double tables_ns = 0;
  for (int i = 0; i < SCHED_SEQS; i++) handles[i] = seqs[i].seq;
  for (uint32_t g = 0; g < num_groups; g++) {
    kvc_pool_table t;
    double t0 = bench_now_ns();
    bench_check(kvc_pool_block_table(pool, handles, SCHED_SEQS, g, KVC_POOL_TABLE_PADDED, &t),
                "kvc_pool_block_table");
    tables_ns += bench_now_ns() - t0;
    int64_t width = t.table.shape[1];
    int64_t rs = t.table.strides ? t.table.strides[0] : width, cs = t.table.strides ? t.table.strides[1] : 1;
    const int32_t* base = (const int32_t*)((const char*)t.table.data + t.table.byte_offset);
    for (int i = 0; i < SCHED_SEQS; i++) {
      int64_t held = 0, first = -1;
      for (int64_t j = 0; j < width; j++)
        if (base[i * rs + j * cs] != 0) {
          held++;
          if (first < 0) first = j;
        }
      if (held == 0) continue;
      uint64_t length = kvc_pool_sequence_length(seqs[i].seq);
      uint64_t slots = (uint64_t)held * SCHED_BLOCK, tokens = length - (uint64_t)first * SCHED_BLOCK;
      if (tokens > slots) { /* a table that does not cover the sequence's tokens is a bug, not waste */
        fprintf(stderr, "bench_pool: sequence %d holds %lld blocks of group %u from block %lld for %llu tokens\n",
                i, (long long)held, g, (long long)first, (unsigned long long)length);
        exit(1);
      }
      uint64_t waste = slots - tokens;
      if (held > res->held_max[g]) res->held_max[g] = held;
      if (waste > res->waste_max[g]) res->waste_max[g] = waste;
      res->waste_sum[g] += waste;
      res->slots_sum[g] += slots;
      res->holders[g]++;
    }
  }
  return tables_ns;
}

/* One step; part times in `ns` when measuring. */
static void sched_step(kvc_pool* pool, sched_seq* seqs, const int32_t* system, sched_result* res, double* ns) {
  int64_t slots[2 * SCHED_MAX_TOKENS];
  int arriving[SCHED_SEQS], num_arriving = 0;
  double t0 = bench_now_ns();
  for (int i = 0; i < SCHED_SEQS; i++)
    if (seqs[i].fed == seqs[i].total) {
      kvc_pool_sequence_destroy(seqs[i].seq);
      seqs[i].seq = NULL;
      arriving[num_arriving++] = i;
    }
  double t1 = bench_now_ns();
  /* The requests are drawn outside the timed parts. */
  for (int a = 0; a < num_arriving; a++) new_request(&seqs[arriving[a]], system);
  double t2 = bench_now_ns();
  for (int a = 0; a < num_arriving; a++) {
    sched_seq* s = &seqs[arriving[a]];
    uint64_t matched = 0;
    bench_check(kvc_pool_sequence_create(pool, NULL, &s->seq), "kvc_pool_sequence_create");
    bench_check(kvc_pool_match_prefix(s->seq, s->tokens, (size_t)s->prompt, &matched), "kvc_pool_match_prefix");
    s->fed = (int)matched;
    res->matched_tokens += matched;
    res->prompt_tokens += (uint64_t)s->prompt;
  }
  double t3 = bench_now_ns();
  /* Admission control, timed apart (not part of the step): what the step's reserves will take. */
  const kvc_pool_sequence* handles[SCHED_SEQS];
  uint64_t counts[SCHED_SEQS], needed[2];
  for (int i = 0; i < SCHED_SEQS; i++) {
    handles[i] = seqs[i].seq;
    counts[i] = seqs[i].fed < seqs[i].prompt ? (uint64_t)(seqs[i].prompt - seqs[i].fed) : 1;
  }
  double a0 = bench_now_ns();
  bench_check(kvc_pool_blocks_needed(pool, handles, counts, SCHED_SEQS, needed), "kvc_pool_blocks_needed");
  double a1 = bench_now_ns();
  t3 += a1 - a0;
  for (int i = 0; i < SCHED_SEQS; i++) {
    sched_seq* s = &seqs[i];
    size_t n = (size_t)counts[i];
    bench_check(kvc_pool_reserve(s->seq, s->tokens + s->fed, n, slots), "kvc_pool_reserve");
    s->fed += (int)n;
  }
  double t4 = bench_now_ns();
  for (int i = 0; i < SCHED_SEQS; i++) bench_check(kvc_pool_commit(seqs[i].seq), "kvc_pool_commit");
  double t5 = bench_now_ns();
  res->arrivals += (uint64_t)num_arriving;
  if (ns) {
    ns[0] = t1 - t0;
    ns[1] = t3 - t2;
    ns[2] = t4 - t3;
    ns[3] = t5 - t4;
    ns[4] = a1 - a0;
  }
}

/* One run: a fresh pool, SCHED_SEQS requests admitted at once, warm-up, then SCHED_MEASURED measured steps. */
static void sched_run(uint32_t num_groups, sched_result* res) {
  /* Every sequence's own blocks (at most 111 + 191 tokens after the shared prompt, or 255 + 191 of its own:
     28 blocks), with room left for ~3000 cached blocks: the cache fills during the warm-up. */
  kvc_pool* pool = make_pool(KVC_DTYPE_BFLOAT16, num_groups, SCHED_BLOCK, 10240, SCHED_WINDOW, 32, 1, 8);
  static sched_seq seqs[SCHED_SEQS];
  int32_t system[SCHED_SYSTEM];
  for (int t = 0; t < SCHED_SYSTEM; t++) system[t] = 1 + sched_rand(32000);
  for (int i = 0; i < SCHED_SEQS; i++) seqs[i].seq = NULL, seqs[i].fed = seqs[i].total = 0;
  /* fed == total: the first step admits every sequence as an arrival */
  sched_result warm;
  memset(&warm, 0, sizeof warm);
  for (int s = 0; s < SCHED_WARMUP; s++) sched_step(pool, seqs, system, &warm, NULL);
  uint64_t evictions0 = 0;
  for (uint32_t g = 0; g < num_groups; g++) evictions0 += stats_of(pool, g).evictions;
  for (int s = 0; s < SCHED_MEASURED; s++) {
    double ns[SCHED_PARTS];
    sched_step(pool, seqs, system, res, ns);
    ns[5] = measure_partial(pool, num_groups, seqs, res);
    double total = 0;
    for (int p = 0; p < SCHED_PARTS; p++) {
      res->part_ns[p][res->samples] = ns[p];
      if (p < SCHED_STEP_PARTS) total += ns[p];
    }
    res->step_ns[res->samples++] = total;
  }
  for (uint32_t g = 0; g < num_groups; g++) res->evictions += stats_of(pool, g).evictions;
  res->evictions -= evictions0;
  for (int i = 0; i < SCHED_SEQS; i++) kvc_pool_sequence_destroy(seqs[i].seq);
  kvc_pool_destroy(pool);
}

/* What one block's key costs (kvc_block_hash: SHA-256 over the parent and 16 token ids), ns: the match of an
   arrival hashes each block of its prompt up to the first miss, and a commit each block that became full. */
static double block_hash_ns(int runs) {
  enum { HASHES = 4096 };
  int32_t tokens[SCHED_BLOCK];
  uint8_t chain[2][KVC_BLOCK_HASH_SIZE] = {{0}};
  for (int t = 0; t < SCHED_BLOCK; t++) tokens[t] = 1 + t;
  double* ns = bench_alloc((size_t)runs * sizeof(double));
  for (int r = 0; r < runs; r++) {
    double t0 = bench_now_ns();
    for (int i = 0; i < HASHES; i++) /* each hash the next one's parent, as in a chain */
      bench_check(kvc_block_hash(chain[i & 1], tokens, SCHED_BLOCK, NULL, 0, chain[(i + 1) & 1]), "kvc_block_hash");
    ns[r] = (bench_now_ns() - t0) / HASHES;
  }
  double median = bench_summarize(ns, (size_t)runs).median;
  free(ns);
  return median;
}

static void bench_schedule(int runs, bench_results* out) {
  static const char* const model_names[2] = {"llama", "hybrid"};
  static const char* const group_names[2] = {"full", "sliding"};
  printf("pool_schedule: one decode step of %d running sequences (release + match + reserve + commit),\n"
         "steady state after %d steps, %d steps x %d runs; ns per step, median [min, max of the run medians]\n",
         SCHED_SEQS, SCHED_WARMUP, SCHED_MEASURED, runs);
  for (uint32_t num_groups = 1; num_groups <= 2; num_groups++) {
    sched_result res;
    memset(&res, 0, sizeof res);
    size_t cap = (size_t)runs * SCHED_MEASURED;
    res.step_ns = bench_alloc(cap * sizeof(double));
    for (int p = 0; p < SCHED_PARTS; p++) res.part_ns[p] = bench_alloc(cap * sizeof(double));
    double* run_medians = bench_alloc((size_t)runs * sizeof(double));
    double* scratch = bench_alloc(SCHED_MEASURED * sizeof(double));
    for (int r = 0; r < runs; r++) {
      size_t first = res.samples;
      sched_run(num_groups, &res);
      memcpy(scratch, res.step_ns + first, SCHED_MEASURED * sizeof(double));
      run_medians[r] = bench_summarize(scratch, SCHED_MEASURED).median;
    }
    bench_stats spread = bench_summarize(run_medians, (size_t)runs);
    bench_stats step = bench_summarize(res.step_ns, res.samples);
    const char* name = model_names[num_groups - 1];
    printf("  %-6s (%u group%s): %8.0f ns per step [%.0f, %.0f];", name, num_groups, num_groups > 1 ? "s" : "",
           step.median, spread.min, spread.max);
    char metric[64];
    for (int p = 0; p < SCHED_PARTS; p++) {
      double part = bench_summarize(res.part_ns[p], res.samples).median;
      printf("%s %s %.0f", p == SCHED_STEP_PARTS ? "; apart:" : "", part_names[p], part);
      snprintf(metric, sizeof metric, "%s_ns_256_%s", part_names[p], name);
      bench_add(out, "pool_schedule", "kvcache-c", metric, part, "ns");
    }
    double per_step = (double)res.arrivals / (double)res.samples;
    printf("\n          %.2f arrivals and %.1f evictions per step; %.0f%% of prompt tokens matched\n", per_step,
           (double)res.evictions / (double)res.samples,
           100.0 * (double)res.matched_tokens / (double)(res.prompt_tokens ? res.prompt_tokens : 1));
    snprintf(metric, sizeof metric, "step_ns_256_%s", name);
    bench_add(out, "pool_schedule", "kvcache-c", metric, step.median, "ns");
    snprintf(metric, sizeof metric, "arrivals_per_step_%s", name);
    bench_add(out, "pool_schedule", "kvcache-c", metric, per_step, "count");
    snprintf(metric, sizeof metric, "evictions_per_step_%s", name);
    bench_add(out, "pool_schedule", "kvcache-c", metric, (double)res.evictions / (double)res.samples, "count");
    for (uint32_t g = 0; g < num_groups; g++) {
      double mean = (double)res.waste_sum[g] / (double)(res.holders[g] ? res.holders[g] : 1);
      double max_blocks = (double)res.waste_max[g] / SCHED_BLOCK;
      printf("          partial blocks, %s group: %.1f token slots lost per sequence on average, at most %llu "
             "(%.2f of a %d-token block); %.1f%% of the slots held; a sequence held at most %lld blocks\n",
             group_names[g], mean, (unsigned long long)res.waste_max[g], max_blocks, SCHED_BLOCK,
             100.0 * (double)res.waste_sum[g] / (double)(res.slots_sum[g] ? res.slots_sum[g] : 1),
             (long long)res.held_max[g]);
      if (g == 1) { /* a window of W tokens spans at most ceil((W - 1) / block) + 1 blocks */
        snprintf(metric, sizeof metric, "sliding_blocks_held_max_%s", name);
        bench_add(out, "pool_partial", "kvcache-c", metric, (double)res.held_max[g], "blocks");
      }
      snprintf(metric, sizeof metric, "waste_mean_tokens_%s_%s", name, group_names[g]);
      bench_add(out, "pool_partial", "kvcache-c", metric, mean, "tokens");
      snprintf(metric, sizeof metric, "waste_max_blocks_%s_%s", name, group_names[g]);
      bench_add(out, "pool_partial", "kvcache-c", metric, max_blocks, "blocks");
      snprintf(metric, sizeof metric, "waste_fraction_%s_%s", name, group_names[g]);
      bench_add(out, "pool_partial", "kvcache-c", metric,
                (double)res.waste_sum[g] / (double)(res.slots_sum[g] ? res.slots_sum[g] : 1), "ratio");
    }
    if (num_groups == 1) {
      double hash = block_hash_ns(runs);
      printf("          one block's hash (SHA-256 of the parent and 16 token ids): %.0f ns; a step hashes about %.0f "
             "blocks (every prompt block an arrival looks up, and every block that fills)\n",
             hash, per_step * (double)(SCHED_SYSTEM + 64) / SCHED_BLOCK + (SCHED_SEQS - per_step) / SCHED_BLOCK);
      bench_add(out, "pool_schedule", "kvcache-c", "block_hash_ns_16", hash, "ns");
    }
    free(res.step_ns);
    for (int p = 0; p < SCHED_PARTS; p++) free(res.part_ns[p]);
    free(run_medians);
    free(scratch);
  }
}

/* ----------------------------------------------------------------- fork */

#define LLAMA_LAYERS 32
#define LLAMA_HEADS 8
#define LLAMA_HEAD_DIM 128
#define ROW_ELEMS ((size_t)LLAMA_HEADS * LLAMA_HEAD_DIM) /* one token of one layer's K or V */
#define FORK_TOKENS 2048
#define FORK_BATCH 32 /* forks timed back to back, then destroyed */

/* A sequence of `tokens` tokens, reserved and committed (its K/V bytes are the pool's zeros). */
static kvc_pool_sequence* long_sequence(kvc_pool* pool, int tokens) {
  int32_t* ids = bench_alloc((size_t)tokens * sizeof(int32_t));
  int64_t* slots = bench_alloc((size_t)tokens * sizeof(int64_t));
  for (int t = 0; t < tokens; t++) ids[t] = 1 + t % 30000;
  kvc_pool_sequence* seq = NULL;
  bench_check(kvc_pool_sequence_create(pool, NULL, &seq), "kvc_pool_sequence_create");
  bench_check(kvc_pool_reserve(seq, ids, (size_t)tokens, slots), "kvc_pool_reserve");
  bench_check(kvc_pool_commit(seq), "kvc_pool_commit");
  free(ids);
  free(slots);
  return seq;
}

static void bench_fork(int reps, bench_results* out) {
  /* 2k tokens + 8 (the copy-on-write case) + a fork's copied block each */
  uint32_t blocks = (FORK_TOKENS + 8) / 16 + 1 + FORK_BATCH + 8;
  kvc_pool* pool = make_pool(KVC_DTYPE_BFLOAT16, 1, 16, blocks, 0, LLAMA_LAYERS, LLAMA_HEADS, LLAMA_HEAD_DIM);
  double* fork_ns = bench_alloc((size_t)reps * sizeof(double));
  double* destroy_ns = bench_alloc((size_t)reps * sizeof(double));
  double* cow_ns = bench_alloc((size_t)reps * sizeof(double));
  kvc_pool_sequence* forks[FORK_BATCH];
  const int32_t next = 7;
  int64_t slot[1];
  for (int partial = 0; partial < 2; partial++) {
    kvc_pool_sequence* seq = long_sequence(pool, FORK_TOKENS + (partial ? 8 : 0));
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
      double t0 = bench_now_ns();
      for (int f = 0; f < FORK_BATCH; f++) bench_check(kvc_pool_fork(seq, &forks[f]), "kvc_pool_fork");
      double t1 = bench_now_ns();
      if (partial) /* the first token of each fork copies the shared partial block of all 32 layers */
        for (int f = 0; f < FORK_BATCH; f++) bench_check(kvc_pool_reserve(forks[f], &next, 1, slot), "reserve");
      double t2 = bench_now_ns();
      for (int f = 0; f < FORK_BATCH; f++) kvc_pool_sequence_destroy(forks[f]);
      double t3 = bench_now_ns();
      if (r < 0) continue;
      if (partial) {
        cow_ns[r] = (t2 - t1) / FORK_BATCH;
      } else {
        fork_ns[r] = (t1 - t0) / FORK_BATCH;
        destroy_ns[r] = (t3 - t2) / FORK_BATCH;
      }
    }
    kvc_pool_sequence_destroy(seq);
  }
  kvc_pool_destroy(pool);
  bench_stats f = bench_summarize(fork_ns, (size_t)reps), d = bench_summarize(destroy_ns, (size_t)reps);
  bench_stats c = bench_summarize(cow_ns, (size_t)reps);
  double block_bytes = 16.0 * ROW_ELEMS * 2 * 2 * LLAMA_LAYERS;
  printf("pool_fork: a %d-token sequence (%d blocks of 16, 32 layers x 8 x 128 bf16), %d forks per repetition\n"
         "  fork    %8.0f ns [%.0f, %.0f]; destroying the fork %.0f ns\n"
         "  first token of a fork of %d tokens (copy-on-write of the shared partial block, %.0f KiB): %.0f ns "
         "[%.0f, %.0f], %.1f GB/s\n",
         FORK_TOKENS, FORK_TOKENS / 16, FORK_BATCH, f.median, f.min, f.max, d.median, FORK_TOKENS + 8,
         block_bytes / 1024, c.median, c.min, c.max, block_bytes / c.median);
  bench_add(out, "pool_fork", "kvcache-c", "fork_ns_2k", f.median, "ns");
  bench_add(out, "pool_fork", "kvcache-c", "fork_destroy_ns_2k", d.median, "ns");
  bench_add(out, "pool_fork", "kvcache-c", "fork_first_token_cow_ns_2k", c.median, "ns");
  free(fork_ns);
  free(destroy_ns);
  free(cow_ns);
}

/* ---------------------------------------------------------------- write */

#define WRITE_SEQS 256

static volatile uint64_t bench_sink; /* keeps the rooflines' stores observable */

typedef struct write_setup {
  kvc_pool* pool;
  kvc_kv storage[LLAMA_LAYERS];
  int64_t slots[WRITE_SEQS];    /* one group: the step's slot mapping */
  int64_t rotated[WRITE_SEQS];  /* the same slots, token i's at token i + 1: another step's mapping */
  int layer_steps;              /* per-layer steps so far: they alternate the two mappings */
  uint16_t* src;                /* [LLAMA_LAYERS][2][WRITE_SEQS][ROW_ELEMS] */
  uint16_t* flat;               /* the contiguous roofline's destination, as large */
  int64_t shape[3];
  kvc_tensor keys[LLAMA_LAYERS], values[LLAMA_LAYERS];
} write_setup;

static uint16_t* src_rows(const write_setup* w, int layer, int is_value) {
  return w->src + ((size_t)layer * 2 + (size_t)is_value) * WRITE_SEQS * ROW_ELEMS;
}

/* The storage row of `slot` in `layer` (NHD: block-major, then token in block; any strides). */
static uint16_t* slot_row(const write_setup* w, int layer, int is_value, int64_t slot) {
  const kvc_tensor* t = is_value ? &w->storage[layer].value : &w->storage[layer].key;
  int64_t bs = t->shape[1];
  int64_t off = (slot / bs) * bench_stride(t, 0) + (slot % bs) * bench_stride(t, 1);
  return (uint16_t*)((char*)t->data + t->byte_offset) + off;
}

static void write_init(write_setup* w, kvc_dtype dtype) {
  /* 256 sequences of 0-14 tokens, then one decode token each: one block per sequence (2 MiB of storage each) */
  w->pool = make_pool(dtype, 1, 16, WRITE_SEQS + 2, 0, LLAMA_LAYERS, LLAMA_HEADS, LLAMA_HEAD_DIM);
  for (uint32_t l = 0; l < LLAMA_LAYERS; l++)
    bench_check(kvc_pool_layer_storage(w->pool, l, KVC_POOL_LAYOUT_NHD, &w->storage[l]), "kvc_pool_layer_storage");
  bench_pool_decode_step(w->pool, WRITE_SEQS, w->slots);
  for (int i = 0; i < WRITE_SEQS; i++) w->rotated[(i + 1) % WRITE_SEQS] = w->slots[i];
  size_t elems = (size_t)LLAMA_LAYERS * 2 * WRITE_SEQS * ROW_ELEMS;
  w->src = bench_alloc(elems * sizeof(uint16_t));
  w->flat = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(w->src, elems, 17);
  memset(w->flat, 0, elems * sizeof(uint16_t));
  kvc_device cpu = {KVC_DEVICE_CPU, 0};
  bench_pool_step_tensors(w->src, dtype, cpu, LLAMA_LAYERS, WRITE_SEQS, LLAMA_HEADS, LLAMA_HEAD_DIM, w->shape, w->keys,
                          w->values);
}

static void write_free(write_setup* w) {
  kvc_pool_destroy(w->pool);
  free(w->src);
  free(w->flat);
}

static double time_write(write_setup* w) {
  double t0 = bench_now_ns();
  bench_check(kvc_pool_write(w->pool, w->keys, w->values, LLAMA_LAYERS, w->slots, WRITE_SEQS), "kvc_pool_write");
  return bench_now_ns() - t0;
}

/*
 * The same step as a forward pass writes it: one kvc_pool_write_layer per layer through one mapping. Steps
 * alternate two mappings, as a serving loop's steps differ, so that the first layer of every step checks its
 * mapping and the later ones find it accepted: what a real step costs, not a mapping checked once for all.
 */
static double time_write_layers(write_setup* w) {
  const int64_t* slots = w->layer_steps++ % 2 ? w->rotated : w->slots;
  double t0 = bench_now_ns();
  for (uint32_t l = 0; l < LLAMA_LAYERS; l++)
    bench_check(kvc_pool_write_layer(w->pool, l, &w->keys[l], &w->values[l], slots, WRITE_SEQS),
                "kvc_pool_write_layer");
  return bench_now_ns() - t0;
}

/* Every row of the step, read back from the storage after a write into cleared rows: a benchmark of a
   wrong write is worthless. */
static void write_verify(write_setup* w) {
  for (int l = 0; l < LLAMA_LAYERS; l++)
    for (int v = 0; v < 2; v++)
      for (int i = 0; i < WRITE_SEQS; i++) memset(slot_row(w, l, v, w->slots[i]), 0, ROW_ELEMS * sizeof(uint16_t));
  time_write(w);
  for (int l = 0; l < LLAMA_LAYERS; l++)
    for (int v = 0; v < 2; v++)
      for (int i = 0; i < WRITE_SEQS; i++)
        if (memcmp(slot_row(w, l, v, w->slots[i]), src_rows(w, l, v) + (size_t)i * ROW_ELEMS,
                   ROW_ELEMS * sizeof(uint16_t)) != 0) {
          fprintf(stderr, "bench_pool: after kvc_pool_write, layer %d %s of token %d (slot %lld) is not the source\n",
                  l, v ? "V" : "K", i, (long long)w->slots[i]);
          exit(1);
        }
}

/* One memcpy per layer and K/V (512 KiB each: below the size where glibc switches to non-temporal stores, which
   the pool's row copies never use) into consecutive addresses of one buffer as large as the step. */
static double time_flat_memcpy(write_setup* w) {
  size_t chunk = (size_t)WRITE_SEQS * ROW_ELEMS;
  double t0 = bench_now_ns();
  for (size_t c = 0; c < (size_t)LLAMA_LAYERS * 2; c++) memcpy(w->flat + c * chunk, w->src + c * chunk, chunk * 2);
  double t1 = bench_now_ns();
  bench_sink += w->flat[(size_t)LLAMA_LAYERS * 2 * chunk - 1];
  return t1 - t0;
}

static double time_slot_memcpy(write_setup* w) {
  double t0 = bench_now_ns();
  for (int l = 0; l < LLAMA_LAYERS; l++)
    for (int v = 0; v < 2; v++) {
      const uint16_t* src = src_rows(w, l, v);
      for (int i = 0; i < WRITE_SEQS; i++)
        memcpy(slot_row(w, l, v, w->slots[i]), src + (size_t)i * ROW_ELEMS, ROW_ELEMS * sizeof(uint16_t));
    }
  double t1 = bench_now_ns();
  bench_sink += *slot_row(w, LLAMA_LAYERS - 1, 1, w->slots[WRITE_SEQS - 1]);
  return t1 - t0;
}

static void bench_write(int reps, bench_results* out) {
  static const kvc_dtype dtypes[2] = {KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT16};
  static const char* const dtype_names[2] = {"bf16", "fp16"};
  double bytes = (double)LLAMA_LAYERS * 2 * WRITE_SEQS * ROW_ELEMS * sizeof(uint16_t);
  printf("pool_write: one decode step of %d sequences x 32 layers x K,V (8 x 128), %.0f MiB, one kvc_pool_write,\n"
         "  and 32 kvc_pool_write_layer (one per layer, as a forward pass writes); %d alternated repetitions, median ns "
         "[min, max]\n",
         WRITE_SEQS, bytes / (1 << 20), reps);
  double *t[4], *cpu[4];
  for (int k = 0; k < 4; k++) {
    t[k] = bench_alloc((size_t)reps * sizeof(double));
    cpu[k] = bench_alloc((size_t)reps * sizeof(double));
  }
  for (int d = 0; d < 2; d++) {
    static write_setup w;
    write_init(&w, dtypes[d]);
    /* Warm-up (the first write faults the destination pages in), and a check of what it writes. */
    write_verify(&w);
    time_slot_memcpy(&w);
    time_flat_memcpy(&w);
    time_write_layers(&w);
    for (int r = 0; r < reps; r++) { /* rotate the order, so that drift and neighbours hit all four alike */
      for (int k = 0; k < 4; k++) {
        int which = (r + k) % 4;
        double c0 = bench_thread_cpu_ns();
        double ns = which == 0   ? time_write(&w)
                    : which == 1 ? time_flat_memcpy(&w)
                    : which == 2 ? time_slot_memcpy(&w)
                                 : time_write_layers(&w);
        cpu[which][r] = bench_thread_cpu_ns() - c0;
        t[which][r] = ns;
      }
    }
    write_verify(&w);
    bench_stats sw = bench_summarize(t[0], (size_t)reps), sf = bench_summarize(t[1], (size_t)reps);
    bench_stats ss = bench_summarize(t[2], (size_t)reps);
    double cw = bench_summarize(cpu[0], (size_t)reps).median, cf = bench_summarize(cpu[1], (size_t)reps).median;
    double cs = bench_summarize(cpu[2], (size_t)reps).median;
    bench_stats sl = bench_summarize(t[3], (size_t)reps);
    double cl = bench_summarize(cpu[3], (size_t)reps).median;
    const char* dn = dtype_names[d];
    printf("  %s: kvc_pool_write %8.0f ns [%.0f, %.0f] %5.1f GB/s | memcpy %8.0f ns %5.1f GB/s | slot memcpy "
           "%8.0f ns %5.1f GB/s | write / memcpy %.2f, write / slot memcpy %.2f\n",
           dn, sw.median, sw.min, sw.max, bytes / sw.median, sf.median, bytes / sf.median, ss.median,
           bytes / ss.median, sw.median / sf.median, sw.median / ss.median);
    printf("        thread CPU time: kvc_pool_write %8.0f ns | memcpy %8.0f ns | slot memcpy %8.0f ns | write / memcpy "
           "%.2f, write / slot memcpy %.2f\n",
           cw, cf, cs, cw / cf, cw / cs);
    printf("        32 x kvc_pool_write_layer %8.0f ns [%.0f, %.0f], CPU %8.0f ns | per-layer / one write: %.2f (wall), "
           "%.2f (CPU)\n",
           sl.median, sl.min, sl.max, cl, sl.median / sw.median, cl / cw);
    char metric[64];
    snprintf(metric, sizeof metric, "step_ns_256x32_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, sw.median, "ns");
    bench_add(out, "pool_write", "memcpy", metric, sf.median, "ns");
    bench_add(out, "pool_write", "slot-memcpy", metric, ss.median, "ns");
    snprintf(metric, sizeof metric, "write_over_memcpy_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, sw.median / sf.median, "ratio");
    snprintf(metric, sizeof metric, "write_over_slot_memcpy_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, sw.median / ss.median, "ratio");
    snprintf(metric, sizeof metric, "step_cpu_ns_256x32_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, cw, "ns");
    bench_add(out, "pool_write", "memcpy", metric, cf, "ns");
    bench_add(out, "pool_write", "slot-memcpy", metric, cs, "ns");
    snprintf(metric, sizeof metric, "write_over_memcpy_cpu_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, cw / cf, "ratio");
    snprintf(metric, sizeof metric, "write_over_slot_memcpy_cpu_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, cw / cs, "ratio");
    snprintf(metric, sizeof metric, "layers_step_ns_256x32_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, sl.median, "ns");
    snprintf(metric, sizeof metric, "layers_over_write_cpu_%s", dn);
    bench_add(out, "pool_write", "kvcache-c", metric, cl / cw, "ratio");
    write_free(&w);
  }
  for (int k = 0; k < 4; k++) {
    free(t[k]);
    free(cpu[k]);
  }
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 31;
  static bench_results res;
  printf("bench_pool: kvcache %s, CPU pool, one thread\n\n", kvc_version_string());
  bench_schedule(reps < 7 ? reps : 7, &res);
  printf("\n");
  bench_fork(reps, &res);
  printf("\n");
  bench_write(reps, &res);
  bench_write_json(args.json_path, &res);
  return 0;
}
