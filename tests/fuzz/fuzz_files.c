/*
 * fuzz_files.c: structure-aware fuzzer of cache files, pool sequence files
 * and tier frames, through the public ABI only.
 *
 * Valid objects are built once: a cache of every layer kind (two layers,
 * past their windows), every preset, an encoder-decoder cache, a pool
 * sequence of full, sliding and recurrent groups, and the frames a pool
 * writes to a tier. Each input picks one and is read as a program of field
 * mutations (files_mutator.h): numbers inside section headers and record
 * payloads, payload lengths, sections duplicated, dropped or swapped, the
 * file's object kind; a frame's declared sizes, key or length. Every
 * checksum is then recomputed, so the result is a well-formed file whose
 * only defence is the loader's semantic checks.
 *
 * Every outcome must be either a clean refusal (an error with a message; the
 * target of a restore, or the pool a sequence is loaded into, unchanged as
 * far as every public query and every stored byte show) or an object whose
 * later operations stay in bounds: every view read, an update of every
 * layer, a crop, a reorder, a save and a load of that save (a frame: a miss,
 * or a hit whose blocks gather). AddressSanitizer and UBSan judge the
 * bounds; a changed target or a message-less error aborts with the mutation
 * log, which names each field changed and its old and new value.
 *
 * Without libFuzzer (KVC_FUZZ_STANDALONE) driver.c runs pseudo-random inputs
 * from a fixed seed (the CTest run persist_fuzz) and from $KVC_FUZZ_SEED.
 */
#define _POSIX_C_SOURCE 200809L /* opendir and stat, for the standalone replay */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "persist_test.h"
#include "../pool/pool_test.h"
#include "files_mutator.h"
#include "reader.h"
#include "report.h"

#include "files_mutator.c"
#include "reader.c"
#include "report.c"

#define FUZZ_TARGET_NAME "fuzz_files"
#include "driver.c"

/* ---------------------------------------------------------------- seeds */

typedef enum seed_kind { SEED_CACHE, SEED_ENCDEC, SEED_SEQUENCE, SEED_FRAME } seed_kind;

typedef struct seed {
  char name[48];
  seed_kind kind;
  kvc_cache_options options; /* SEED_CACHE: what a restore target is made from */
  kvc_layer_options layers[2];
  kvc_model_config config;
  uint32_t num_layers;
  unsigned char* file; /* the valid file, or the valid frame (SEED_FRAME) */
  size_t len;
} seed;

enum { MAX_SEEDS = 40 };
static seed g_seeds[MAX_SEEDS];
static int g_num_seeds;
static kvc_quant_options g_quant[3];
static unsigned long long g_outcomes[4][2]; /* [seed kind][refused, accepted] */

static kvc_error* make_cache(const seed* s, kvc_cache** out) {
  kvc_cache_options o = s->options;
  if (o.preset == KVC_PRESET_CUSTOM) {
    o.layers = s->layers;
    o.num_layers = 2;
  } else {
    o.config = &s->config;
  }
  return kvc_cache_create(&o, out);
}

