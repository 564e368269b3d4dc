/*
 * bench_quantized: QUANTIZED layers on one Llama-like layer (8 KV heads,
 * head_dim 128, bfloat16, batch 1), group size 64, residual_length 128.
 *
 *  1. Memory: bytes per cached token of the quantized store (packed codes,
 *     scales and zero points; the residual excluded), for quanto 4-bit and
 *     2-bit and HQQ 4-bit, against bfloat16 keys and values.
 *  2. Per-step update cost at 1k and 32k cached tokens. Incremental mode
 *     quantizes each token once as it leaves the residual: the claim under
 *     test is that a step costs the same at any context length (32k / 1k <=
 *     1.2). Transformers mode re-quantizes the whole history every
 *     residual_length steps (as transformers does): reported as the mean
 *     over one such cycle, and split into its ordinary steps and its flush.
 *  3. Compact mode (KVC_QUANT_MODE_COMPACT): bytes_reserved per cached
 *     token against a bfloat16 dynamic cache, with and without the working
 *     copy the cache's compact layers share (a model's 32 layers share one),
 *     and its per-step cost at 1k and 32k, which grows with the context (each
 *     step dequantizes the history): reported, no target.
 *  4. Dequantization error on random normal data [1, 8, 1024, 128]: mean
 *     |error| / mean |x| and max |error| / max |x|, through the cache.
 *
 * Medians over repetitions; repetitions alternate between the lengths, so
 * load from other processes falls on each alike. Each repetition restores
 * the layer to the same state (crop, and a refill of the residual).
 */
#include "bench_common.h"

#include <math.h>

#define KV_HEADS 8
#define HEAD_DIM 128
#define GROUP 64
#define RESIDUAL 128
#define TOKEN_ELEMS ((size_t)KV_HEADS * HEAD_DIM)

static kvc_cache* make_cache(kvc_quantizer quantizer, kvc_quant_mode mode, int nbits, int axis, int64_t residual) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  q.quantizer = quantizer;
  q.mode = mode;
  q.nbits = nbits;
  q.axis_key = q.axis_value = axis;
  q.q_group_size = GROUP;
  q.residual_length = residual;
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = 1;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_QUANTIZED;
  opt.config = &cfg;
  opt.quant = &q;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create");
  return cache;
}

/* Appends n tokens of bfloat16 data from `seed` (filled once per call, outside any timing). */
static void append(kvc_cache* cache, int64_t n, uint64_t seed) {
  size_t elems = (size_t)n * TOKEN_ELEMS;
  uint16_t* k = bench_alloc(elems * sizeof(uint16_t));
  uint16_t* v = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(k, elems, seed);
  bench_fill_bf16(v, elems, seed + 1);
  int64_t shape[4] = {1, KV_HEADS, n, HEAD_DIM};
  kvc_tensor kt = bench_tensor_bf16(k, shape), vt = bench_tensor_bf16(v, shape);
  bench_check(kvc_cache_update(cache, 0, &kt, &vt, NULL, NULL), "kvc_cache_update");
  free(k);
  free(v);
}

static int64_t seq_length(const kvc_cache* cache) {
  int64_t n = -1;
  bench_check(kvc_cache_seq_length(cache, 0, &n), "kvc_cache_seq_length");
  return n;
}

static int64_t quantized_length(const kvc_cache* cache) {
  kvc_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  bench_check(kvc_cache_layer_info(cache, 0, &info), "kvc_cache_layer_info");
  return info.quantized_length;
}

static kvc_memory_info memory(const kvc_cache* cache) {
  kvc_memory_info m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  bench_check(kvc_cache_memory(cache, &m), "kvc_cache_memory");
  return m;
}

static void expect(int ok, const char* what) {
  if (ok) return;
  fprintf(stderr, "bench: unexpected state: %s\n", what);
  exit(1);
}

/* ------------------------------------------------------------------ memory */

