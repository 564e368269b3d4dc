/*
 * test_persist_lying.c: well-formed files that lie. Each case saves a cache,
 * changes ONE number of a layer's record (and, where the number sizes a
 * section, that section with it), recomputes every checksum (header,
 * sections, table, footer: tests/fuzz/files_mutator.c), and gives the file
 * to restore and load: each is refused with KVC_ERROR_IO naming the section,
 * the field and the value, and the target cache is unchanged. Before the
 * kinds' check_loaded hooks (core/kind.h) each of these loaded with "ok" and
 * the next update read or wrote out of bounds (issue: hostile bytes, point
 * 1). A file with a section repeated is refused too, and a pool sequence
 * file whose sliding group's table holds a block the window gave back.
 */
#include "persist_test.h"
#include "../pool/pool_test.h"

#include "../fuzz/files_mutator.c"
#include "../fuzz/reader.c"

/* The LAYR record's values (core/persist/save_cache.c, docs/file-format.md 'Layer record'). */
enum {
  REC_CAP = 6,
  REC_START = 7,
  REC_END = 8,
  REC_NROWS = 15,
  REC_ROW0_BYTES = 17, /* row buffer j: allocated at 16 + 2j, row bytes at 17 + 2j */
};
/* The kind's record starts after the row buffers: 16 + 2 * nrows. */
static int ext_at(int nrows, int k) { return 16 + 2 * nrows + k; }

static kvc_quant_options quant = KVC_QUANT_OPTIONS_INIT;

/* A cache of one layer of `kind` (window 6, max_cache_len 16), after a prefill of 7 and a decode step. */
static kvc_cache* make(kvc_layer_kind kind) {
  quant.q_group_size = 8;
  quant.residual_length = 2;
  kvc_layer_options l = tu_layer(kind, 6, 16);
  if (kind == KVC_LAYER_QUANTIZED) l.quant = &quant;
  if (kind == KVC_LAYER_SINK) l.num_sink_tokens = 2;
  kvc_cache_options o = tu_custom_options(1, &l);
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  return c;
}

static kvc_cache* make_filled(kvc_layer_kind kind, int64_t prefill) {
  kvc_cache* c = make(kind);
  if (c) {
    ps_step(c, 1, prefill, 0, 1);
    ps_step(c, 1, 1, prefill, 2);
  }
  return c;
}

static fm_section* find(fm_file* f, uint32_t type, uint32_t index, uint32_t sub) {
  for (size_t i = 0; i < f->count; i++)
    if (f->sections[i].type == type && f->sections[i].index == index && f->sections[i].sub == sub)
      return &f->sections[i];
  return NULL;
}

#define TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define LAYR TAG('L', 'A', 'Y', 'R')
#define ROWS TAG('R', 'O', 'W', 'S')

static int64_t rec_get(const fm_section* s, int k) { return (int64_t)get64(s->payload + 8 * k); }
static void rec_set(fm_section* s, int k, int64_t v) { put64(s->payload + 8 * k, (uint64_t)v); }

/* Resizes row buffer `sub`'s ROWS section to batch x row_bytes (zeros added), as a writer of that size would. */
static int resize_rows(fm_file* f, uint32_t sub, int64_t row_bytes) {
  fm_section* r = find(f, ROWS, 0, sub);
  if (!CHECK(r != NULL)) return 0;
  size_t len = (size_t)r->dims[0] * (size_t)row_bytes;
  unsigned char* p = (unsigned char*)realloc(r->payload, len ? len : 1);
  if (!CHECK(p != NULL)) return 0;
  if (len > r->len) memset(p + r->len, 0, len - r->len);
  r->payload = p;
  r->len = len;
  r->dims[3] = (uint32_t)row_bytes;
  return 1;
}

/*
 * The file of `c` with `lie` applied and re-signed, given to restore (into a fresh cache of the same options that
 * holds other tokens) and to load: both must refuse with KVC_ERROR_IO whose message has `words`.
 */
typedef int (*lie_fn)(fm_file* f);