static seed* new_seed(const char* name, seed_kind kind) {
  if (g_num_seeds == MAX_SEEDS) abort();
  seed* s = &g_seeds[g_num_seeds++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->kind = kind;
  s->options = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  s->config = (kvc_model_config)KVC_MODEL_CONFIG_INIT;
  s->num_layers = 2;
  return s;
}

static void keep_file(seed* s, const ps_buffer* b) {
  s->file = b->data;
  s->len = b->len;
}

static void add_cache(seed* s) {
  kvc_cache* c = NULL;
  ps_buffer b = {0};
  if (make_cache(s, &c)) abort();
  int64_t pos = 0;
  ps_step(c, s->num_layers, 7, pos, 1), pos += 7;
  for (int t = 0; t < 3; t++, pos++) ps_step(c, s->num_layers, 1, pos, 2 + t);
  if (kvc_cache_save_to(c, ps_buffer_write, &b, NULL)) abort();
  kvc_cache_destroy(c);
  keep_file(s, &b);
}

static void add_kind(const char* name, kvc_layer_kind kind, int64_t window, int64_t max_len, int quant) {
  seed* s = new_seed(name, SEED_CACHE);
  s->options.preset = KVC_PRESET_CUSTOM;
  for (int i = 0; i < 2; i++) {
    s->layers[i] = tu_layer(kind, window, max_len);
    if (kind == KVC_LAYER_SINK) s->layers[i].num_sink_tokens = 2;
    if (quant) s->layers[i].quant = &g_quant[quant - 1];
  }
  add_cache(s);
}

static void add_preset(const char* name, kvc_preset p) {
  static const kvc_layer_type mamba_types[3] = {KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION,
                                                KVC_LAYER_TYPE_LINEAR_ATTENTION};
  seed* s = new_seed(name, SEED_CACHE);
  s->options.preset = p;
  s->options.max_cache_len = 32;
  s->options.window_length = 8;
  s->options.num_sink_tokens = 2;
  s->config.num_hidden_layers = 3;
  s->config.sliding_window = 6;
  s->config.attention_chunk_size = 6;
  s->num_layers = 3;
  if (p == KVC_PRESET_QUANTIZED) {
    s->config.sliding_window = s->config.attention_chunk_size = 0;
    s->options.quant = &g_quant[0];
  }
  if (p == KVC_PRESET_HYBRID_MAMBA) s->config.layer_types = mamba_types;
  add_cache(s);
}

static kvc_error* make_encdec(kvc_encoder_decoder_cache** out) {
  kvc_cache *self = NULL, *cross = NULL;
  kvc_error* e = kvc_cache_create(NULL, &self);
  if (!e) e = kvc_cache_create(NULL, &cross);
  if (!e) return kvc_encoder_decoder_cache_create(self, cross, out);
  kvc_cache_destroy(self);
  return e;
}

static void add_encdec(void) {
  seed* s = new_seed("encoder-decoder", SEED_ENCDEC);
  kvc_encoder_decoder_cache* ed = NULL;
  if (make_encdec(&ed)) abort();
  ps_step(kvc_encoder_decoder_cache_self_attention(ed), 2, 3, 0, 1);
  float k[PS_B * PS_H * 5 * PS_D];
  int64_t shape[4] = {PS_B, PS_H, 5, PS_D};
  ps_fill(k, PS_B * PS_H * 5 * PS_D, 3);
  kvc_tensor kt = ps_tensor(k, 4, shape);
  if (kvc_encoder_decoder_cache_update_cross(ed, 1, &kt, &kt, NULL)) abort();
  ps_buffer b = {0};
  if (kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &b, NULL)) abort();
  kvc_encoder_decoder_cache_destroy(ed);
  keep_file(s, &b);
}

/* The pool of the sequence seeds: full, sliding and recurrent groups (pool_test.h's geometry). */
static const pt_group POOL_GROUPS[3] = {
    {KVC_POOL_GROUP_FULL, 4, 16, 0}, {KVC_POOL_GROUP_SLIDING, 4, 16, 8}, {KVC_POOL_GROUP_RECURRENT, 4, 8, 0}};
static const uint32_t POOL_LAYER_GROUP[3] = {0, 1, 2};

static kvc_error* make_pool(kvc_pool** out) {
  return pt_pool(out, POOL_GROUPS, 3, POOL_LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1);
}

static int32_t pool_token(int64_t i) { return (int32_t)(1000 + i * 7); }

static kvc_error* pool_steps(kvc_pool* p, kvc_pool_sequence* s, int64_t from, int64_t n) {
  int32_t ids[5];
  kvc_error* e = NULL;
  for (int64_t at = from; !e && at < from + n; at += 5) {
    int64_t k = from + n - at < 5 ? from + n - at : 5;
    for (int64_t i = 0; i < k; i++) ids[i] = pool_token(at + i);
    e = pt_step(p, 3, 3, s, ids, k);
  }
  return e;
}

static void add_sequence(void) {
  seed* s = new_seed("pool sequence", SEED_SEQUENCE);
  kvc_pool* p = NULL;
  kvc_pool_sequence* q = NULL;
  ps_buffer b = {0};
  if (make_pool(&p) || kvc_pool_sequence_create(p, NULL, &q) || pool_steps(p, q, 0, 13) ||
      kvc_pool_sequence_save_to(q, ps_buffer_write, &b, NULL))
    abort();
  kvc_pool_sequence_destroy(q);
  kvc_pool_destroy(p);
  keep_file(s, &b);
}

/* A tier held in memory: the frames a pool writes, and what the fuzzer serves back. */
typedef struct mem_tier {
  kvc_tier_key keys[16];
  unsigned char* values[16];
  size_t sizes[16], count;
} mem_tier;