static void bench_memory(bench_results* res) {
  static const struct {
    kvc_quantizer q;
    int nbits;
    const char* name;
  } kinds[] = {{KVC_QUANTIZER_QUANTO, 4, "quanto4_g64"},
               {KVC_QUANTIZER_QUANTO, 2, "quanto2_g64"},
               {KVC_QUANTIZER_HQQ, 4, "hqq4_g64"}};
  double plain = (double)(TOKEN_ELEMS * 2 * sizeof(uint16_t));
  printf("bytes per cached token (keys and values, one layer)\n");
  printf("  %-14s %8.0f\n", "bfloat16", plain);
  bench_add(res, "quantized_memory", "kvcache-c", "bytes_per_token_bf16", plain, "bytes");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    kvc_cache* c = make_cache(kinds[i].q, KVC_QUANT_MODE_INCREMENTAL, kinds[i].nbits, 0, RESIDUAL);
    append(c, 1024 + RESIDUAL, 3);
    int64_t q = quantized_length(c);
    expect(q == 1024, "1024 quantized tokens after a prefill of 1024 + residual_length");
    kvc_memory_info m = memory(c);
    double per_token = (double)m.bytes_quantized / (double)q;
    printf("  %-14s %8.1f  (%.2fx smaller; %.2f bits per element)\n", kinds[i].name, per_token, plain / per_token,
           per_token * 8.0 / (double)(TOKEN_ELEMS * 2));
    char metric[64];
    snprintf(metric, sizeof metric, "bytes_per_token_%s", kinds[i].name);
    bench_add(res, "quantized_memory", "kvcache-c", metric, per_token, "bytes");
    snprintf(metric, sizeof metric, "compression_vs_bf16_%s", kinds[i].name);
    bench_add(res, "quantized_memory", "kvcache-c", metric, plain / per_token, "x");
    kvc_cache_destroy(c);
  }
  printf("\n");
}

/* ------------------------------------------------------------------ per-step cost */

typedef struct step_inputs {
  int steps;
  uint16_t* bytes; /* [steps][2][TOKEN_ELEMS] */
  int64_t shape[4];
  kvc_tensor* keys;
  kvc_tensor* values;
} step_inputs;

static void inputs_init(step_inputs* d, int steps) {
  d->steps = steps;
  d->bytes = bench_alloc((size_t)steps * 2 * TOKEN_ELEMS * sizeof(uint16_t));
  bench_fill_bf16(d->bytes, (size_t)steps * 2 * TOKEN_ELEMS, 17);
  d->shape[0] = 1;
  d->shape[1] = KV_HEADS;
  d->shape[2] = 1;
  d->shape[3] = HEAD_DIM;
  d->keys = bench_alloc((size_t)steps * sizeof(kvc_tensor));
  d->values = bench_alloc((size_t)steps * sizeof(kvc_tensor));
  for (int s = 0; s < steps; s++) {
    d->keys[s] = bench_tensor_bf16(d->bytes + (size_t)s * 2 * TOKEN_ELEMS, d->shape);
    d->values[s] = bench_tensor_bf16(d->bytes + ((size_t)s * 2 + 1) * TOKEN_ELEMS, d->shape);
  }
}

static void inputs_free(step_inputs* d) {
  free(d->bytes);
  free(d->keys);
  free(d->values);
}

/* Times each of d->steps one-token updates into `each` (ns). */
static void time_steps(kvc_cache* cache, const step_inputs* d, double* each) {
  for (int s = 0; s < d->steps; s++) {
    double t0 = bench_now_ns();
    bench_check(kvc_cache_update(cache, 0, &d->keys[s], &d->values[s], NULL, NULL), "kvc_cache_update");
    each[s] = bench_now_ns() - t0;
  }
}

/*
 * Incremental mode: a layer holding `context` tokens (the last 128 in the
 * residual); `steps` steps each quantize one token. Restored by cutting back
 * to the quantized tokens and refilling the residual (a multi-token update
 * that quantizes nothing).
 */
static void restore_incremental(kvc_cache* c, int64_t context, int steps) {
  bench_check(kvc_cache_crop(c, -(int64_t)(steps + RESIDUAL)), "kvc_cache_crop");
  append(c, RESIDUAL, 5);
  expect(seq_length(c) == context && quantized_length(c) == context - RESIDUAL, "incremental restore");
}

/* Transformers mode: one cycle of residual_length steps ends in a flush; cropping them re-creates the start. */
static void restore_transformers(kvc_cache* c, int64_t context) {
  bench_check(kvc_cache_crop(c, -RESIDUAL), "kvc_cache_crop");
  expect(seq_length(c) == context && quantized_length(c) == context, "transformers restore");
}

typedef struct length_run {
  int64_t context;
  kvc_cache* inc;
  kvc_cache* tf;
  double* inc_step;   /* [reps]: ns per step of one repetition */
  double* tf_mean;    /* [reps]: mean ns per step over a cycle */
  double* tf_plain;   /* [reps]: median of the cycle's non-flushing steps */
  double* tf_flush;   /* [reps]: the flushing step */
} length_run;

