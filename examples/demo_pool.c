/*
 * examples/demo_pool.c: the demo's decoder serving requests by continuous
 * batching over a kvc_pool (kvcache/pool.h), as a serving loop does it.
 *
 * The model is the table's "DynamicCache (config, sliding)" one: layers 0-2
 * attend over a sliding window of WINDOW tokens, layer 3 over everything. The
 * pool has one group of blocks per attention kind: FULL_BLOCK-token blocks for
 * layer 3, SLIDING_BLOCK-token blocks for layers 0-2, which go back to the
 * pool once every token in them has left the window.
 *
 * Requests arrive a few per step. Most begin with the same system prompt, so
 * kvc_pool_match_prefix finds its blocks cached by an earlier request and
 * only the rest of the prompt is computed; some repeat an earlier prompt
 * whole; some sample n > 1 continuations: after the prefill they fork
 * (kvc_pool_fork shares every block) and each fork takes another token
 * first, then decodes greedily, writing into its own copy of the shared
 * partial block (copy-on-write in kvc_pool_reserve). A request leaves when
 * its tokens are generated (kvc_pool_sequence_destroy: its full blocks stay
 * cached for later requests).
 *
 * One step of the loop:
 *   admission  kvc_pool_sequence_create + kvc_pool_match_prefix for the
 *              waiting requests, admitted while kvc_pool_blocks_needed for
 *              the whole batch fits in the free and evictable blocks;
 *   reserve    kvc_pool_reserve for every running sequence: its new tokens'
 *              slots (the prompt's unmatched rest, or the last sampled token);
 *   tables     kvc_pool_block_table of each group, the padded form;
 *   forward    each sequence's new tokens through the model. Attention
 *              (pool_self_attention) reads the history from the pool's
 *              storage (kvc_pool_layer_storage, NHD views) through the block
 *              table, and the step's own tokens from the K/V it just
 *              computed, which it keeps for the write;
 *   write      one kvc_pool_write for every layer of every sequence of the
 *              step, through the concatenated slot mappings;
 *   commit     kvc_pool_commit: full blocks are hashed and become reusable.
 *
 * Three requests carry an image (a multimodal item, kvc_pool_mm_item): the
 * same tokens (the system prompt, IMAGE_LEN placeholder tokens, two more),
 * images A, B and A again. Blocks that overlap the image hash with its
 * content hash (docs/block-hash.md, version 2), so the request with image B
 * shares only the system prompt's blocks before the image, and the second
 * request with image A shares the image's blocks too.
 *
 * Then every request is run again alone, with a DynamicCache of the same
 * layer types (the table's path, demo_attention.c) fed the same tokens: its
 * logits at every step must equal the pool run's bit for bit. Attention
 * gathers the same keys in the same order and calls the same kernel, so a
 * block read from the wrong place, a missed copy-on-write or a window block
 * freed too early shows as a difference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "demo.h"
#include "kvcache/pool.h"

#define NUM_GROUPS 2
#define G_FULL 0
#define G_SLIDING 1
#define FULL_BLOCK 8        /* tokens per block of the full-attention group */
#define SLIDING_BLOCK 4     /* of the sliding group: smaller, so blocks leave its window sooner */
#define POOL_BLOCKS 80     /* blocks of each group, the null block included */
#define NUM_REQUESTS 30
#define SYSTEM_LEN 26       /* the shared system prompt: 3 whole blocks of 8 tokens and 2 more */
#define MAX_USER 8          /* tokens of a request after the system prompt: 2..MAX_USER */
#define MAX_GEN 14          /* tokens a request generates: 6..MAX_GEN */
#define MAX_SAMPLES 3       /* n of the forking requests: 2 or 3 */
#define MAX_OUTPUTS (NUM_REQUESTS * MAX_SAMPLES)
#define IMAGE_LEN 8         /* placeholder tokens of an image, right after the system prompt */
#define IMAGE_TOKEN (VOCAB - 1)
#define NUM_IMAGE_REQUESTS 3
static const int image_request[NUM_IMAGE_REQUESTS] = {20, 23, 26}; /* images A, B, A */
static const char* const image_hash[NUM_IMAGE_REQUESTS] = {"image A", "image B", "image A"};