static size_t mem_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                      size_t count) {
  mem_tier* t = (mem_tier*)ctx;
  for (size_t i = 0; i < count && t->count < 16; i++) {
    unsigned char* v = (unsigned char*)malloc(sizes[i]);
    if (!v) return i;
    memcpy(v, values[i], sizes[i]);
    t->keys[t->count] = keys[i];
    t->values[t->count] = v;
    t->sizes[t->count++] = sizes[i];
  }
  return count;
}

static size_t mem_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                      size_t count) {
  mem_tier* t = (mem_tier*)ctx;
  size_t i = 0;
  for (; i < count; i++) {
    size_t j = 0;
    while (j < t->count && memcmp(&t->keys[j], &keys[i], sizeof keys[i])) j++;
    if (j == t->count) break;
    sizes[i] = t->sizes[j];
    if (t->sizes[j] <= capacity) memcpy(values[i], t->values[j], t->sizes[j]);
  }
  return i;
}

static void mem_destroy(void* ctx) {
  mem_tier* t = (mem_tier*)ctx;
  for (size_t i = 0; i < t->count; i++) free(t->values[i]);
  free(t);
}

/* A pool of one full group (the frame seeds) with `t` as its tier; t is the tier's from then on. */
static kvc_error* make_tiered_pool(mem_tier* t, kvc_pool** out) {
  static const pt_group full[1] = {{KVC_POOL_GROUP_FULL, 4, 8, 0}};
  static const uint32_t layer_group[2] = {0, 0};
  kvc_tier_ops ops = {sizeof(kvc_tier_ops), mem_put, mem_get, mem_destroy, NULL};
  kvc_tier* tier = NULL;
  kvc_error* e = kvc_tier_create(&ops, t, "memory", &tier);
  if (e) return e;
  if (!(e = pt_pool(out, full, 1, layer_group, 2, KVC_POOL_LAYOUT_NHD, 0, 1))) {
    if ((e = kvc_pool_add_tier(*out, tier, KVC_TIER_WRITE_ON_COMMIT))) {
      kvc_pool_destroy(*out);
      *out = NULL;
    }
  }
  if (e) kvc_tier_destroy(tier);
  return e;
}

/* The frames of a 13-token sequence's three full blocks, each a seed. */
static mem_tier g_frames;

static void add_frames(void) {
  mem_tier* t = (mem_tier*)calloc(1, sizeof *t);
  kvc_pool* p = NULL;
  kvc_pool_sequence* q = NULL;
  int32_t ids[13];
  for (int i = 0; i < 13; i++) ids[i] = pool_token(i);
  if (!t || make_tiered_pool(t, &p) || kvc_pool_sequence_create(p, NULL, &q) || pt_step(p, 1, 2, q, ids, 13))
    abort();
  g_frames.count = t->count;
  for (size_t i = 0; i < t->count; i++) {
    g_frames.keys[i] = t->keys[i];
    g_frames.sizes[i] = t->sizes[i];
    g_frames.values[i] = (unsigned char*)malloc(t->sizes[i]);
    if (!g_frames.values[i]) abort();
    memcpy(g_frames.values[i], t->values[i], t->sizes[i]);
    char name[32];
    snprintf(name, sizeof name, "tier frame %zu", i);
    seed* s = new_seed(name, SEED_FRAME);
    s->file = g_frames.values[i];
    s->len = g_frames.sizes[i];
  }
  kvc_pool_sequence_destroy(q);
  kvc_pool_destroy(p);
}