static void bench_steps(bench_results* res, const bench_args* args) {
  int reps = args->reps ? args->reps : 15;
  int steps = args->steps;
  int64_t defaults[2] = {1024, 32768};
  const int64_t* lengths = args->context ? &args->context : defaults;
  int nlengths = args->context ? 1 : 2;
  step_inputs inc_in, tf_in;
  inputs_init(&inc_in, steps);
  inputs_init(&tf_in, RESIDUAL);
  double* each = bench_alloc(sizeof(double) * (size_t)(steps > RESIDUAL ? steps : RESIDUAL));
  length_run runs[2];
  for (int i = 0; i < nlengths; i++) {
    length_run* r = &runs[i];
    r->context = lengths[i];
    r->inc = make_cache(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, RESIDUAL);
    append(r->inc, lengths[i], 7);
    r->tf = make_cache(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, RESIDUAL);
    append(r->tf, lengths[i], 7);
    /* warm-up: growth of the group buffers and of the returned copy, page faults */
    time_steps(r->inc, &inc_in, each);
    restore_incremental(r->inc, lengths[i], steps);
    time_steps(r->tf, &tf_in, each);
    expect(quantized_length(r->tf) == lengths[i] + RESIDUAL, "a flush at the end of a transformers cycle");
    restore_transformers(r->tf, lengths[i]);
    r->inc_step = bench_alloc(sizeof(double) * (size_t)reps);
    r->tf_mean = bench_alloc(sizeof(double) * (size_t)reps);
    r->tf_plain = bench_alloc(sizeof(double) * (size_t)reps);
    r->tf_flush = bench_alloc(sizeof(double) * (size_t)reps);
  }
  for (int rep = 0; rep < reps; rep++)
    for (int i = 0; i < nlengths; i++) {
      length_run* r = &runs[i];
      time_steps(r->inc, &inc_in, each);
      double sum = 0;
      for (int s = 0; s < steps; s++) sum += each[s];
      r->inc_step[rep] = sum / steps;
      expect(quantized_length(r->inc) == r->context - RESIDUAL + steps, "one token quantized per step");
      restore_incremental(r->inc, r->context, steps);

      time_steps(r->tf, &tf_in, each);
      sum = 0;
      for (int s = 0; s < RESIDUAL; s++) sum += each[s];
      r->tf_mean[rep] = sum / RESIDUAL;
      r->tf_flush[rep] = each[RESIDUAL - 1];
      r->tf_plain[rep] = bench_summarize(each, RESIDUAL - 1).median;
      restore_transformers(r->tf, r->context);
    }
  printf("per-step update cost, quanto 4-bit g64, residual_length %d (%d repetitions; incremental: %d steps each, "
         "transformers: one %d-step cycle each)\n",
         RESIDUAL, reps, steps, RESIDUAL);
  printf("%-8s %-34s %14s %12s %12s\n", "context", "mode", "median ns/step", "min", "max");
  double first = 0, last = 0;
  char first_label[24] = "", last_label[24] = "";
  for (int i = 0; i < nlengths; i++) {
    length_run* r = &runs[i];
    char label[24], m[64];
    bench_length_label(r->context, label, sizeof label);
    bench_stats inc = bench_summarize(r->inc_step, (size_t)reps);
    bench_stats mean = bench_summarize(r->tf_mean, (size_t)reps);
    bench_stats plain = bench_summarize(r->tf_plain, (size_t)reps);
    bench_stats flush = bench_summarize(r->tf_flush, (size_t)reps);
    printf("%-8s %-34s %14.0f %12.0f %12.0f\n", label, "incremental", inc.median, inc.min, inc.max);
    printf("%-8s %-34s %14.0f %12.0f %12.0f\n", label, "transformers, mean over a cycle", mean.median, mean.min,
           mean.max);
    printf("%-8s %-34s %14.0f %12.0f %12.0f\n", label, "transformers, steps without flush", plain.median, plain.min,
           plain.max);
    printf("%-8s %-34s %14.0f %12.0f %12.0f\n", label, "transformers, the flush", flush.median, flush.min,
           flush.max);
    snprintf(m, sizeof m, "incremental_ns_per_step_%s", label);
    bench_add(res, "quantized_update", "kvcache-c", m, inc.median, "ns");
    snprintf(m, sizeof m, "transformers_mean_ns_per_step_%s", label);
    bench_add(res, "quantized_update", "kvcache-c", m, mean.median, "ns");
    snprintf(m, sizeof m, "transformers_plain_ns_per_step_%s", label);
    bench_add(res, "quantized_update", "kvcache-c", m, plain.median, "ns");
    snprintf(m, sizeof m, "transformers_flush_ns_%s", label);
    bench_add(res, "quantized_update", "kvcache-c", m, flush.median, "ns");
    if (i == 0) {
      first = inc.median;
      snprintf(first_label, sizeof first_label, "%s", label);
    }
    last = inc.median;
    snprintf(last_label, sizeof last_label, "%s", label);
    kvc_cache_destroy(r->inc);
    kvc_cache_destroy(r->tf);
    free(r->inc_step);
    free(r->tf_mean);
    free(r->tf_plain);
    free(r->tf_flush);
  }
  if (nlengths > 1) {
    char m[128]; /* two labels of up to 24 bytes and the words around them */
    snprintf(m, sizeof m, "incremental_%s_over_%s", last_label, first_label);
    bench_add(res, "quantized_update", "kvcache-c", m, last / first, "x");
    printf("\nincremental@%s / incremental@%s = %.2f (target <= 1.2)\n", last_label, first_label, last / first);
  }
  printf("\n");
  free(each);
  inputs_free(&inc_in);
  inputs_free(&tf_in);
}

