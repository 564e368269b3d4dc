/*
 * tests/pool/test_pool_shared_budget.c: a pool whose groups share one block
 * budget (kvc_pool_options.shared_budget_bytes): the options' checks, the
 * pages and ids, memory going to the group that needs it, eviction across
 * groups, exact admission, and every operation (write, write_layer, gather,
 * views, fork, truncate, match, pin, clear, recurrent checkpoints, files,
 * tiers) on page-strided storage.
 */
#include <unistd.h>

#include "../common/arena_allocator.h"
#include "pool_test.h"

/* pt_pool's layers: attention K 2x4 and V 2x3 floats per token, recurrent conv 3x2 and SSM 2x4x2 per slot. */
#define ATT_PAGE(bs) ((uint64_t)(bs) * 2 * 4 * 4 + (uint64_t)(bs) * 2 * 3 * 4) /* 16-byte multiples for bs 2, 4 */
#define REC_PAGE 96u                                                             /* 24 -> 32, and 64 */

static const pt_group FULL_SLIDING[] = {{KVC_POOL_GROUP_FULL, 4, 0, 0}, {KVC_POOL_GROUP_SLIDING, 4, 0, 4}};
static const uint32_t TWO_LAYERS[] = {0, 1};

static kvc_error* shared_pool(kvc_pool** out, const pt_group* g, uint32_t ng, const uint32_t* lg, uint32_t nl,
                              kvc_pool_layout layout, uint32_t events, uint64_t bytes) {
  pt_options po;
  pt_options_fill(&po, g, ng, lg, nl, layout, events, 1);
  po.o.shared_budget_bytes = bytes;
  return kvc_pool_create(&po.o, out);
}

static int32_t toks[64];

static void test_options_refused(void) {
  pt_options po;
  pt_options_fill(&po, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1);
  kvc_pool* p = (kvc_pool*)&po; /* a failed create leaves *out as it was */
  po.o.shared_budget_bytes = 9 * ATT_PAGE(4);
  po.g[1].num_blocks = 8;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "groups[1].num_blocks is 8");
  po.g[1].num_blocks = 0;
  po.o.shared_budget_bytes = 2 * ATT_PAGE(4) - 1;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "options.shared_budget_bytes is 447, 1 pages "
                "of 224 bytes");
  po.o.shared_budget_bytes = 0; /* per-group budgets: then num_blocks must be set */
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "groups[0].num_blocks is 0");
  po.o.shared_budget_bytes = 9 * ATT_PAGE(4);
  po.o.struct_size = 92;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "options.struct_size is 92");
  CHECK(p == (kvc_pool*)&po);
  /* 0.7's first size (88, before shared_budget_bytes) is read without a byte past it (ASan watches the copy). */
  po.o.struct_size = 88;
  po.g[0].num_blocks = po.g[1].num_blocks = 4;
  void* old = malloc(88);
  memcpy(old, &po.o, 88);
  p = NULL;
  REQUIRE_OK(kvc_pool_create((const kvc_pool_options*)old, &p));
  CHECK_EQ_U64(pt_stats(p, 1).num_blocks, 3);
  kvc_pool_destroy(p);
  uint8_t fp[KVC_BLOCK_HASH_SIZE];
  REQUIRE_OK(kvc_pool_options_fingerprint((const kvc_pool_options*)old, fp));
  free(old);
}

