/*
 * bench/bench_tier_step.c: a serving step of a CPU pool with a Redis tier
 * on, against the same step without a tier (docs/tiers.md, 'The tier
 * worker').
 *
 * A bfloat16 model of 2 layers, 8 KV heads of dim 128, 16-token blocks
 * (128 KiB a block); 64 sequences decode one token a step: reserve_batch,
 * the K/V of the 64 tokens written (kvc_pool_write), commit_batch. The
 * sequences start at staggered lengths, so about 4 blocks fill (and are
 * stored on commit) every step; a sequence that reaches 256 tokens is
 * replaced by a new one, so stored blocks keep coming. Three pools of the
 * same step, taking turns in each repetition:
 *   none    no tier;
 *   sync    a Redis tier (WRITE_ON_COMMIT), stores inside commit (0.6's way);
 *   worker  the same tier with the pool's tier worker (stores queued).
 * Reported: medians of the repetitions' ns per step, wall (the step's
 * latency) and the calling thread's CPU time, and worker/none (the goal:
 * within 1.2) and sync/none of each. The redis-server is the tests' helper's
 * (tests/tier/redis/redis_server.h), on 127.0.0.1; SKIPPED without one.
 */
#define _GNU_SOURCE
#include "bench_pool_common.h"
#include "redis_server.h"

enum { HEADS = 8, DIM = 128, LAYERS = 2, BLOCK = 16, SEQS = 64, MAX_LEN = 256 };

typedef struct step_pool {
  kvc_pool* pool;
  kvc_pool_sequence* seqs[SEQS];
  int32_t next; /* the next token id: every sequence's tokens are its own, so every block hash is new */
} step_pool;

static kvc_tier* open_redis(const char* seeds) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.cluster = KVC_REDIS_CLUSTER_OFF;
  o.command_timeout_ms = 2000;
  o.call_timeout_ms = 10000;
  kvc_tier* t = NULL;
  bench_check(kvc_redis_tier_create(&o, &t), "kvc_redis_tier_create");
  return t;
}

/* A fresh sequence with `len` committed tokens (a staggered start). */
static kvc_pool_sequence* new_sequence(step_pool* s, int len) {
  kvc_pool_sequence* q = NULL;
  bench_check(kvc_pool_sequence_create(s->pool, NULL, &q), "kvc_pool_sequence_create");
  if (len) {
    int32_t tok[BLOCK];
    int64_t slots[BLOCK];
    for (int t = 0; t < len; t++) tok[t] = s->next++;
    bench_check(kvc_pool_reserve(q, tok, (size_t)len, slots), "kvc_pool_reserve");
    bench_check(kvc_pool_commit(q), "kvc_pool_commit");
  }
  return q;
}

static void step_pool_open(step_pool* s, const char* seeds, int worker) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  g.block_size = BLOCK;
  g.num_blocks = SEQS * (MAX_LEN / BLOCK + 1) + 512; /* room for cached blocks and those a queued store holds */
  kvc_pool_layer_options l = KVC_POOL_LAYER_OPTIONS_INIT;
  l.num_kv_heads = HEADS;
  l.key_head_dim = DIM;
  kvc_pool_layer_options layers[LAYERS] = {l, l};
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_BFLOAT16;
  o.num_groups = 1;
  o.groups = &g;
  o.num_layers = LAYERS;
  o.layers = layers;
  bench_check(kvc_pool_create(&o, &s->pool), "kvc_pool_create");
  if (seeds) bench_check(kvc_pool_add_tier(s->pool, open_redis(seeds), KVC_TIER_WRITE_ON_COMMIT), "add_tier");
  if (worker) bench_check(kvc_pool_start_tier_worker(s->pool, NULL), "kvc_pool_start_tier_worker");
  s->next = 1 + (worker + (seeds != NULL)) * 100000000; /* the three pools' blocks never share a key */
  for (int i = 0; i < SEQS; i++) s->seqs[i] = new_sequence(s, i % BLOCK);
}