static void expect_refused(kvc_layer_kind kind, kvc_cache* c, lie_fn lie, const char* words) {
  ps_buffer b = {0};
  fm_file f;
  memset(&f, 0, sizeof f);
  kvc_cache* target = make(kind);
  if (!target || !CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &b, NULL)) || !CHECK(fm_parse(b.data, b.len, &f) == 0) ||
      !lie(&f))
    goto done;
  size_t len = 0;
  unsigned char* file = fm_write(&f, &len);
  if (!CHECK(file != NULL)) goto done;
  ps_step(target, 1, 2, 0, 9);
  cache_snap before;
  snap_take(target, &before);
  kvc_error* e = kvc_cache_restore_buffer(target, file, len);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_IO);
  if (e && !CHECK(strstr(kvc_error_message(e), words) != NULL))
    fprintf(TU_LOG, "  message: %s\n  expected it to contain: %s\n", kvc_error_message(e), words);
  kvc_error_destroy(e);
  CHECK(snap_unchanged(target, &before, 0));
  snap_free(&before);
  kvc_cache* loaded = NULL;
  CHECK_ERR(kvc_cache_load_buffer(file, len, NULL, &loaded), KVC_ERROR_IO);
  CHECK(loaded == NULL);
  free(file);
done:
  fm_free(&f);
  free(b.data);
  kvc_cache_destroy(target);
}

/* The file as saved loads, and the lie is the only difference (so each refusal is the semantic check's). */
static void expect_untouched_loads(kvc_cache* c) {
  ps_buffer b = {0};
  fm_file f;
  kvc_cache* back = NULL;
  if (CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &b, NULL)) && CHECK(fm_parse(b.data, b.len, &f) == 0)) {
    size_t len = 0;
    unsigned char* file = fm_write(&f, &len);
    CHECK(file && len == b.len && !memcmp(file, b.data, len)); /* re-signing alone changes nothing */
    if (file && CHECK_OK(kvc_cache_load_buffer(file, len, NULL, &back))) ps_same(c, back, "re-signed file");
    free(file);
    fm_free(&f);
  }
  kvc_cache_destroy(back);
  free(b.data);
}

static void run_case(kvc_layer_kind kind, int64_t prefill, lie_fn lie, const char* words) {
  kvc_cache* c = make_filled(kind, prefill);
  if (!c) return;
  expect_untouched_loads(c);
  expect_refused(kind, c, lie, words);
  kvc_cache_destroy(c);
}

/* ------------------------------------------------------------- the lies */

/* The KEYS and VALS sections with `tokens` tokens (dims[2]) instead of theirs, as a writer of that region would. */
static int resize_store(fm_file* f, int64_t tokens) {
  for (int w = 0; w < 2; w++) {
    fm_section* s = find(f, w ? TAG('V', 'A', 'L', 'S') : TAG('K', 'E', 'Y', 'S'), 0, 0);
    if (!CHECK(s != NULL)) return 0;
    size_t len = (size_t)s->dims[0] * s->dims[1] * (size_t)tokens * s->dims[3] * s->elem_bytes;
    unsigned char* p = (unsigned char*)calloc(1, len ? len : 1);
    if (!CHECK(p != NULL)) return 0;
    free(s->payload);
    s->payload = p;
    s->len = len;
    s->dims[2] = (uint32_t)tokens;
  }
  return 1;
}

/* A store of `cap` slots holding [0, cap): capacity and region agree, the sections too; only the kind disagrees. */
static int store_of(fm_file* f, int64_t cap) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_START) == 0)) return 0;
  rec_set(l, REC_CAP, cap);
  rec_set(l, REC_END, cap);
  return resize_store(f, cap);
}

static int static_capacity_below_max_len(fm_file* f) { return store_of(f, 8); } /* max_cache_len 16 */
static int static_sliding_capacity(fm_file* f) { return store_of(f, 5); }       /* 6 slots */

static int dynamic_sliding_region(fm_file* f) {
  /* The store keeps window - 1 = 5 tokens; claim 1 more (the store has room: only the kind's rule is broken). */
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_START) >= 1)) return 0;
  rec_set(l, REC_START, rec_get(l, REC_START) - 1);
  return resize_store(f, rec_get(l, REC_END) - rec_get(l, REC_START));
}