static void test_memory_follows_load(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 16, 9 * ATT_PAGE(4) + 100));
  for (uint32_t g = 0; g < 2; g++) {
    kvc_pool_stats st = pt_stats(p, g);
    CHECK_EQ_U64(st.num_blocks, 8); /* pool-wide: 9 pages, the null one included */
    CHECK_EQ_U64(st.free_blocks, 8);
  }
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  int64_t slots[2 * 64];
  /* 20 tokens: 5 blocks in each group (a prefill keeps its window's blocks until committed) > 8. */
  CHECK_REFUSED(kvc_pool_reserve(a, toks, 20, slots), KVC_ERROR_OUT_OF_MEMORY, "shared budget");
  CHECK_EQ_U64(pt_stats(p, 0).free_blocks, 8);
  CHECK_EQ_U64(kvc_pool_sequence_length(a), 0);
  uint64_t need[2];
  uint64_t n16 = 16;
  REQUIRE_OK(kvc_pool_blocks_needed(p, (const kvc_pool_sequence* const*)&a, &n16, 1, need));
  CHECK_EQ_U64(need[0], 8); /* the whole plan on one budget, in every entry */
  CHECK_EQ_U64(need[1], 8);
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 16));
  CHECK_ROW(p, a, 0, 1, 2, 3, 4);
  CHECK_ROW(p, a, 1, 5, 6, 7, 8); /* ids are pool-wide */
  kvc_pool_stats s0 = pt_stats(p, 0), s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.used_blocks, 4);
  CHECK_EQ_U64(s1.used_blocks, 4);
  CHECK_EQ_U64(s0.free_blocks, 0);
  /* The next token: the sliding group gives back blocks 5..7 (left the window) before the full group takes. */
  uint64_t one = 1;
  REQUIRE_OK(kvc_pool_blocks_needed(p, (const kvc_pool_sequence* const*)&a, &one, 1, need));
  CHECK_EQ_U64(need[0], 0);
  REQUIRE_OK(pt_step(p, 2, 2, a, toks + 16, 1));
  s0 = pt_stats(p, 0);
  s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.used_blocks, 5);
  CHECK_EQ_U64(s1.used_blocks, 2);
  /* The sliding group's full committed blocks stayed cached until the takes evicted the oldest: the full group's
     block 5 is a page the sliding group had. */
  CHECK_EQ_U64(s1.evictions + s1.cached_blocks, 3);
  CHECK_EQ_U64(s0.free_blocks + s0.cached_blocks + s1.cached_blocks + s0.used_blocks + s1.used_blocks, 8);
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  kvc_pool_event ev[16];
  size_t n = 0;
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 16, &n));
  int removed_sliding = 0;
  for (size_t i = 0; i < n; i++) removed_sliding += ev[i].kind == KVC_POOL_EVENT_BLOCK_REMOVED && ev[i].group == 1;
  CHECK_EQ_I64(removed_sliding, (int64_t)s1.evictions);
  kvc_pool_sequence_destroy(a);
  kvc_pool_destroy(p);
}

static void test_eviction_across_groups(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_HND, 64, 11 * ATT_PAGE(4)));
  kvc_pool_sequence *a = NULL, *b = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 8)); /* 2 + 2 blocks, all committed and full */
  kvc_pool_sequence_destroy(a);
  kvc_pool_stats s0 = pt_stats(p, 0), s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.cached_blocks, 2);
  CHECK_EQ_U64(s1.cached_blocks, 2);
  CHECK_EQ_U64(s0.free_blocks, 6);
  /* Another prompt of 20 tokens needs 10 blocks: 6 free, then the 4 cached ones of both groups, oldest first. */
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int32_t other[20];
  for (int i = 0; i < 20; i++) other[i] = 100 + i;
  int64_t slots[40];
  REQUIRE_OK(kvc_pool_reserve(b, other, 20, slots));
  s0 = pt_stats(p, 0);
  s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.evictions, 2);
  CHECK_EQ_U64(s1.evictions, 2);
  CHECK_EQ_U64(s0.cached_blocks + s1.cached_blocks + s0.free_blocks, 0);
  REQUIRE_OK(pt_write(p, 2, slots, 0, 20));
  CHECK_EQ_I64(pt_gather_mismatches(b, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(b, 1), 0);
  /* Pool-wide: one more token does not fit (the sliding group keeps its blocks until committed). */
  CHECK_REFUSED(kvc_pool_reserve(b, other, 1, slots), KVC_ERROR_OUT_OF_MEMORY, "shared budget");
  kvc_pool_sequence_destroy(b);
  kvc_pool_destroy(p);
}

