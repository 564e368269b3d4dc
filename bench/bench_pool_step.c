/*
 * bench_pool_step: the host cost of a scheduler's decode step over 256
 * running sequences of a pool, in C: every sequence reserves one token, then
 * every sequence commits (a full block is hashed and cached every 16th
 * step of a sequence). Two ways to make the same step:
 *   per_sequence  256 kvc_pool_reserve calls, then 256 kvc_pool_commit calls
 *   batch         one kvc_pool_reserve_batch and one kvc_pool_commit_batch
 * Each runs on its own pool, prefilled alike (64-token prompts, distinct per
 * sequence), and the two take turns, so both time the same states. The
 * pool's storage does not enter (no K/V is written). Reported: medians over
 * the repetitions of ns per step, in wall time and in this thread's CPU time
 * (the scheduler's own work: on a shared machine other processes inflate
 * wall time, not CPU time). bench/bench_pool_python.py runs this program
 * beside the same step made from Python, for the ratio the Python scheduler
 * pays over C.
 */
#include "bench_common.h"

#define SEQS 256
#define PROMPT 64
#define BLOCK 16

typedef struct step_pool {
  kvc_pool* pool;
  kvc_pool_sequence* seqs[SEQS];
} step_pool;

static void step_pool_open(step_pool* s, int tokens_per_seq) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  g.block_size = BLOCK;
  g.num_blocks = (uint32_t)(SEQS * ((tokens_per_seq + BLOCK - 1) / BLOCK + 1) + 2);
  kvc_pool_layer_options l = KVC_POOL_LAYER_OPTIONS_INIT;
  l.num_kv_heads = 1;
  l.key_head_dim = 8;
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT16;
  o.num_groups = 1;
  o.groups = &g;
  o.num_layers = 1;
  o.layers = &l;
  bench_check(kvc_pool_create(&o, &s->pool), "kvc_pool_create");
  int32_t prompt[PROMPT];
  int64_t slots[PROMPT];
  for (int i = 0; i < SEQS; i++) {
    bench_check(kvc_pool_sequence_create(s->pool, NULL, &s->seqs[i]), "kvc_pool_sequence_create");
    for (int t = 0; t < PROMPT; t++) prompt[t] = 1 + i * PROMPT + t;
    bench_check(kvc_pool_reserve(s->seqs[i], prompt, PROMPT, slots), "kvc_pool_reserve (prompt)");
    bench_check(kvc_pool_commit(s->seqs[i]), "kvc_pool_commit (prompt)");
  }
}

/* `steps` steps; returns wall and CPU ns per step. */
static void run_steps(step_pool* s, int batch, int steps, int32_t next, double* wall, double* cpu) {
  static int32_t tokens[SEQS];
  static int64_t slots[SEQS];
  static uint64_t ones[SEQS];
  for (int i = 0; i < SEQS; i++) ones[i] = 1;
  double w0 = bench_now_ns(), c0 = bench_thread_cpu_ns();
  for (int k = 0; k < steps; k++) {
    for (int i = 0; i < SEQS; i++) tokens[i] = next + k;
    if (batch) {
      size_t reserved = 0;
      bench_check(kvc_pool_reserve_batch(s->pool, s->seqs, SEQS, tokens, ones, slots, &reserved),
                  "kvc_pool_reserve_batch");
      if (reserved != SEQS) {
        fprintf(stderr, "bench_pool_step: the pool ran out of blocks (%zu of %d reserved)\n", reserved, SEQS);
        exit(1);
      }
      bench_check(kvc_pool_commit_batch(s->pool, s->seqs, SEQS), "kvc_pool_commit_batch");
    } else {
      for (int i = 0; i < SEQS; i++) bench_check(kvc_pool_reserve(s->seqs[i], &tokens[i], 1, &slots[i]), "reserve");
      for (int i = 0; i < SEQS; i++) bench_check(kvc_pool_commit(s->seqs[i]), "kvc_pool_commit");
    }
  }
  *cpu = (bench_thread_cpu_ns() - c0) / steps;
  *wall = (bench_now_ns() - w0) / steps;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 15;
  int steps = args.steps;
  step_pool pools[2];
  for (int b = 0; b < 2; b++) step_pool_open(&pools[b], PROMPT + (reps + 1) * steps);
  double* samples[2][2]; /* [batch][wall|cpu] */
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 2; k++) samples[b][k] = bench_alloc((size_t)reps * sizeof(double));
  double w, c;
  for (int b = 0; b < 2; b++) run_steps(&pools[b], b, steps, 100000, &w, &c); /* warm-up */
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < 2; k++) {
      int b = (k + r) % 2;
      run_steps(&pools[b], b, steps, 100000 + (r + 1) * steps, &samples[b][0][r], &samples[b][1][r]);
    }
  static bench_results res;
  static const char* names[2] = {"per_sequence", "batch"};
  printf("pool step: %d sequences x 1 token (reserve, then commit), %d repetitions of %d steps; kvcache %s\n", SEQS,
         reps, steps, kvc_version_string());
  printf("%-14s %16s %16s\n", "C step", "wall ns/step", "cpu ns/step");
  for (int b = 0; b < 2; b++) {
    bench_stats sw = bench_summarize(samples[b][0], (size_t)reps);
    bench_stats sc = bench_summarize(samples[b][1], (size_t)reps);
    printf("%-14s %16.0f %16.0f\n", names[b], sw.median, sc.median);
    char m[64];
    snprintf(m, sizeof m, "wall_ns_per_step_%s", names[b]);
    bench_add(&res, "pool_step", "kvcache-c", m, sw.median, "ns");
    snprintf(m, sizeof m, "cpu_ns_per_step_%s", names[b]);
    bench_add(&res, "pool_step", "kvcache-c", m, sc.median, "ns");
    for (int k = 0; k < 2; k++) free(samples[b][k]);
    kvc_pool_destroy(pools[b].pool);
  }
  bench_write_json(args.json_path, &res);
  return 0;
}