/* Layers 0-2 sliding, layer 3 full: make_dynamic_sliding's layer types. */
static const uint32_t layer_group[N_LAYERS] = {G_SLIDING, G_SLIDING, G_SLIDING, G_FULL};
static const layer_mask layer_masks[N_LAYERS] = {
    {MASK_SLIDING, WINDOW}, {MASK_SLIDING, WINDOW}, {MASK_SLIDING, WINDOW}, {MASK_FULL, 0}};
static const uint32_t group_block[NUM_GROUPS] = {FULL_BLOCK, SLIDING_BLOCK};
static const char* const group_name[NUM_GROUPS] = {"full", "sliding"};

typedef struct request {
  int arrival; /* the step it arrives at */
  int prompt[MAX_LEN], prompt_len;
  int gen;     /* tokens each of its samples generates */
  int samples; /* n: 1, or forks after the prefill */
  const char* kind;
  const char* image; /* the content hash of its image (at SYSTEM_LEN, IMAGE_LEN tokens); NULL: none */
} request;

/* One sample of a request: one sequence of the pool, one generation. */
typedef struct output {
  int request, sample; /* sample s takes the (s+1)-th most likely token first, then decodes greedily */
  kvc_pool_sequence* seq;
  int tokens[MAX_LEN], len; /* the prompt, then the generated tokens */
  int fed;                  /* tokens whose K/V are in the pool */
  int generated;
  int matched;              /* prompt tokens kvc_pool_match_prefix found cached */
  float logits[MAX_GEN][VOCAB];
} output;

/* What pool_self_attention needs of the sequence forward() is running. */
struct pool_seq_step {
  const kvc_tensor* table[NUM_GROUPS]; /* each group's padded block table of the step's batch */
  int64_t row;                        /* the sequence's row in them */
  const kvc_kv* storage;            /* [N_LAYERS]: the layers' K/V storage, NHD */
  float *step_k, *step_v;           /* [N_LAYERS][step_tokens][KV_DIM]: the step's new K/V */
  int64_t step_tokens, offset;      /* the sequence's first token in the step's K/V */
  int null_reads;                   /* history positions whose table entry was the null block */
};

static uint64_t pool_rng = 0x9001;

