/*
 * bench_pool_budget: a hybrid model's serving loop (4 full-attention layers
 * and 4 sliding-window layers of 512 tokens, Gemma-style, 16-token blocks)
 * on pools of the same memory, with one block budget shared by the groups
 * (kvc_pool_options.shared_budget_bytes) against per-group budgets (each
 * group's num_blocks, the page split between the groups: evenly, as the
 * layer counts would split it, and the best of the splits 1:7 .. 7:1 for
 * this workload, chosen after the fact).
 *
 * The workload: every step two requests arrive (one in eight long: a
 * 3072-token prompt; the others 256 tokens), each generating 64 tokens. The
 * scheduler admits waiting requests first come first served while
 * kvc_pool_blocks_needed says the new request's prompt and output and the
 * running sequences' remaining tokens fit, prefills a prompt in one reserve and commit,
 * then decodes every running sequence one token per step with
 * kvc_pool_reserve_batch / kvc_pool_commit_batch; a sequence the batch could
 * not reserve is preempted (destroyed, back to the head of the queue). The
 * same arrivals reach every pool. No K/V is written (the bookkeeping is the
 * same without it). Reported per pool: medians over the measured steps of
 * the blocks in use (every group), the running (admitted) sequences and the
 * step's wall time, and the requests completed.
 */
#include "bench_common.h"

#define LAYERS_PER_GROUP 4
#define BLOCK 16
#define WINDOW 512
#define PAGES 2048 /* the memory: this many blocks of one group's size (every layer of the group) */
#define LONG_PROMPT 3072
#define SHORT_PROMPT 256
#define OUTPUT 64
#define MAX_SEQS 1024
#define WARMUP 200

typedef struct request {
  int32_t first_token; /* distinct per request: no prefix sharing */
  int prompt, generated;
  kvc_pool_sequence* seq;
} request;

typedef struct sim {
  kvc_pool* pool;
  int shared;
  request* all;
  int n_requests;
  int queue[8 * MAX_SEQS], q_head, q_len; /* waiting requests, indices into all */
  int running[MAX_SEQS], n_running;
  long completed;
} sim;

static void pool_open(sim* s, uint64_t page_bytes, int full_pages, int shared) {
  kvc_pool_group_options g[2] = {KVC_POOL_GROUP_OPTIONS_INIT, KVC_POOL_GROUP_OPTIONS_INIT};
  g[0].block_size = g[1].block_size = BLOCK;
  g[1].kind = KVC_POOL_GROUP_SLIDING;
  g[1].window = WINDOW;
  if (!shared) {
    g[0].num_blocks = (uint32_t)full_pages;
    g[1].num_blocks = (uint32_t)(PAGES - full_pages);
  }
  kvc_pool_layer_options l[2 * LAYERS_PER_GROUP];
  for (int i = 0; i < 2 * LAYERS_PER_GROUP; i++) {
    kvc_pool_layer_options x = KVC_POOL_LAYER_OPTIONS_INIT;
    x.group = (uint32_t)(i % 2); /* interleaved, as Gemma's layers */
    x.num_kv_heads = 1;
    x.key_head_dim = 8;
    l[i] = x;
  }
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT16;
  o.num_groups = 2;
  o.groups = g;
  o.num_layers = 2 * LAYERS_PER_GROUP;
  o.layers = l;
  if (shared) o.shared_budget_bytes = page_bytes * PAGES;
  bench_check(kvc_pool_create(&o, &s->pool), "kvc_pool_create");
  s->shared = shared;
}

/*
 * Whether `req` can run to its end beside the running sequences: its prompt and output, then every running
 * sequence's remaining tokens, as one plan (kvc_pool_blocks_needed). Admitting only what can finish keeps the
 * loop from preempting (and recomputing) what it admitted a step earlier.
 */