/* `steps` steps; returns wall ns per step, and this thread's CPU ns per step in *cpu. */
static double run_steps(step_pool* s, int steps, uint16_t* data, double* cpu) {
  static int32_t tokens[SEQS];
  static int64_t slots[SEQS];
  static uint64_t ones[SEQS];
  int64_t shape[3];
  kvc_tensor k[LAYERS], v[LAYERS];
  bench_pool_step_tensors(data, KVC_DTYPE_BFLOAT16, (kvc_device){KVC_DEVICE_CPU, 0}, LAYERS, SEQS, HEADS, DIM, shape,
                          k, v);
  for (int i = 0; i < SEQS; i++) ones[i] = 1;
  double t0 = bench_now_ns(), c0 = bench_thread_cpu_ns();
  for (int step = 0; step < steps; step++) {
    for (int i = 0; i < SEQS; i++) {
      if (kvc_pool_sequence_length(s->seqs[i]) >= MAX_LEN) {
        kvc_pool_sequence_destroy(s->seqs[i]);
        s->seqs[i] = new_sequence(s, 0);
      }
      tokens[i] = s->next++;
    }
    size_t reserved = 0;
    bench_check(kvc_pool_reserve_batch(s->pool, s->seqs, SEQS, tokens, ones, slots, &reserved), "reserve_batch");
    if (reserved != SEQS) {
      fprintf(stderr, "bench_tier_step: the pool ran out of blocks (%zu of %d reserved)\n", reserved, SEQS);
      exit(1);
    }
    bench_check(kvc_pool_write(s->pool, k, v, LAYERS, slots, SEQS), "kvc_pool_write");
    bench_check(kvc_pool_commit_batch(s->pool, s->seqs, SEQS), "commit_batch");
  }
  *cpu = (bench_thread_cpu_ns() - c0) / steps;
  return (bench_now_ns() - t0) / steps;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 15;
  int steps = args.steps;
  static bench_results res;
  printf("tier step: %d sequences x 1 token (reserve_batch, write %d layers, commit_batch), about %d blocks of %d "
         "KiB stored a step; kvcache %s\n", SEQS, LAYERS, SEQS / BLOCK, LAYERS * BLOCK * HEADS * DIM * 2 * 2 / 1024,
         kvc_version_string());
  rs_server server;
  memset(&server, 0, sizeof server);
  if (!rs_on_path("redis-server") || !rs_on_path("redis-cli")) {
    printf("  SKIPPED: redis-server is not installed (scripts/setup.sh installs it)\n");
    bench_write_json(args.json_path, &res);
    return 0;
  }
  if (rs_start(&server, 0) != 0) {
    printf("  SKIPPED: redis-server did not start\n");
    bench_write_json(args.json_path, &res);
    return 0;
  }
  char seeds[64];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
  uint16_t* data = bench_alloc((size_t)LAYERS * 2 * SEQS * HEADS * DIM * sizeof(uint16_t));
  bench_fill_bf16(data, (size_t)LAYERS * 2 * SEQS * HEADS * DIM, 3);
  static const char* names[3] = {"none", "sync", "worker"};
  step_pool pools[3];
  for (int c = 0; c < 3; c++) step_pool_open(&pools[c], c ? seeds : NULL, c == 2);
  double *ns[3], *cpu[3];
  for (int c = 0; c < 3; c++) {
    ns[c] = bench_alloc((size_t)reps * sizeof(double));
    cpu[c] = bench_alloc((size_t)reps * sizeof(double));
    double ignored;
    run_steps(&pools[c], steps, data, &ignored); /* warm-up */
  }
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < 3; k++) {
      int c = (k + r) % 3;
      ns[c][r] = run_steps(&pools[c], steps, data, &cpu[c][r]);
    }
  /* Wall time is the step's latency (a sync store waits on the socket, which costs no CPU); the calling thread's
     CPU time is what the step itself does, which other processes on a shared machine do not inflate. */
  double med[3], medc[3];
  for (int c = 0; c < 3; c++) {
    med[c] = bench_summarize(ns[c], (size_t)reps).median;
    medc[c] = bench_summarize(cpu[c], (size_t)reps).median;
    printf("  %-7s %12.0f ns/step wall %12.0f ns/step cpu (calling thread)\n", names[c], med[c], medc[c]);
    char m[64];
    snprintf(m, sizeof m, "ns_per_step_%s", names[c]);
    bench_add(&res, "tier_step", "kvcache-c", m, med[c], "ns");
    snprintf(m, sizeof m, "cpu_ns_per_step_%s", names[c]);
    bench_add(&res, "tier_step", "kvcache-c", m, medc[c], "ns");
  }
  printf("  wall: worker/none %.3f (goal <= 1.2), sync/none %.3f; cpu: worker/none %.3f, sync/none %.3f (medians of "
         "%d repetitions of %d steps)\n", med[2] / med[0], med[1] / med[0], medc[2] / medc[0], medc[1] / medc[0], reps,
         steps);
  bench_add(&res, "tier_step", "kvcache-c", "worker_over_none", med[2] / med[0], "ratio");
  bench_add(&res, "tier_step", "kvcache-c", "sync_over_none", med[1] / med[0], "ratio");
  bench_add(&res, "tier_step", "kvcache-c", "cpu_worker_over_none", medc[2] / medc[0], "ratio");
  bench_add(&res, "tier_step", "kvcache-c", "cpu_sync_over_none", medc[1] / medc[0], "ratio");
  kvc_tier_worker_stats ws;
  memset(&ws, 0, sizeof ws);
  ws.struct_size = sizeof ws;
  bench_check(kvc_pool_tier_worker_stats(pools[2].pool, &ws), "tier_worker_stats");
  printf("  worker: %llu blocks queued, %llu dropped (queue full)\n", (unsigned long long)ws.blocks_queued,
         (unsigned long long)ws.blocks_dropped);
  bench_add(&res, "tier_step", "kvcache-c", "worker_dropped_share",
            ws.blocks_queued + ws.blocks_dropped
                ? (double)ws.blocks_dropped / (double)(ws.blocks_queued + ws.blocks_dropped) : 0.0, "ratio");
  for (int c = 0; c < 3; c++) {
    kvc_pool_destroy(pools[c].pool);
    free(ns[c]);
    free(cpu[c]);
  }
  free(data);
  rs_stop(&server);
  bench_write_json(args.json_path, &res);
  return 0;
}
