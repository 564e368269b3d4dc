/*
 * tests/pool/test_pool_errors.c: bad input on every pool entry point. Each
 * refusal has the expected code and a message naming the argument or field,
 * and leaves the pool exactly as it was: the counters of every group, every
 * sequence's lengths and block tables, the K/V bytes and recurrent states.
 */
#include "pool_test.h"

static const pt_group GROUPS[] = {{KVC_POOL_GROUP_FULL, 2, 6, 0}, {KVC_POOL_GROUP_RECURRENT, 2, 4, 0}};
static const uint32_t LAYERS[] = {0, 1};

typedef struct pool_snapshot {
  kvc_pool_stats stats[2];
  uint64_t length[2], committed[2];
  int32_t rows[2][16];
  int64_t widths[2];
  float k[6 * 2 * 2 * 4], v[6 * 2 * 2 * 3];
  float state[2][6 + 16];
} pool_snapshot;

static void take(pool_snapshot* s, kvc_pool* p, kvc_pool_sequence* const* seqs) {
  memset(s, 0, sizeof(*s));
  for (uint32_t g = 0; g < 2; g++) s->stats[g] = pt_stats(p, g);
  kvc_kv kv;
  kvc_error_destroy(kvc_pool_layer_storage(p, 0, KVC_POOL_LAYOUT_NHD, &kv));
  memcpy(s->k, kv.key.data, sizeof s->k);
  memcpy(s->v, kv.value.data, sizeof s->v);
  for (int i = 0; i < 2; i++) {
    s->length[i] = kvc_pool_sequence_length(seqs[i]);
    s->committed[i] = kvc_pool_sequence_committed(seqs[i]);
    s->widths[i] = pt_row(p, seqs[i], 0, s->rows[i], 16);
    kvc_tensor conv, ssm;
    kvc_error* e = kvc_pool_recurrent_state(seqs[i], 1, &conv, &ssm);
    if (!e) {
      memcpy(s->state[i], conv.data, 6 * sizeof(float));
      memcpy(s->state[i] + 6, ssm.data, 16 * sizeof(float));
    }
    kvc_error_destroy(e);
  }
}

#define CHECK_UNCHANGED(p, seqs, before)                \
  do {                                                  \
    pool_snapshot now_;                                      \
    take(&now_, (p), (seqs));                           \
    CHECK(memcmp(&now_, &(before), sizeof now_) == 0);  \
  } while (0)