/* A slot in a block another group holds is refused by both writes, and nothing is written. */
static void test_slot_of_another_group(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 9 * ATT_PAGE(4)));
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  int64_t slots[8];
  REQUIRE_OK(kvc_pool_reserve(a, toks, 4, slots)); /* group 0: block 1 (slots 4..7), group 1: block 2 */
  CHECK_EQ_I64(slots[0], 4);
  CHECK_EQ_I64(slots[4], 8);
  int64_t stale[8];
  memcpy(stale, slots, sizeof stale);
  stale[0] = 9; /* group 0's token 0 into group 1's block 2 */
  kvc_kv kv;
  REQUIRE_OK(kvc_pool_layer_storage(p, 1, KVC_POOL_LAYOUT_NHD, &kv));
  float before[8];
  memcpy(before, (char*)kv.key.data + 2 * 224, sizeof before);
  CHECK_REFUSED(pt_write(p, 2, stale, 0, 4), KVC_ERROR_INVALID_ARGUMENT, "which group 1 holds");
  CHECK(!memcmp(before, (char*)kv.key.data + 2 * 224, sizeof before));
  float kb[4 * 8] = {0}, vb[4 * 6] = {0};
  int64_t ks[3] = {4, 2, 4}, vs[3] = {4, 2, 3};
  kvc_tensor k = t3(kb, ks), v = t3(vb, vs);
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &k, &v, stale, 4), KVC_ERROR_INVALID_ARGUMENT, "which group 1 holds");
  CHECK(!memcmp(before, (char*)kv.key.data + 2 * 224, sizeof before));
  kvc_pool_sequence_destroy(a);
  kvc_pool_destroy(p);
}

/* Views step a page; writes through write and write_layer land where the views and gathers read. */
static void test_views_and_writes(void) {
  for (int layout = 0; layout < 2; layout++) {
    kvc_pool* p = NULL;
    REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, layout, 0, 12 * ATT_PAGE(4)));
    kvc_kv kv;
    REQUIRE_OK(kvc_pool_layer_storage(p, 1, layout, &kv));
    CHECK_EQ_I64(kv.key.shape[0], 12);
    CHECK_EQ_I64(kv.key.strides[0], (int64_t)ATT_PAGE(4) / 4);
    CHECK_EQ_I64(kv.value.strides[0], (int64_t)ATT_PAGE(4) / 4);
    kvc_pool_sequence *a = NULL, *b = NULL;
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
    REQUIRE_OK(pt_step(p, 2, 2, a, toks, 6));
    /* b through write_layer, layer by layer, interleaved with a's blocks in the pages. */
    int64_t slots[2 * 7];
    REQUIRE_OK(kvc_pool_reserve(b, toks, 7, slots));
    float kb[2][7 * 8], vb[2][7 * 6];
    int64_t ks[3] = {7, 2, 4}, vs[3] = {7, 2, 3};
    for (uint32_t l = 0; l < 2; l++) {
      for (int64_t t = 0; t < 7; t++)
        for (int64_t h = 0; h < 2; h++) {
          for (int64_t d = 0; d < 4; d++) kb[l][t * 8 + h * 4 + d] = pt_value(l, 0, t, h, d);
          for (int64_t d = 0; d < 3; d++) vb[l][t * 6 + h * 3 + d] = pt_value(l, 1, t, h, d);
        }
      kvc_tensor k = t3(kb[l], ks), v = t3(vb[l], vs);
      REQUIRE_OK(kvc_pool_write_layer(p, l, &k, &v, slots, 7));
    }
    for (uint32_t l = 0; l < 2; l++) {
      CHECK_EQ_I64(pt_gather_mismatches(a, l), 0);
      CHECK_EQ_I64(pt_gather_mismatches(b, l), 0);
    }
    /* Token 5 of b, layer 1, head 1, dim 2 through the view: block slots[7 + 5] / 4, offset 1. */
    int64_t s = slots[7 + 5], blk = s / 4, off = s % 4;
    const int64_t* st = kv.key.strides;
    int64_t at = layout == KVC_POOL_LAYOUT_NHD ? blk * st[0] + off * st[1] + 1 * st[2] + 2
                                               : blk * st[0] + 1 * st[1] + off * st[2] + 2;
    CHECK(((const float*)kv.key.data)[at] == pt_value(1, 0, 5, 1, 2));
    kvc_pool_sequence_destroy(a);
    kvc_pool_sequence_destroy(b);
    kvc_pool_destroy(p);
  }
}

