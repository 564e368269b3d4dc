/*
 * test_internal_pool_oom.c: every heap allocation of every pool call that
 * allocates, refused in turn (../common/heap_sweep.h): a clean
 * OUT_OF_MEMORY with the pool, its sequences, tables and queued events as
 * they were, or the same success, and nothing leaked.
 *
 * The fixture is a hybrid pool (full attention, a sliding window, a
 * recurrent group) with a 17-token sequence `a`, committed, and an empty
 * sequence `b`.
 */
#include "../common/heap_sweep.h"
#include "pool_test.h"

static const pt_group GROUPS[3] = {
    {KVC_POOL_GROUP_FULL, 4, 32, 0}, {KVC_POOL_GROUP_SLIDING, 4, 32, 8}, {KVC_POOL_GROUP_RECURRENT, 4, 8, 0}};
static const uint32_t LAYER_GROUP[3] = {0, 1, 2};
enum { NG = 3, NL = 3, PROMPT = 17 };

typedef struct fixture {
  kvc_pool* p;
  kvc_pool_sequence *a, *b, *made; /* made: what a call under test created */
  int64_t slots[NG * 8];           /* a reservation of 6 tokens, for write */
} fixture;

static int32_t token(int64_t i) { return (int32_t)(1000 + i * 7); }

static void drain_events(kvc_pool* p, heap_state* out) {
  kvc_pool_event ev[64];
  size_t n = 0;
  do {
    if (!CHECK_OK(kvc_pool_events_pull(p, ev, 64, &n))) return;
    for (size_t i = 0; out && i < n; i++) heap_state_put(out, &ev[i], sizeof ev[i]);
  } while (n == 64);
}

/* The hybrid pool (ng = NG), or its full-attention group alone (ng = 1, every layer in it). */
static fixture* make_pool(uint32_t ng) {
  static const uint32_t ALL_FULL[NL] = {0, 0, 0};
  fixture* f = (fixture*)calloc(1, sizeof *f);
  if (!f || !CHECK_OK(pt_pool(&f->p, GROUPS, ng, ng == 1 ? ALL_FULL : LAYER_GROUP, NL, KVC_POOL_LAYOUT_NHD, 256, 1)) ||
      !CHECK_OK(kvc_pool_sequence_create(f->p, NULL, &f->a)) || !CHECK_OK(kvc_pool_sequence_create(f->p, NULL, &f->b))) {
    free(f);
    return NULL;
  }
  int32_t ids[5];
  for (int64_t at = 0; at < PROMPT; at += 5) {
    int64_t k = PROMPT - at < 5 ? PROMPT - at : 5;
    for (int64_t i = 0; i < k; i++) ids[i] = token(at + i);
    CHECK_OK(pt_step(f->p, ng, NL, f->a, ids, k));
  }
  drain_events(f->p, NULL);
  return f;
}
static fixture* make_base(void) { return make_pool(NG); }
static void* make(void) { return make_base(); }
/* Truncation: a sliding window or a recurrent group limit where a sequence may go back to. */
static void* make_full_only(void) { return make_pool(1); }

static void* make_reserved(void) {
  fixture* f = make_base();
  int32_t ids[6];
  for (int i = 0; i < 6; i++) ids[i] = token(PROMPT + i);
  if (f && !CHECK_OK(kvc_pool_reserve(f->a, ids, 6, f->slots))) return NULL;
  return f;
}

static void* make_written(void) {
  fixture* f = (fixture*)make_reserved();
  if (f && !CHECK_OK(pt_write(f->p, NL, f->slots, PROMPT, 6))) return NULL;
  return f;
}

static void destroy(void* x) {
  fixture* f = (fixture*)x;
  kvc_pool_destroy(f->p); /* and its sequences */
  free(f);
}

static void observe_sequence(kvc_pool* p, kvc_pool_sequence* s, heap_state* out) {
  if (!s) return;
  heap_state_u64(out, kvc_pool_sequence_length(s));
  heap_state_u64(out, kvc_pool_sequence_committed(s));
  for (uint32_t g = 0; g < 2; g++) {
    int32_t row[64];
    int64_t w = pt_row(p, s, g, row, 64);
    heap_state_u64(out, (uint64_t)w);
    if (w > 0) heap_state_put(out, row, (size_t)w * sizeof row[0]);
  }
  for (uint32_t l = 0; l < 2; l++) heap_state_u64(out, (uint64_t)pt_gather_mismatches(s, l));
  kvc_tensor conv, ssm;
  kvc_error* e = kvc_pool_recurrent_state(s, 2, &conv, &ssm); /* INVALID_STATE before a first reserve */
  heap_state_u64(out, (uint64_t)kvc_error_code(e));
  if (!e) heap_state_put(out, ssm.data, (size_t)(ssm.shape[0] * ssm.shape[1] * ssm.shape[2]) * sizeof(float));
  kvc_error_destroy(e);
}