static void build_seeds(void) {
  static const kvc_quant_mode modes[3] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS,
                                          KVC_QUANT_MODE_COMPACT};
  for (int m = 0; m < 3; m++) {
    g_quant[m] = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
    g_quant[m].mode = modes[m];
    g_quant[m].q_group_size = 8;
    g_quant[m].residual_length = 4;
  }
  add_kind("dynamic", KVC_LAYER_DYNAMIC, 0, 0, 0);
  add_kind("dynamic sliding", KVC_LAYER_DYNAMIC_SLIDING, 6, 0, 0);
  add_kind("dynamic chunked", KVC_LAYER_DYNAMIC_CHUNKED, 6, 0, 0);
  add_kind("static", KVC_LAYER_STATIC, 0, 16, 0);
  add_kind("static sliding", KVC_LAYER_STATIC_SLIDING, 6, 16, 0);
  add_kind("static chunked", KVC_LAYER_STATIC_CHUNKED, 6, 16, 0);
  add_kind("quantized incremental", KVC_LAYER_QUANTIZED, 0, 0, 1);
  add_kind("quantized transformers", KVC_LAYER_QUANTIZED, 0, 0, 2);
  add_kind("quantized compact", KVC_LAYER_QUANTIZED, 0, 0, 3);
  add_kind("sink", KVC_LAYER_SINK, 8, 0, 0);
  add_kind("linear", KVC_LAYER_LINEAR, 0, 0, 0);
  add_kind("linear + dynamic", KVC_LAYER_LINEAR_DYNAMIC, 0, 0, 0);
  add_kind("linear + dynamic sliding", KVC_LAYER_LINEAR_DYNAMIC_SLIDING, 6, 0, 0);
  add_kind("linear + static", KVC_LAYER_LINEAR_STATIC, 0, 16, 0);
  add_kind("linear + static sliding", KVC_LAYER_LINEAR_STATIC_SLIDING, 6, 16, 0);
  add_kind("fp8 quantized", KVC_LAYER_QUANTIZED_FP8, 0, 0, 0);
  add_kind("dummy", KVC_LAYER_DUMMY, 0, 0, 0);
  add_kind("dynamic indexed", KVC_LAYER_DYNAMIC_INDEXED, 0, 0, 0);
  add_kind("static indexed", KVC_LAYER_STATIC_INDEXED, 0, 16, 0);
  for (size_t i = 0; i < PS_NUM_PRESETS; i++) add_preset(PS_PRESETS[i].name, PS_PRESETS[i].preset);
  add_encdec();
  add_sequence();
  add_frames();
}

/* ------------------------------------------------------------- outcomes */

static const char* g_seed_name = "";

/* A refusal must say why. */
static int refused(kvc_error* e, const char* what) {
  if (!e) return 0;
  const char* m = kvc_error_message(e);
  if (!m || !m[0]) fail("%s of seed %s: an error without a message", what, g_seed_name);
  trace("%s: refused: %s\n", what, m);
  kvc_error_destroy(e);
  return 1;
}

/*
 * A consistent file may declare a store as large as its writer could have made (a dynamic store's capacity,
 * kvc_cache_reserve): loading allocates it (docs/file-format.md says so). Operations that move whole stores
 * (reorder) would then touch gigabytes; such a cache is counted, not exercised.
 */
enum { EXERCISE_MAX_BYTES = 256 << 20 };
static unsigned long long g_too_large;

/* What a caller does with a loaded cache: read every view, step every layer, crop, reorder, save, load that. */
static void exercise_cache(kvc_cache* c, uint32_t layers) {
  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  kvc_error* unknown = kvc_cache_memory(c, &mem);
  if (unknown) fail("seed %s: kvc_cache_memory of a loaded cache failed: %s", g_seed_name, kvc_error_message(unknown));
  if (mem.bytes_reserved > EXERCISE_MAX_BYTES) {
    trace("a store of %llu bytes: not exercised\n", (unsigned long long)mem.bytes_reserved);
    g_too_large++;
    return;
  }
  cache_snap snap;
  snap_take(c, &snap);
  snap_free(&snap);
  uint32_t n = kvc_cache_num_layers(c);
  if (n > layers) layers = n;
  ps_step(c, layers, 3, 40, 50);
  ps_step(c, layers, 1, 43, 51);
  kvc_error_destroy(kvc_cache_crop(c, -1));
  int64_t batch = 0;
  if (!kvc_cache_batch_size(c, &batch) && batch > 0 && batch <= 64) {
    int64_t beam[64];
    for (int64_t i = 0; i < batch; i++) beam[i] = batch - 1 - i;
    kvc_error_destroy(kvc_cache_reorder(c, beam, (size_t)batch));
  }
  ps_step(c, layers, 1, 44, 52);
  snap_take(c, &snap);
  snap_free(&snap);
  ps_buffer b = {0};
  if (!refused(kvc_cache_save_to(c, ps_buffer_write, &b, NULL), "the save of the loaded cache")) {
    kvc_cache* again = NULL;
    if (!refused(kvc_cache_load_buffer(b.data, b.len, NULL, &again), "the load of the saved loaded cache")) {
      if (!ps_same(c, again, "loaded cache saved and loaded again"))
        fail("seed %s: a cache loaded from a file, saved and loaded again differs from itself", g_seed_name);
      kvc_cache_destroy(again);
    }
  }
  free(b.data);
}