static int fits(sim* s, const request* req) {
  static const kvc_pool_sequence* seqs[MAX_SEQS + 1];
  static uint64_t n[MAX_SEQS + 1];
  int k = 0; /* in the reserves' order: this prompt now, then the running sequences' tokens */
  seqs[k] = req->seq, n[k++] = (uint64_t)(req->prompt + OUTPUT);
  for (int i = 0; i < s->n_running; i++) {
    const request* r = &s->all[s->running[i]];
    seqs[k] = r->seq, n[k++] = (uint64_t)(OUTPUT - r->generated);
  }
  uint64_t need[2];
  bench_check(kvc_pool_blocks_needed(s->pool, seqs, n, (size_t)k, need), "kvc_pool_blocks_needed");
  kvc_pool_stats st[2];
  for (uint32_t g = 0; g < 2; g++) {
    memset(&st[g], 0, sizeof st[g]);
    st[g].struct_size = sizeof st[g];
    bench_check(kvc_pool_stats_get(s->pool, g, &st[g]), "kvc_pool_stats_get");
  }
  if (s->shared) return need[0] <= st[0].free_blocks + st[0].cached_blocks + st[1].cached_blocks;
  return need[0] <= st[0].free_blocks + st[0].cached_blocks && need[1] <= st[1].free_blocks + st[1].cached_blocks;
}

static void prompt_tokens(const request* r, int32_t* out) {
  for (int t = 0; t < r->prompt; t++) out[t] = r->first_token + t;
}

static void admit(sim* s) {
  static int32_t tokens[LONG_PROMPT];
  static int64_t slots[2 * LONG_PROMPT];
  while (s->q_len && s->n_running < MAX_SEQS) {
    request* r = &s->all[s->queue[s->q_head]];
    bench_check(kvc_pool_sequence_create(s->pool, NULL, &r->seq), "kvc_pool_sequence_create");
    if (!fits(s, r)) {
      kvc_pool_sequence_destroy(r->seq);
      r->seq = NULL;
      return; /* first come first served: nothing overtakes the head */
    }
    prompt_tokens(r, tokens);
    bench_check(kvc_pool_reserve(r->seq, tokens, (size_t)r->prompt, slots), "kvc_pool_reserve (prompt)");
    bench_check(kvc_pool_commit(r->seq), "kvc_pool_commit (prompt)");
    r->generated = 0;
    s->running[s->n_running++] = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % (8 * MAX_SEQS);
    s->q_len--;
  }
}

static void decode(sim* s, int32_t token) {
  static kvc_pool_sequence* seqs[MAX_SEQS];
  static int32_t tokens[MAX_SEQS];
  static uint64_t ones[MAX_SEQS];
  static int64_t slots[2 * MAX_SEQS];
  for (int i = 0; i < s->n_running; i++) seqs[i] = s->all[s->running[i]].seq, tokens[i] = token, ones[i] = 1;
  size_t done = 0;
  bench_check(kvc_pool_reserve_batch(s->pool, seqs, (size_t)s->n_running, tokens, ones, slots, &done),
              "kvc_pool_reserve_batch");
  bench_check(kvc_pool_commit_batch(s->pool, seqs, done), "kvc_pool_commit_batch");
  /* Preempted: the ones the batch could not reserve go back to the head of the queue, last first. */
  for (int i = s->n_running - 1; i >= (int)done; i--) {
    request* r = &s->all[s->running[i]];
    kvc_pool_sequence_destroy(r->seq);
    r->seq = NULL;
    s->q_head = (s->q_head + 8 * MAX_SEQS - 1) % (8 * MAX_SEQS);
    s->queue[s->q_head] = s->running[i];
    s->q_len++;
  }
  s->n_running = (int)done;
  int kept = 0;
  for (int i = 0; i < s->n_running; i++) {
    request* r = &s->all[s->running[i]];
    if (++r->generated == OUTPUT) {
      kvc_pool_sequence_destroy(r->seq);
      r->seq = NULL;
      s->completed++;
    } else {
      s->running[kept++] = s->running[i];
    }
  }
  s->n_running = kept;
}

typedef struct outcome {
  double blocks, running, step_ns;
  long completed;
} outcome;

