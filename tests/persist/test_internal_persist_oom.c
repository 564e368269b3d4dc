/*
 * test_internal_persist_oom.c: every heap allocation of every save, load
 * and restore refused in turn (../common/heap_sweep.h): a clean
 * OUT_OF_MEMORY with the caches, the target and the directory as they
 * were (no partial or temporary file left), or the same success; nothing
 * leaked. The state observed is the objects' own file bytes (save_to), which
 * hold everything a cache or a pool sequence is.
 *
 * The cache mixes five kinds (dynamic, sink, linear with attention,
 * quantized, static indexed); the encoder-decoder cache has two dynamic
 * halves; the pool sequence lives in a hybrid pool.
 */
#include <dirent.h>
#include <sys/stat.h>

#include "../common/heap_sweep.h"
#include "../pool/pool_test.h"
#include "persist_test.h"

static kvc_cache* mixed_cache(uint64_t seed) {
  kvc_cache* c = NULL;
  if (!CHECK_OK(ps_mixed_cache(KVC_LAYER_LINEAR_DYNAMIC, &c))) return NULL;
  ps_step(c, 5, 4, 0, seed);
  ps_step(c, 5, 1, 4, seed + 1);
  return c;
}

static const pt_group GROUPS[3] = {
    {KVC_POOL_GROUP_FULL, 4, 32, 0}, {KVC_POOL_GROUP_SLIDING, 4, 32, 8}, {KVC_POOL_GROUP_RECURRENT, 4, 8, 0}};
static const uint32_t LAYER_GROUP[3] = {0, 1, 2};

typedef struct fixture {
  kvc_cache *c, *target;                 /* the cache saved, and one a restore replaces */
  kvc_encoder_decoder_cache *ed, *ed_target;
  kvc_pool *pool, *other;                /* a sequence of `pool`, loaded into `other` */
  kvc_pool_sequence* seq;
  ps_buffer cache_file, ed_file, seq_file;
  char path[256], ed_path[256], seq_path[256], out_path[256];
} fixture;

static kvc_encoder_decoder_cache* encdec(uint64_t seed) {
  kvc_cache *self = NULL, *cross = NULL;
  kvc_encoder_decoder_cache* ed = NULL;
  if (!CHECK_OK(kvc_cache_create(NULL, &self)) || !CHECK_OK(kvc_cache_create(NULL, &cross)) ||
      !CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed)))
    return NULL;
  ps_step(kvc_encoder_decoder_cache_self_attention(ed), 2, 3, 0, seed);
  ps_step(kvc_encoder_decoder_cache_cross_attention(ed), 2, 5, 0, seed + 1);
  return ed;
}

static void* make(void) {
  fixture* f = (fixture*)calloc(1, sizeof *f);
  if (!f) return NULL;
  f->c = mixed_cache(1);
  f->target = mixed_cache(50);
  f->ed = encdec(3);
  f->ed_target = encdec(70);
  if (!f->c || !f->target || !f->ed || !f->ed_target) return NULL;
  if (!CHECK_OK(pt_pool(&f->pool, GROUPS, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1)) ||
      !CHECK_OK(pt_pool(&f->other, GROUPS, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1)) ||
      !CHECK_OK(kvc_pool_sequence_create(f->pool, NULL, &f->seq)))
    return NULL;
  int32_t ids[11];
  for (int i = 0; i < 11; i++) ids[i] = 1000 + 7 * i;
  CHECK_OK(pt_step(f->pool, 3, 3, f->seq, ids, 11));
  ps_path(f->path, sizeof f->path, "oom-cache");
  ps_path(f->ed_path, sizeof f->ed_path, "oom-encdec");
  ps_path(f->seq_path, sizeof f->seq_path, "oom-seq");
  ps_path(f->out_path, sizeof f->out_path, "oom-out");
  unlink(f->out_path);
  if (!CHECK_OK(kvc_cache_save_to(f->c, ps_buffer_write, &f->cache_file, NULL)) ||
      !CHECK_OK(kvc_encoder_decoder_cache_save_to(f->ed, ps_buffer_write, &f->ed_file, NULL)) ||
      !CHECK_OK(kvc_pool_sequence_save_to(f->seq, ps_buffer_write, &f->seq_file, NULL)) ||
      !CHECK_OK(kvc_cache_save(f->c, f->path, NULL)) || !CHECK_OK(kvc_encoder_decoder_cache_save(f->ed, f->ed_path, NULL)) ||
      !CHECK_OK(kvc_pool_sequence_save(f->seq, f->seq_path, NULL)))
    return NULL;
  return f;
}

static void destroy(void* x) {
  fixture* f = (fixture*)x;
  kvc_cache_destroy(f->c);
  kvc_cache_destroy(f->target);
  kvc_encoder_decoder_cache_destroy(f->ed);
  kvc_encoder_decoder_cache_destroy(f->ed_target);
  kvc_pool_destroy(f->pool);
  kvc_pool_destroy(f->other);
  free(f->cache_file.data);
  free(f->ed_file.data);
  free(f->seq_file.data);
  unlink(f->path);
  unlink(f->ed_path);
  unlink(f->seq_path);
  unlink(f->out_path);
  free(f);
}

static int put_bytes(void* user, const void* data, size_t bytes) {
  heap_state_put((heap_state*)user, data, bytes);
  return 0;
}

