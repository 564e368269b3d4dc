/*
 * demo: a tiny decoder that generates text greedily with every cache kind
 * kvcache offers, as an example of how a model uses the API.
 *
 * The model (demo_model.c) is deterministic (fixed-seed random weights,
 * float32 math): a 4-layer decoder with grouped-query attention (4 query
 * heads share 2 KV heads, head_dim 16), RoPE, RMSNorm and a SiLU MLP. The
 * recurrent rows replace attention in some or all layers by a small
 * Mamba-like mixer (demo_mamba.c: a causal depthwise conv and a diagonal
 * linear recurrence). demo_attention.c shows the three steps of an attention
 * layer with a cache; demo_caches.c how each cache is created.
 *
 * Every run is checked against a reference that keeps no cache at all:
 *  - attention rows recompute attention over the whole history with the
 *    same masks, and the logits must agree bit for bit;
 *  - sink rows recompute StreamingLLM attention (sink tokens plus the most
 *    recent ones, numbered by cache slot) within SINK_BOUND, see below;
 *  - recurrent rows recompute the whole sequence from its first token at
 *    every step, bit for bit.
 * The table also compares runs that must agree with each other (a cache and
 * its offloaded twin, a dynamic sliding cache and a static one of the same
 * window). Quantized rows are lossy: they are compared with the
 * full-precision run within QUANT_BOUND, and must choose the same first
 * tokens.
 *
 * After the table, demo_pool.c serves many requests at once with the model
 * of the dynamic sliding row through a paged block pool (continuous
 * batching, prefix reuse, forks), and checks every request's logits against
 * the same request run alone in a DynamicCache.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "demo.h"

#define REPEATS 5 /* timed runs per cache; the best is shown */

/*
 * The sink rows' keys are rotated on entry and then back by one position at
 * every shift, with float32 products of table entries (docs/semantics.md,
 * 'Sink layers'); the reference rotates each unrotated key once, straight to
 * its slot. A key is re-rotated at most WINDOW - SINK_TOKENS - 1 = 5 times
 * before it is evicted, so the keys differ by a few float32 roundings (~1e-7
 * relative) and the logits (of magnitude up to ~3.5) by ~1e-6. 1e-4 leaves a
 * wide margin, while a key one slot off, or kept keys left unrotated, change
 * them by units.
 */
#define SINK_BOUND 1e-4f
/*
 * 4-bit codes in groups of 16 values err by up to (max - min) / 30 per value.
 * Fed the same tokens, the quantized runs' logits stay within ~0.25 of #0's
 * (with 2-bit codes ~1, with bf16 K/V ~0.007), well below the logits'
 * magnitude (up to ~3.5); a cache that loses all but the last 8 tokens is ~4
 * off under the same input. The small random model's logits are flat: its
 * two best logits are 0.1 apart or less at some steps, within the 4-bit
 * error, so greedy runs may part from #0 there (from step 4 on); the first
 * QUANT_SAME_FIRST choices are clear enough to have to agree.
 */
#define QUANT_BOUND 0.5f
#define QUANT_SAME_FIRST 4

static const int prompt[PROMPT_LEN] = {1, 7, 23, 42, 5, 17, 33, 60, 2, 9, 48, 31};

/* ------------------------------------------------------------ generation */

typedef struct result {
  int tokens[GEN_TOKENS];
  float logits[GEN_TOKENS][VOCAB];
  double seconds;
  kvc_memory_info mem; /* the cache's memory after generation */
} result;

