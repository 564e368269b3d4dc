/*
 * tests/pool/test_pool_ops.c: the semantics of every pool operation on the
 * CPU, with exact block ids, reference counts (through the stats), slot
 * mappings, tables and bytes.
 */
#include "pool_test.h"

static const pt_group FULL4[] = {{KVC_POOL_GROUP_FULL, 4, 8, 0}};
static const uint32_t ONE_LAYER[] = {0};

static float* key_storage(const kvc_pool* p, uint32_t layer) {
  kvc_kv kv;
  kvc_error* e = kvc_pool_layer_storage(p, layer, KVC_POOL_LAYOUT_NHD, &kv);
  kvc_error_destroy(e);
  return e ? NULL : (float*)kv.key.data;
}

/* A pool of one layer in group `g` (`events`: the event ring) and a sequence `a` that computed and committed the
   first `n` of `tokens` (none when n is 0). */
static kvc_error* one_layer_pool(const pt_group* g, uint32_t events, int caching, const int32_t* tokens, int64_t n,
                                 kvc_pool** p, kvc_pool_sequence** a) {
  *a = NULL;
  kvc_error* e = pt_pool(p, g, 1, ONE_LAYER, 1, KVC_POOL_LAYOUT_NHD, events, caching);
  if (!e) e = kvc_pool_sequence_create(*p, NULL, a);
  if (!e && n) e = pt_step(*p, 1, 1, *a, tokens, n);
  return e;
}

static void test_create_and_reserve(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, FULL4, 1, ONE_LAYER, 1, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_stats st = pt_stats(p, 0);
  CHECK_EQ_U64(st.num_blocks, 7);
  CHECK_EQ_U64(st.free_blocks, 7);
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  int32_t toks[7] = {1, 2, 3, 4, 5, 6, 7};
  int64_t slots[7];
  REQUIRE_OK(kvc_pool_reserve(a, toks, 6, slots));
  int64_t want[6] = {4, 5, 6, 7, 8, 9}; /* blocks 1 and 2 */
  for (int i = 0; i < 6; i++) CHECK_EQ_I64(slots[i], want[i]);
  CHECK_ROW(p, a, 0, 1, 2);
  st = pt_stats(p, 0);
  CHECK_EQ_U64(st.used_blocks, 2);
  CHECK_EQ_U64(st.free_blocks, 5);
  CHECK_EQ_U64(kvc_pool_sequence_length(a), 6);
  CHECK_EQ_U64(kvc_pool_sequence_committed(a), 0);
  REQUIRE_OK(pt_write(p, 1, slots, 0, 6));
  REQUIRE_OK(kvc_pool_commit(a));
  CHECK_EQ_U64(kvc_pool_sequence_committed(a), 6);
  REQUIRE_OK(kvc_pool_reserve(a, toks + 6, 1, slots));
  CHECK_EQ_I64(slots[0], 10);
  REQUIRE_OK(pt_write(p, 1, slots, 6, 1));
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  /* The bytes are where the slots say: token 5 of head 1, dim 2 in block 2, offset 1 (NHD). */
  float* k = key_storage(p, 0);
  REQUIRE(k != NULL);
  CHECK(k[((2 * 4 + 1) * 2 + 1) * 4 + 2] == pt_value(0, 0, 5, 1, 2));
  kvc_pool_sequence_destroy(a);
  st = pt_stats(p, 0);
  CHECK_EQ_U64(st.used_blocks, 0);
  CHECK_EQ_U64(st.cached_blocks, 1); /* block 1 was full and committed */
  CHECK_EQ_U64(st.free_blocks, 6);
  kvc_pool_destroy(p);
}