static void test_create_refusals(void) {
  kvc_pool_group_options g[2] = {KVC_POOL_GROUP_OPTIONS_INIT, KVC_POOL_GROUP_OPTIONS_INIT};
  kvc_pool_layer_options l[2] = {KVC_POOL_LAYER_OPTIONS_INIT, KVC_POOL_LAYER_OPTIONS_INIT};
  g[0].num_blocks = 4;
  l[0].num_kv_heads = 1;
  l[0].key_head_dim = 8;
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT16;
  o.num_groups = 1;
  o.groups = g;
  o.num_layers = 1;
  o.layers = l;
  kvc_pool* sentinel = (kvc_pool*)&o;
  kvc_pool* p = sentinel;
  CHECK_REFUSED(kvc_pool_create(NULL, &p), KVC_ERROR_INVALID_ARGUMENT, "options");
  CHECK_REFUSED(kvc_pool_create(&o, NULL), KVC_ERROR_INVALID_ARGUMENT, "out");
#define BAD(field_set, what)                                                 \
  do {                                                                       \
    kvc_pool_options o2 = o;                                                 \
    kvc_pool_group_options g2[2] = {g[0], g[1]};                             \
    kvc_pool_layer_options l2[2] = {l[0], l[1]};                             \
    o2.groups = g2;                                                          \
    o2.layers = l2;                                                          \
    field_set;                                                               \
    CHECK_REFUSED(kvc_pool_create(&o2, &p), KVC_ERROR_INVALID_ARGUMENT, what); \
    CHECK(p == sentinel);                                                    \
  } while (0)
  BAD(o2.struct_size = 8, "options.struct_size");
  BAD(o2.dtype = KVC_DTYPE_UNSET, "options.dtype");
  BAD(o2.num_groups = 0, "options.num_groups");
  BAD(o2.layers = NULL, "options.layers");
  BAD(o2.layout = 5, "options.layout");
  BAD(o2.hash_seed_len = 3, "options.hash_seed");
  BAD(o2.enable_prefix_caching = 2, "options.enable_prefix_caching");
  BAD(o2.event_capacity = UINT32_MAX, "options.event_capacity");
  BAD(g2[0].struct_size = 4, "groups[0].struct_size");
  BAD(g2[0].kind = 9, "groups[0].kind");
  BAD(g2[0].block_size = 0, "groups[0].block_size");
  BAD(g2[0].num_blocks = 1, "groups[0].num_blocks");
  BAD(g2[0].window = 3, "groups[0].window");
  BAD((g2[0].kind = KVC_POOL_GROUP_SLIDING, g2[0].window = 0), "groups[0].window");
  BAD(g2[0].reserved = 1, "groups[0].reserved");
  BAD(l2[0].struct_size = 0, "layers[0].struct_size");
  BAD(l2[0].group = 1, "layers[0].group");
  BAD(l2[0].num_kv_heads = 0, "layers[0].num_kv_heads");
  BAD(l2[0].key_head_dim = 0, "layers[0].key_head_dim");
  BAD(l2[0].conv_dim = 2, "layers[0].conv_dim");
  BAD(l2[0].reserved = 7, "layers[0].reserved");
  BAD((g2[0].kind = KVC_POOL_GROUP_RECURRENT), "layers[0].conv_dim");
  BAD((o2.num_groups = 2, g2[1].num_blocks = 3), "groups[1] has no layer");
#undef BAD
  kvc_pool_options_init(NULL);
  kvc_pool_options fresh;
  kvc_pool_options_init(&fresh);
  CHECK_EQ_I64(fresh.struct_size, sizeof fresh);
  CHECK_EQ_I64(fresh.enable_prefix_caching, 1);
  kvc_pool_destroy(NULL);
  kvc_pool_sequence_destroy(NULL);
  CHECK_EQ_U64(kvc_pool_sequence_length(NULL), 0);
  CHECK_EQ_U64(kvc_pool_sequence_committed(NULL), 0);
}