static int argmax(const float* v) {
  int best = 0;
  for (int i = 1; i < VOCAB; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

/*
 * Prefill the prompt in one call, then decode one token at a time; with
 * `forced`, feed those tokens instead of the greedy choices (the lossy rows
 * are measured so, to compare every step's logits with the same history).
 *
 * A sink row prefills only its first WINDOW tokens and feeds the rest of the
 * prompt one at a time: a sink layer (docs/semantics.md, 'Sink layers')
 * rotates kept keys back by n positions at a shift of n new tokens, which is
 * how far they move only when the cache held window_length tokens before it.
 * A first update of exactly window_length tokens makes that true of every
 * shift after it (a longer one is stored whole and moves the next shift's
 * keys further than they are rotated).
 */
static void generate(run* r, const model* m, const int* forced, result* out) {
  int prefill = r->sink_window && r->sink_window < PROMPT_LEN ? (int)r->sink_window : PROMPT_LEN;
  forward(r, m, prompt, prefill, 0, out->logits[0]);
  for (int i = prefill; i < PROMPT_LEN; i++) forward(r, m, &prompt[i], 1, i, out->logits[0]);
  out->tokens[0] = argmax(out->logits[0]);
  for (int t = 1; t < GEN_TOKENS; t++) {
    const int* next = forced ? &forced[t - 1] : &out->tokens[t - 1];
    forward(r, m, next, 1, PROMPT_LEN + t - 1, out->logits[t]);
    out->tokens[t] = argmax(out->logits[t]);
  }
}

/* The recurrent rows' reference: every step runs the whole sequence from its first token, carrying nothing over. */
static void generate_from_scratch(run* r, const model* m, result* out) {
  int seq[MAX_LEN];
  memcpy(seq, prompt, sizeof prompt);
  for (int t = 0; t < GEN_TOKENS; t++) {
    forward(r, m, seq, PROMPT_LEN + t, 0, out->logits[t]);
    out->tokens[t] = argmax(out->logits[t]);
    seq[PROMPT_LEN + t] = out->tokens[t];
  }
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_memory(const kvc_cache* cache, kvc_memory_info* total) {
  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  check(kvc_cache_memory(cache, &mem), "kvc_cache_memory");
  total->bytes_reserved += mem.bytes_reserved;
  total->bytes_device += mem.bytes_device;
  total->bytes_host += mem.bytes_host;
  total->bytes_quantized += mem.bytes_quantized;
  total->bytes_state += mem.bytes_state;
}

/* ------------------------------------------------------------------ table */

typedef enum {
  REF_MASKS,     /* attention over the whole history with the row's masks */
  REF_STREAMING, /* StreamingLLM attention, tokens numbered by cache slot */
  REF_SCRATCH,   /* the whole sequence from its first token at every step */
  REF_NONE       /* lossy: nothing to recompute exactly */
} reference;

#define REFERENCE (-1)
#define MF {MASK_FULL, 0}
#define MS {MASK_SLIDING, WINDOW}
#define MC {MASK_CHUNKED, WINDOW}

typedef struct row {
  const char* name;
  const char* layers;       /* as the legend spells them */
  kvc_cache* (*make)(void); /* NULL: EncoderDecoderCache of two lazy DynamicCaches */
  kvc_dtype dtype;          /* of K/V; 0 means float32 */
  int cross;                /* cross-attention over the encoder output */
  int compare_to;           /* the row the table compares with, or REFERENCE */
  float bound;              /* the largest |dlogit| that comparison allows; 0: bit for bit */
  reference ref;            /* what every run is also checked against */
  layer_mask masks[N_LAYERS];
  mixer mix[N_LAYERS];
  int sink;                 /* tokens are numbered by cache slot */
  rope_passing rope_pass;
  int offloaded;            /* must end generation with K/V in the host tier */
  int exact_prefill;        /* lossy, but the prefill's logits are bit for bit compare_to's */
} row;

static const row rows[] = {
    {.name = "DynamicCache (lazy)", .layers = "F F F F", .make = make_dynamic, .compare_to = REFERENCE},
    {.name = "DynamicCache (config, sliding)", .layers = "S S S F", .make = make_dynamic_sliding, .compare_to = 4,
     .masks = {MS, MS, MS, MF}},
    {.name = "StaticCache", .layers = "F F F F", .make = make_static, .compare_to = 0},
    {.name = "SlidingWindowCache", .layers = "S S S S", .make = make_sliding_window, .compare_to = REFERENCE,
     .masks = {MS, MS, MS, MS}},
    {.name = "HybridCache", .layers = "S S S F", .make = make_hybrid, .compare_to = 1, .masks = {MS, MS, MS, MF}},
    {.name = "HybridChunkedCache", .layers = "C C C F", .make = make_hybrid_chunked, .compare_to = 6,
     .masks = {MC, MC, MC, MF}},
    {.name = "custom (dynamic chunked)", .layers = "C C C F", .make = make_custom_chunked, .compare_to = 5,
     .masks = {MC, MC, MC, MF}},
    {.name = "EncoderDecoderCache", .layers = "F F F F +x", .make = NULL, .cross = 1, .compare_to = REFERENCE},
    {.name = "DynamicCache (lazy), bf16 K/V", .layers = "F F F F", .make = make_dynamic,
     .dtype = KVC_DTYPE_BFLOAT16, .compare_to = REFERENCE},
    {.name = "OffloadedCache (lazy)", .layers = "f f f f", .make = make_offloaded, .compare_to = 0, .offloaded = 1},
    {.name = "OffloadedStaticCache", .layers = "f f f f", .make = make_offloaded_static, .compare_to = 2,
     .offloaded = 1},
    {.name = "OffloadedHybridCache", .layers = "C C C f", .make = make_offloaded_hybrid, .compare_to = 5,
     .masks = {MC, MC, MC, MF}, .offloaded = 1},
    {.name = "QuantizedCache quanto/incremental", .layers = "Q Q Q Q", .make = make_quanto_incremental,
     .compare_to = 0, .bound = QUANT_BOUND, .ref = REF_NONE},
    {.name = "QuantizedCache quanto/transformers", .layers = "Q Q Q Q", .make = make_quanto_transformers,
     .compare_to = 0, .bound = QUANT_BOUND, .ref = REF_NONE, .exact_prefill = 1},
    {.name = "QuantizedCache HQQ/incremental", .layers = "Q Q Q Q", .make = make_hqq_incremental, .compare_to = 0,
     .bound = QUANT_BOUND, .ref = REF_NONE},
    {.name = "QuantizedCache HQQ/transformers", .layers = "Q Q Q Q", .make = make_hqq_transformers,
     .compare_to = 0, .bound = QUANT_BOUND, .ref = REF_NONE, .exact_prefill = 1},
    {.name = "SinkCache, 2-D cos/sin table", .layers = "K K K K", .make = make_sink, .compare_to = REFERENCE,
     .bound = SINK_BOUND, .ref = REF_STREAMING, .sink = 1, .rope_pass = ROPE_TABLE_2D},
    {.name = "SinkCache, 3-D cos/sin per call", .layers = "K K K K", .make = make_sink, .compare_to = 16,
     .ref = REF_STREAMING, .sink = 1, .rope_pass = ROPE_PER_CALL_3D},
    {.name = "MambaCache", .layers = "M M M M", .make = make_mamba, .compare_to = REFERENCE, .ref = REF_SCRATCH,
     .mix = {MIX_MAMBA, MIX_MAMBA, MIX_MAMBA, MIX_MAMBA}},
    {.name = "HybridMambaAttentionDynamicCache", .layers = "M F M F", .make = make_hybrid_mamba,
     .compare_to = REFERENCE, .ref = REF_SCRATCH, .mix = {MIX_MAMBA, MIX_ATTENTION, MIX_MAMBA, MIX_ATTENTION}},
};
#define NROWS (sizeof rows / sizeof rows[0])

static void setup_run(const row* spec, run* r) {
  memset(r, 0, sizeof *r);
  r->dtype = spec->dtype ? spec->dtype : KVC_DTYPE_FLOAT32;
  r->cross = spec->cross;
  memcpy(r->mix, spec->mix, sizeof r->mix);
  r->sink_window = spec->sink ? WINDOW : 0;
}

/* One generation with a fresh cache of this row's kind. */
static void run_cache(const row* spec, const model* m, run* r, const int* forced, result* out) {
  setup_run(spec, r);
  r->rope_pass = spec->rope_pass;
  if (spec->make) {
    r->cache = spec->make();
  } else {
    kvc_cache* self = make_dynamic();
    kvc_cache* cross = make_dynamic();
    kvc_error* err = kvc_encoder_decoder_cache_create(self, cross, &r->encdec);
    if (err) kvc_cache_destroy(self), kvc_cache_destroy(cross);
    check(err, "kvc_encoder_decoder_cache_create");
    r->cache = kvc_encoder_decoder_cache_self_attention(r->encdec);
  }
  double t0 = now_s();
  generate(r, m, forced, out);
  out->seconds = now_s() - t0;
  memset(&out->mem, 0, sizeof out->mem);
  add_memory(r->cache, &out->mem);
  if (r->encdec) {
    add_memory(kvc_encoder_decoder_cache_cross_attention(r->encdec), &out->mem);
    kvc_encoder_decoder_cache_destroy(r->encdec);
  } else {
    kvc_cache_destroy(r->cache);
  }
}

static void run_reference(const row* spec, const model* m, run* r, result* out) {
  setup_run(spec, r);
  memcpy(r->masks, spec->masks, sizeof r->masks);
  if (spec->ref == REF_SCRATCH)
    generate_from_scratch(r, m, out);
  else
    generate(r, m, NULL, out);
}

/* max |dlogit| at step t; infinite where a logit is NaN, which fmaxf would skip and every bound let through */
static float step_diff(const result* a, const result* b, int t) {
  float d = 0.0f;
  for (int i = 0; i < VOCAB; i++) {
    float e = fabsf(a->logits[t][i] - b->logits[t][i]);
    if (isnan(e)) return INFINITY;
    d = fmaxf(d, e);
  }
  return d;
}

static float max_abs_diff(const result* a, const result* b) {
  float d = 0.0f;
  for (int t = 0; t < GEN_TOKENS; t++) d = fmaxf(d, step_diff(a, b, t));
  return d;
}

static float max_abs_logit(const result* a) {
  float m = 0.0f;
  for (int t = 0; t < GEN_TOKENS; t++)
    for (int i = 0; i < VOCAB; i++) m = fmaxf(m, fabsf(a->logits[t][i]));
  return m;
}

static int same_first_tokens(const result* a, const result* b) {
  int t = 0;
  while (t < GEN_TOKENS && a->tokens[t] == b->tokens[t]) t++;
  return t;
}

static int same_choices(const result* a, const result* b) {
  int n = 0;
  for (int t = 0; t < GEN_TOKENS; t++) n += a->tokens[t] == b->tokens[t];
  return n;
}

static const char* reference_name(reference ref) {
  switch (ref) {
    case REF_STREAMING: return "no-cache StreamingLLM, slot positions";
    case REF_SCRATCH: return "no-cache recompute from scratch";
    default: return "no-cache recompute, same masks";
  }
}

static int other_model(const row* spec) {
  for (int l = 0; l < N_LAYERS; l++)
    if (spec->mix[l] != MIX_ATTENTION) return 1;
  return spec->cross;
}

int main(void) {
  static model m;
  static run r;
  static result res[NROWS], ref[NROWS], forced[NROWS], scratch;
  model_init(&m);

  printf("kvcache %s demo: %d-layer decoder, %d query / %d KV heads (GQA), head_dim %d, d_model %d, vocab %d\n",
         kvc_version_string(), N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, D_MODEL, VOCAB);
  printf("prompt of %d tokens, %d tokens generated greedily; sliding window = chunk size = sink window = %d\n",
         PROMPT_LEN, GEN_TOKENS, WINDOW);
  printf("layers: F full attention, S sliding window, C chunked, +x cross-attention over %d encoder states,\n",
         ENC_LEN);
  printf("        lower case: offloaded to the host tier between updates, Q quantized (%d-bit, groups of %d,\n",
         QUANT_NBITS, HEAD_DIM);
  printf("        residual %d), K sink (%d sink tokens + recent ones), M Mamba-like (conv over %d steps +\n",
         QUANT_RESIDUAL, SINK_TOKENS, CONV_K);
  printf("        diagonal recurrence with %d states per channel, %d channels)\n\n", D_STATE, D_INNER);

  int failures = 0;
  for (size_t i = 0; i < NROWS; i++) {
    run_cache(&rows[i], &m, &r, NULL, &res[i]);
    for (int k = 1; k < REPEATS; k++) { /* same work again: keep the best time */
      run_cache(&rows[i], &m, &r, NULL, &scratch);
      if (scratch.seconds < res[i].seconds) res[i].seconds = scratch.seconds;
      if (max_abs_diff(&scratch, &res[i]) != 0.0f) {
        printf("MISMATCH: %s gave other logits when run again\n", rows[i].name);
        failures++;
      }
    }
    if (rows[i].ref == REF_NONE) continue;
    run_reference(&rows[i], &m, &r, &ref[i]);
    float allowed = rows[i].ref == REF_STREAMING ? SINK_BOUND : 0.0f;
    if (max_abs_diff(&res[i], &ref[i]) > allowed) {
      printf("MISMATCH: %s differs from its cache-free reference (%s) by %g\n", rows[i].name,
             reference_name(rows[i].ref), max_abs_diff(&res[i], &ref[i]));
      failures++;
    }
  }
  for (size_t i = 0; i < NROWS; i++) /* lossy rows, fed the tokens of the row they are compared with */
    if (rows[i].bound > 0.0f && rows[i].compare_to != REFERENCE)
      run_cache(&rows[i], &m, &r, res[rows[i].compare_to].tokens, &forced[i]);

  printf("%-2s %-34s %-10s %6s %11s  %-38s %-8s %11s %12s\n", "#", "cache", "layers", "tok/s", "cache bytes",
         "compared to", "rule", "max|dlogit|", "vs full attn");
  for (size_t i = 0; i < NROWS; i++) {
    const row* spec = &rows[i];
    char against[80], rule[16], vs_full[24];
    float d;
    if (spec->compare_to == REFERENCE) {
      snprintf(against, sizeof against, "%s", reference_name(spec->ref));
      d = max_abs_diff(&res[i], &ref[i]);
    } else {
      int lossy = spec->bound > 0.0f;
      snprintf(against, sizeof against, "#%d %s%s", spec->compare_to, rows[spec->compare_to].name,
               lossy ? ", same input" : "");
      d = max_abs_diff(lossy ? &forced[i] : &res[i], &res[spec->compare_to]);
    }
    if (d > spec->bound) failures++;
    if (spec->bound > 0.0f)
      snprintf(rule, sizeof rule, "<= %g", spec->bound);
    else
      snprintf(rule, sizeof rule, "exact");
    if (other_model(spec))
      snprintf(vs_full, sizeof vs_full, "other model");
    else
      snprintf(vs_full, sizeof vs_full, "%.3g", max_abs_diff(&res[i], &res[0]));
    printf("%-2zu %-34s %-10s %6.0f %11llu  %-38s %-8s %11.3g %12s%s\n", i, spec->name, spec->layers,
           GEN_TOKENS / res[i].seconds, (unsigned long long)res[i].mem.bytes_reserved, against, rule, d, vs_full,
           d > spec->bound ? "  FAILED" : "");
  }

  printf("\ntokens of #0:");
  for (int t = 0; t < GEN_TOKENS; t++) printf(" %d", res[0].tokens[t]);

  printf("\n\nQuantized rows: max|dlogit| is measured feeding them the tokens of #0, so that every step has the\n"
         "same history (#0's logits reach %.2f in magnitude). Packed: codes, scales and zero points; the cache\n"
         "bytes also count the full-precision residual and the dequantized history that update returns.\n",
         max_abs_logit(&res[0]));
  for (size_t i = 0; i < NROWS; i++) {
    if (rows[i].ref != REF_NONE) continue;
    int c = rows[i].compare_to, first = same_first_tokens(&res[i], &res[c]);
    float prefill = step_diff(&forced[i], &res[c], 0);
    printf("  #%-2zu %-34s choice = #%d's at %2d/%d steps | alone: first %2d tokens = #%d's | prefill max|dlogit|"
           " %.3g | %llu B packed\n",
           i, rows[i].name, c, same_choices(&forced[i], &res[c]), GEN_TOKENS, first, c, prefill,
           (unsigned long long)res[i].mem.bytes_quantized);
    if (first < QUANT_SAME_FIRST) {
      printf("  FAILED: its first %d tokens must be #%d's\n", QUANT_SAME_FIRST, c);
      failures++;
    }
    if (rows[i].exact_prefill && prefill != 0.0f) {
      printf("  FAILED: transformers' timeline returns the prefill unquantized: its logits must be #%d's exactly\n", c);
      failures++;
    }
  }
  printf("Offloaded rows, after generation. Device tier: the layers that stay there or were prefetched for the\n"
         "next step, and the device copy the last update's views still point into:\n");
  for (size_t i = 0; i < NROWS; i++) {
    if (!rows[i].offloaded) continue;
    printf("  #%-2zu %-34s device tier %7llu B, host tier %7llu B\n", i, rows[i].name,
           (unsigned long long)res[i].mem.bytes_device, (unsigned long long)res[i].mem.bytes_host);
    if (res[i].mem.bytes_host == 0) {
      printf("  FAILED: nothing was offloaded\n");
      failures++;
    }
  }
  printf("Recurrent rows, conv and recurrent states after generation:\n");
  for (size_t i = 0; i < NROWS; i++)
    if (rows[i].ref == REF_SCRATCH)
      printf("  #%-2zu %-34s %llu B of state\n", i, rows[i].name, (unsigned long long)res[i].mem.bytes_state);

  printf("\nEvery run but the quantized ones was also checked against a recompute without any cache: the same\n"
         "masks (exactly), StreamingLLM over cache slots (sink rows, within %g: their keys are re-rotated at\n"
         "every shift, the reference rotates them once), the whole sequence from scratch (recurrent rows, exactly).\n",
         SINK_BOUND);
  printf("\"vs full attn\" shows what windows, sinks, bf16 and quantization change.\n");

  failures += run_pool_demo(&m);
  if (failures) {
    printf("FAILED: %d comparison(s) did not hold\n", failures);
    return 1;
  }
  printf("\nAll comparisons hold.\n");
  return 0;
}