static void* alloc_or_exit(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "demo: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

static int next_rand(int bound) { /* an LCG: a fixed request mix */
  pool_rng = pool_rng * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  return (int)((pool_rng >> 33) % (uint64_t)bound);
}

/* ------------------------------------------------------------- attention */

/* Entry [row, col] of a padded block table (int32), whatever its strides. */
static int32_t table_at(const kvc_tensor* t, int64_t row, int64_t col) {
  int64_t rs = t->strides ? t->strides[0] : t->shape[1], cs = t->strides ? t->strides[1] : 1;
  return ((const int32_t*)((const char*)t->data + t->byte_offset))[row * rs + col * cs];
}

/* Element [a, b, c, d] of a 4-D float32 view, whatever its strides. */
static float at4(const kvc_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t s3 = t->strides ? t->strides[3] : 1;
  int64_t s2 = t->strides ? t->strides[2] : t->shape[3];
  int64_t s1 = t->strides ? t->strides[1] : t->shape[2] * t->shape[3];
  int64_t s0 = t->strides ? t->strides[0] : t->shape[1] * t->shape[2] * t->shape[3];
  return ((const float*)((const char*)t->data + t->byte_offset))[a * s0 + b * s1 + c * s2 + d * s3];
}

void pool_self_attention(run* r, uint32_t layer, int n, int64_t pos0, const float* q, const float* k,
                         const float* v, float* out) {
  static gathered g;
  struct pool_seq_step* s = r->pool;
  uint32_t group = layer_group[layer], bs = group_block[group];
  const kvc_kv* store = &s->storage[layer];
  size_t at = ((size_t)layer * (size_t)s->step_tokens + (size_t)s->offset) * KV_DIM;
  memcpy(s->step_k + at, k, sizeof(float) * (size_t)n * KV_DIM);
  memcpy(s->step_v + at, v, sizeof(float) * (size_t)n * KV_DIM);
  for (int i = 0; i < n; i++) {
    g.count = 0;
    for (int64_t p = 0; p < pos0 + n; p++) {
      if (!key_visible(r->masks[layer], p, pos0 + i)) continue;
      if (p >= pos0) { /* this step's token: not in the pool before the step's write */
        memcpy(g.k[g.count], k + (p - pos0) * KV_DIM, sizeof g.k[0]);
        memcpy(g.v[g.count], v + (p - pos0) * KV_DIM, sizeof g.v[0]);
      } else { /* history: slot p % bs of the block the table names */
        int32_t block = table_at(s->table[group], s->row, p / bs);
        s->null_reads += block == 0;
        for (int h = 0; h < N_KV_HEADS; h++)
          for (int d = 0; d < HEAD_DIM; d++) {
            g.k[g.count][h][d] = at4(&store->key, block, p % bs, h, d);
            g.v[g.count][h][d] = at4(&store->value, block, p % bs, h, d);
          }
      }
      g.count++;
    }
    attend(q + i * D_MODEL, &g, out + i * D_MODEL);
  }
}

/* ----------------------------------------------------------------- setup */

static void make_requests(request* req) {
  int system[SYSTEM_LEN];
  for (int t = 0; t < SYSTEM_LEN; t++) system[t] = next_rand(VOCAB);
  for (int i = 0; i < NUM_REQUESTS; i++) {
    request* q = &req[i];
    q->arrival = i * 2 / 5; /* 2.5 per step */
    q->gen = 6 + next_rand(MAX_GEN - 5);
    q->samples = i % 5 == 1 ? 2 + (i / 5) % 2 : 1;
    if (i % 10 == 9) { /* asked again: the same prompt as five requests before */
      memcpy(q->prompt, req[i - 5].prompt, sizeof q->prompt);
      q->prompt_len = req[i - 5].prompt_len;
      q->kind = "repeat";
      continue;
    }
    int own = i % 6 == 4; /* no system prompt */
    int len = own ? 0 : SYSTEM_LEN;
    if (!own) memcpy(q->prompt, system, sizeof system);
    int extra = own ? 8 + next_rand(16) : 2 + next_rand(MAX_USER - 1);
    for (int t = 0; t < extra; t++) q->prompt[len++] = next_rand(VOCAB);
    q->prompt_len = len;
    q->kind = own ? "own" : "system";
  }
  for (int k = 0; k < NUM_IMAGE_REQUESTS; k++) { /* the same tokens, the images of image_hash */
    request* q = &req[image_request[k]];
    memcpy(q->prompt, system, sizeof system);
    for (int t = 0; t < IMAGE_LEN; t++) q->prompt[SYSTEM_LEN + t] = IMAGE_TOKEN;
    q->prompt[SYSTEM_LEN + IMAGE_LEN] = 1;
    q->prompt[SYSTEM_LEN + IMAGE_LEN + 1] = 2;
    q->prompt_len = SYSTEM_LEN + IMAGE_LEN + 2;
    q->kind = "image";
    q->image = image_hash[k];
  }
}

/* A sequence for q: with its image as a multimodal item, whose hash goes into the blocks it overlaps. */
static kvc_pool_sequence* sequence_for(kvc_pool* pool, const request* q) {
  kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  kvc_pool_mm_item image = {q->image, q->image ? strlen(q->image) : 0, SYSTEM_LEN, IMAGE_LEN};
  if (q->image) {
    so.mm_items = &image;
    so.num_mm_items = 1;
  }
  kvc_pool_sequence* seq = NULL;
  check(kvc_pool_sequence_create(pool, &so, &seq), "kvc_pool_sequence_create");
  return seq;
}

static kvc_pool* make_pool(void) {
  kvc_pool_group_options groups[NUM_GROUPS];
  for (int g = 0; g < NUM_GROUPS; g++) {
    groups[g] = (kvc_pool_group_options)KVC_POOL_GROUP_OPTIONS_INIT;
    groups[g].block_size = group_block[g];
    groups[g].num_blocks = POOL_BLOCKS;
  }
  groups[G_SLIDING].kind = KVC_POOL_GROUP_SLIDING;
  groups[G_SLIDING].window = WINDOW;
  kvc_pool_layer_options layers[N_LAYERS];
  for (int l = 0; l < N_LAYERS; l++) {
    layers[l] = (kvc_pool_layer_options)KVC_POOL_LAYER_OPTIONS_INIT;
    layers[l].group = layer_group[l];
    layers[l].num_kv_heads = N_KV_HEADS;
    layers[l].key_head_dim = HEAD_DIM;
  }
  static const char seed[] = "kvcache demo decoder, fixed-seed weights";
  kvc_pool_options opt = KVC_POOL_OPTIONS_INIT;
  opt.dtype = KVC_DTYPE_FLOAT32;
  opt.num_groups = NUM_GROUPS;
  opt.groups = groups;
  opt.num_layers = N_LAYERS;
  opt.layers = layers;
  opt.hash_seed = seed;
  opt.hash_seed_len = sizeof seed - 1;
  opt.event_capacity = 4096; /* a step's events, published after it (publish_events) */
  kvc_pool* pool = NULL;
  check(kvc_pool_create(&opt, &pool), "kvc_pool_create");
  return pool;
}

static kvc_pool_stats stats_of(const kvc_pool* pool, uint32_t group) {
  kvc_pool_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  check(kvc_pool_stats_get(pool, group, &s), "kvc_pool_stats_get");
  return s;
}

/* (s+1)-th largest logit: s = 0 is the greedy choice. */
static int ranked(const float* logits, int s) {
  int taken[MAX_SAMPLES] = {0}, best = 0;
  for (int k = 0; k <= s; k++) {
    best = -1;
    for (int i = 0; i < VOCAB; i++) {
      int used = 0;
      for (int j = 0; j < k; j++) used |= taken[j] == i;
      if (!used && (best < 0 || logits[i] > logits[best])) best = i;
    }
    taken[k] = best;
  }
  return best;
}

/* ------------------------------------------------------------------ run */

typedef struct pool_run {
  kvc_pool* pool;
  kvc_kv storage[N_LAYERS];
  const request* req;
  output* out;          /* [MAX_OUTPUTS] */
  int num_out;
  int running[MAX_OUTPUTS], num_running;
  int next_request;     /* requests before it are admitted */
  int steps, deferred;  /* steps run; admissions put off for lack of blocks */
  uint64_t peak_used[NUM_GROUPS], peak_unshared[NUM_GROUPS], peak_used_total, peak_unshared_total;
  int peak_running, null_reads;
  uint64_t prompt_tokens, matched_tokens;
  const model* m;
} pool_run;

/* Whether the running sequences' next token and `seq`'s `tokens` fit in the free and evictable blocks. */
static int admissible(pool_run* pr, kvc_pool_sequence* seq, uint64_t tokens) {
  const kvc_pool_sequence* seqs[MAX_OUTPUTS + 1];
  uint64_t counts[MAX_OUTPUTS + 1], needed[NUM_GROUPS];
  size_t n = 0;
  for (int i = 0; i < pr->num_running; i++) {
    const output* o = &pr->out[pr->running[i]];
    seqs[n] = o->seq;
    counts[n++] = (uint64_t)(o->len - o->fed);
  }
  seqs[n] = seq;
  counts[n++] = tokens;
  check(kvc_pool_blocks_needed(pr->pool, seqs, counts, n, needed), "kvc_pool_blocks_needed");
  for (uint32_t g = 0; g < NUM_GROUPS; g++) {
    kvc_pool_stats s = stats_of(pr->pool, g);
    if (needed[g] > s.free_blocks + s.cached_blocks) return 0;
  }
  return 1;
}

/* Admits the requests that have arrived, in order, while their prompts fit. */
static void admit(pool_run* pr, int step) {
  while (pr->next_request < NUM_REQUESTS && pr->req[pr->next_request].arrival <= step) {
    const request* q = &pr->req[pr->next_request];
    kvc_pool_sequence* seq = sequence_for(pr->pool, q);
    uint64_t matched = 0;
    check(kvc_pool_match_prefix(seq, q->prompt, (size_t)q->prompt_len, &matched), "kvc_pool_match_prefix");
    if (!admissible(pr, seq, (uint64_t)q->prompt_len - matched)) {
      kvc_pool_sequence_destroy(seq); /* the matched blocks stay cached; try again next step */
      pr->deferred++;
      return;
    }
    output* o = &pr->out[pr->num_out];
    memset(o, 0, sizeof *o);
    o->request = pr->next_request++;
    o->seq = seq;
    memcpy(o->tokens, q->prompt, sizeof(int) * (size_t)q->prompt_len);
    o->len = q->prompt_len;
    o->fed = o->matched = (int)matched;
    pr->prompt_tokens += (uint64_t)q->prompt_len;
    pr->matched_tokens += matched;
    pr->running[pr->num_running++] = pr->num_out++;
  }
}

/* Blocks in use (the pool's count) against the references the block tables hold (without sharing, each a block). */
static void count_blocks(pool_run* pr, const kvc_pool_table* tables, size_t n) {
  uint64_t used_total = 0, unshared_total = 0;
  for (uint32_t g = 0; g < NUM_GROUPS; g++) {
    uint64_t used = stats_of(pr->pool, g).used_blocks, refs = 0;
    for (size_t i = 0; i < n; i++)
      for (int64_t j = 0; j < tables[g].table.shape[1]; j++) refs += table_at(&tables[g].table, (int64_t)i, j) != 0;
    if (used > pr->peak_used[g]) pr->peak_used[g] = used;
    if (refs > pr->peak_unshared[g]) pr->peak_unshared[g] = refs;
    used_total += used;
    unshared_total += refs;
  }
  if (used_total > pr->peak_used_total) pr->peak_used_total = used_total;
  if (unshared_total > pr->peak_unshared_total) pr->peak_unshared_total = unshared_total;
}

/* After the step: record the logits, sample, fork after a prefill, let finished requests leave. */
static void sample(pool_run* pr, const float (*logits)[VOCAB]) {
  int n = pr->num_running, kept = 0;
  int order[MAX_OUTPUTS];
  memcpy(order, pr->running, sizeof(int) * (size_t)n);
  for (int b = 0; b < n; b++) {
    output* o = &pr->out[order[b]];
    const request* q = &pr->req[o->request];
    memcpy(o->logits[o->generated], logits[b], sizeof o->logits[0]);
    int forks = o->generated == 0 ? q->samples - 1 : 0;
    for (int s = 1; s <= forks; s++) { /* n > 1: every sample shares the prompt's blocks */
      output* c = &pr->out[pr->num_out];
      memcpy(c, o, sizeof *c);
      c->sample = s;
      c->matched = 0;
      check(kvc_pool_fork(o->seq, &c->seq), "kvc_pool_fork");
      c->tokens[c->len++] = ranked(logits[b], s);
      c->generated++;
      pr->running[kept++] = pr->num_out++;
    }
    o->tokens[o->len++] = ranked(logits[b], o->generated == 0 ? o->sample : 0);
    if (++o->generated == q->gen) {
      kvc_pool_sequence_destroy(o->seq); /* its full blocks stay cached */
      o->seq = NULL;
    } else {
      pr->running[kept++] = order[b];
    }
  }
  /* A fork that finishes at once cannot: every request generates 6 tokens or more. */
  pr->num_running = kept;
}

static void step(pool_run* pr) {
  int n = pr->num_running;
  const kvc_pool_sequence* seqs[MAX_OUTPUTS];
  int64_t total = 0;
  for (int b = 0; b < n; b++) {
    output* o = &pr->out[pr->running[b]];
    seqs[b] = o->seq;
    total += o->len - o->fed;
  }
  int64_t* slots = alloc_or_exit(sizeof(int64_t) * NUM_GROUPS * (size_t)total);
  float* step_k = alloc_or_exit(sizeof(float) * N_LAYERS * (size_t)total * KV_DIM);
  float* step_v = alloc_or_exit(sizeof(float) * N_LAYERS * (size_t)total * KV_DIM);
  float(*logits)[VOCAB] = alloc_or_exit(sizeof(float) * VOCAB * (size_t)n);

  /* reserve: each sequence's slots, concatenated group by group for the one write */
  int64_t offset = 0;
  for (int b = 0; b < n; b++) {
    output* o = &pr->out[pr->running[b]];
    int64_t own[NUM_GROUPS * MAX_LEN];
    size_t count = (size_t)(o->len - o->fed);
    check(kvc_pool_reserve(o->seq, o->tokens + o->fed, count, own), "kvc_pool_reserve");
    for (int g = 0; g < NUM_GROUPS; g++)
      memcpy(slots + g * total + offset, own + (size_t)g * count, sizeof(int64_t) * count);
    offset += (int64_t)count;
  }
  /* Views in the pool's memory, those of the two groups side by side, valid until the next call that changes
     the pool: the forward below makes none. */
  kvc_pool_table tables[NUM_GROUPS];
  for (uint32_t g = 0; g < NUM_GROUPS; g++)
    check(kvc_pool_block_table(pr->pool, seqs, (size_t)n, g, KVC_POOL_TABLE_PADDED, &tables[g]),
          "kvc_pool_block_table");
  count_blocks(pr, tables, (size_t)n);
  if (n > pr->peak_running) pr->peak_running = n;

  /* forward: one sequence at a time on this CPU; attention reads the pool */
  static run r;
  memset(&r, 0, sizeof r);
  r.dtype = KVC_DTYPE_FLOAT32;
  memcpy(r.masks, layer_masks, sizeof r.masks);
  struct pool_seq_step ctx = {{&tables[0].table, &tables[1].table}, 0, pr->storage, step_k, step_v, total, 0, 0};
  r.pool = &ctx;
  for (int b = 0; b < n; b++) {
    output* o = &pr->out[pr->running[b]];
    ctx.row = b;
    forward(&r, pr->m, o->tokens + o->fed, o->len - o->fed, o->fed, logits[b]);
    ctx.offset += o->len - o->fed;
  }
  pr->null_reads += ctx.null_reads;

  /* write: all layers of all sequences in one call, then commit */
  int64_t shape[4] = {total, N_KV_HEADS, HEAD_DIM, 0};
  kvc_tensor keys[N_LAYERS], values[N_LAYERS];
  for (int l = 0; l < N_LAYERS; l++) {
    kvc_tensor t = {NULL, {KVC_DEVICE_CPU, 0}, 3, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32), shape, NULL, 0};
    keys[l] = values[l] = t;
    keys[l].data = step_k + (size_t)l * (size_t)total * KV_DIM;
    values[l].data = step_v + (size_t)l * (size_t)total * KV_DIM;
  }
  check(kvc_pool_write(pr->pool, keys, values, N_LAYERS, slots, (size_t)total), "kvc_pool_write");
  for (int b = 0; b < n; b++) {
    output* o = &pr->out[pr->running[b]];
    check(kvc_pool_commit(o->seq), "kvc_pool_commit");
    o->fed = o->len;
    if (kvc_pool_sequence_committed(o->seq) != (uint64_t)o->fed) {
      fprintf(stderr, "demo: a sequence holds %llu committed tokens, expected %d\n",
              (unsigned long long)kvc_pool_sequence_committed(o->seq), o->fed);
      exit(1);
    }
  }
  sample(pr, (const float(*)[VOCAB])logits);
  free(slots), free(step_k), free(step_v), free(logits);
}