static int indexer_capacity(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_NROWS) == 1)) return 0;
  rec_set(l, ext_at(1, 2), rec_get(l, ext_at(1, 2)) * 4); /* the indexer's cap: appends index past its rows */
  return 1;
}

static int indexer_row_bytes(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_NROWS) == 1)) return 0;
  int64_t row = rec_get(l, REC_ROW0_BYTES) / 2;
  rec_set(l, REC_ROW0_BYTES, row); /* half the rows a cap of that many tokens needs, the ROWS section as small */
  return resize_rows(f, 0, row);
}

static int quantized_unit_bytes(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_NROWS) == 2 && rec_get(l, ext_at(2, 0)) > 0)) return 0;
  rec_set(l, ext_at(2, 0), rec_get(l, ext_at(2, 0)) * 8); /* key unit bytes: units read past the groups */
  return 1;
}

static int quantized_row_bytes(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_NROWS) == 2)) return 0;
  int64_t row = rec_get(l, ext_at(2, 0)); /* one unit's bytes: fewer than the units held */
  if (!CHECK(rec_get(l, ext_at(2, 1)) > 1)) return 0;
  rec_set(l, REC_ROW0_BYTES, row);
  return resize_rows(f, 0, row);
}

static int linear_conv_capacity(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l && rec_get(l, REC_NROWS) == 2)) return 0;
  /* State pair 0: conv dtype, has_previous, channels, kernel, cap, ... after the pair count. */
  int cap = ext_at(2, 1 + 4);
  rec_set(l, cap, rec_get(l, cap) * 2 + 1); /* the conv rows are still cap x channels of the old cap */
  return 1;
}

static int duplicate_layer_section(fm_file* f) {
  fm_section* l = find(f, LAYR, 0, 0);
  if (!CHECK(l != NULL)) return 0;
  fm_section copy = *l;
  copy.payload = (unsigned char*)malloc(l->len);
  if (!CHECK(copy.payload != NULL)) return 0;
  memcpy(copy.payload, l->payload, l->len);
  rec_set(&copy, REC_CAP, rec_get(&copy, REC_CAP) + 1); /* the second copy says something else */
  return CHECK(push(f, &copy) == 0);
}

/* The sink kind's table (KSTA): record_layer, max_window, has_table, len, dim, rows, then rows cos and rows sin
 * floats. A window one smaller, and the table cut to match it, so that every size agrees: the next shift read the
 * table past its end. */
static int sink_table_window(fm_file* f) {
  fm_section* k = find(f, TAG('K', 'S', 'T', 'A'), KVC_LAYER_SINK, 0);
  if (!CHECK(k && rec_get(k, 2) == 1)) return 0;
  int64_t window = rec_get(k, 1), len = rec_get(k, 3), dim = rec_get(k, 4), rows = rec_get(k, 5);
  int64_t keep = (len < window - 1 ? len : window - 1) * dim;
  if (!CHECK(rows == (len < window ? len : window) * dim && keep < rows)) return 0;
  rec_set(k, 1, window - 1);
  rec_set(k, 5, keep);
  unsigned char* p = k->payload;
  memmove(p + 48 + 4 * keep, p + 48 + 4 * rows, (size_t)(4 * keep)); /* sin's first rows after cos's */
  memmove(p + 48 + 8 * keep, p + 48 + 8 * rows, k->len - (size_t)(48 + 8 * rows)); /* the re-rotations */
  k->len -= (size_t)(8 * (rows - keep));
  return 1;
}

static void test_static_capacity(void) {
  run_case(KVC_LAYER_STATIC, 7, static_capacity_below_max_len, "layer 0 (LAYR section, part 0): the store's capacity is 8");
}

static void test_static_sliding_capacity(void) {
  run_case(KVC_LAYER_STATIC_SLIDING, 3, static_sliding_capacity, "the store's capacity is 5");
}

static void test_dynamic_sliding_region(void) {
  run_case(KVC_LAYER_DYNAMIC_SLIDING, 7, dynamic_sliding_region, "the stored tokens is 6");
}

