/*
 * test_persist_pool.c: a pool sequence saved and loaded into another pool of
 * the same layout: its tokens, lengths and K/V come back (gather), its
 * committed full blocks are cached (a new request matches its prefix), its
 * recurrent live state comes back, and it keeps stepping. A pool without
 * room refuses with OUT_OF_MEMORY and is unchanged; a pool of another
 * layout or hash seed is refused naming the difference.
 */
#include "../pool/pool_test.h"

static const pt_group GROUPS[3] = {
    {KVC_POOL_GROUP_FULL, 4, 32, 0}, {KVC_POOL_GROUP_SLIDING, 4, 32, 8}, {KVC_POOL_GROUP_RECURRENT, 4, 8, 0}};
static const uint32_t LAYER_GROUP[3] = {0, 1, 2};

typedef struct file {
  unsigned char* data;
  size_t len, cap;
} file;

static int file_write(void* user, const void* data, size_t bytes) {
  file* f = (file*)user;
  if (f->len + bytes > f->cap) {
    f->cap = (f->len + bytes) * 2;
    unsigned char* p = (unsigned char*)realloc(f->data, f->cap);
    if (!p) return -1;
    f->data = p;
  }
  memcpy(f->data + f->len, data, bytes);
  f->len += bytes;
  return 0;
}

static int32_t token(int64_t i) { return (int32_t)(1000 + i * 7); }

/* A sequence of n tokens written and committed in steps of 5; its SSM state set to a known value. */
static kvc_pool_sequence* filled(kvc_pool* p, int64_t n, float ssm) {
  kvc_pool_sequence* s = NULL;
  if (!CHECK_OK(kvc_pool_sequence_create(p, NULL, &s))) return NULL;
  int32_t ids[5];
  for (int64_t at = 0; at < n; at += 5) {
    int64_t k = n - at < 5 ? n - at : 5;
    for (int64_t i = 0; i < k; i++) ids[i] = token(at + i);
    CHECK_OK(pt_step(p, 3, 3, s, ids, k));
  }
  kvc_tensor conv, rec;
  if (CHECK_OK(kvc_pool_recurrent_state(s, 2, &conv, &rec))) {
    int64_t n_rec = 1;
    for (int d = 0; d < rec.ndim; d++) n_rec *= rec.shape[d];
    for (int64_t i = 0; i < n_rec; i++) ((float*)rec.data)[i] = ssm + (float)i;
  }
  return s;
}

