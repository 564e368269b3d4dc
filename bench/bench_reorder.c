/*
 * bench_reorder: beam-search reorder (kvc_cache_reorder, transformers'
 * reorder_cache) on a Llama-3-8B-shaped DynamicCache: 4 beams, 32 layers,
 * 8 KV heads, head_dim 128, bfloat16, a fixed context (4k tokens by default).
 *
 * The claim under test: a reorder copies only the rows that change. Four
 * permutations move 0, 1, 2 and 3 rows; their times must grow with the moved
 * rows and the identity must cost ~nothing. From the one-row time we derive
 * how many rows the {0,0,2,2} reorder really moved. Each time is compared with
 * a memcpy of the moved rows' bytes, measured in the same run.
 */
#include "bench_common.h"

#define LAYERS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define BEAMS 4
#define NPERMS 4

/* perms[k] moves exactly k rows; perms[2] is the "half the beams" case. */
static const int64_t perms[NPERMS][BEAMS] = {{0, 1, 2, 3}, {0, 0, 2, 3}, {0, 0, 2, 2}, {0, 0, 0, 0}};

static volatile uint64_t bench_sink;

static int moved_rows(const int64_t* perm) {
  int n = 0;
  for (int b = 0; b < BEAMS; b++) n += perm[b] != b;
  return n;
}

static kvc_cache* make_prefilled_cache(int64_t context) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_DYNAMIC;
  opt.config = &cfg;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create");

  size_t elems = (size_t)BEAMS * KV_HEADS * (size_t)context * HEAD_DIM;
  uint16_t* k = bench_alloc(elems * sizeof(uint16_t));
  uint16_t* v = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(k, elems, 21);
  bench_fill_bf16(v, elems, 23);
  int64_t shape[4] = {BEAMS, KV_HEADS, context, HEAD_DIM};
  kvc_tensor keys[LAYERS], values[LAYERS];
  for (int l = 0; l < LAYERS; l++) {
    keys[l] = bench_tensor_bf16(k, shape);
    values[l] = bench_tensor_bf16(v, shape);
  }
  bench_check(kvc_cache_update_all(cache, LAYERS, keys, values, NULL, NULL), "prefill");
  free(k);
  free(v);
  return cache;
}

/* Whether beam rows a and b of layer 0's keys hold the same bytes. */
static int rows_equal(const kvc_cache* cache, int a, int b) {
  kvc_kv view;
  bench_check(kvc_cache_layer_view(cache, 0, &view), "kvc_cache_layer_view");
  const kvc_tensor* t = &view.key;
  const char* base = (const char*)t->data + t->byte_offset;
  for (int64_t h = 0; h < t->shape[1]; h++)
    for (int64_t s = 0; s < t->shape[2]; s++) {
      int64_t oa = a * bench_stride(t, 0) + h * bench_stride(t, 1) + s * bench_stride(t, 2);
      int64_t ob = b * bench_stride(t, 0) + h * bench_stride(t, 1) + s * bench_stride(t, 2);
      if (memcmp(base + oa * 2, base + ob * 2, HEAD_DIM * 2) != 0) return 0;
    }
  return 1;
}

/* A benchmark of a wrong result is worthless: check {0,0,2,2} once. */
static void verify_reorder(kvc_cache* cache) {
  if (rows_equal(cache, 0, 1) || rows_equal(cache, 2, 3)) {
    fprintf(stderr, "bench: prefilled beams are not distinct\n");
    exit(1);
  }
  bench_check(kvc_cache_reorder(cache, perms[2], BEAMS), "kvc_cache_reorder");
  if (!rows_equal(cache, 0, 1) || !rows_equal(cache, 2, 3) || rows_equal(cache, 0, 2)) {
    fprintf(stderr, "bench: reorder {0,0,2,2} did not copy beam 0 to 1 and beam 2 to 3\n");
    exit(1);
  }
}

/* The roofline: a buffer shaped like the cache (per layer, K and V, 4 beam
 * rows each), where memcpy copies exactly the rows the permutation moves. */
typedef struct roof_buffer {
  char* bytes;
  size_t row_bytes; /* one beam row of one layer's K or V */
} roof_buffer;

static double roof_reorder(const roof_buffer* rb, const int64_t* perm) {
  double t0 = bench_now_ns();
  for (size_t tensor = 0; tensor < 2 * LAYERS; tensor++) {
    char* base = rb->bytes + tensor * BEAMS * rb->row_bytes;
    for (int b = 0; b < BEAMS; b++)
      if (perm[b] != b) memcpy(base + (size_t)b * rb->row_bytes, base + (size_t)perm[b] * rb->row_bytes, rb->row_bytes);
  }
  double dt = bench_now_ns() - t0;
  bench_sink += (uint64_t)(unsigned char)rb->bytes[rb->row_bytes + 17];
  return dt;
}