static void test_fork_copy_on_write(void) {
  int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  kvc_pool* p;
  kvc_pool_sequence *a, *c = NULL;
  REQUIRE_OK(one_layer_pool(FULL4, 0, 1, toks, 6, &p, &a));
  REQUIRE_OK(kvc_pool_fork(a, &c));
  CHECK_EQ_U64(kvc_pool_sequence_length(c), 6);
  CHECK_EQ_U64(kvc_pool_sequence_committed(c), 6);
  CHECK_ROW(p, c, 0, 1, 2);
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks, 2); /* shared, nothing copied */
  int64_t slot;
  REQUIRE_OK(kvc_pool_reserve(c, toks + 6, 1, &slot));
  CHECK_EQ_I64(slot, 3 * 4 + 2); /* block 2 was shared: copied into block 3 */
  CHECK_ROW(p, c, 0, 1, 3);
  CHECK_ROW(p, a, 0, 1, 2);
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks, 3);
  REQUIRE_OK(pt_write(p, 1, &slot, 6, 1));
  float* k = key_storage(p, 0);
  REQUIRE(k != NULL);
  CHECK(k[((2 * 4 + 2) * 2 + 0) * 4 + 0] == 0.0f); /* a's block 2 untouched by c's write */
  CHECK_EQ_I64(pt_gather_mismatches(c, 0), 0);   /* tokens 4, 5 copied, 6 written */
  REQUIRE_OK(kvc_pool_reserve(a, toks + 6, 1, &slot));
  CHECK_EQ_I64(slot, 2 * 4 + 2); /* a now holds block 2 alone and it is not cached: written in place */
  REQUIRE_OK(pt_write(p, 1, &slot, 6, 1));
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(c, 0), 0);
  kvc_pool_sequence_destroy(a);
  kvc_pool_sequence_destroy(c);
  kvc_pool_destroy(p);
}

static void check_event(const kvc_pool_event* e, uint64_t id, kvc_pool_event_kind kind, uint32_t block,
                        const uint8_t* hash, const uint8_t* parent) {
  CHECK_EQ_U64(e->id, id);
  CHECK_EQ_I64(e->kind, kind);
  CHECK_EQ_U64(e->block_id, block);
  CHECK(memcmp(e->block_hash, hash, 32) == 0);
  if (parent) CHECK(memcmp(e->parent_hash, parent, 32) == 0);
}

static void test_lru_eviction_order(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 2, 5, 0}};
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, g, 1, ONE_LAYER, 1, KVC_POOL_LAYOUT_NHD, 16, 1));
  int32_t ta[5] = {1, 2, 3, 4, 99}, tb[5] = {5, 6, 7, 8, 99}, tc[2] = {9, 10};
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  REQUIRE_OK(pt_step(p, 1, 1, a, ta, 4)); /* blocks 1, 2 */
  REQUIRE_OK(pt_step(p, 1, 1, b, tb, 4)); /* blocks 3, 4 */
  kvc_pool_sequence_destroy(a);           /* LRU: 2, 1 (a sequence's tail goes first) */
  kvc_pool_sequence_destroy(b);           /* LRU: 2, 1, 4, 3 */
  kvc_pool_stats st = pt_stats(p, 0);
  CHECK_EQ_U64(st.cached_blocks, 4);
  CHECK_EQ_U64(st.free_blocks, 0);
  uint8_t root[32], ha[2][32], hb[2][32];
  size_t n = 0;
  REQUIRE_OK(kvc_block_hash_root("model-x", 7, NULL, 0, root));
  REQUIRE_OK(kvc_block_hash_chain(root, ta, 4, 2, ha, 2, &n));
  REQUIRE_OK(kvc_block_hash_chain(root, tb, 4, 2, hb, 2, &n));
  kvc_pool_event ev[8];
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 8, &n));
  REQUIRE_EQ_I64(n, 4);
  check_event(&ev[0], 1, KVC_POOL_EVENT_BLOCK_STORED, 1, ha[0], root);
  check_event(&ev[1], 2, KVC_POOL_EVENT_BLOCK_STORED, 2, ha[1], ha[0]);
  check_event(&ev[3], 4, KVC_POOL_EVENT_BLOCK_STORED, 4, hb[1], hb[0]);
  CHECK_EQ_U64(ev[0].num_tokens, 2);
  int64_t slots[2];
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &c));
  REQUIRE_OK(kvc_pool_reserve(c, tc, 2, slots));
  CHECK_ROW(p, c, 0, 2); /* the least recently used: a's tail */
  CHECK_EQ_U64(pt_stats(p, 0).evictions, 1);
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 8, &n));
  REQUIRE_EQ_I64(n, 1);
  check_event(&ev[0], 5, KVC_POOL_EVENT_BLOCK_REMOVED, 2, ha[1], NULL);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &d));
  REQUIRE_OK(kvc_pool_match_prefix(d, ta, 5, &matched));
  CHECK_EQ_U64(matched, 2); /* [1, 2] still cached, [3, 4] evicted */
  CHECK_ROW(p, d, 0, 1);
  st = pt_stats(p, 0);
  CHECK_EQ_U64(st.prefix_queries, 2);
  CHECK_EQ_U64(st.prefix_hits, 1);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &e));
  REQUIRE_OK(kvc_pool_reserve(e, tc, 2, slots));
  CHECK_ROW(p, e, 0, 4); /* LRU now 4, 3 (d holds 1) */
  kvc_pool_sequence_destroy(d);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &d));
  REQUIRE_OK(kvc_pool_match_prefix(d, tb, 5, &matched));
  CHECK_EQ_U64(matched, 2);
  CHECK_ROW(p, d, 0, 3);
  kvc_pool_destroy(p); /* frees c, d, e too */
}