static void test_round_trip(void) {
  kvc_pool *a = NULL, *b = NULL;
  REQUIRE_OK(pt_pool(&a, GROUPS, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(pt_pool(&b, GROUPS, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence* s = filled(a, 13, 0.25f);
  file f = {0};
  kvc_pool_sequence* t = NULL;
  if (s && CHECK_OK(kvc_pool_sequence_save_to(s, file_write, &f, NULL)) &&
      CHECK_OK(kvc_pool_sequence_load_buffer(b, f.data, f.len, &t))) {
    CHECK_EQ_U64(kvc_pool_sequence_length(t), 13);
    CHECK_EQ_U64(kvc_pool_sequence_committed(t), 13);
    CHECK_EQ_I64(pt_gather_mismatches(t, 0), 0);
    /* The sliding group gave back blocks that left the window: same as the original (INVALID_STATE gathers). */
    CHECK_EQ_I64(pt_gather_mismatches(t, 1), pt_gather_mismatches(s, 1));
    for (uint32_t g = 0; g < 2; g++) CHECK_EQ_U64(pt_stats(b, g).used_blocks, pt_stats(a, g).used_blocks);
    kvc_tensor c0, r0, c1, r1;
    if (CHECK_OK(kvc_pool_recurrent_state(s, 2, &c0, &r0)) && CHECK_OK(kvc_pool_recurrent_state(t, 2, &c1, &r1))) {
      int64_t n_rec = 1;
      for (int d = 0; d < r0.ndim; d++) n_rec *= r0.shape[d];
      CHECK(memcmp(r0.data, r1.data, (size_t)n_rec * sizeof(float)) == 0);
    }
    /* A new request with the same prompt matches as much in the new pool as in the original (the recurrent
       group matches at its checkpoints only, which a file does not carry: test_prefix_hit has none). */
    kvc_pool_sequence* req[2] = {NULL, NULL};
    kvc_pool* pools[2] = {a, b};
    uint64_t matched[2] = {1, 2};
    int32_t ids[13];
    for (int i = 0; i < 13; i++) ids[i] = token(i);
    for (int k = 0; k < 2; k++)
      if (CHECK_OK(kvc_pool_sequence_create(pools[k], NULL, &req[k])))
        CHECK_OK(kvc_pool_match_prefix(req[k], ids, 13, &matched[k]));
    CHECK_EQ_U64(matched[1], matched[0]);
    for (int k = 0; k < 2; k++) kvc_pool_sequence_destroy(req[k]);
    /* Both keep stepping alike. */
    int32_t more[2] = {token(13), token(14)};
    CHECK_OK(pt_step(a, 3, 3, s, more, 2));
    CHECK_OK(pt_step(b, 3, 3, t, more, 2));
    CHECK_EQ_I64(pt_gather_mismatches(t, 0), 0);
    CHECK_EQ_U64(kvc_pool_sequence_length(t), 15);
  }
  kvc_pool_sequence_destroy(t);
  kvc_pool_sequence_destroy(s);
  free(f.data);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
}

static void test_no_room_and_other_layout(void) {
  kvc_pool *a = NULL, *small = NULL, *other = NULL;
  const pt_group tiny[3] = {{KVC_POOL_GROUP_FULL, 4, 3, 0}, GROUPS[1], GROUPS[2]};
  const pt_group wider[3] = {{KVC_POOL_GROUP_FULL, 8, 32, 0}, GROUPS[1], GROUPS[2]};
  REQUIRE_OK(pt_pool(&a, GROUPS, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(pt_pool(&small, tiny, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(pt_pool(&other, wider, 3, LAYER_GROUP, 3, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence* s = filled(a, 13, 1.0f);
  file f = {0};
  if (s && CHECK_OK(kvc_pool_sequence_save_to(s, file_write, &f, NULL))) {
    kvc_pool_stats before = pt_stats(small, 0);
    kvc_pool_sequence* t = NULL;
    kvc_error* e = kvc_pool_sequence_load_buffer(small, f.data, f.len, &t);
    CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_OUT_OF_MEMORY);
    CHECK(e && strstr(kvc_error_message(e), "group 0") != NULL);
    kvc_error_destroy(e);
    CHECK(t == NULL);
    kvc_pool_stats after = pt_stats(small, 0);
    CHECK_EQ_U64(after.free_blocks, before.free_blocks);
    CHECK_EQ_U64(after.used_blocks, before.used_blocks);
    e = kvc_pool_sequence_load_buffer(other, f.data, f.len, &t);
    CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_INVALID_ARGUMENT);
    if (!CHECK(e && strstr(kvc_error_message(e), "group 0: block_size 4 (file) vs 8 (pool)") != NULL))
      printf("    %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    /* Every byte changed is refused too (a sample: every 7th byte), the pool unchanged. */
    kvc_pool_stats b0 = pt_stats(a, 0);
    for (size_t i = 0; i < f.len; i += 7) {
      f.data[i] ^= 0x40;
      e = kvc_pool_sequence_load_buffer(a, f.data, f.len, &t);
      f.data[i] ^= 0x40;
      if (!CHECK(e != NULL)) break;
      kvc_error_destroy(e);
    }
    CHECK_EQ_U64(pt_stats(a, 0).used_blocks, b0.used_blocks);
  }
  kvc_pool_sequence_destroy(s);
  free(f.data);
  kvc_pool_destroy(a);
  kvc_pool_destroy(small);
  kvc_pool_destroy(other);
}

/* Without a recurrent group: the restored committed blocks are cached, so a new request in the new pool hits them
 * (3 full blocks of 4 of a 13-token prompt) and reads the restored bytes. */
static void test_prefix_hit(void) {
  kvc_pool *a = NULL, *b = NULL;
  REQUIRE_OK(pt_pool(&a, GROUPS, 1, LAYER_GROUP, 1, KVC_POOL_LAYOUT_HND, 0, 1));
  REQUIRE_OK(pt_pool(&b, GROUPS, 1, LAYER_GROUP, 1, KVC_POOL_LAYOUT_HND, 0, 1));
  kvc_pool_sequence* s = NULL;
  int32_t ids[13];
  for (int i = 0; i < 13; i++) ids[i] = token(i);
  file f = {0};
  kvc_pool_sequence *t = NULL, *req = NULL;
  uint64_t matched = 0;
  if (CHECK_OK(kvc_pool_sequence_create(a, NULL, &s)) && CHECK_OK(pt_step(a, 1, 1, s, ids, 13)) &&
      CHECK_OK(kvc_pool_sequence_save_to(s, file_write, &f, NULL)) &&
      CHECK_OK(kvc_pool_sequence_load_buffer(b, f.data, f.len, &t))) {
    kvc_pool_sequence_destroy(t); /* its blocks stay cached */
    t = NULL;
    if (CHECK_OK(kvc_pool_sequence_create(b, NULL, &req)) && CHECK_OK(kvc_pool_match_prefix(req, ids, 13, &matched)))
      CHECK_EQ_U64(matched, 12);
    CHECK_EQ_U64(pt_stats(b, 0).prefix_hits, pt_stats(b, 0).prefix_queries);
  }
  kvc_pool_sequence_destroy(req);
  kvc_pool_sequence_destroy(s);
  free(f.data);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
}

int main(void) {
  TU_RUN(test_prefix_hit);
  TU_RUN(test_round_trip);
  TU_RUN(test_no_room_and_other_layout);
  return tu_finish();
}