static double cache_reorder(kvc_cache* cache, const int64_t* perm) {
  double t0 = bench_now_ns();
  bench_check(kvc_cache_reorder(cache, perm, BEAMS), "kvc_cache_reorder");
  return bench_now_ns() - t0;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int64_t context = args.context ? args.context : 4096;
  int reps = args.reps ? args.reps : 15; /* a repetition moves ~3 GB */
  char label[24];
  bench_length_label(context, label, sizeof label);

  size_t row_bytes = (size_t)KV_HEADS * (size_t)context * HEAD_DIM * sizeof(uint16_t);
  double row_bytes_all = (double)row_bytes * 2 * LAYERS; /* one beam, every layer, K and V */

  printf("beam reorder: %d beams, context %s, %d layers x %d KV heads x head_dim %d, bfloat16, DynamicCache\n",
         BEAMS, label, LAYERS, KV_HEADS, HEAD_DIM);
  printf("one beam row, all layers, K+V: %.0f bytes; %d repetitions; kvcache %s\n\n", row_bytes_all, reps,
         kvc_version_string());

  kvc_cache* cache = make_prefilled_cache(context);
  verify_reorder(cache);

  roof_buffer rb = {bench_alloc(2 * LAYERS * BEAMS * row_bytes), row_bytes};
  memset(rb.bytes, 1, 2 * LAYERS * BEAMS * row_bytes); /* fault every page in before timing */

  /* Interleave permutations within each repetition so drift on a shared
   * machine hits them alike; repetition -1 is the warm-up. */
  double* t_cache[NPERMS];
  double* t_roof[NPERMS];
  for (int p = 0; p < NPERMS; p++) {
    t_cache[p] = bench_alloc((size_t)reps * sizeof(double));
    t_roof[p] = bench_alloc((size_t)reps * sizeof(double));
  }
  for (int r = -1; r < reps; r++)
    for (int p = 0; p < NPERMS; p++) {
      double tc = cache_reorder(cache, perms[p]);
      double tr = roof_reorder(&rb, perms[p]);
      if (r >= 0) {
        t_cache[p][r] = tc;
        t_roof[p][r] = tr;
      }
    }
  kvc_cache_destroy(cache);
  free(rb.bytes);

  bench_stats sc[NPERMS], sr[NPERMS];
  for (int p = 0; p < NPERMS; p++) {
    sc[p] = bench_summarize(t_cache[p], (size_t)reps);
    sr[p] = bench_summarize(t_roof[p], (size_t)reps);
    free(t_cache[p]);
    free(t_roof[p]);
  }

  /* One moved row costs t(1 row) - t(identity); the {0,0,2,2} time divided
   * by that says how many rows it really moved. (The 3-row case copies one
   * source row three times, so part of its reads hit the CPU cache; it is
   * checked for growth, not used for the per-row cost.) */
  double ns_per_row = sc[1].median - sc[0].median;
  double rows_derived = ns_per_row > 0 ? (sc[2].median - sc[0].median) / ns_per_row : -1;

  static bench_results res;
  printf("%-14s %-6s %14s %14s %14s %14s %9s\n", "beam_idx", "rows", "median ns", "min ns", "max ns",
         "memcpy ns", "x memcpy");
  for (int p = 0; p < NPERMS; p++) {
    int k = moved_rows(perms[p]);
    char idx[32], m[64];
    snprintf(idx, sizeof idx, "{%lld,%lld,%lld,%lld}", (long long)perms[p][0], (long long)perms[p][1],
             (long long)perms[p][2], (long long)perms[p][3]);
    if (k > 0)
      printf("%-14s %-6d %14.0f %14.0f %14.0f %14.0f %9.2f\n", idx, k, sc[p].median, sc[p].min, sc[p].max,
             sr[p].median, sc[p].median / sr[p].median);
    else
      printf("%-14s %-6d %14.0f %14.0f %14.0f %14s %9s\n", idx, k, sc[p].median, sc[p].min, sc[p].max, "-",
             "-");
    snprintf(m, sizeof m, "reorder_ns_%drows", k);
    bench_add(&res, "beam_reorder", "kvcache-c", m, sc[p].median, "ns");
    snprintf(m, sizeof m, "reorder_min_ns_%drows", k);
    bench_add(&res, "beam_reorder", "kvcache-c", m, sc[p].min, "ns");
    snprintf(m, sizeof m, "reorder_max_ns_%drows", k);
    bench_add(&res, "beam_reorder", "kvcache-c", m, sc[p].max, "ns");
    if (k > 0) {
      snprintf(m, sizeof m, "reorder_ns_%drows", k);
      bench_add(&res, "beam_reorder", "memcpy", m, sr[p].median, "ns");
      snprintf(m, sizeof m, "reorder_ratio_to_memcpy_%drows", k);
      bench_add(&res, "beam_reorder", "kvcache-c", m, sc[p].median / sr[p].median, "x");
    }
  }
  double bytes_moved = moved_rows(perms[2]) * row_bytes_all;
  double identity_over_one = sc[0].median / sc[1].median;
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_context_tokens", (double)context, "tokens");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_row_bytes", row_bytes_all, "bytes");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_ns_per_row", ns_per_row, "ns");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_bytes_moved", bytes_moved, "bytes");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_rows_moved_derived", rows_derived, "rows");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_bytes_moved_derived", rows_derived * row_bytes_all,
            "bytes");
  bench_add(&res, "beam_reorder", "kvcache-c", "reorder_identity_over_1row", identity_over_one, "x");

  printf("\none moved row: %.0f ns (%.2f GB/s)\n", ns_per_row, row_bytes_all / ns_per_row);
  printf("{0,0,2,2} moves %d rows = %.0f bytes; timing says %.2f rows = %.0f bytes\n", moved_rows(perms[2]),
         bytes_moved, rows_derived, rows_derived * row_bytes_all);
  printf("identity / one-row reorder = %.4f (should be ~0)\n", identity_over_one);
  bench_write_json(args.json_path, &res);
  return 0;
}