static void test_sliding_window_frees(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_SLIDING, 2, 8, 3}};
  int32_t t[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kvc_pool* p;
  kvc_pool_sequence* a;
  REQUIRE_OK(one_layer_pool(g, 0, 1, t, 5, &p, &a)); /* a prefill keeps every block: its own queries need them */
  CHECK_ROW(p, a, 0, 1, 2, 3);
  uint64_t need = 9;
  const kvc_pool_sequence* one[1] = {a};
  uint64_t more = 1;
  REQUIRE_OK(kvc_pool_blocks_needed(p, one, &more, 1, &need));
  CHECK_EQ_U64(need, 0); /* block 1 leaves the window (gain 1), position 5 is in block 3 */
  kvc_pool_stats before = pt_stats(p, 0);
  REQUIRE_OK(pt_step(p, 1, 1, a, t + 5, 1));
  CHECK_ROW(p, a, 0, 0, 2, 3); /* token 5 attends to 3, 4, 5: block 1 (tokens 0, 1) went back */
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK_EQ_U64(after.used_blocks, 2);
  CHECK_EQ_U64(after.cached_blocks, 1); /* block 1 was full and committed: cached, reusable */
  /* It gave back more than it took: needed is 0 and the available blocks grew by one. */
  CHECK_EQ_U64(after.free_blocks + after.cached_blocks, before.free_blocks + before.cached_blocks + 1);
  REQUIRE_OK(kvc_pool_blocks_needed(p, one, &more, 1, &need));
  CHECK_EQ_U64(need, 0); /* block 2 goes, block 4 comes */
  before = after;
  REQUIRE_OK(pt_step(p, 1, 1, a, t + 6, 1));
  after = pt_stats(p, 0);
  CHECK_EQ_U64(after.free_blocks + after.cached_blocks, before.free_blocks + before.cached_blocks);
  CHECK_ROW(p, a, 0, 0, 0, 3, 4);
  CHECK_ERR(kvc_pool_gather(a, 0, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), -1); /* INVALID_STATE: tokens 0-3 have no bytes */
  kvc_pool_sequence_destroy(a);
  /* A match needs only the blocks the next token attends to. */
  kvc_pool_sequence* b = NULL;
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 99};
  REQUIRE_OK(kvc_pool_match_prefix(b, prompt, 8, &matched));
  CHECK_EQ_U64(matched, 6);
  CHECK_ROW(p, b, 0, 0, 0, 3); /* token 6 attends to 4, 5, 6: block 3 only */
  kvc_pool_destroy(p);
}