/* ------------------------------------------------------------ reference */

/* The output's request alone, in a DynamicCache of the same layer types: 0 if every step's logits are equal. */
static int differs_alone(const model* m, const request* q, const output* o) {
  static run r;
  static float logits[VOCAB];
  memset(&r, 0, sizeof r);
  r.dtype = KVC_DTYPE_FLOAT32;
  r.cache = make_dynamic_sliding();
  int bad = 0;
  forward(&r, m, q->prompt, q->prompt_len, 0, logits);
  bad |= memcmp(logits, o->logits[0], sizeof logits) != 0;
  for (int t = 1; t < q->gen; t++) {
    int pos = q->prompt_len + t - 1;
    forward(&r, m, &o->tokens[pos], 1, pos, logits);
    bad |= memcmp(logits, o->logits[t], sizeof logits) != 0;
  }
  kvc_cache_destroy(r.cache);
  return bad;
}

/* What a server sends its router after a step: the step's events as the msgpack bytes vLLM's KV event publisher
   sends (NVIDIA Dynamo and llm-d read them); here counted, and the first batch shown. */
typedef struct published {
  int batches;
  size_t bytes;
  uint8_t first[48];
  size_t first_len;
} published;

static void publish_events(kvc_pool* pool, int step_no, published* pub) {
  kvc_pool_vllm_batch_options o = KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  o.ts = (double)step_no;
  size_t size = 0;
  check(kvc_pool_events_pull_vllm(pool, &o, NULL, 0, &size), "kvc_pool_events_pull_vllm");
  if (size <= 12) return; /* [ts, [], nil]: nothing happened */
  uint8_t* buf = (uint8_t*)alloc_or_exit(size);
  check(kvc_pool_events_pull_vllm(pool, &o, buf, size, &size), "kvc_pool_events_pull_vllm");
  if (!pub->batches++) {
    pub->first_len = size < sizeof pub->first ? size : sizeof pub->first;
    memcpy(pub->first, buf, pub->first_len);
  }
  pub->bytes += size;
  free(buf);
}