/* The pool's counters and queued events, and every sequence's lengths, table rows and bytes. */
static void observe(void* x, heap_state* out) {
  fixture* f = (fixture*)x;
  for (uint32_t g = 0; g < NG; g++) {
    kvc_pool_stats s = pt_stats(f->p, g);
    heap_state_put(out, &s, sizeof s);
  }
  drain_events(f->p, out); /* the queue is empty before a call: what a call queued is what shows */
  observe_sequence(f->p, f->a, out);
  observe_sequence(f->p, f->b, out);
  observe_sequence(f->p, f->made, out);
}

static kvc_error* op_create(void* x) {
  (void)x;
  kvc_pool* p = NULL;
  kvc_error* e = pt_pool(&p, GROUPS, NG, LAYER_GROUP, NL, KVC_POOL_LAYOUT_HND, 64, 1);
  kvc_pool_destroy(p);
  return e;
}
static kvc_error* op_sequence_create(void* x) {
  fixture* f = (fixture*)x;
  return kvc_pool_sequence_create(f->p, NULL, &f->made);
}
static kvc_error* op_reserve(void* x) {
  fixture* f = (fixture*)x;
  int32_t ids[6];
  for (int i = 0; i < 6; i++) ids[i] = token(PROMPT + i);
  return kvc_pool_reserve(f->a, ids, 6, f->slots);
}
/* pt_write's values from static buffers: the test's own allocations must not be among the call's. */
static void step_inputs(kvc_tensor* k, kvc_tensor* v) {
  static float kb[NL][6 * 8], vb[NL][6 * 6];
  static int64_t kshape[3] = {6, 2, 4}, vshape[3] = {6, 2, 3};
  for (uint32_t l = 0; l < NL; l++) {
    for (int64_t t = 0; t < 6; t++)
      for (int64_t h = 0; h < 2; h++) {
        for (int64_t d = 0; d < 4; d++) kb[l][t * 8 + h * 4 + d] = pt_value(l, 0, PROMPT + t, h, d);
        for (int64_t d = 0; d < 3; d++) vb[l][t * 6 + h * 3 + d] = pt_value(l, 1, PROMPT + t, h, d);
      }
    memset(&k[l], 0, sizeof k[l]);
    memset(&v[l], 0, sizeof v[l]);
    k[l].data = kb[l], v[l].data = vb[l];
    k[l].device.device_type = v[l].device.device_type = KVC_DEVICE_CPU;
    k[l].ndim = v[l].ndim = 3;
    k[l].dtype = v[l].dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
    k[l].shape = kshape, v[l].shape = vshape;
  }
}
static kvc_error* op_write(void* x) {
  fixture* f = (fixture*)x;
  kvc_tensor k[NL], v[NL];
  step_inputs(k, v);
  return kvc_pool_write(f->p, k, v, NL, f->slots, 6);
}
static kvc_error* op_write_layer(void* x) {
  fixture* f = (fixture*)x;
  kvc_tensor k[NL], v[NL];
  step_inputs(k, v);
  return kvc_pool_write_layer(f->p, 0, &k[0], &v[0], f->slots, 6);
}
static kvc_error* op_reserve_batch(void* x) {
  fixture* f = (fixture*)x;
  int32_t ids[6];
  for (int i = 0; i < 6; i++) ids[i] = token(PROMPT + i);
  kvc_pool_sequence* both[2] = {f->a, f->b};
  const uint64_t counts[2] = {2, 4};
  size_t reserved = 0;
  return kvc_pool_reserve_batch(f->p, both, 2, ids, counts, f->slots, &reserved);
}
static kvc_error* op_commit_batch(void* x) {
  fixture* f = (fixture*)x;
  kvc_pool_sequence* both[2] = {f->a, f->b};
  return kvc_pool_commit_batch(f->p, both, 2);
}
static kvc_error* op_commit(void* x) { return kvc_pool_commit(((fixture*)x)->a); }
static kvc_error* op_match_prefix(void* x) {
  fixture* f = (fixture*)x;
  int32_t ids[PROMPT];
  for (int i = 0; i < PROMPT; i++) ids[i] = token(i);
  uint64_t matched = 0;
  return kvc_pool_match_prefix(f->b, ids, PROMPT, &matched);
}
static kvc_error* op_fork(void* x) {
  fixture* f = (fixture*)x;
  return kvc_pool_fork(f->a, &f->made);
}
static kvc_error* op_truncate(void* x) { return kvc_pool_truncate(((fixture*)x)->a, 9); }
static kvc_error* op_pin(void* x) { return kvc_pool_sequence_pin(((fixture*)x)->a); }
static kvc_error* op_clear_cache(void* x) {
  fixture* f = (fixture*)x;
  kvc_pool_sequence_destroy(f->a); /* its blocks become cached: something to clear */
  f->a = NULL;
  return kvc_pool_clear_cache(f->p);
}
static kvc_error* op_block_table_csr(void* x) {
  fixture* f = (fixture*)x;
  const kvc_pool_sequence* both[2] = {f->a, f->b};
  kvc_pool_table t;
  return kvc_pool_block_table(f->p, both, 2, 0, KVC_POOL_TABLE_CSR, &t);
}
static kvc_error* op_blocks_needed(void* x) {
  fixture* f = (fixture*)x;
  const kvc_pool_sequence* both[2] = {f->a, f->b};
  const uint64_t more[2] = {9, 30};
  uint64_t needed[2 * NG];
  return kvc_pool_blocks_needed(f->p, both, more, 2, needed);
}
static kvc_error* op_fingerprint(void* x) {
  uint8_t fp[KVC_BLOCK_HASH_SIZE];
  return kvc_pool_fingerprint(((fixture*)x)->p, fp);
}
static kvc_error* op_gather(void* x) {
  static float kb[2 * PROMPT * 4], vb[2 * PROMPT * 3];
  int64_t ks[4] = {1, 2, PROMPT, 4}, vs[4] = {1, 2, PROMPT, 3};
  kvc_tensor k, v;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  k.data = kb, v.data = vb;
  k.device.device_type = v.device.device_type = KVC_DEVICE_CPU;
  k.ndim = v.ndim = 4;
  k.dtype = v.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  k.shape = ks, v.shape = vs;
  return kvc_pool_gather(((fixture*)x)->a, 0, &k, &v);
}