static void test_chunked_frees(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_CHUNKED, 2, 8, 4}};
  int32_t t[6] = {1, 2, 3, 4, 5, 6};
  kvc_pool* p;
  kvc_pool_sequence* a;
  REQUIRE_OK(one_layer_pool(g, 0, 1, t, 5, &p, &a));
  CHECK_ROW(p, a, 0, 1, 2, 3);
  int64_t slot;
  REQUIRE_OK(kvc_pool_reserve(a, t + 5, 1, &slot));
  CHECK_ROW(p, a, 0, 0, 0, 3); /* token 5 is in chunk [4, 8): blocks of tokens 0-3 go back */
  CHECK_EQ_I64(slot, 3 * 2 + 1);
  kvc_pool_destroy(p);
}

static void test_truncate(void) {
  int32_t t[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  REQUIRE_OK(one_layer_pool(FULL4, 0, 1, t, 10, &p, &a));
  CHECK_ROW(p, a, 0, 1, 2, 3);
  CHECK_ERR(kvc_pool_truncate(a, 11), KVC_ERROR_OUT_OF_RANGE);
  REQUIRE_OK(kvc_pool_truncate(a, 6));
  CHECK_EQ_U64(kvc_pool_sequence_length(a), 6);
  CHECK_EQ_U64(kvc_pool_sequence_committed(a), 6);
  CHECK_ROW(p, a, 0, 1, 2);
  CHECK_EQ_U64(pt_stats(p, 0).free_blocks, 5); /* block 3 (partial, uncached) is free again */
  int64_t slot;
  int32_t x = 77;
  REQUIRE_OK(kvc_pool_reserve(a, &x, 1, &slot));
  CHECK_ROW(p, a, 0, 1, 3); /* block 2 is cached: copied before the write */
  CHECK_EQ_I64(slot, 3 * 4 + 2);
  REQUIRE_OK(pt_write(p, 1, &slot, 6, 1));
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  REQUIRE_OK(kvc_pool_match_prefix(b, t, 9, &matched));
  CHECK_EQ_U64(matched, 8); /* block 2 kept its contents */
  CHECK_ROW(p, b, 0, 1, 2);
  CHECK_EQ_I64(pt_gather_mismatches(b, 0), 0);
  kvc_pool_destroy(p);
}

static void test_pin_and_out_of_blocks(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 2, 4, 0}};
  int32_t t[4] = {1, 2, 3, 4};
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  REQUIRE_OK(one_layer_pool(g, 0, 1, t, 4, &p, &a));
  REQUIRE_OK(kvc_pool_sequence_pin(a));
  REQUIRE_OK(kvc_pool_sequence_pin(a)); /* twice is once */
  kvc_pool_sequence_destroy(a);
  kvc_pool_stats st = pt_stats(p, 0);
  CHECK_EQ_U64(st.pinned_blocks, 2);
  CHECK_EQ_U64(st.cached_blocks, 0);
  CHECK_EQ_U64(st.free_blocks, 1);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int64_t slots[2];
  REQUIRE_OK(kvc_pool_reserve(b, t, 2, slots));
  CHECK_ROW(p, b, 0, 3);
  st = pt_stats(p, 0);
  CHECK_ERR(kvc_pool_reserve(b, t, 2, slots), KVC_ERROR_OUT_OF_MEMORY);
  kvc_pool_stats st2 = pt_stats(p, 0);
  CHECK(memcmp(&st, &st2, sizeof st) == 0);
  CHECK_EQ_U64(kvc_pool_sequence_length(b), 2);
  CHECK_ROW(p, b, 0, 3);
  REQUIRE_OK(kvc_pool_unpin_all(p));
  CHECK_EQ_U64(pt_stats(p, 0).cached_blocks, 2);
  REQUIRE_OK(kvc_pool_reserve(b, t, 2, slots));
  CHECK_ROW(p, b, 0, 3, 1); /* unpinned in block order: 1 is the least recent */
  REQUIRE_OK(kvc_pool_clear_cache(p));
  st = pt_stats(p, 0);
  CHECK_EQ_U64(st.cached_blocks, 0);
  CHECK_EQ_U64(st.free_blocks, 1);
  kvc_pool_destroy(p);
}