static void test_indexer_capacity(void) {
  run_case(KVC_LAYER_DYNAMIC_INDEXED, 7, indexer_capacity, "the indexer's row bytes is");
}

static void test_indexer_row_bytes(void) {
  run_case(KVC_LAYER_STATIC_INDEXED, 7, indexer_row_bytes, "the indexer's row bytes is");
}

static void test_quantized_unit_bytes(void) {
  run_case(KVC_LAYER_QUANTIZED, 12, quantized_unit_bytes, "the quantized key unit bytes is");
}

static void test_quantized_row_bytes(void) {
  run_case(KVC_LAYER_QUANTIZED, 12, quantized_row_bytes, "a quantized row buffer's row bytes is");
}

static void test_linear_conv_capacity(void) {
  run_case(KVC_LAYER_LINEAR, 7, linear_conv_capacity, "state pair 0's conv row bytes is");
}

static void test_sink_table_window(void) {
  run_case(KVC_LAYER_SINK, 7, sink_table_window, "record_layer is 0 and max_window 5");
}

static void test_duplicate_section(void) {
  run_case(KVC_LAYER_DYNAMIC, 7, duplicate_layer_section, "repeats section");
}

/* A sliding group (block 4, window 8) of a 13-token sequence decoded token by token gave its first blocks back;
 * the file claims the last of those held and the first in the window given back: the same count, so every
 * section size agrees. */
static void test_pool_sequence_window(void) {
  static const pt_group groups[2] = {{KVC_POOL_GROUP_FULL, 4, 16, 0}, {KVC_POOL_GROUP_SLIDING, 4, 16, 8}};
  static const uint32_t layer_group[2] = {0, 1};
  kvc_pool *a = NULL, *b = NULL;
  kvc_pool_sequence *s = NULL, *t = NULL;
  ps_buffer buf = {0};
  fm_file f;
  memset(&f, 0, sizeof f);
  int32_t ids[13];
  for (int i = 0; i < 13; i++) ids[i] = 100 + i;
  if (!CHECK_OK(pt_pool(&a, groups, 2, layer_group, 2, KVC_POOL_LAYOUT_NHD, 0, 1)) ||
      !CHECK_OK(pt_pool(&b, groups, 2, layer_group, 2, KVC_POOL_LAYOUT_NHD, 0, 1)) ||
      !CHECK_OK(kvc_pool_sequence_create(a, NULL, &s)))
    goto done;
  for (int i = 0; i < 13; i++) /* decode steps: the window gives blocks back as it moves */
    if (!CHECK_OK(pt_step(a, 2, 2, s, ids + i, 1))) goto done;
  if (!CHECK_OK(kvc_pool_sequence_save_to(s, ps_buffer_write, &buf, NULL)) || !CHECK(fm_parse(buf.data, buf.len, &f) == 0))
    goto done;
  fm_section* q = find(&f, TAG('P', 'S', 'E', 'Q'), 0, 0);
  /* length, committed, the 32-byte root, a value per token; then per group: blocks, window start, hashed, live,
   * and a flag per block. */
  int g1 = 2 + 4 + 13 + 4 + 4;
  const int64_t wf = q ? rec_get(q, g1 + 1) : 0; /* blocks before it left the window */
  if (!CHECK(q && rec_get(q, g1) == 4 && wf >= 1 && wf < 4 && rec_get(q, g1 + 3 + wf) == 0 &&
             rec_get(q, g1 + 4 + wf) == 1))
    goto done;
  rec_set(q, g1 + 3 + wf, 1); /* the last block the window gave back, held again */
  rec_set(q, g1 + 4 + wf, 0); /* the first block in the window, given back */
  size_t len = 0;
  unsigned char* file = fm_write(&f, &len);
  if (!CHECK(file != NULL)) goto done;
  kvc_pool_stats before = pt_stats(b, 1);
  kvc_error* e = kvc_pool_sequence_load_buffer(b, file, len, &t);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_IO);
  char want[96];
  snprintf(want, sizeof want, "group 1's table entry %lld is 1; entries before window_from (%lld)", (long long)wf - 1,
           (long long)wf);
  if (!CHECK(e && strstr(kvc_error_message(e), want) != NULL) && e)
    fprintf(TU_LOG, "  message: %s\n  expected it to contain: %s\n", kvc_error_message(e), want);
  kvc_error_destroy(e);
  CHECK(t == NULL);
  kvc_pool_stats after = pt_stats(b, 1);
  CHECK(!memcmp(&before, &after, sizeof before));
  free(file);