/* K and V of different head dims and groups of different page sizes: rows in units that divide the page. */
static void test_uneven_pages(void) {
  pt_options po;
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 4, 0, 0}, {KVC_POOL_GROUP_CHUNKED, 2, 0, 4}};
  pt_options_fill(&po, g, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_HND, 0, 1);
  po.o.shared_budget_bytes = 10 * ATT_PAGE(4) + 5;
  kvc_pool* p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  CHECK_EQ_U64(pt_stats(p, 1).num_blocks, 9); /* the chunked group's 112-byte blocks take a 224-byte page */
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 5));
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(a, 1), 0);
  kvc_pool_sequence_destroy(a);
  kvc_pool_destroy(p);
}

static void test_fork_truncate_match_pin(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 16 * ATT_PAGE(4)));
  kvc_pool_sequence *a = NULL, *c = NULL, *m = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 10));
  REQUIRE_OK(kvc_pool_fork(a, &c));
  REQUIRE_OK(pt_step(p, 2, 2, c, toks + 10, 1)); /* copy-on-write of the shared partial block */
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(c, 0), 0);
  REQUIRE_OK(kvc_pool_truncate(c, 9));
  CHECK_EQ_U64(kvc_pool_sequence_length(c), 9);
  CHECK_EQ_I64(pt_gather_mismatches(c, 0), 0);
  REQUIRE_OK(kvc_pool_sequence_pin(a));
  kvc_pool_sequence_destroy(a);
  kvc_pool_sequence_destroy(c);
  CHECK_EQ_U64(pt_stats(p, 0).pinned_blocks, 2);
  CHECK_EQ_U64(pt_stats(p, 1).pinned_blocks, 2);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &m));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_match_prefix(m, toks, 10, &matched));
  CHECK_EQ_U64(matched, 8);
  CHECK_EQ_I64(pt_gather_mismatches(m, 0), 0);
  kvc_pool_sequence_destroy(m);
  REQUIRE_OK(kvc_pool_unpin_all(p));
  CHECK_EQ_U64(pt_stats(p, 0).pinned_blocks, 0);
  CHECK_EQ_U64(pt_stats(p, 1).pinned_blocks, 0);
  REQUIRE_OK(kvc_pool_clear_cache(p));
  kvc_pool_stats s0 = pt_stats(p, 0), s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.cached_blocks + s1.cached_blocks, 0);
  CHECK_EQ_U64(s0.free_blocks, 15);
  kvc_pool_destroy(p);
}

/* A recurrent group beside a full one: live slots and checkpoints are pages of the same budget. */
static void test_recurrent(void) {
  static const pt_group g[] = {{KVC_POOL_GROUP_FULL, 4, 0, 0}, {KVC_POOL_GROUP_RECURRENT, 4, 0, 0}};
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, g, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 6 * ATT_PAGE(4)));
  kvc_pool_sequence *a = NULL, *m = NULL, *f = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 8)); /* 2 blocks, a live slot, a checkpoint at 4? (commit at 8: one) */
  kvc_tensor conv, ssm;
  REQUIRE_OK(kvc_pool_recurrent_state(a, 1, &conv, &ssm));
  ((float*)ssm.data)[3] = 42.0f;
  /* The state lives in its page: the full group's blocks are not touched by it. */
  CHECK_EQ_I64(pt_gather_mismatches(a, 0), 0);
  kvc_pool_stats s0 = pt_stats(p, 0), s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.used_blocks, 2);
  CHECK_EQ_U64(s1.used_blocks + s1.cached_blocks, 2); /* live + the checkpoint at 8 */
  REQUIRE_OK(kvc_pool_fork(a, &f));
  REQUIRE_OK(kvc_pool_recurrent_state(f, 1, &conv, &ssm));
  CHECK(((float*)ssm.data)[3] == 42.0f);
  kvc_pool_sequence_destroy(f);
  kvc_pool_sequence_destroy(a);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &m));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_match_prefix(m, toks, 9, &matched));
  CHECK_EQ_U64(matched, 8);
  CHECK_EQ_I64(pt_gather_mismatches(m, 0), 0);
  /* Budget exhausted by another sequence: a fork needs a live slot and is refused, naming the budget. */
  kvc_pool_sequence* big = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &big));
  int32_t other[4] = {7, 7, 7, 7};
  int64_t slots[8];
  REQUIRE_OK(kvc_pool_reserve(big, other, 4, slots)); /* 1 block + 1 live slot: the budget's last 2 */
  CHECK_EQ_U64(pt_stats(p, 0).free_blocks + pt_stats(p, 0).cached_blocks + pt_stats(p, 1).cached_blocks, 0);
  CHECK_REFUSED(kvc_pool_fork(m, &f), KVC_ERROR_OUT_OF_MEMORY, "shared budget for the fork's live states");
  kvc_pool_sequence_destroy(big);
  kvc_pool_sequence_destroy(m);
  kvc_pool_destroy(p);
}

