/*
 * test_persist_api_errors.c: every entry point of kvcache/persist.h given
 * bad input or a failing medium: NULL handles, paths, callbacks and outs,
 * option structs of another size, staging sizes out of range, a directory
 * that does not exist, a path that is a directory, a write callback that
 * refuses, a file system that refuses to grow the file (RLIMIT_FSIZE), empty
 * files and files that hold another object. Each is refused with the code
 * the header gives and a message that names the argument; the target cache
 * is unchanged, no file appears under the path and no temporary file stays
 * beside it. The encoder-decoder callback writer and the pool sequence's
 * path functions also make one round trip each, since nothing else calls
 * them.
 */
#include "../tier/tier_test.h" /* first: it sets the feature macros (setrlimit, mkdtemp, nftw) */

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "persist_test.h"

/* An error of `code` whose message contains `part`; destroyed. */
static int refused(kvc_error* e, kvc_code code, const char* part, int line) {
  int ok = CHECK(e != NULL) && CHECK_EQ_I64(kvc_error_code(e), code) &&
           CHECK(strstr(kvc_error_message(e), part) != NULL);
  if (!ok) fprintf(TU_LOG, "    line %d: message \"%s\" should contain \"%s\"\n", line, e ? kvc_error_message(e) : "",
                   part);
  kvc_error_destroy(e);
  return ok;
}
#define REFUSED(expr, code, part) refused((expr), (code), (part), __LINE__)

/* A write callback that accepts `left` calls, then refuses. */
typedef struct refusing_sink {
  int left, calls;
} refusing_sink;

static int refusing_write(void* user, const void* data, size_t bytes) {
  (void)data, (void)bytes;
  refusing_sink* s = (refusing_sink*)user;
  s->calls++;
  return s->left-- > 0 ? 0 : -1;
}

/* The number of entries of `dir` besides . and .. */
static int entries(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static kvc_cache* small_cache(uint64_t step) {
  kvc_cache* c = NULL;
  kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 8)};
  kvc_cache_options o = tu_custom_options(2, l);
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  ps_step(c, 2, 3, 0, step);
  return c;
}

static kvc_encoder_decoder_cache* small_pair(uint64_t step) {
  kvc_cache *a = small_cache(step), *b = small_cache(step + 100);
  kvc_encoder_decoder_cache* ed = NULL;
  if (!a || !b || !CHECK_OK(kvc_encoder_decoder_cache_create(a, b, &ed))) {
    kvc_cache_destroy(a);
    kvc_cache_destroy(b);
    return NULL;
  }
  return ed;
}

static const pt_group GROUP = {KVC_POOL_GROUP_FULL, 4, 16, 0};
static const uint32_t LAYERS[2] = {0, 0};

static void test_options_init(void) {
  kvc_save_options_init(NULL); /* accepted: nothing to initialise */
  kvc_load_options_init(NULL);
  kvc_save_options s;
  memset(&s, 0xff, sizeof s);
  kvc_save_options_init(&s);
  const kvc_save_options want_s = KVC_SAVE_OPTIONS_INIT;
  CHECK(!memcmp(&s, &want_s, sizeof s));
  kvc_load_options l;
  memset(&l, 0xff, sizeof l);
  kvc_load_options_init(&l);
  CHECK_EQ_U64(l.struct_size, sizeof l); /* field by field: the struct has padding */
  CHECK_EQ_I64(l.device.device_type, KVC_DEVICE_CPU);
  CHECK_EQ_I64(l.device.device_id, 0);
  CHECK_EQ_PTR(l.stream, NULL);
  CHECK_EQ_PTR(l.allocator, NULL);
  CHECK_EQ_U64(l.max_bytes, 0);
}