/* A restore that failed left the target exactly as it was. */
static void check_unchanged(const kvc_cache* target, const cache_snap* before, const char* what) {
  cache_snap after;
  char why[512];
  snap_take(target, &after);
  int same = snap_equal(before, &after, 0, why, sizeof why);
  snap_free(&after);
  if (!same) fail("%s of seed %s: refused, but the target changed: %s", what, g_seed_name, why);
}

static void run_cache(const seed* s, const unsigned char* file, size_t len, int restore) {
  if (!restore) {
    kvc_cache* c = NULL;
    if (refused(kvc_cache_load_buffer(file, len, NULL, &c), "kvc_cache_load_buffer")) {
      g_outcomes[s->kind][0]++;
      return;
    }
    g_outcomes[s->kind][1]++;
    exercise_cache(c, s->num_layers);
    kvc_cache_destroy(c);
    return;
  }
  kvc_cache* target = NULL;
  if (make_cache(s, &target)) abort();
  ps_step(target, s->num_layers, 2, 0, 9);
  cache_snap before;
  snap_take(target, &before);
  if (refused(kvc_cache_restore_buffer(target, file, len), "kvc_cache_restore_buffer")) {
    g_outcomes[s->kind][0]++;
    check_unchanged(target, &before, "kvc_cache_restore_buffer");
  } else {
    g_outcomes[s->kind][1]++;
    exercise_cache(target, s->num_layers);
  }
  snap_free(&before);
  kvc_cache_destroy(target);
}

static void run_encdec(const seed* s, const unsigned char* file, size_t len, int restore) {
  kvc_encoder_decoder_cache* ed = NULL;
  cache_snap before[2];
  if (restore) {
    if (make_encdec(&ed)) abort();
    ps_step(kvc_encoder_decoder_cache_self_attention(ed), 2, 2, 0, 9);
    snap_take(kvc_encoder_decoder_cache_self_attention(ed), &before[0]);
    snap_take(kvc_encoder_decoder_cache_cross_attention(ed), &before[1]);
  }
  kvc_error* e = restore ? kvc_encoder_decoder_cache_restore_buffer(ed, file, len)
                         : kvc_encoder_decoder_cache_load_buffer(file, len, NULL, &ed);
  if (refused(e, restore ? "kvc_encoder_decoder_cache_restore_buffer" : "kvc_encoder_decoder_cache_load_buffer")) {
    g_outcomes[s->kind][0]++;
    if (restore) {
      check_unchanged(kvc_encoder_decoder_cache_self_attention(ed), &before[0], "encoder-decoder restore (self)");
      check_unchanged(kvc_encoder_decoder_cache_cross_attention(ed), &before[1], "encoder-decoder restore (cross)");
    }
  } else {
    g_outcomes[s->kind][1]++;
    exercise_cache(kvc_encoder_decoder_cache_self_attention(ed), 2);
    exercise_cache(kvc_encoder_decoder_cache_cross_attention(ed), 2);
    for (uint32_t l = 0; l < 4; l++) {
      int32_t u = 0;
      kvc_error_destroy(kvc_encoder_decoder_cache_is_updated(ed, l, &u));
    }
    ps_buffer b = {0};
    refused(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &b, NULL), "the save of the loaded cache");
    free(b.data);
  }
  if (restore) snap_free(&before[0]), snap_free(&before[1]);
  kvc_encoder_decoder_cache_destroy(ed);
}

static void same_stats(const kvc_pool_stats* a, const kvc_pool_stats* b, uint32_t g) {
  if (memcmp(a, b, sizeof *a)) fail("pool sequence load of seed %s: refused, but group %u's stats changed", g_seed_name, g);
}

static void run_sequence(const seed* s, const unsigned char* file, size_t len) {
  kvc_pool* p = NULL;
  kvc_pool_sequence *other = NULL, *q = NULL;
  /* The pool holds another sequence, which a refusal must not touch. */
  if (make_pool(&p) || kvc_pool_sequence_create(p, NULL, &other) || pool_steps(p, other, 100, 6)) abort();
  kvc_pool_stats before[3], after[3];
  for (uint32_t g = 0; g < 3; g++) before[g] = pt_stats(p, g);
  if (refused(kvc_pool_sequence_load_buffer(p, file, len, &q), "kvc_pool_sequence_load_buffer")) {
    g_outcomes[s->kind][0]++;
    for (uint32_t g = 0; g < 3; g++) after[g] = pt_stats(p, g), same_stats(&before[g], &after[g], g);
  } else {
    g_outcomes[s->kind][1]++;
    kvc_error_destroy(pool_steps(p, q, (int64_t)kvc_pool_sequence_length(q), 3));
    ps_buffer b = {0};
    refused(kvc_pool_sequence_save_to(q, ps_buffer_write, &b, NULL), "the save of the loaded sequence");
    free(b.data);
    kvc_pool_sequence_destroy(q);
  }
  kvc_error_destroy(pool_steps(p, other, 106, 2));
  kvc_pool_sequence_destroy(other);
  kvc_pool_destroy(p);
}