/* A sequence file saved from a per-group pool loads into a shared one (and back): the bytes are the same. */
static void test_files(void) {
  static const pt_group own[] = {{KVC_POOL_GROUP_FULL, 4, 8, 0}, {KVC_POOL_GROUP_SLIDING, 4, 8, 4}};
  kvc_pool *a = NULL, *b = NULL;
  REQUIRE_OK(pt_pool(&a, own, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(shared_pool(&b, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 12 * ATT_PAGE(4)));
  kvc_pool_sequence *s = NULL, *t = NULL, *u = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(a, NULL, &s));
  REQUIRE_OK(pt_step(a, 2, 2, s, toks, 7));
  char path[64];
  snprintf(path, sizeof path, "/tmp/kvc_shared_budget_%d.kvc", (int)getpid());
  REQUIRE_OK(kvc_pool_sequence_save(s, path, NULL));
  /* Fill most of b first, so the loaded blocks land at other ids. */
  kvc_pool_sequence* filler = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(b, NULL, &filler));
  REQUIRE_OK(pt_step(b, 2, 2, filler, toks + 20, 3));
  REQUIRE_OK(kvc_pool_sequence_load(b, path, &t));
  CHECK_EQ_I64(pt_gather_mismatches(t, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(t, 1), 0);
  REQUIRE_OK(kvc_pool_sequence_save(t, path, NULL));
  REQUIRE_OK(kvc_pool_sequence_load(a, path, &u));
  CHECK_EQ_I64(pt_gather_mismatches(u, 1), 0);
  /* No room: refused before anything is taken. */
  kvc_pool_sequence* more = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(b, NULL, &more));
  REQUIRE_OK(pt_step(b, 2, 2, more, toks + 30, 8));
  uint64_t free_before = pt_stats(b, 0).free_blocks;
  kvc_pool_sequence* v = NULL;
  CHECK_REFUSED(kvc_pool_sequence_load(b, path, &v), KVC_ERROR_OUT_OF_MEMORY, "shared budget");
  CHECK_EQ_U64(pt_stats(b, 0).free_blocks, free_before);
  CHECK(v == NULL);
  unlink(path);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
}

/* A disk tier under a shared pool: evicted blocks go down and come back into pages of the budget. */
static void test_tier(void) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/kvc_shared_budget_tier_%d", (int)getpid());
  kvc_disk_tier_options to = KVC_DISK_TIER_OPTIONS_INIT;
  to.directory = dir;
  kvc_tier* tier = NULL;
  REQUIRE_OK(kvc_disk_tier_create(&to, &tier));
  kvc_pool* p = NULL;
  REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 7 * ATT_PAGE(4)));
  REQUIRE_OK(kvc_pool_add_tier(p, tier, KVC_TIER_WRITE_ON_EVICT));
  kvc_pool_sequence *a = NULL, *b = NULL, *m = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 8));
  kvc_pool_sequence_destroy(a);
  /* Another prompt evicts all four cached blocks (both groups) into the tier. */
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  int32_t other[12];
  for (int i = 0; i < 12; i++) other[i] = 200 + i;
  REQUIRE_OK(pt_step(p, 2, 2, b, other, 12));
  kvc_pool_sequence_destroy(b);
  REQUIRE_OK(kvc_pool_clear_cache(p));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &m));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_match_prefix(m, toks, 9, &matched));
  CHECK_EQ_U64(matched, 8);
  CHECK_EQ_I64(pt_gather_mismatches(m, 0), 0); /* the sliding group holds only its window: no gather */
  kvc_tier_stats ts;
  memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  REQUIRE_OK(kvc_tier_stats_get(tier, &ts));
  CHECK(ts.puts >= 4);
  CHECK(ts.hits >= 2);
  kvc_pool_sequence_destroy(m);
  kvc_pool_destroy(p); /* the pool owns the tier */
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