/* The image requests' prefix hits: blocks overlapping an image are shared only with the same image. */
static int image_report(const pool_run* pr) {
  int matched[NUM_IMAGE_REQUESTS] = {0};
  for (int i = 0; i < pr->num_out; i++)
    for (int k = 0; k < NUM_IMAGE_REQUESTS; k++)
      if (pr->out[i].request == image_request[k] && pr->out[i].sample == 0) matched[k] = pr->out[i].matched;
  printf("multimodal: 3 requests of the same %d tokens, an image at tokens %d-%d: %s matched %d tokens, %s %d,\n"
         "%s again %d (blocks overlapping the image hash with its content: different images share none)\n",
         SYSTEM_LEN + IMAGE_LEN + 2, SYSTEM_LEN, SYSTEM_LEN + IMAGE_LEN - 1, image_hash[0], matched[0],
         image_hash[1], matched[1], image_hash[2], matched[2]);
  int failures = 0;
  if (matched[1] > SYSTEM_LEN) {
    printf("FAILED: the request with %s reused blocks holding %s's tokens\n", image_hash[1], image_hash[0]);
    failures++;
  }
  if (matched[2] < SYSTEM_LEN + IMAGE_LEN - FULL_BLOCK + 1) {
    printf("FAILED: the second request with %s did not reuse its image's blocks\n", image_hash[2]);
    failures++;
  }
  return failures;
}