static void test_events_ring_and_salt(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 2, 16, 0}};
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, g, 1, ONE_LAYER, 1, KVC_POOL_LAYOUT_NHD, 4, 1));
  kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  so.salt = "tenant-1";
  so.salt_len = 8;
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, &so, &a));
  int32_t t[11] = {5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 11};
  REQUIRE_OK(pt_step(p, 1, 1, a, t, 10)); /* 5 blocks stored: the ring of 4 drops the first */
  uint8_t root[32], h[5][32];
  size_t n = 0;
  REQUIRE_OK(kvc_block_hash_root("model-x", 7, "tenant-1", 8, root));
  REQUIRE_OK(kvc_block_hash_chain(root, t, 10, 2, h, 5, &n));
  kvc_pool_event ev[4];
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 2, &n));
  REQUIRE_EQ_I64(n, 2);
  check_event(&ev[0], 2, KVC_POOL_EVENT_BLOCK_STORED, 2, h[1], h[0]);
  check_event(&ev[1], 3, KVC_POOL_EVENT_BLOCK_STORED, 3, h[2], h[1]);
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 4, &n));
  REQUIRE_EQ_I64(n, 2);
  check_event(&ev[1], 5, KVC_POOL_EVENT_BLOCK_STORED, 5, h[4], h[3]);
  uint64_t matched = 9;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b)); /* no salt: another chain */
  REQUIRE_OK(kvc_pool_match_prefix(b, t, 11, &matched));
  CHECK_EQ_U64(matched, 0);
  REQUIRE_OK(kvc_pool_sequence_create(p, &so, &c));
  REQUIRE_OK(kvc_pool_match_prefix(c, t, 11, &matched));
  CHECK_EQ_U64(matched, 10);
  CHECK_ROW(p, c, 0, 1, 2, 3, 4, 5);
  CHECK_EQ_I64(pt_gather_mismatches(c, 0), 0);
  REQUIRE_OK(kvc_pool_match_prefix(b, t, 1, &matched)); /* the last token is always computed */
  CHECK_EQ_U64(matched, 0);
  kvc_pool_sequence_destroy(a);
  kvc_pool_sequence_destroy(c);
  REQUIRE_OK(kvc_pool_clear_cache(p));
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 4, &n));
  REQUIRE_EQ_I64(n, 1);
  CHECK_EQ_U64(ev[0].id, 6);
  CHECK_EQ_I64(ev[0].kind, KVC_POOL_EVENT_ALL_CLEARED);
  kvc_pool_destroy(p);
}

static void test_tables(void) {
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  REQUIRE_OK(one_layer_pool(FULL4, 0, 1, t, 0, &p, &a));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int64_t slots[9];
  REQUIRE_OK(kvc_pool_reserve(a, t, 9, slots)); /* 1, 2, 3 */
  REQUIRE_OK(kvc_pool_reserve(b, t, 4, slots)); /* 4 */
  const kvc_pool_sequence* both[2] = {a, b};
  kvc_pool_table tb;
  REQUIRE_OK(kvc_pool_block_table(p, both, 2, 0, KVC_POOL_TABLE_PADDED, &tb));
  CHECK_EQ_I64(tb.table.ndim, 2);
  CHECK_EQ_I64(tb.table.shape[0], 2);
  CHECK_EQ_I64(tb.table.shape[1], 3);
  CHECK(tb.indptr.data == NULL);
  int32_t padded[6] = {1, 2, 3, 4, 0, 0};
  for (int i = 0; i < 6; i++) CHECK_EQ_I64(((int32_t*)tb.table.data)[i], padded[i]);
  REQUIRE_OK(kvc_pool_block_table(p, both, 2, 0, KVC_POOL_TABLE_CSR, &tb));
  CHECK_EQ_I64(tb.indptr.shape[0], 3);
  CHECK_EQ_I64(tb.table.shape[0], 4);
  CHECK_EQ_I64(tb.last_page_len.shape[0], 2);
  int32_t indptr[3] = {0, 3, 4}, indices[4] = {1, 2, 3, 4}, last[2] = {1, 4};
  for (int i = 0; i < 3; i++) CHECK_EQ_I64(((int32_t*)tb.indptr.data)[i], indptr[i]);
  for (int i = 0; i < 4; i++) CHECK_EQ_I64(((int32_t*)tb.table.data)[i], indices[i]);
  for (int i = 0; i < 2; i++) CHECK_EQ_I64(((int32_t*)tb.last_page_len.data)[i], last[i]);
  CHECK(tb.table.dtype.code == KVC_TYPE_CODE_INT && tb.table.dtype.bits == 32);
  kvc_pool_destroy(p);
}