static void test_every_pool_call(void) {
  const heap_case cases[] = {
      {"kvc_pool_create", make, op_create, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_create", make, op_sequence_create, observe, destroy, 0, NULL},
      {"kvc_pool_reserve", make, op_reserve, observe, destroy, 0, NULL},
      {"kvc_pool_write", make_reserved, op_write, observe, destroy, 0, NULL},
      {"kvc_pool_write_layer", make_reserved, op_write_layer, observe, destroy, 0, NULL},
      {"kvc_pool_reserve_batch", make, op_reserve_batch, observe, destroy, 0, NULL},
      {"kvc_pool_commit_batch", make_written, op_commit_batch, observe, destroy, 0, NULL},
      {"kvc_pool_commit", make_written, op_commit, observe, destroy, 0, NULL},
      {"kvc_pool_match_prefix", make, op_match_prefix, observe, destroy, 0, NULL},
      {"kvc_pool_fork", make, op_fork, observe, destroy, 0, NULL},
      {"kvc_pool_truncate", make_full_only, op_truncate, observe, destroy, 0, NULL},
      {"kvc_pool_sequence_pin", make, op_pin, observe, destroy, 0, NULL},
      {"kvc_pool_clear_cache", make, op_clear_cache, observe, destroy, 0, NULL},
      {"kvc_pool_block_table (CSR)", make, op_block_table_csr, observe, destroy, 0, NULL},
      {"kvc_pool_blocks_needed", make, op_blocks_needed, observe, destroy, 0, NULL},
      {"kvc_pool_fingerprint", make, op_fingerprint, observe, destroy, 0, NULL},
      {"kvc_pool_gather", make, op_gather, observe, destroy, 0, NULL},
  };
  heap_sweep_all(cases, sizeof cases / sizeof cases[0], 0);
}

int main(void) {
  TU_RUN(test_every_pool_call);
  return tu_finish();
}