/* The files beside out_path (a save's temporary ones included) and their sizes. */
static void observe_directory(const fixture* f, heap_state* out) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s", f->out_path);
  char* slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  const char* stem = slash + 1;
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, stem, strlen(stem)) != 0) continue;
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    heap_state_put(out, e->d_name, strlen(e->d_name) + 1);
    if (stat(p, &st) == 0) heap_state_u64(out, (uint64_t)st.st_size);
  }
  closedir(d);
}

/* Everything a call may touch: the caches' and sequences' bytes, the other pool's counters, the directory. */
static void observe(void* x, heap_state* out) {
  fixture* f = (fixture*)x;
  CHECK_OK(kvc_cache_save_to(f->c, put_bytes, out, NULL));
  CHECK_OK(kvc_cache_save_to(f->target, put_bytes, out, NULL));
  CHECK_OK(kvc_encoder_decoder_cache_save_to(f->ed, put_bytes, out, NULL));
  CHECK_OK(kvc_encoder_decoder_cache_save_to(f->ed_target, put_bytes, out, NULL));
  CHECK_OK(kvc_pool_sequence_save_to(f->seq, put_bytes, out, NULL));
  for (uint32_t g = 0; g < 3; g++) {
    kvc_pool_stats s = pt_stats(f->other, g);
    heap_state_put(out, &s, sizeof s);
  }
  observe_directory(f, out);
}

/* A sink that allocates nothing: the call's allocations are the library's own. */
static int discard(void* user, const void* data, size_t bytes) {
  (void)user, (void)data, (void)bytes;
  return 0;
}

#define F ((fixture*)x)
static kvc_error* op_save_to(void* x) { return kvc_cache_save_to(F->c, discard, NULL, NULL); }
static kvc_error* op_save(void* x) { return kvc_cache_save(F->c, F->out_path, NULL); }
static kvc_error* op_load(void* x) {
  kvc_cache* out = NULL;
  kvc_error* e = kvc_cache_load(F->path, NULL, &out);
  kvc_cache_destroy(out);
  return e;
}
static kvc_error* op_load_buffer(void* x) {
  kvc_cache* out = NULL;
  kvc_error* e = kvc_cache_load_buffer(F->cache_file.data, F->cache_file.len, NULL, &out);
  kvc_cache_destroy(out);
  return e;
}
static kvc_error* op_restore(void* x) { return kvc_cache_restore(F->target, F->path); }
static kvc_error* op_restore_buffer(void* x) {
  return kvc_cache_restore_buffer(F->target, F->cache_file.data, F->cache_file.len);
}
static kvc_error* op_encdec_save(void* x) { return kvc_encoder_decoder_cache_save(F->ed, F->out_path, NULL); }
static kvc_error* op_encdec_load(void* x) {
  kvc_encoder_decoder_cache* out = NULL;
  kvc_error* e = kvc_encoder_decoder_cache_load(F->ed_path, NULL, &out);
  kvc_encoder_decoder_cache_destroy(out);
  return e;
}
static kvc_error* op_encdec_restore(void* x) { return kvc_encoder_decoder_cache_restore(F->ed_target, F->ed_path); }
static kvc_error* op_encdec_restore_buffer(void* x) {
  return kvc_encoder_decoder_cache_restore_buffer(F->ed_target, F->ed_file.data, F->ed_file.len);
}
static kvc_error* op_sequence_save(void* x) { return kvc_pool_sequence_save(F->seq, F->out_path, NULL); }
static kvc_error* op_sequence_save_to(void* x) { return kvc_pool_sequence_save_to(F->seq, discard, NULL, NULL); }
static kvc_error* op_sequence_load(void* x) {
  kvc_pool_sequence* out = NULL;
  kvc_error* e = kvc_pool_sequence_load(F->other, F->seq_path, &out);
  kvc_pool_sequence_destroy(out); /* its blocks stay cached: the other pool's counters show the load */
  return e;
}
static kvc_error* op_sequence_load_buffer(void* x) {
  kvc_pool_sequence* out = NULL;
  kvc_error* e = kvc_pool_sequence_load_buffer(F->other, F->seq_file.data, F->seq_file.len, &out);
  kvc_pool_sequence_destroy(out);
  return e;
}
#undef F

static void test_every_save_load_and_restore(void) {
  const heap_case cases[] = {
      {"kvc_cache_save_to", make, op_save_to, observe, destroy, 0, NULL},
      {"kvc_cache_save", make, op_save, observe, destroy, 0, NULL},
      {"kvc_cache_load", make, op_load, observe, destroy, 0, NULL},
      {"kvc_cache_load_buffer", make, op_load_buffer, observe, destroy, 0, NULL},
      {"kvc_cache_restore", make, op_restore, observe, destroy, 0, NULL},
      {"kvc_cache_restore_buffer", make, op_restore_buffer, observe, destroy, 0, NULL},
      {"kvc_encoder_decoder_cache_save", make, op_encdec_save, observe, destroy, 0, NULL},
      {"kvc_encoder_decoder_cache_load", make, op_encdec_load, observe, destroy, 0, NULL},
      {"kvc_encoder_decoder_cache_restore", make, op_encdec_restore, observe, destroy, 0, NULL},
      {"kvc_encoder_decoder_cache_restore_buffer", make, op_encdec_restore_buffer, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_save", make, op_sequence_save, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_save_to", make, op_sequence_save_to, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_load", make, op_sequence_load, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_load_buffer", make, op_sequence_load_buffer, observe, destroy, 0, NULL},
  };
  heap_sweep_all(cases, sizeof cases / sizeof cases[0], 1);
}

int main(void) {
  TU_RUN(test_every_save_load_and_restore);
  return tu_finish();
}