static void test_refusals_leave_the_pool_unchanged(void) {
  kvc_pool *p = NULL, *other = NULL;
  REQUIRE_OK(pt_pool(&p, GROUPS, 2, LAYERS, 2, KVC_POOL_LAYOUT_NHD, 8, 1));
  REQUIRE_OK(pt_pool(&other, GROUPS, 2, LAYERS, 2, KVC_POOL_LAYOUT_NHD, 8, 1));
  kvc_pool_sequence *a = NULL, *stranger = NULL, *seqs[2] = {NULL, NULL};
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(kvc_pool_sequence_create(other, NULL, &stranger));
  int32_t t[5] = {1, 2, 3, 4, 5}, neg[3] = {1, -4, 2};
  REQUIRE_OK(pt_step(p, 2, 2, a, t, 3));
  {
    kvc_tensor conv, ssm;
    REQUIRE_OK(kvc_pool_recurrent_state(a, 1, &conv, &ssm));
    for (int i = 0; i < 6; i++) ((float*)conv.data)[i] = 7.0f + (float)i;
  }
  seqs[0] = a;
  REQUIRE_OK(kvc_pool_fork(a, &seqs[1]));
  pool_snapshot before;
  take(&before, p, seqs);
  int64_t slots[64];
  uint64_t u = 0, need[2];
  size_t n = 0;

  CHECK_REFUSED(kvc_pool_set_stream(p, (void*)slots), KVC_ERROR_INVALID_ARGUMENT, "stream");
  CHECK_REFUSED(kvc_pool_set_stream(NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "pool");
  kvc_pool_stats st;
  memset(&st, 0, sizeof st);
  CHECK_REFUSED(kvc_pool_stats_get(p, 0, &st), KVC_ERROR_INVALID_ARGUMENT, "struct_size");
  st.struct_size = sizeof st;
  CHECK_REFUSED(kvc_pool_stats_get(p, 2, &st), KVC_ERROR_OUT_OF_RANGE, "group is 2");
  CHECK_REFUSED(kvc_pool_stats_get(p, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "out");
  CHECK_REFUSED(kvc_pool_clear_cache(NULL), KVC_ERROR_INVALID_ARGUMENT, "pool");
  CHECK_REFUSED(kvc_pool_unpin_all(NULL), KVC_ERROR_INVALID_ARGUMENT, "pool");
  CHECK_UNCHANGED(p, seqs, before);

  kvc_pool_sequence* s = NULL;
  kvc_pool_sequence_options so = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  so.salt_len = 3;
  CHECK_REFUSED(kvc_pool_sequence_create(p, &so, &s), KVC_ERROR_INVALID_ARGUMENT, "salt");
  so.struct_size = 3;
  CHECK_REFUSED(kvc_pool_sequence_create(p, &so, &s), KVC_ERROR_INVALID_ARGUMENT, "struct_size");
  CHECK_REFUSED(kvc_pool_sequence_create(NULL, NULL, &s), KVC_ERROR_INVALID_ARGUMENT, "pool");
  CHECK_REFUSED(kvc_pool_sequence_create(p, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "out");
  CHECK(s == NULL);

  CHECK_REFUSED(kvc_pool_match_prefix(a, t, 5, &u), KVC_ERROR_INVALID_ARGUMENT, "holds 3 tokens");
  CHECK_REFUSED(kvc_pool_match_prefix(stranger, neg, 3, &u), KVC_ERROR_INVALID_ARGUMENT, "tokens[1] is -4");
  CHECK_REFUSED(kvc_pool_match_prefix(stranger, t, 5, NULL), KVC_ERROR_INVALID_ARGUMENT, "matched_tokens");
  CHECK_REFUSED(kvc_pool_match_prefix(NULL, t, 5, &u), KVC_ERROR_INVALID_ARGUMENT, "sequence");

  CHECK_REFUSED(kvc_pool_reserve(a, t, 0, slots), KVC_ERROR_INVALID_ARGUMENT, "num_tokens is 0");
  CHECK_REFUSED(kvc_pool_reserve(a, neg, 3, slots), KVC_ERROR_INVALID_ARGUMENT, "tokens[1] is -4");
  CHECK_REFUSED(kvc_pool_reserve(a, t, 2, NULL), KVC_ERROR_INVALID_ARGUMENT, "slot_mapping");
  CHECK_REFUSED(kvc_pool_reserve(a, NULL, 2, slots), KVC_ERROR_INVALID_ARGUMENT, "tokens is NULL");
  int32_t many[16] = {0};
  CHECK_REFUSED(kvc_pool_reserve(a, many, 16, slots), KVC_ERROR_OUT_OF_MEMORY, "group 0 needs");
  CHECK_UNCHANGED(p, seqs, before);

  CHECK_REFUSED(kvc_pool_commit(NULL), KVC_ERROR_INVALID_ARGUMENT, "sequence");
  CHECK_REFUSED(kvc_pool_fork(NULL, &s), KVC_ERROR_INVALID_ARGUMENT, "sequence");
  CHECK_REFUSED(kvc_pool_fork(a, NULL), KVC_ERROR_INVALID_ARGUMENT, "out");
  CHECK_REFUSED(kvc_pool_truncate(a, 4), KVC_ERROR_OUT_OF_RANGE, "num_tokens is 4");
  CHECK_REFUSED(kvc_pool_truncate(a, 1), KVC_ERROR_INVALID_STATE, "checkpoint");
  CHECK_REFUSED(kvc_pool_truncate(NULL, 1), KVC_ERROR_INVALID_ARGUMENT, "sequence");
  CHECK_REFUSED(kvc_pool_sequence_pin(NULL), KVC_ERROR_INVALID_ARGUMENT, "sequence");
  CHECK_UNCHANGED(p, seqs, before);

  const kvc_pool_sequence* list[2] = {a, NULL};
  uint64_t more[2] = {1, 1};
  CHECK_REFUSED(kvc_pool_blocks_needed(p, list, more, 2, need), KVC_ERROR_INVALID_ARGUMENT, "sequences[1] is NULL");
  list[1] = stranger;
  CHECK_REFUSED(kvc_pool_blocks_needed(p, list, more, 2, need), KVC_ERROR_INVALID_ARGUMENT, "another pool");
  CHECK_REFUSED(kvc_pool_blocks_needed(p, list, NULL, 2, need), KVC_ERROR_INVALID_ARGUMENT, "new_tokens");
  CHECK_REFUSED(kvc_pool_blocks_needed(p, list, more, 2, NULL), KVC_ERROR_INVALID_ARGUMENT, "blocks_needed");

  /* Writes: each refusal before any byte moves. */
  float kb[2 * 8] = {0}, vb[2 * 6] = {0};
  int64_t ks[3] = {2, 2, 4}, vs[3] = {2, 2, 3}, bad[3] = {2, 2, 5};
  kvc_tensor keys[2] = {t3(kb, ks), t3(NULL, ks)}, values[2] = {t3(vb, vs), t3(NULL, vs)};
  int64_t ok_slots[4] = {2, 3, -1, -1};
  int64_t w[4];
#define WRITE_REFUSED(set, code, what)                                                      \
  do {                                                                                      \
    memcpy(w, ok_slots, sizeof w);                                                          \
    kvc_tensor k2[2] = {keys[0], keys[1]}, v2[2] = {values[0], values[1]};                  \
    set;                                                                                    \
    CHECK_REFUSED(kvc_pool_write(p, k2, v2, 2, w, 2), code, what);                          \
  } while (0)
  WRITE_REFUSED(w[0] = 12, KVC_ERROR_INVALID_ARGUMENT, "slot_mapping[0]");
  WRITE_REFUSED(w[1] = 1, KVC_ERROR_INVALID_ARGUMENT, "null block");
  WRITE_REFUSED(w[1] = 10, KVC_ERROR_INVALID_ARGUMENT, "no sequence holds");
  WRITE_REFUSED(w[1] = 2, KVC_ERROR_INVALID_ARGUMENT, "appears twice");
  WRITE_REFUSED(k2[0].shape = bad, KVC_ERROR_SHAPE_MISMATCH, "keys[0]");
  WRITE_REFUSED(v2[0].dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT16), KVC_ERROR_DTYPE_MISMATCH, "values[0]");
  WRITE_REFUSED(k2[0].device.device_type = KVC_DEVICE_CUDA, KVC_ERROR_DEVICE_MISMATCH, "keys[0]");
  WRITE_REFUSED(k2[0].ndim = 4, KVC_ERROR_SHAPE_MISMATCH, "keys[0].ndim");
  CHECK_REFUSED(kvc_pool_write(p, keys, values, 1, ok_slots, 2), KVC_ERROR_INVALID_ARGUMENT, "num_layers is 1");
  CHECK_REFUSED(kvc_pool_write(p, keys, NULL, 2, ok_slots, 2), KVC_ERROR_INVALID_ARGUMENT, "values");
  CHECK_REFUSED(kvc_pool_write(p, keys, values, 2, NULL, 2), KVC_ERROR_INVALID_ARGUMENT, "slot_mapping");
#undef WRITE_REFUSED
  CHECK_UNCHANGED(p, seqs, before);

  kvc_kv kv;
  CHECK_REFUSED(kvc_pool_layer_storage(p, 2, KVC_POOL_LAYOUT_NHD, &kv), KVC_ERROR_OUT_OF_RANGE, "layer is 2");
  CHECK_REFUSED(kvc_pool_layer_storage(p, 1, KVC_POOL_LAYOUT_NHD, &kv), KVC_ERROR_INVALID_ARGUMENT, "recurrent");
  CHECK_REFUSED(kvc_pool_layer_storage(p, 0, 3, &kv), KVC_ERROR_INVALID_ARGUMENT, "layout is 3");
  kvc_pool_table tb;
  const kvc_pool_sequence* one[2] = {a, stranger};
  CHECK_REFUSED(kvc_pool_block_table(p, one, 1, 1, KVC_POOL_TABLE_PADDED, &tb), KVC_ERROR_INVALID_ARGUMENT,
                "recurrent");
  CHECK_REFUSED(kvc_pool_block_table(p, one, 1, 2, KVC_POOL_TABLE_PADDED, &tb), KVC_ERROR_OUT_OF_RANGE, "group is 2");
  CHECK_REFUSED(kvc_pool_block_table(p, one, 1, 0, 7, &tb), KVC_ERROR_INVALID_ARGUMENT, "format is 7");
  CHECK_REFUSED(kvc_pool_block_table(p, one, 2, 0, KVC_POOL_TABLE_CSR, &tb), KVC_ERROR_INVALID_ARGUMENT,
                "sequences[1] belongs to another pool");
  CHECK_REFUSED(kvc_pool_block_table(p, NULL, 2, 0, KVC_POOL_TABLE_CSR, &tb), KVC_ERROR_INVALID_ARGUMENT,
                "sequences is NULL");
  float g4[64];
  int64_t gshape[4] = {1, 2, 2, 4};
  kvc_tensor gk = t3(g4, gshape), gv = t3(g4, gshape);
  gk.ndim = gv.ndim = 4;
  CHECK_REFUSED(kvc_pool_gather(a, 0, &gk, &gv), KVC_ERROR_SHAPE_MISMATCH, "needs [1, 2, 3, 4]");
  CHECK_REFUSED(kvc_pool_gather(a, 1, &gk, &gv), KVC_ERROR_INVALID_ARGUMENT, "recurrent");
  CHECK_REFUSED(kvc_pool_gather(a, 9, &gk, &gv), KVC_ERROR_OUT_OF_RANGE, "layer is 9");
  kvc_tensor conv, ssm;
  CHECK_REFUSED(kvc_pool_recurrent_state(a, 0, &conv, &ssm), KVC_ERROR_INVALID_ARGUMENT, "attention group");
  CHECK_REFUSED(kvc_pool_recurrent_state(a, 5, &conv, &ssm), KVC_ERROR_OUT_OF_RANGE, "layer is 5");
  CHECK_REFUSED(kvc_pool_recurrent_state(a, 1, NULL, &ssm), KVC_ERROR_INVALID_ARGUMENT, "conv_state");
  kvc_pool_event ev[2];
  CHECK_REFUSED(kvc_pool_events_pull(p, ev, 2, NULL), KVC_ERROR_INVALID_ARGUMENT, "count");
  CHECK_REFUSED(kvc_pool_events_pull(p, NULL, 2, &n), KVC_ERROR_INVALID_ARGUMENT, "events is NULL");
  CHECK_UNCHANGED(p, seqs, before);
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 2, &n));
  CHECK_EQ_U64(n, 1); /* the one block a stored; no refusal queued anything */
  kvc_pool_destroy(other);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_create_refusals);
  TU_RUN(test_refusals_leave_the_pool_unchanged);
  return tu_finish();
}