int run_pool_demo(const model* m) {
  static request req[NUM_REQUESTS];
  static output out[MAX_OUTPUTS];
  make_requests(req);
  pool_run pr;
  memset(&pr, 0, sizeof pr);
  pr.req = req;
  pr.out = out;
  pr.m = m;
  pr.pool = make_pool();
  for (uint32_t l = 0; l < N_LAYERS; l++)
    check(kvc_pool_layer_storage(pr.pool, l, KVC_POOL_LAYOUT_NHD, &pr.storage[l]), "kvc_pool_layer_storage");

  int shared = 0, repeats = 0, forking = 0, samples = 0;
  for (int i = 0; i < NUM_REQUESTS; i++) {
    shared += strcmp(req[i].kind, "own") != 0;
    repeats += strcmp(req[i].kind, "repeat") == 0;
    forking += req[i].samples > 1;
    samples += req[i].samples;
  }
  printf("\nContinuous batching over a kvc_pool (examples/demo_pool.c), the model of #1 (S S S F, window %d):\n",
         WINDOW);
  printf("%d requests arrive 2-3 per step; %d begin with one %d-token system prompt (%d of them repeat an earlier\n"
         "prompt whole), %d sample n = 2 or 3 continuations by forking after the prefill: %d sequences in all.\n",
         NUM_REQUESTS, shared, SYSTEM_LEN, repeats, forking, samples);
  printf("Pool: group full (layer 3) %d-token blocks, group sliding (layers 0-2) %d-token blocks, %d blocks each.\n",
         FULL_BLOCK, SLIDING_BLOCK, POOL_BLOCKS);

  struct timespec t0, t1;
  published pub = {0};
  timespec_get(&t0, TIME_UTC);
  for (int s = 0; pr.next_request < NUM_REQUESTS || pr.num_running > 0; s++) {
    admit(&pr, s);
    if (pr.num_running > 0) step(&pr);
    publish_events(pr.pool, s, &pub);
    pr.steps = s + 1;
  }
  timespec_get(&t1, TIME_UTC);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;

  kvc_pool_stats st[NUM_GROUPS];
  for (uint32_t g = 0; g < NUM_GROUPS; g++) st[g] = stats_of(pr.pool, g);
  printf("%d steps in %.1f ms, up to %d sequences running at once; %d admissions put off for lack of blocks\n",
         pr.steps, ms, pr.peak_running, pr.deferred);
  printf("prefix hits: %llu of %llu prompt tokens came from the pool (%.0f%%); block lookups:",
         (unsigned long long)pr.matched_tokens, (unsigned long long)pr.prompt_tokens,
         100.0 * (double)pr.matched_tokens / (double)pr.prompt_tokens);
  for (int g = 0; g < NUM_GROUPS; g++)
    printf(" %s %llu/%llu (%.0f%%)%s", group_name[g], (unsigned long long)st[g].prefix_hits,
           (unsigned long long)st[g].prefix_queries,
           st[g].prefix_queries ? 100.0 * (double)st[g].prefix_hits / (double)st[g].prefix_queries : 0.0,
           g + 1 < NUM_GROUPS ? "," : "\n");
  printf("peak blocks in use: %llu (full %llu, sliding %llu) against %llu without sharing (full %llu, sliding %llu)\n",
         (unsigned long long)pr.peak_used_total, (unsigned long long)pr.peak_used[G_FULL],
         (unsigned long long)pr.peak_used[G_SLIDING], (unsigned long long)pr.peak_unshared_total,
         (unsigned long long)pr.peak_unshared[G_FULL], (unsigned long long)pr.peak_unshared[G_SLIDING]);
  printf("after the run: cached full %llu, sliding %llu; evictions full %llu, sliding %llu\n",
         (unsigned long long)st[G_FULL].cached_blocks, (unsigned long long)st[G_SLIDING].cached_blocks,
         (unsigned long long)st[G_FULL].evictions, (unsigned long long)st[G_SLIDING].evictions);
  printf("events for a router, in vLLM's form (kvc_pool_events_pull_vllm after each step): %d KVEventBatch "
         "messages, %zu bytes of msgpack; the first begins\n  ", pub.batches, pub.bytes);
  for (size_t i = 0; i < pub.first_len; i++) printf("%02x", pub.first[i]);
  printf("...\n  ([ts, [{\"type\": \"BlockStored\", \"block_hashes\": [...], \"parent_block_hash\": nil, "
         "\"token_ids\": [...], ...}], nil], as vLLM's msgspec decoder reads it)\n");

  int failures = image_report(&pr);
  int differ = 0, checked = 0;
  for (int i = 0; i < pr.num_out; i++, checked++) differ += differs_alone(m, &req[out[i].request], &out[i]);
  if (pr.num_out != samples) {
    printf("FAILED: %d sequences ran, %d expected\n", pr.num_out, samples);
    failures++;
  }
  if (pr.null_reads) {
    printf("FAILED: attention read %d history positions inside the window from the null block\n", pr.null_reads);
    failures++;
  }
  for (uint32_t g = 0; g < NUM_GROUPS; g++)
    if (st[g].used_blocks != 0) {
      printf("FAILED: group %s holds %llu blocks in use after every sequence left\n", group_name[g],
             (unsigned long long)st[g].used_blocks);
      failures++;
    }
  if (differ) {
    printf("FAILED: %d of %d sequences' logits differ from the same request run alone in a DynamicCache\n", differ,
           checked);
    failures++;
  } else {
    printf("exact: each of the %d sequences' logits, at every step, equal bit for bit those of the same request\n"
           "run alone in a DynamicCache of the same layer types (make_dynamic_sliding) fed the same tokens\n",
           checked);
  }
  kvc_pool_destroy(pr.pool);
  return failures;
}