static void test_save_arguments(void) {
  char dir[4096], path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "persist-api"));
  snprintf(path, sizeof path, "%s/cache.kvc", dir);
  kvc_cache* c = small_cache(1);
  kvc_encoder_decoder_cache* ed = small_pair(2);
  kvc_pool* p = NULL;
  REQUIRE(c && ed);
  REQUIRE_OK(pt_pool(&p, &GROUP, 1, LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  ps_buffer buf = {0};

  REFUSED(kvc_cache_save(NULL, path, NULL), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_cache_save(c, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "path is NULL");
  REFUSED(kvc_cache_save_to(NULL, ps_buffer_write, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_cache_save_to(c, NULL, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT, "write is NULL");
  REFUSED(kvc_encoder_decoder_cache_save(NULL, path, NULL), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_encoder_decoder_cache_save(ed, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "path is NULL");
  REFUSED(kvc_encoder_decoder_cache_save_to(NULL, ps_buffer_write, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT,
          "cache is NULL");
  REFUSED(kvc_encoder_decoder_cache_save_to(ed, NULL, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT, "write is NULL");
  REFUSED(kvc_pool_sequence_save(NULL, path, NULL), KVC_ERROR_INVALID_ARGUMENT, "sequence is NULL");
  REFUSED(kvc_pool_sequence_save(s, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "path is NULL");
  REFUSED(kvc_pool_sequence_save_to(NULL, ps_buffer_write, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT,
          "sequence is NULL");
  REFUSED(kvc_pool_sequence_save_to(s, NULL, &buf, NULL), KVC_ERROR_INVALID_ARGUMENT, "write is NULL");

  /* Options: another struct size, then staging sizes either side of [4096, 2^40). */
  kvc_save_options o = KVC_SAVE_OPTIONS_INIT;
  o.struct_size = 4;
  REFUSED(kvc_cache_save(c, path, &o), KVC_ERROR_INVALID_ARGUMENT, "options");
  REFUSED(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &buf, &o), KVC_ERROR_INVALID_ARGUMENT, "options");
  REFUSED(kvc_pool_sequence_save(s, path, &o), KVC_ERROR_INVALID_ARGUMENT, "options");
  o = (kvc_save_options)KVC_SAVE_OPTIONS_INIT;
  o.reserved = 3;
  REFUSED(kvc_cache_save_to(c, ps_buffer_write, &buf, &o), KVC_ERROR_INVALID_ARGUMENT, "reserved is 3");
  o.reserved = 0;
  o.staging_bytes = 4095;
  REFUSED(kvc_cache_save_to(c, ps_buffer_write, &buf, &o), KVC_ERROR_INVALID_ARGUMENT, "staging_bytes is 4095");
  REFUSED(kvc_encoder_decoder_cache_save(ed, path, &o), KVC_ERROR_INVALID_ARGUMENT, "staging_bytes is 4095");
  o.staging_bytes = (uint64_t)1 << 40;
  REFUSED(kvc_pool_sequence_save_to(s, ps_buffer_write, &buf, &o), KVC_ERROR_INVALID_ARGUMENT, "staging_bytes");
  CHECK_EQ_U64(buf.len, 0); /* nothing was written by any refusal */
  CHECK_EQ_I64(entries(dir), 0);
  o.staging_bytes = 4096; /* the smallest accepted (a CPU cache uses no stage) */
  CHECK_OK(kvc_cache_save(c, path, &o));
  CHECK_EQ_I64(entries(dir), 1);

  free(buf.data);
  kvc_cache_destroy(c);
  kvc_encoder_decoder_cache_destroy(ed);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* Writes that fail: no file under the path, no temporary beside it, the error names what failed. */
static void test_save_failures(void) {
  char dir[4096], path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "persist-api"));
  kvc_cache* c = small_cache(3);
  REQUIRE(c != NULL);

  snprintf(path, sizeof path, "%s/no-such-folder/cache.kvc", dir);
  REFUSED(kvc_cache_save(c, path, NULL), KVC_ERROR_IO, "cannot create a file beside");

  snprintf(path, sizeof path, "%s/a-folder", dir); /* the rename over a directory fails */
  REQUIRE(mkdir(path, 0755) == 0);
  REFUSED(kvc_cache_save(c, path, NULL), KVC_ERROR_IO, "cannot rename");
  CHECK_EQ_I64(entries(dir), 1); /* the folder only: the temporary file is gone */
  CHECK_EQ_I64(entries(path), 0);

  /* The file system refuses to grow the file past 100 bytes: write(2) fails with EFBIG. */
  snprintf(path, sizeof path, "%s/cache.kvc", dir);
  struct rlimit old, small;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  small = old;
  small.rlim_cur = 100;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  kvc_error* e = kvc_cache_save(c, path, NULL);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  REFUSED(e, KVC_ERROR_IO, "failed");
  CHECK_EQ_I64(entries(dir), 1); /* still only the folder */
  CHECK(access(path, F_OK) != 0);

  /* A callback that refuses: its first call, then a later one (the file header went through). */
  for (int left = 0; left < 3; left++) {
    refusing_sink sink = {left, 0};
    REFUSED(kvc_cache_save_to(c, refusing_write, &sink, NULL), KVC_ERROR_IO, "the write callback refused");
    CHECK_EQ_I64(sink.calls, left + 1); /* nothing is written after the refusal */
  }
  kvc_encoder_decoder_cache* ed = small_pair(4);
  if (ed) {
    refusing_sink sink = {1, 0};
    REFUSED(kvc_encoder_decoder_cache_save_to(ed, refusing_write, &sink, NULL), KVC_ERROR_IO, "refused");
    kvc_encoder_decoder_cache_destroy(ed);
  }
  kvc_cache_destroy(c);
  tt_rmtree(dir);
}

static void test_load_refusals(void) {
  char dir[4096], path[4200], empty[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "persist-api"));
  snprintf(path, sizeof path, "%s/cache.kvc", dir);
  snprintf(empty, sizeof empty, "%s/empty.kvc", dir);
  FILE* f = fopen(empty, "w");
  REQUIRE(f != NULL);
  fclose(f);
  kvc_cache* c = small_cache(5);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_save(c, path, NULL));
  ps_buffer file = {0};
  REQUIRE_OK(kvc_cache_save_to(c, ps_buffer_write, &file, NULL));

  kvc_cache* out = (kvc_cache*)&file; /* left alone by every refusal */
  kvc_encoder_decoder_cache* ed_out = (kvc_encoder_decoder_cache*)&file;
  REFUSED(kvc_cache_load(NULL, NULL, &out), KVC_ERROR_INVALID_ARGUMENT, "path is NULL");
  REFUSED(kvc_cache_load(path, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL");
  REFUSED(kvc_cache_load_buffer(NULL, 10, NULL, &out), KVC_ERROR_INVALID_ARGUMENT, "data is NULL");
  REFUSED(kvc_cache_load_buffer(file.data, file.len, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL");
  REFUSED(kvc_encoder_decoder_cache_load(path, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL");
  kvc_load_options lo = KVC_LOAD_OPTIONS_INIT;
  lo.struct_size = 8;
  REFUSED(kvc_cache_load(path, &lo, &out), KVC_ERROR_INVALID_ARGUMENT, "options");
  REFUSED(kvc_encoder_decoder_cache_load_buffer(file.data, file.len, &lo, &ed_out), KVC_ERROR_INVALID_ARGUMENT,
          "options");

  snprintf(path, sizeof path, "%s/missing.kvc", dir);
  REFUSED(kvc_cache_load(path, NULL, &out), KVC_ERROR_IO, "missing.kvc");
  REFUSED(kvc_cache_load(empty, NULL, &out), KVC_ERROR_IO, "empty.kvc");
  REFUSED(kvc_cache_load(dir, NULL, &out), KVC_ERROR_IO, dir); /* a directory, not a file */
  REFUSED(kvc_cache_restore(c, empty), KVC_ERROR_IO, "empty.kvc");

  /* A cache's file asked for as another object. */
  REFUSED(kvc_encoder_decoder_cache_load_buffer(file.data, file.len, NULL, &ed_out), KVC_ERROR_INVALID_ARGUMENT,
          "holds a cache, not an encoder-decoder cache");
  CHECK_EQ_PTR(out, (kvc_cache*)&file);
  CHECK_EQ_PTR(ed_out, (kvc_encoder_decoder_cache*)&file);

  /* Restore: NULL targets and data, and a file of another object; the target is unchanged. */
  REFUSED(kvc_cache_restore(NULL, path), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_cache_restore_buffer(NULL, file.data, file.len), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_encoder_decoder_cache_restore(NULL, path), KVC_ERROR_INVALID_ARGUMENT, "cache is NULL");
  REFUSED(kvc_encoder_decoder_cache_restore_buffer(NULL, file.data, file.len), KVC_ERROR_INVALID_ARGUMENT,
          "cache is NULL");
  REFUSED(kvc_cache_restore_buffer(c, NULL, 0), KVC_ERROR_INVALID_ARGUMENT, "data is NULL");
  kvc_encoder_decoder_cache* ed = small_pair(6);
  REQUIRE(ed != NULL);
  kvc_cache* before = NULL;
  REQUIRE_OK(kvc_cache_clone(kvc_encoder_decoder_cache_self_attention(ed), &before));
  REFUSED(kvc_encoder_decoder_cache_restore_buffer(ed, file.data, file.len), KVC_ERROR_INVALID_ARGUMENT,
          "holds a cache, not an encoder-decoder cache");
  ps_same(kvc_encoder_decoder_cache_self_attention(ed), before, "the pair after a refused restore");
  ps_buffer pair = {0};
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &pair, NULL));
  kvc_cache* c_before = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &c_before));
  REFUSED(kvc_cache_restore_buffer(c, pair.data, pair.len), KVC_ERROR_INVALID_ARGUMENT,
          "holds an encoder-decoder cache, not a cache");
  ps_same(c, c_before, "the cache after a refused restore");

  free(pair.data);
  free(file.data);
  kvc_cache_destroy(before);
  kvc_cache_destroy(c_before);
  kvc_cache_destroy(c);
  kvc_encoder_decoder_cache_destroy(ed);
  tt_rmtree(dir);
}

/* The encoder-decoder callback writer and its reader agree: a load and a restore give the saved pair back. */
static void test_encoder_decoder_through_callbacks(void) {
  kvc_encoder_decoder_cache *ed = small_pair(7), *target = small_pair(8), *loaded = NULL;
  REQUIRE(ed && target);
  ps_buffer file = {0};
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &file, NULL));
  CHECK_OK(kvc_encoder_decoder_cache_load_buffer(file.data, file.len, NULL, &loaded));
  CHECK_OK(kvc_encoder_decoder_cache_restore_buffer(target, file.data, file.len));
  if (loaded) {
    ps_same(kvc_encoder_decoder_cache_self_attention(ed), kvc_encoder_decoder_cache_self_attention(loaded), "self");
    ps_same(kvc_encoder_decoder_cache_cross_attention(ed), kvc_encoder_decoder_cache_cross_attention(loaded),
            "cross");
  }
  ps_same(kvc_encoder_decoder_cache_self_attention(ed), kvc_encoder_decoder_cache_self_attention(target),
          "restored self");
  ps_same(kvc_encoder_decoder_cache_cross_attention(ed), kvc_encoder_decoder_cache_cross_attention(target),
          "restored cross");
  free(file.data);
  kvc_encoder_decoder_cache_destroy(ed);
  kvc_encoder_decoder_cache_destroy(target);
  kvc_encoder_decoder_cache_destroy(loaded);
}

/* A pool sequence through a path: refusals first (the pool unchanged), then a round trip. */
static void test_pool_sequence_paths(void) {
  char dir[4096], path[4200], cache_path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "persist-api"));
  snprintf(path, sizeof path, "%s/sequence.kvc", dir);
  snprintf(cache_path, sizeof cache_path, "%s/cache.kvc", dir);
  kvc_pool *a = NULL, *b = NULL;
  REQUIRE_OK(pt_pool(&a, &GROUP, 1, LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(pt_pool(&b, &GROUP, 1, LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence *s = NULL, *t = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(a, NULL, &s));
  int32_t ids[9];
  for (int i = 0; i < 9; i++) ids[i] = 40 + 3 * i;
  REQUIRE_OK(pt_step(a, 1, 2, s, ids, 9));
  REQUIRE_OK(kvc_pool_sequence_save(s, path, NULL));
  kvc_cache* c = small_cache(9);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_save(c, cache_path, NULL));
  ps_buffer cache_file = {0};
  REQUIRE_OK(kvc_cache_save_to(c, ps_buffer_write, &cache_file, NULL));

  const uint64_t free_before = pt_stats(b, 0).free_blocks;
  REFUSED(kvc_pool_sequence_load(NULL, path, &t), KVC_ERROR_INVALID_ARGUMENT, "pool is NULL");
  REFUSED(kvc_pool_sequence_load_buffer(NULL, cache_file.data, cache_file.len, &t), KVC_ERROR_INVALID_ARGUMENT,
          "pool is NULL");
  REFUSED(kvc_pool_sequence_load(b, path, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL");
  REFUSED(kvc_pool_sequence_load(b, NULL, &t), KVC_ERROR_INVALID_ARGUMENT, "path is NULL");
  REFUSED(kvc_pool_sequence_load(b, cache_path, &t), KVC_ERROR_INVALID_ARGUMENT, "not a pool sequence");
  REFUSED(kvc_pool_sequence_load_buffer(b, NULL, 0, &t), KVC_ERROR_INVALID_ARGUMENT, "data is NULL");
  CHECK_EQ_PTR(t, NULL);
  CHECK_EQ_U64(pt_stats(b, 0).free_blocks, free_before);
  kvc_cache* out = NULL;
  REFUSED(kvc_cache_load(path, NULL, &out), KVC_ERROR_INVALID_ARGUMENT, "holds a pool sequence, not a cache");
  CHECK_EQ_PTR(out, NULL);

  REQUIRE_OK(kvc_pool_sequence_load(b, path, &t));
  CHECK_EQ_U64(kvc_pool_sequence_length(t), 9);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(t, l), 0);

  free(cache_file.data);
  kvc_cache_destroy(c);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
  tt_rmtree(dir);
}

/* A file restored into a cache of another model: refused naming the first difference, the target unchanged. */
static void test_restore_into_another_model(void) {
  kvc_cache *c = small_cache(10), *one = NULL, *half = NULL, *before = NULL;
  REQUIRE(c != NULL);
  ps_buffer file = {0};
  REQUIRE_OK(kvc_cache_save_to(c, ps_buffer_write, &file, NULL));
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  REQUIRE_OK(kvc_cache_create(&o, &one)); /* one layer where the file has two */
  REFUSED(kvc_cache_restore_buffer(one, file.data, file.len), KVC_ERROR_INVALID_ARGUMENT,
          "number of layers 2 (file) vs 1 (cache)");
  /* The same layers holding float16: the stored dtype differs. */
  kvc_layer_options two[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 8)};
  o = tu_custom_options(2, two);
  REQUIRE_OK(kvc_cache_create(&o, &half));
  uint16_t k[PS_B * PS_H * 2 * PS_D], v[PS_B * PS_H * 2 * PS_D];
  memset(k, 0, sizeof k), memset(v, 0, sizeof v);
  int64_t shape[4] = {PS_B, PS_H, 2, PS_D};
  kvc_tensor kt = ps_tensor((float*)k, 4, shape), vt = ps_tensor((float*)v, 4, shape);
  kt.dtype = vt.dtype = tu_data_type(KVC_DTYPE_FLOAT16);
  kvc_update_options uo = KVC_UPDATE_OPTIONS_INIT;
  REQUIRE_OK(kvc_cache_update(half, 0, &kt, &vt, &uo, NULL));
  REQUIRE_OK(kvc_cache_clone(half, &before));
  REFUSED(kvc_cache_restore_buffer(half, file.data, file.len), KVC_ERROR_INVALID_ARGUMENT,
          "layer 0: dtype float32 (file) vs float16 (cache)");
  ps_same(half, before, "the cache after a refused restore");
  free(file.data);
  kvc_cache_destroy(c);
  kvc_cache_destroy(one);
  kvc_cache_destroy(half);
  kvc_cache_destroy(before);
}

int main(void) {
  TU_RUN(test_options_init);
  TU_RUN(test_save_arguments);
  TU_RUN(test_save_failures);
  TU_RUN(test_load_refusals);
  TU_RUN(test_restore_into_another_model);
  TU_RUN(test_encoder_decoder_through_callbacks);
  TU_RUN(test_pool_sequence_paths);
  return tu_finish();
}