static outcome run(uint64_t page_bytes, int full_pages, int shared, int steps) {
  sim s;
  memset(&s, 0, sizeof s);
  pool_open(&s, page_bytes, full_pages, shared);
  s.n_requests = 2 * (WARMUP + steps);
  s.all = (request*)bench_alloc((size_t)s.n_requests * sizeof(request));
  uint64_t rng = 12345;
  for (int i = 0; i < s.n_requests; i++) {
    s.all[i].prompt = bench_rand(&rng) % 8 == 0 ? LONG_PROMPT : SHORT_PROMPT;
    s.all[i].first_token = 1 + i * (LONG_PROMPT + OUTPUT);
    s.all[i].seq = NULL;
  }
  double* blocks = (double*)bench_alloc((size_t)steps * sizeof(double));
  double* running = (double*)bench_alloc((size_t)steps * sizeof(double));
  double* ns = (double*)bench_alloc((size_t)steps * sizeof(double));
  int arrived = 0;
  long completed_before = 0;
  for (int k = 0; k < WARMUP + steps; k++) {
    for (int a = 0; a < 2 && s.q_len < 8 * MAX_SEQS - 1; a++) {
      s.queue[(s.q_head + s.q_len) % (8 * MAX_SEQS)] = arrived++;
      s.q_len++;
    }
    double t0 = bench_now_ns();
    admit(&s);
    decode(&s, 7);
    double t1 = bench_now_ns();
    if (k == WARMUP) completed_before = s.completed;
    if (k < WARMUP) continue;
    uint64_t used = 0;
    for (uint32_t g = 0; g < 2; g++) {
      kvc_pool_stats st;
      memset(&st, 0, sizeof st);
      st.struct_size = sizeof st;
      bench_check(kvc_pool_stats_get(s.pool, g, &st), "kvc_pool_stats_get");
      used += st.used_blocks;
    }
    blocks[k - WARMUP] = (double)used;
    running[k - WARMUP] = s.n_running;
    ns[k - WARMUP] = t1 - t0;
  }
  outcome o = {bench_summarize(blocks, (size_t)steps).median, bench_summarize(running, (size_t)steps).median,
               bench_summarize(ns, (size_t)steps).median, s.completed - completed_before};
  for (int i = 0; i < s.n_requests; i++)
    if (s.all[i].seq) kvc_pool_sequence_destroy(s.all[i].seq);
  kvc_pool_destroy(s.pool);
  free(s.all);
  free(blocks);
  free(running);
  free(ns);
  return o;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int steps = args.steps > 100 ? args.steps : 600;
  /* A group's block: 4 layers of K and V, 16 tokens x 1 head x 8 dims of fp16 = 256 bytes each. */
  uint64_t page = (uint64_t)LAYERS_PER_GROUP * 2 * BLOCK * 8 * 2;
  static bench_results res;
  printf("pool budget: hybrid model (4 full + 4 sliding-window-%d layers, %d-token blocks), %d pages of %llu bytes "
         "(%.1f MiB), 2 arrivals a step (1 in 8 of %d prompt tokens, else %d; %d generated), %d measured steps; "
         "kvcache %s\n", WINDOW, BLOCK, PAGES, (unsigned long long)page, PAGES * (double)page / 1048576.0,
         LONG_PROMPT, SHORT_PROMPT, OUTPUT, steps, kvc_version_string());
  printf("%-26s %14s %14s %14s %12s\n", "budget", "blocks in use", "admitted seqs", "step us", "completed");
  outcome shared = run(page, 0, 1, steps);
  outcome even = run(page, PAGES / 2, 0, steps);
  outcome best = even;
  int best_eighths = 4;
  for (int e = 1; e <= 7; e++) {
    if (e == 4) continue;
    outcome o = run(page, PAGES * e / 8, 0, steps);
    if (o.completed > best.completed || (o.completed == best.completed && o.running > best.running))
      best = o, best_eighths = e;
  }
  char best_name[48];
  snprintf(best_name, sizeof best_name, "per_group_best (%d:%d)", best_eighths, 8 - best_eighths);
  const char* names[3] = {"shared", "per_group_even (4:4)", best_name};
  const char* impl[3] = {"shared", "per_group_even", "per_group_best"};
  outcome* all[3] = {&shared, &even, &best};
  for (int i = 0; i < 3; i++) {
    printf("%-26s %14.0f %14.0f %14.1f %12ld\n", names[i], all[i]->blocks, all[i]->running, all[i]->step_ns / 1e3,
           all[i]->completed);
    bench_add(&res, "pool_budget", impl[i], "blocks_in_use_median", all[i]->blocks, "blocks");
    bench_add(&res, "pool_budget", impl[i], "admitted_sequences_median", all[i]->running, "sequences");
    bench_add(&res, "pool_budget", impl[i], "step_wall_ns_median", all[i]->step_ns, "ns");
    bench_add(&res, "pool_budget", impl[i], "requests_completed", (double)all[i]->completed, "requests");
  }
  bench_write_json(args.json_path, &res);
  return 0;
}