/* ------------------------------------------------------------------ compact mode */

static void bench_compact(bench_results* res, const bench_args* args) {
  const int64_t n = 1024 + RESIDUAL;
  kvc_cache* c = make_cache(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 4, 0, RESIDUAL);
  append(c, n, 3);
  expect(quantized_length(c) == 1024 && seq_length(c) == n, "compact: 1024 quantized tokens");
  kvc_cache* d = NULL;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  bench_check(kvc_cache_create(&opt, &d), "kvc_cache_create");
  append(d, n, 3);
  double compact = (double)memory(c).bytes_reserved / (double)n, plain = (double)memory(d).bytes_reserved / (double)n;
  double copy = (double)(TOKEN_ELEMS * 2 * sizeof(uint16_t)); /* the shared working copy, per token of one layer */
  printf("compact mode, quanto 4-bit g64, %lld tokens: bytes_reserved per cached token (one layer)\n", (long long)n);
  printf("  %-40s %8.1f\n", "bfloat16 dynamic", plain);
  printf("  %-40s %8.1f  (%.2fx of bf16)\n", "compact, with the shared working copy", compact, compact / plain);
  printf("  %-40s %8.1f  (%.2fx of bf16)\n", "compact, working copy shared by 32 layers", compact - copy + copy / 32,
         (compact - copy + copy / 32) / plain);
  bench_add(res, "quantized_compact", "kvcache-c", "bytes_per_token_dynamic_bf16", plain, "bytes");
  bench_add(res, "quantized_compact", "kvcache-c", "bytes_per_token_compact_q4", compact, "bytes");
  bench_add(res, "quantized_compact", "kvcache-c", "bytes_per_token_compact_q4_32_layers", compact - copy + copy / 32,
            "bytes");
  kvc_cache_destroy(c);
  kvc_cache_destroy(d);

  /* Per-step cost: few steps and repetitions, a 32k step dequantizes 64 Mi elements. */
  int reps = args->reps ? (args->reps < 5 ? args->reps : 5) : 5, steps = args->steps < 8 ? args->steps : 8;
  int64_t defaults[2] = {1024, 32768};
  const int64_t* lengths = args->context ? &args->context : defaults;
  int nlengths = args->context ? 1 : 2;
  step_inputs in;
  inputs_init(&in, steps);
  double* each = bench_alloc(sizeof(double) * (size_t)steps);
  double* per = bench_alloc(sizeof(double) * (size_t)reps);
  printf("compact mode per-step cost (%d repetitions of %d steps)\n", reps, steps);
  for (int i = 0; i < nlengths; i++) {
    kvc_cache* k = make_cache(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 4, 0, RESIDUAL);
    append(k, lengths[i], 7);
    time_steps(k, &in, each); /* warm-up: the scratch and the group buffers grow */
    restore_incremental(k, lengths[i], steps);
    for (int rep = 0; rep < reps; rep++) {
      time_steps(k, &in, each);
      double sum = 0;
      for (int s = 0; s < steps; s++) sum += each[s];
      per[rep] = sum / steps;
      restore_incremental(k, lengths[i], steps);
    }
    bench_stats st = bench_summarize(per, (size_t)reps);
    char label[24], m[64];
    bench_length_label(lengths[i], label, sizeof label);
    printf("  %-8s median %12.0f ns/step  (min %.0f, max %.0f)\n", label, st.median, st.min, st.max);
    snprintf(m, sizeof m, "compact_ns_per_step_%s", label);
    bench_add(res, "quantized_compact", "kvcache-c", m, st.median, "ns");
    kvc_cache_destroy(k);
  }
  printf("\n");
  free(each);
  free(per);
  inputs_free(&in);
}