/* The tier serves every seed frame, frame `which` replaced by the mutated one; a new request of the same tokens
 * either misses it or gets blocks whose bytes a save reads back. */
static void run_frame(size_t which, unsigned char* frame, size_t len) {
  mem_tier* t = (mem_tier*)calloc(1, sizeof *t);
  if (!t) abort();
  for (size_t i = 0; i < g_frames.count; i++) {
    size_t n = i == which ? len : g_frames.sizes[i];
    t->keys[i] = g_frames.keys[i];
    t->values[i] = (unsigned char*)malloc(n ? n : 1);
    if (!t->values[i]) abort();
    memcpy(t->values[i], i == which ? frame : g_frames.values[i], n);
    t->sizes[i] = n;
    t->count++;
  }
  kvc_pool* p = NULL;
  kvc_pool_sequence* q = NULL;
  int32_t ids[13];
  for (int i = 0; i < 13; i++) ids[i] = pool_token(i);
  if (make_tiered_pool(t, &p) || kvc_pool_sequence_create(p, NULL, &q)) abort();
  size_t matched = 0;
  if (!refused(kvc_pool_match_prefix(q, ids, 13, &matched), "kvc_pool_match_prefix")) {
    trace("matched %zu tokens\n", matched);
    g_outcomes[SEED_FRAME][matched > which * 4 ? 1 : 0]++;
    ps_buffer b = {0};
    refused(kvc_pool_sequence_save_to(q, ps_buffer_write, &b, NULL), "the save of the matched sequence");
    free(b.data);
  }
  kvc_pool_sequence_destroy(q);
  kvc_pool_destroy(p);
}

/* ----------------------------------------------------------------- target */

#ifdef KVC_FUZZ_STANDALONE
static void summary(void) {
  static const char* names[4] = {"cache files", "encoder-decoder files", "pool sequence files", "tier frames"};
  for (int k = 0; k < 4; k++)
    printf("fuzz_files: %s: %llu refused, %llu accepted\n", names[k], g_outcomes[k][0], g_outcomes[k][1]);
  printf("fuzz_files: %llu accepted caches of more than %d MiB not exercised\n", g_too_large, EXERCISE_MAX_BYTES >> 20);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FILE* quiet;
  if (!g_num_seeds) {
    quiet = fopen("/dev/null", "w");
    tu_log_stream = quiet; /* the steps' refusals on a lying cache are expected outcomes, not test failures */
    build_seeds();
    install_death_callback();
#ifdef KVC_FUZZ_STANDALONE
    g_fuzz_summary = summary;
#endif
  }
  reader in = {data, size, 0};
  trace_reset();
  const seed* s = &g_seeds[rd(&in) % g_num_seeds];
  g_seed_name = s->name;
  trace("seed %s (%zu bytes)\n", s->name, s->len);
  char log[2048] = "";
  if (s->kind == SEED_FRAME) {
    unsigned char* frame = (unsigned char*)malloc(s->len);
    if (!frame) abort();
    memcpy(frame, s->file, s->len);
    size_t len = s->len;
    fm_mutate_frame(&frame, &len, &in, log, sizeof log);
    trace("%s", log);
    run_frame((size_t)(s - g_seeds) - (size_t)(g_num_seeds - (int)g_frames.count), frame, len);
    free(frame);
    return 0;
  }
  fm_file f;
  if (fm_parse(s->file, s->len, &f)) abort();
  fm_mutate(&f, &in, 3, log, sizeof log);
  trace("%s", log);
  size_t len = 0;
  unsigned char* file = fm_write(&f, &len);
  fm_free(&f);
  if (!file) return 0;
  int restore = rd(&in) & 1;
  if (s->kind == SEED_CACHE) run_cache(s, file, len, restore);
  else if (s->kind == SEED_ENCDEC) run_encdec(s, file, len, restore);
  else run_sequence(s, file, len);
  free(file);
  g_fuzz_ops++;
  return 0;
}