/* Admission: blocks_needed's entry against free + every group's cached blocks says exactly whether it fits. */
static void test_admission_exact(void) {
  int fit = 0, short_of = 0; /* both outcomes must occur for the check to mean anything */
  for (uint64_t pages = 5; pages <= 16; pages++) {
    kvc_pool* p = NULL;
    REQUIRE_OK(shared_pool(&p, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, pages * ATT_PAGE(4)));
    kvc_pool_sequence* s[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s[i]));
    REQUIRE_OK(pt_step(p, 2, 2, s[0], toks, 6)); /* 2 + 2 blocks, committed */
    uint64_t n[3] = {3, 5, 2}, need[2];
    REQUIRE_OK(kvc_pool_blocks_needed(p, (const kvc_pool_sequence* const*)s, n, 3, need));
    CHECK_EQ_U64(need[0], need[1]);
    kvc_pool_stats a = pt_stats(p, 0), b = pt_stats(p, 1);
    uint64_t avail = a.free_blocks + a.cached_blocks + b.cached_blocks;
    int64_t slots[2 * 10];
    size_t done = 0;
    REQUIRE_OK(kvc_pool_reserve_batch(p, s, 3, toks, n, slots, &done));
    CHECK_EQ_I64((int64_t)(done == 3), (int64_t)(need[0] <= avail));
    fit += done == 3;
    short_of += done < 3;
    for (int i = 0; i < 3; i++) kvc_pool_sequence_destroy(s[i]);
    kvc_pool_destroy(p);
  }
  CHECK(fit > 0 && short_of > 0);
}

/* The storage comes from the caller's allocator as one buffer of all pages, zeroed, and goes back at destroy. */
static arena A;

static void test_allocator(void) {
  kvc_allocator al = arena_start(&A);
  pt_options po;
  pt_options_fill(&po, FULL_SLIDING, 2, TWO_LAYERS, 2, KVC_POOL_LAYOUT_NHD, 0, 1);
  po.o.shared_budget_bytes = 9 * ATT_PAGE(4) + 3;
  po.o.allocator = &al;
  kvc_pool* p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  CHECK_EQ_I64(A.allocs, 1);
  CHECK_EQ_U64(A.live_bytes, 9 * ATT_PAGE(4));
  kvc_kv kv;
  REQUIRE_OK(kvc_pool_layer_storage(p, 1, KVC_POOL_LAYOUT_NHD, &kv));
  CHECK(arena_holds(kv.value.data, 4));
  kvc_pool_sequence* a = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pt_step(p, 2, 2, a, toks, 5));
  CHECK_EQ_I64(pt_gather_mismatches(a, 1), 0);
  kvc_pool_destroy(p);
  CHECK_EQ_I64(A.live_count, 0);
  CHECK_EQ_I64(A.bad_frees, 0);
}

int main(void) {
  for (int i = 0; i < 64; i++) toks[i] = 10 + i;
  TU_RUN(test_options_refused);
  TU_RUN(test_memory_follows_load);
  TU_RUN(test_eviction_across_groups);
  TU_RUN(test_slot_of_another_group);
  TU_RUN(test_views_and_writes);
  TU_RUN(test_uneven_pages);
  TU_RUN(test_fork_truncate_match_pin);
  TU_RUN(test_recurrent);
  TU_RUN(test_files);
  TU_RUN(test_tier);
  TU_RUN(test_admission_exact);
  TU_RUN(test_allocator);
  return tu_finish();
}