static void test_blocks_needed_shared(void) {
  int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  REQUIRE_OK(one_layer_pool(FULL4, 0, 1, t, 5, &p, &a)); /* block 2 partial */
  REQUIRE_OK(kvc_pool_fork(a, &b));
  const kvc_pool_sequence* both[2] = {a, b};
  uint64_t more[2] = {1, 4}, need = 0;
  REQUIRE_OK(kvc_pool_blocks_needed(p, both, more, 2, &need));
  CHECK_EQ_U64(need, 2); /* a copies the shared block; then b holds it alone and writes in place, then grows */
  kvc_pool_stats before = pt_stats(p, 0);
  int64_t slots[4];
  REQUIRE_OK(kvc_pool_reserve(a, t, 1, slots));
  REQUIRE_OK(kvc_pool_reserve(b, t, 4, slots));
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK_EQ_U64(before.free_blocks + before.cached_blocks - after.free_blocks - after.cached_blocks, need);
  CHECK_ROW(p, a, 0, 1, 3);
  CHECK_ROW(p, b, 0, 1, 2, 4);
  kvc_pool_destroy(p);
}

/*
 * A sliding group where y gives a block back and x needs one: x first needs 1 block (its reserve runs before
 * y's release), y first needs none. The admission check must see the order, or a batch it accepts fails in
 * reserve (found by the pool demo).
 */
static void test_blocks_needed_order(void) {
  pt_single po;
  pt_single_fill(&po, KVC_POOL_GROUP_SLIDING, 4, 5, 1, 1); /* 4 usable blocks */
  po.g.window = 4;
  kvc_pool* p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t slots[9];
  kvc_pool_sequence *x = NULL, *y = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &x));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &y));
  REQUIRE_OK(kvc_pool_reserve(x, t, 4, slots)); /* one full block */
  REQUIRE_OK(kvc_pool_commit(x));
  REQUIRE_OK(kvc_pool_reserve(y, t, 9, slots)); /* three blocks, the first out of the window after the commit */
  REQUIRE_OK(kvc_pool_commit(y));
  kvc_pool_stats s = pt_stats(p, 0);
  CHECK_EQ_U64(s.free_blocks + s.cached_blocks, 0);
  const kvc_pool_sequence* xy[2] = {x, y};
  const kvc_pool_sequence* yx[2] = {y, x};
  uint64_t one[2] = {1, 1}, need = 99;
  REQUIRE_OK(kvc_pool_blocks_needed(p, xy, one, 2, &need));
  CHECK_EQ_U64(need, 1);
  REQUIRE_OK(kvc_pool_blocks_needed(p, yx, one, 2, &need));
  CHECK_EQ_U64(need, 0);
  kvc_error* e = kvc_pool_reserve(x, t, 1, slots); /* what admission of [x, y] refuses */
  CHECK(kvc_error_code(e) == KVC_ERROR_OUT_OF_MEMORY);
  kvc_error_destroy(e);
  REQUIRE_OK(kvc_pool_reserve(y, t, 1, slots)); /* [y, x] fits */
  REQUIRE_OK(kvc_pool_reserve(x, t, 1, slots));
  kvc_pool_destroy(p);
}