done:
  fm_free(&f);
  free(buf.data);
  kvc_pool_sequence_destroy(t);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
}

/* A KEYS section of a layer the file does not have: no loader reads it, yet its checksum is checked (after the
 * load, which the cache built aside makes harmless). As written it loads; with a byte of its payload changed it is
 * refused from a buffer and from a path, a restore's target unchanged. */
static void test_unread_bulk_section_is_checked(void) {
  kvc_cache* c = make_filled(KVC_LAYER_DYNAMIC, 7);
  ps_buffer b = {0};
  fm_file f;
  memset(&f, 0, sizeof f);
  unsigned char* file = NULL;
  size_t len = 0;
  if (!c || !CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &b, NULL)) || !CHECK(fm_parse(b.data, b.len, &f) == 0))
    goto done;
  fm_section* k = find(&f, TAG('K', 'E', 'Y', 'S'), 0, 0);
  if (!CHECK(k != NULL && k->len > 0)) goto done;
  fm_section extra = *k;
  extra.index = 99;
  if (!CHECK((extra.payload = (unsigned char*)malloc(k->len)) != NULL)) goto done;
  memcpy(extra.payload, k->payload, k->len);
  if (!CHECK(push(&f, &extra) == 0) || !CHECK((file = fm_write(&f, &len)) != NULL)) goto done;
  kvc_cache* back = NULL;
  if (CHECK_OK(kvc_cache_load_buffer(file, len, NULL, &back))) ps_same(c, back, "with an unread section");
  kvc_cache_destroy(back);
  /* The extra section is the last before the table: its payload's first byte. */
  const size_t table = 64 + (f.count * 32 + 63) / 64 * 64;
  file[len - 64 - table - (extra.len + 63) / 64 * 64] ^= 0x01;
  back = NULL;
  kvc_error* e = kvc_cache_load_buffer(file, len, NULL, &back);
  CHECK(back == NULL);
  if (!CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "(KEYS, part 0, index 99)") &&
             strstr(kvc_error_message(e), "checksum")))
    fprintf(TU_LOG, "  message: %s\n", e ? kvc_error_message(e) : "(none)");
  kvc_error_destroy(e);
  kvc_cache* target = make(KVC_LAYER_DYNAMIC);
  if (target) {
    ps_step(target, 1, 2, 0, 9);
    cache_snap before;
    snap_take(target, &before);
    CHECK_ERR(kvc_cache_restore_buffer(target, file, len), KVC_ERROR_IO);
    CHECK(snap_unchanged(target, &before, 0));
    snap_free(&before);
    kvc_cache_destroy(target);
  }
  char path[256];
  ps_path(path, sizeof path, "unread");
  FILE* out = fopen(path, "wb");
  if (CHECK(out != NULL)) {
    CHECK(fwrite(file, 1, len, out) == len);
    fclose(out);
    back = NULL;
    CHECK_ERR(kvc_cache_load(path, NULL, &back), KVC_ERROR_IO);
    CHECK(back == NULL);
    unlink(path);
  }
done:
  free(file);
  fm_free(&f);
  free(b.data);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_static_capacity);
  TU_RUN(test_static_sliding_capacity);
  TU_RUN(test_dynamic_sliding_region);
  TU_RUN(test_indexer_capacity);
  TU_RUN(test_indexer_row_bytes);
  TU_RUN(test_quantized_unit_bytes);
  TU_RUN(test_quantized_row_bytes);
  TU_RUN(test_linear_conv_capacity);
  TU_RUN(test_sink_table_window);
  TU_RUN(test_duplicate_section);
  TU_RUN(test_unread_bulk_section_is_checked);
  TU_RUN(test_pool_sequence_window);
  return tu_finish();
}