/* ------------------------------------------------------------------ error */

static float normal(uint64_t* st) {
  double u = ((double)(bench_rand(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double v = (double)(bench_rand(st) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void bench_error(bench_results* res) {
  static const struct {
    kvc_quantizer q;
    int axis;
    const char* name;
  } kinds[] = {{KVC_QUANTIZER_QUANTO, 0, "quanto4_g64"}, {KVC_QUANTIZER_HQQ, 1, "hqq4_g64"}};
  const int64_t S = 1024;
  size_t n = (size_t)S * TOKEN_ELEMS;
  uint16_t* k = bench_alloc(n * sizeof(uint16_t));
  uint16_t* v = bench_alloc(n * sizeof(uint16_t));
  uint64_t st = 42;
  for (size_t i = 0; i < n; i++) k[i] = to_bf16(normal(&st));
  for (size_t i = 0; i < n; i++) v[i] = to_bf16(normal(&st));
  int64_t shape[4] = {1, KV_HEADS, S, HEAD_DIM};
  printf("dequantization error, random normal bfloat16 [1, 8, 1024, 128], every token quantized\n");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    kvc_cache* c = make_cache(kinds[i].q, KVC_QUANT_MODE_INCREMENTAL, 4, kinds[i].axis, 0);
    kvc_tensor kt = bench_tensor_bf16(k, shape), vt = bench_tensor_bf16(v, shape);
    kvc_kv out;
    bench_check(kvc_cache_update(c, 0, &kt, &vt, NULL, &out), "kvc_cache_update");
    expect(quantized_length(c) == S, "every token quantized");
    double sum_err = 0, sum_abs = 0, max_err = 0, max_abs = 0;
    for (int w = 0; w < 2; w++) {
      const kvc_tensor* t = w ? &out.value : &out.key;
      const uint16_t* x = w ? v : k;
      const uint16_t* base = (const uint16_t*)((const char*)t->data + t->byte_offset);
      for (int64_t h = 0; h < KV_HEADS; h++)
        for (int64_t s = 0; s < S; s++)
          for (int64_t d = 0; d < HEAD_DIM; d++) {
            double a = from_bf16(x[(h * S + s) * HEAD_DIM + d]);
            double y = from_bf16(base[h * bench_stride(t, 1) + s * bench_stride(t, 2) + d]);
            double e = fabs(y - a);
            sum_err += e;
            sum_abs += fabs(a);
            if (e > max_err) max_err = e;
            if (fabs(a) > max_abs) max_abs = fabs(a);
          }
    }
    printf("  %-12s mean|err|/mean|x| %.5f   max|err|/max|x| %.5f\n", kinds[i].name, sum_err / sum_abs,
           max_err / max_abs);
    char m[64];
    snprintf(m, sizeof m, "mean_relative_error_%s", kinds[i].name);
    bench_add(res, "quantized_error", "kvcache-c", m, sum_err / sum_abs, "ratio");
    snprintf(m, sizeof m, "max_relative_error_%s", kinds[i].name);
    bench_add(res, "quantized_error", "kvcache-c", m, max_err / max_abs, "ratio");
    kvc_cache_destroy(c);
  }
  free(k);
  free(v);
  printf("\n");
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  static bench_results res;
  printf("quantized layers: %d KV heads x head_dim %d, bfloat16, batch 1; kvcache %s\n\n", KV_HEADS, HEAD_DIM,
         kvc_version_string());
  bench_memory(&res);
  bench_steps(&res, &args);
  bench_compact(&res, &args);
  bench_error(&res);
  bench_write_json(args.json_path, &res);
  return 0;
}