static void test_hnd_layout_and_views(void) {
  static const uint32_t two[] = {0, 0};
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, FULL4, 1, two, 2, KVC_POOL_LAYOUT_HND, 0, 1));
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  int32_t t[7] = {1, 2, 3, 4, 5, 6, 7};
  REQUIRE_OK(pt_step(p, 1, 2, a, t, 7));
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(a, 1), 0);
  kvc_kv nhd, hnd;
  REQUIRE_OK(kvc_pool_layer_storage(p, 1, KVC_POOL_LAYOUT_NHD, &nhd));
  REQUIRE_OK(kvc_pool_layer_storage(p, 1, KVC_POOL_LAYOUT_HND, &hnd));
  CHECK(nhd.value.data == hnd.value.data);
  CHECK_EQ_I64(hnd.value.shape[1], 2);
  CHECK_EQ_I64(hnd.value.shape[2], 4);
  CHECK_EQ_I64(hnd.value.strides[3], 1);
  CHECK_EQ_I64(hnd.value.strides[2], 3); /* compact HND: [block, head, token, dim] */
  const float* v = (const float*)hnd.value.data;
  /* Token 5 (block 2, offset 1), head 1, dim 2 read through both views. */
  const int64_t* sn = nhd.value.strides;
  const int64_t* sh = hnd.value.strides;
  CHECK(v[2 * sn[0] + 1 * sn[1] + 1 * sn[2] + 2] == pt_value(1, 1, 5, 1, 2));
  CHECK(v[2 * sh[0] + 1 * sh[1] + 1 * sh[2] + 2] == pt_value(1, 1, 5, 1, 2));
  kvc_pool_destroy(p);
}

/* Fills the live state of recurrent layer 1 with `base + i`. Returns 0 on failure. */
static int set_state(kvc_pool_sequence* s, float base) {
  kvc_tensor conv, ssm;
  kvc_error* e = kvc_pool_recurrent_state(s, 1, &conv, &ssm);
  if (e) {
    kvc_error_destroy(e);
    return 0;
  }
  for (int i = 0; i < 6; i++) ((float*)conv.data)[i] = base + (float)i;
  for (int i = 0; i < 16; i++) ((float*)ssm.data)[i] = base + 100 + (float)i;
  return 1;
}

static int state_is(kvc_pool_sequence* s, float base) {
  kvc_tensor conv, ssm;
  kvc_error* e = kvc_pool_recurrent_state(s, 1, &conv, &ssm);
  if (e) {
    kvc_error_destroy(e);
    return 0;
  }
  int ok = conv.ndim == 3 && conv.shape[1] == 3 && conv.shape[2] == 2 && ssm.ndim == 4 && ssm.shape[3] == 2;
  for (int i = 0; i < 6; i++) ok &= ((float*)conv.data)[i] == base + (float)i;
  for (int i = 0; i < 16; i++) ok &= ((float*)ssm.data)[i] == base + 100 + (float)i;
  return ok;
}

static void test_recurrent_checkpoints(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 2, 16, 0}, {KVC_POOL_GROUP_RECURRENT, 2, 6, 0}};
  static const uint32_t layers[] = {0, 1};
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, g, 2, layers, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  CHECK_ERR(kvc_pool_recurrent_state(a, 1, &(kvc_tensor){0}, &(kvc_tensor){0}), KVC_ERROR_INVALID_STATE);
  int32_t t[7] = {1, 2, 3, 4, 5, 6, 7};
  int64_t slots[8];
  REQUIRE_OK(kvc_pool_reserve(a, t, 4, slots));
  CHECK_EQ_I64(slots[4], -1); /* the recurrent group's entries */
  CHECK_EQ_I64(slots[7], -1);
  kvc_tensor conv, ssm;
  REQUIRE_OK(kvc_pool_recurrent_state(a, 1, &conv, &ssm));
  int zero = 1; /* a new live state is zero */
  for (int i = 0; i < 6; i++) zero &= ((float*)conv.data)[i] == 0.0f;
  for (int i = 0; i < 16; i++) zero &= ((float*)ssm.data)[i] == 0.0f;
  CHECK(zero);
  CHECK(set_state(a, 1000));
  REQUIRE_OK(pt_write(p, 2, slots, 0, 4));
  REQUIRE_OK(kvc_pool_commit(a)); /* committed 4: a checkpoint of the state at 4 */
  kvc_pool_stats rs = pt_stats(p, 1);
  CHECK_EQ_U64(rs.used_blocks, 1);   /* a's live state */
  CHECK_EQ_U64(rs.cached_blocks, 1); /* the checkpoint */
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int32_t prompt[5] = {1, 2, 3, 4, 50};
  REQUIRE_OK(kvc_pool_match_prefix(b, prompt, 5, &matched));
  CHECK_EQ_U64(matched, 4);
  CHECK(state_is(b, 1000));
  CHECK_ROW(p, b, 0, 1, 2);
  /* The full group holds [1, 2] but the recurrent group has no checkpoint at 2: no match at all. */
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &c));
  int32_t other[5] = {1, 2, 9, 9, 9};
  REQUIRE_OK(kvc_pool_match_prefix(c, other, 5, &matched));
  CHECK_EQ_U64(matched, 0);
  CHECK_EQ_U64(pt_stats(p, 0).prefix_hits, 2);
  /* Rollback restores the checkpoint; without one it is refused and nothing changes. */
  CHECK(set_state(a, 2000));
  REQUIRE_OK(pt_step(p, 2, 2, a, t + 4, 2)); /* committed 6: checkpoint at 6 */
  CHECK(set_state(a, 3000));
  CHECK_ERR(kvc_pool_truncate(a, 5), KVC_ERROR_INVALID_STATE);
  CHECK_EQ_U64(kvc_pool_sequence_length(a), 6);
  CHECK(state_is(a, 3000));
  REQUIRE_OK(kvc_pool_truncate(a, 4));
  CHECK(state_is(a, 1000));
  CHECK_EQ_U64(kvc_pool_sequence_length(a), 4);
  /* A fork copies the live state into a slot of its own. */
  kvc_pool_sequence* f = NULL;
  REQUIRE_OK(kvc_pool_fork(b, &f));
  CHECK(set_state(f, 4000));
  CHECK(state_is(b, 1000) && state_is(f, 4000));
  kvc_pool_destroy(p);
}

static void test_prefix_caching_off(void) {
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  REQUIRE_OK(one_layer_pool(FULL4, 4, 0, t, 8, &p, &a));
  kvc_pool_sequence_destroy(a);
  kvc_pool_stats st = pt_stats(p, 0);
  CHECK_EQ_U64(st.cached_blocks, 0);
  CHECK_EQ_U64(st.free_blocks, 7);
  uint64_t matched = 7;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  REQUIRE_OK(kvc_pool_match_prefix(b, t, 9, &matched));
  CHECK_EQ_U64(matched, 0);
  size_t n = 9;
  kvc_pool_event ev[4];
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 4, &n));
  CHECK_EQ_U64(n, 0);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_create_and_reserve);
  TU_RUN(test_fork_copy_on_write);
  TU_RUN(test_lru_eviction_order);
  TU_RUN(test_sliding_window_frees);
  TU_RUN(test_chunked_frees);
  TU_RUN(test_truncate);
  TU_RUN(test_pin_and_out_of_blocks);
  TU_RUN(test_events_ring_and_salt);
  TU_RUN(test_tables);
  TU_RUN(test_blocks_needed_shared);
  TU_RUN(test_blocks_needed_order);
  TU_RUN(test_hnd_layout_and_views);
  TU_RUN(test_recurrent_checkpoints);
  TU_RUN(test_prefix_caching_off);
  return tu_finish();
}
