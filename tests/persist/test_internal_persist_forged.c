/*
 * test_internal_persist_forged.c: files whose checksums are all right but
 * whose contents are not: a valid file is parsed, one or more of its
 * sections are replaced, dropped, doubled or renumbered, and the file is
 * written again through the library's own section writer (core/persist/
 * output.c), so every checksum is recomputed and only the checks on the
 * values themselves can refuse it (docs/file-format.md: a checksum proves
 * the bytes are the ones written, not that the writer was right). Each
 * forged file, of a cache, an encoder-decoder cache or a pool sequence, is
 * refused by load and restore with KVC_ERROR_IO (a pool or model that
 * differs: INVALID_ARGUMENT) and a message naming what is wrong; a restored
 * target and the pool are unchanged.
 */
#include "../pool/pool_test.h"
#include "persist/crc32c.h"
#include "persist/persist_internal.h"
#include "persist/read_file.h"
#include "persist_test.h"

/* ---- the forger ---------------------------------------------------------- */

enum { F_REPLACE = 1, F_DROP, F_DOUBLE, F_RENUMBER };

typedef struct forge_edit {
  uint32_t type, part, index, sub;
  int action;
  const unsigned char* payload; /* F_REPLACE */
  size_t bytes;
  uint32_t new_index; /* F_RENUMBER */
} forge_edit;

static void emit_section(kvci_out* out, const kvcf_section* h, const unsigned char* payload, size_t bytes) {
  kvcf_section s = *h;
  s.payload_bytes = bytes;
  kvci_out_begin(out, &s);
  kvci_out_bytes(out, payload, bytes);
  kvci_out_end(out);
}

/* `in` with the edits applied, every checksum recomputed, into `out` (freed by the caller); 1 on success. */
static int forge(const ps_buffer* in, const forge_edit* edits, int n, ps_buffer* out) {
  kvci_file f;
  memset(out, 0, sizeof *out);
  kvci_source src;
  kvci_source_borrow("forge", in->data, in->len, &src);
  kvc_error* e = kvci_file_parse("forge", &src, &f);
  if (!CHECK_OK(e)) return 0;
  kvci_out o;
  memset(&o, 0, sizeof o);
  o.fn = "forge", o.write = ps_buffer_write, o.user = out;
  kvci_out_file_header(&o, f.object, in->data + 40);
  for (size_t i = 0; i < f.count; i++) {
    const kvci_file_section* s = &f.sections[i];
    const forge_edit* ed = NULL;
    for (int k = 0; k < n; k++)
      if (edits[k].type == s->h.type && edits[k].part == s->h.part && edits[k].index == s->h.index &&
          edits[k].sub == s->h.sub)
        ed = &edits[k];
    kvcf_section h = s->h;
    if (ed && ed->action == F_DROP) continue;
    if (ed && ed->action == F_RENUMBER) h.index = ed->new_index;
    if (ed && ed->action == F_REPLACE)
      emit_section(&o, &h, ed->payload, ed->bytes);
    else
      emit_section(&o, &h, s->payload, (size_t)s->h.payload_bytes);
    if (ed && ed->action == F_DOUBLE) emit_section(&o, &h, s->payload, (size_t)s->h.payload_bytes);
  }
  kvci_file_free(&f);
  return CHECK_OK(kvci_out_finish(&o));
}

/* A copy of a section's payload, to edit as a record of int64 values. */
static ps_buffer payload_of(const ps_buffer* file, uint32_t type, uint32_t part, uint32_t index, uint32_t sub) {
  ps_buffer b = {0};
  kvci_file f;
  kvci_source src;
  kvci_source_borrow("forge", file->data, file->len, &src);
  if (!CHECK_OK(kvci_file_parse("forge", &src, &f))) return b;
  const kvci_file_section* s = kvci_file_find(&f, type, part, index, sub);
  if (CHECK(s != NULL)) ps_buffer_write(&b, s->payload, (size_t)s->h.payload_bytes + 8); /* room for one more */
  if (s) b.len = (size_t)s->h.payload_bytes;
  kvci_file_free(&f);
  return b;
}

static int64_t rec_get(const ps_buffer* r, size_t k) { return (int64_t)kvcf_get64(r->data + 8 * k); }
static void rec_set(ps_buffer* r, size_t k, int64_t v) { kvcf_put64(r->data + 8 * k, (uint64_t)v); }
/* Inserts v before value k (the buffer has room for one). */
static void rec_insert(ps_buffer* r, size_t k, int64_t v) {
  memmove(r->data + 8 * k + 8, r->data + 8 * k, r->len - 8 * k);
  r->len += 8;
  rec_set(r, k, v);
}

/* Whether msg contains one of the '|'-separated parts (a check whose wording changed keeps both until one goes). */
static int mentions(const char* msg, const char* parts) {
  char one[160];
  for (const char* p = parts;;) {
    const char* bar = strchr(p, '|');
    snprintf(one, sizeof one, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
    if (strstr(msg, one)) return 1;
    if (!bar) return 0;
    p = bar + 1;
  }
}

/* ---- the files ----------------------------------------------------------- */

/* Layers: 0 dynamic, 1 static indexed (row buffers), 2 sink (a kind-wide state); 3 dynamic and 4 quantized (its
 * quantizer in the fingerprint), never updated. */
enum { L_DYN = 0, L_IDX = 1, L_SINK = 2, L_EMPTY = 3, NUM_UPDATED = 3, NUM_LAYERS = 5 };

static kvc_cache* make_cache(uint64_t step) {
  static kvc_quant_options quant = KVC_QUANT_OPTIONS_INIT;
  quant.q_group_size = 8;
  quant.residual_length = 2;
  kvc_layer_options l[NUM_LAYERS] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC_INDEXED, 0, 8),
                                     tu_layer(KVC_LAYER_SINK, 6, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                     tu_layer(KVC_LAYER_QUANTIZED, 0, 0)};
  l[L_SINK].num_sink_tokens = 1;
  l[4].quant = &quant;
  kvc_cache_options o = tu_custom_options(NUM_LAYERS, l);
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  ps_step(c, NUM_UPDATED, 3, 0, step);
  ps_step(c, NUM_UPDATED, 1, 3, step + 1);
  return c;
}

typedef struct fixture {
  ps_buffer file;  /* a valid file of make_cache(1) */
  kvc_cache* target; /* make_cache(50): restores must leave it as it is */
  cache_snap before;
} fixture;

static int setup(fixture* fx) {
  memset(fx, 0, sizeof *fx);
  kvc_cache* c = make_cache(1);
  if (!c) return 0;
  int ok = CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &fx->file, NULL));
  kvc_cache_destroy(c);
  fx->target = make_cache(50);
  if (!ok || !fx->target) return 0;
  snap_take(fx->target, &fx->before);
  return 1;
}

static void teardown(fixture* fx) {
  snap_free(&fx->before);
  kvc_cache_destroy(fx->target);
  free(fx->file.data);
}

/* The forged file is refused by load (code `code`) and restore (`restore_code`, 0: the same), both naming `part`;
 * the target is unchanged. */
static void refused_both(fixture* fx, const forge_edit* edits, int n, kvc_code code, kvc_code restore_code,
                         const char* part, int line) {
  ps_buffer forged;
  if (!forge(&fx->file, edits, n, &forged)) return;
  kvc_cache* out = NULL;
  kvc_error* e = kvc_cache_load_buffer(forged.data, forged.len, NULL, &out);
  for (int pass = 0; pass < 2; pass++) {
    kvc_code want = pass && restore_code ? restore_code : code;
    int ok = CHECK(e != NULL) && CHECK_EQ_I64(kvc_error_code(e), want) &&
             CHECK(part == NULL || mentions(kvc_error_message(e), part));
    if (!ok) fprintf(TU_LOG, "    line %d (%s): \"%s\" should name \"%s\"\n", line, pass ? "restore" : "load",
                     e ? kvc_error_message(e) : "(accepted)", part ? part : "");
    kvc_error_destroy(e);
    e = pass ? NULL : kvc_cache_restore_buffer(fx->target, forged.data, forged.len);
  }
  CHECK_EQ_PTR(out, NULL);
  if (!CHECK(snap_unchanged(fx->target, &fx->before, 0))) fprintf(TU_LOG, "    line %d\n", line);
  free(forged.data);
}
#define REFUSED(fx, edits, n, code, part) refused_both((fx), (edits), (n), (code), 0, (part), __LINE__)

/* A layer record with value k set to v. */
static void layer_value(fixture* fx, uint32_t layer, size_t k, int64_t v, const char* part, int line) {
  ps_buffer r = payload_of(&fx->file, KVCF_LAYER, 0, layer, 0);
  if (!r.data) return;
  rec_set(&r, k, v);
  const forge_edit ed = {KVCF_LAYER, 0, layer, 0, F_REPLACE, r.data, r.len, 0};
  refused_both(fx, &ed, 1, KVC_ERROR_IO, 0, part, line);
  free(r.data);
}

/* ---- caches -------------------------------------------------------------- */

static void test_forger_keeps_a_valid_file_valid(void) {
  fixture fx;
  REQUIRE(setup(&fx));
  ps_buffer same;
  REQUIRE(forge(&fx.file, NULL, 0, &same));
  CHECK_EQ_U64(same.len, fx.file.len);
  CHECK(!memcmp(same.data, fx.file.data, same.len)); /* the forger writes what the library writes */
  kvc_cache *loaded = NULL, *orig = make_cache(1);
  CHECK_OK(kvc_cache_load_buffer(same.data, same.len, NULL, &loaded));
  if (loaded && orig) ps_same(loaded, orig, "a re-signed unchanged file");
  kvc_cache_destroy(loaded);
  kvc_cache_destroy(orig);
  free(same.data);
  teardown(&fx);
}

/* The generic fields of a layer record: each out of its range, then out of step with the others. */
static void test_layer_records(void) {
  fixture fx;
  REQUIRE(setup(&fx));
  for (size_t k = 0; k < 15; k++) layer_value(&fx, L_DYN, k, -1, "a field is out of range", __LINE__);
  layer_value(&fx, L_DYN, 0, 2, "a field is out of range", __LINE__);
  /* An initialized store: every geometry value below 1, a region past its end or past the capacity. */
  for (size_t k = 1; k <= 6; k++) layer_value(&fx, L_DYN, k, 0, "geometry or region is inconsistent", __LINE__);
  ps_buffer r = payload_of(&fx.file, KVCF_LAYER, 0, L_DYN, 0);
  REQUIRE(r.data);
  layer_value(&fx, L_DYN, 7, rec_get(&r, 8) + 1, "geometry or region is inconsistent", __LINE__);
  layer_value(&fx, L_DYN, 8, rec_get(&r, 6) + 1, "geometry or region is inconsistent", __LINE__);
  /* What the fingerprint says: initialized, dtype, heads, key and value dims. */
  layer_value(&fx, L_DYN, 0, 0, "record and the fingerprint disagree", __LINE__);
  layer_value(&fx, L_DYN, 1, rec_get(&r, 1) == KVC_DTYPE_FLOAT32 ? KVC_DTYPE_FLOAT16 : KVC_DTYPE_FLOAT32,
              "record and the fingerprint disagree", __LINE__);
  for (size_t k = 3; k <= 5; k++)
    layer_value(&fx, L_DYN, k, rec_get(&r, k) + 1, "record and the fingerprint disagree", __LINE__);
  layer_value(&fx, L_DYN, 15, 1000, "its row buffer count", __LINE__);
  layer_value(&fx, L_DYN, 15, 1, "its row buffer sizes", __LINE__); /* a count, then no sizes */
  free(r.data);

  /* A never-updated layer: offloaded without a store, extension state its kind has not, row buffers without it. */
  layer_value(&fx, L_EMPTY, 13, 1, "offloaded without a store", __LINE__);
  layer_value(&fx, L_EMPTY, 14, 1, "keeps no extension state", __LINE__);
  r = payload_of(&fx.file, KVCF_LAYER, 0, L_EMPTY, 0);
  REQUIRE(r.data);
  rec_set(&r, 15, 1);
  ps_buffer_write(&r, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16); /* allocated 0, row_bytes 0 */
  forge_edit ed = {KVCF_LAYER, 0, L_EMPTY, 0, F_REPLACE, r.data, r.len, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "row buffers without extension state");
  free(r.data);
  r = payload_of(&fx.file, KVCF_LAYER, 0, L_EMPTY, 0);
  REQUIRE(r.data);
  rec_insert(&r, r.len / 8, 0); /* a value after the record */
  ed.payload = r.data, ed.bytes = r.len;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "bytes after its kind's record");
  free(r.data);

  /* The indexed layer's row buffers: one fewer than its kind has, and an allocated one of no bytes. */
  r = payload_of(&fx.file, KVCF_LAYER, 0, L_IDX, 0);
  REQUIRE(r.data);
  int64_t rows = rec_get(&r, 15);
  REQUIRE(rows >= 1);
  rec_set(&r, 15, rows - 1);
  memmove(r.data + 8 * (16 + 2 * (rows - 1)), r.data + 8 * (16 + 2 * rows), r.len - 8 * (16 + 2 * rows));
  r.len -= 16;
  ed = (forge_edit){KVCF_LAYER, 0, L_IDX, 0, F_REPLACE, r.data, r.len, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "another number of row buffers");
  free(r.data);
  r = payload_of(&fx.file, KVCF_LAYER, 0, L_IDX, 0);
  REQUIRE(r.data);
  int64_t j = -1;
  for (int64_t i = 0; i < rows && j < 0; i++)
    if (rec_get(&r, 16 + 2 * (size_t)i)) j = i;
  REQUIRE(j >= 0); /* an allocated row buffer (the indexer's keys) */
  rec_set(&r, 17 + 2 * (size_t)j, 0);
  const forge_edit two[2] = {{KVCF_LAYER, 0, L_IDX, 0, F_REPLACE, r.data, r.len, 0},
                             {KVCF_ROWS, 0, L_IDX, (uint32_t)j, F_REPLACE, r.data, 0, 0}};
  REFUSED(&fx, two, 2, KVC_ERROR_IO, "an allocated row buffer is empty");
  free(r.data);
  teardown(&fx);
}

/* Sections missing, of another size, doubled or of another kind. */
static void test_sections(void) {
  fixture fx;
  REQUIRE(setup(&fx));
  forge_edit ed = {KVCF_LAYER, 0, L_DYN, 0, F_DROP, NULL, 0, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "LAYR section is missing");
  ed.type = KVCF_KEYS;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "its KEYS section (sub 0) is missing");
  ed.type = KVCF_VALUES, ed.action = F_REPLACE, ed.payload = fx.file.data, ed.bytes = 8;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "has 8 bytes, not");
  ed = (forge_edit){KVCF_ROWS, 0, L_IDX, 0, F_DROP, NULL, 0, 0};
  for (ed.sub = 0; ed.sub < 4; ed.sub++) { /* whichever of its row buffers is allocated */
    ps_buffer forged;
    REQUIRE(forge(&fx.file, &ed, 1, &forged));
    if (forged.len != fx.file.len) REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "ROWS section");
    free(forged.data);
  }
  ed = (forge_edit){KVCF_CACHE_STATE, 0, 0, 0, F_DROP, NULL, 0, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "cache state section (CSTA) is missing or malformed");
  ps_buffer r = payload_of(&fx.file, KVCF_CACHE_STATE, 0, 0, 0);
  REQUIRE(r.data);
  rec_insert(&r, 2, 0);
  ed = (forge_edit){KVCF_CACHE_STATE, 0, 0, 0, F_REPLACE, r.data, r.len, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "(CSTA) is missing or malformed");
  free(r.data);

  /* The sink kind's cache-wide state: twice, and under a kind that keeps none. */
  ed = (forge_edit){KVCF_KIND_STATE, 0, KVC_LAYER_SINK, 0, F_DOUBLE, NULL, 0, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "kind state section|each section may appear once");
  ed.action = F_RENUMBER, ed.new_index = KVC_LAYER_DYNAMIC;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "which has none");
  ed.new_index = 1000;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "names kind 1000");

  /* No fingerprint: load says which part, restore that it cannot compare. */
  ed = (forge_edit){KVCF_FINGERPRINT, 0, 0, 0, F_DROP, NULL, 0, 0};
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "no fingerprint section (FPRT)");
  teardown(&fx);
}

/* The fingerprint's own values: settings, layer prints, counts; load reads them, restore compares them. */
static void test_fingerprints(void) {
  fixture fx;
  REQUIRE(setup(&fx));
  ps_buffer r = payload_of(&fx.file, KVCF_FINGERPRINT, 0, 0, 0);
  REQUIRE(r.data);
  const size_t values = r.len / 8, lazy = 4, count = 4 + 19, layer0 = count + 1;
  REQUIRE(values == layer0 + 19 * NUM_LAYERS);
  forge_edit ed = {KVCF_FINGERPRINT, 0, 0, 0, F_REPLACE, r.data, r.len, 0};
  struct {
    size_t k;
    int64_t v;
    kvc_code restore;
    const char* part;
  } cases[] = {
      {0, -1, 0, "the fingerprint's settings are malformed"},
      {1, 7, KVC_ERROR_INVALID_ARGUMENT, NULL}, /* offload 7: load refuses the settings, restore the model */
      {3, 99, KVC_ERROR_INVALID_ARGUMENT, NULL}, /* an unknown query offset rule */
      {lazy + 4, -1, 0, "the fingerprint of the lazy layer is malformed"}, /* num_states */
      {lazy + 14, 2, 0, "the fingerprint of the lazy layer is malformed"}, /* initialized */
      {count, 1000, 0, "layer count is malformed"},
      {layer0 + 14, 2, 0, "the fingerprint of layer 0 is malformed"},
      {layer0 + 15, 999, 0, "the fingerprint of layer 0 is malformed"},  /* dtype */
      {layer0 + 16, 0, 0, "the fingerprint of layer 0 is malformed"},    /* heads */
      {layer0 + 17, 0, 0, "the fingerprint of layer 0 is malformed"},    /* key dim */
      {layer0 + 18, (int64_t)1 << 40, 0, "the fingerprint of layer 0 is malformed"},
      {layer0 + 0, 999, 0, "invalid layer"}, /* a kind no cache has */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t was = rec_get(&r, cases[i].k);
    rec_set(&r, cases[i].k, cases[i].v);
    if (cases[i].k == 1 || cases[i].k == 3)
      refused_both(&fx, &ed, 1, KVC_ERROR_IO, cases[i].restore, "", __LINE__);
    else
      refused_both(&fx, &ed, 1, KVC_ERROR_IO, cases[i].restore, cases[i].part, __LINE__);
    rec_set(&r, cases[i].k, was);
  }
  ed.bytes = 8 * (lazy + 3); /* ends inside the lazy layer */
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "the fingerprint ends inside the lazy layer");
  ed.bytes = 8 * (layer0 + 19 * (NUM_LAYERS - 1)); /* the count says one layer more than there is */
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "fingerprint");
  rec_insert(&r, values, 0);
  ed.bytes = r.len;
  REFUSED(&fx, &ed, 1, KVC_ERROR_IO, "bytes after its last layer");
  free(r.data);
  teardown(&fx);
}

/* ---- encoder-decoder caches ----------------------------------------------- */

static void test_encoder_decoder_without_flags(void) {
  kvc_cache *a = make_cache(3), *b = make_cache(4);
  kvc_encoder_decoder_cache *ed = NULL, *out = NULL;
  REQUIRE(a && b);
  REQUIRE_OK(kvc_encoder_decoder_cache_create(a, b, &ed));
  ps_buffer file = {0}, forged;
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &file, NULL));
  const forge_edit drop = {KVCF_ENCDEC, 0, 0, 0, F_DROP, NULL, 0, 0};
  REQUIRE(forge(&file, &drop, 1, &forged));
  kvc_error* e = kvc_encoder_decoder_cache_load_buffer(forged.data, forged.len, NULL, &out);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "no is_updated section (EDEC)"));
  kvc_error_destroy(e);
  CHECK_EQ_PTR(out, NULL);
  /* The cross-attention half's fingerprint gone: restore cannot compare it, load cannot build it. */
  const forge_edit drop_cross = {KVCF_FINGERPRINT, 1, 0, 0, F_DROP, NULL, 0, 0};
  free(forged.data);
  REQUIRE(forge(&file, &drop_cross, 1, &forged));
  e = kvc_encoder_decoder_cache_restore_buffer(ed, forged.data, forged.len);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "no fingerprint section"));
  kvc_error_destroy(e);
  e = kvc_encoder_decoder_cache_load_buffer(forged.data, forged.len, NULL, &out);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "for part 1"));
  kvc_error_destroy(e);
  CHECK_EQ_PTR(out, NULL);
  free(forged.data);
  free(file.data);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* ---- pool sequences ------------------------------------------------------ */

static const pt_group GROUPS[2] = {{KVC_POOL_GROUP_FULL, 4, 16, 0}, {KVC_POOL_GROUP_RECURRENT, 4, 4, 0}};
static const uint32_t LAYER_GROUP[2] = {0, 1};

typedef struct pool_fixture {
  kvc_pool *a, *b;
  ps_buffer file;
  uint64_t free_before[2];
} pool_fixture;

static int pool_setup(pool_fixture* px) {
  memset(px, 0, sizeof *px);
  if (!CHECK_OK(pt_pool(&px->a, GROUPS, 2, LAYER_GROUP, 2, KVC_POOL_LAYOUT_NHD, 0, 1)) ||
      !CHECK_OK(pt_pool(&px->b, GROUPS, 2, LAYER_GROUP, 2, KVC_POOL_LAYOUT_NHD, 0, 1)))
    return 0;
  kvc_pool_sequence* s = NULL;
  if (!CHECK_OK(kvc_pool_sequence_create(px->a, NULL, &s))) return 0;
  int32_t ids[10];
  for (int i = 0; i < 10; i++) ids[i] = 7 + 5 * i;
  if (!CHECK_OK(pt_step(px->a, 2, 2, s, ids, 10))) return 0;
  if (!CHECK_OK(kvc_pool_sequence_save_to(s, ps_buffer_write, &px->file, NULL))) return 0;
  for (uint32_t g = 0; g < 2; g++) px->free_before[g] = pt_stats(px->b, g).free_blocks;
  return 1;
}

static void pool_teardown(pool_fixture* px) {
  kvc_pool_destroy(px->a);
  kvc_pool_destroy(px->b);
  free(px->file.data);
}

static void pool_refused(pool_fixture* px, const forge_edit* edits, int n, kvc_code code, const char* part,
                         int line) {
  ps_buffer forged;
  if (!forge(&px->file, edits, n, &forged)) return;
  kvc_pool_sequence* out = NULL;
  kvc_error* e = kvc_pool_sequence_load_buffer(px->b, forged.data, forged.len, &out);
  int ok = CHECK(e != NULL) && CHECK_EQ_I64(kvc_error_code(e), code) && CHECK(mentions(kvc_error_message(e), part));
  if (!ok) fprintf(TU_LOG, "    line %d: \"%s\" should name \"%s\"\n", line, e ? kvc_error_message(e) : "(accepted)",
                   part);
  kvc_error_destroy(e);
  CHECK_EQ_PTR(out, NULL);
  for (uint32_t g = 0; g < 2; g++) CHECK_EQ_U64(pt_stats(px->b, g).free_blocks, px->free_before[g]);
  free(forged.data);
}
#define POOL_REFUSED(px, edits, n, code, part) pool_refused((px), (edits), (n), (code), (part), __LINE__)

/* The section's record with the value at byte `at` set to v (a pool fingerprint's seed has any length). */
static void pool_value(pool_fixture* px, uint32_t type, size_t at, int64_t v, kvc_code code, const char* part,
                       int line) {
  ps_buffer r = payload_of(&px->file, type, 0, 0, 0);
  if (!r.data) return;
  kvcf_put64(r.data + at, (uint64_t)v);
  const forge_edit ed = {type, 0, 0, 0, F_REPLACE, r.data, r.len, 0};
  pool_refused(px, &ed, 1, code, part, line);
  free(r.data);
}

static void test_pool_fingerprints(void) {
  pool_fixture px;
  REQUIRE(pool_setup(&px));
  ps_buffer r = payload_of(&px.file, KVCF_FINGERPRINT, 0, 0, 0);
  REQUIRE(r.data);
  /* dtype, layout, seed length, the seed's bytes, groups: count then 3 values each, layers: count then 7 each. */
  const size_t seed_len = (size_t)rec_get(&r, 2), groups = 24 + seed_len, layers = groups + 8 * (1 + 2 * 3);
  pool_value(&px, KVCF_FINGERPRINT, 0, 99, KVC_ERROR_INVALID_ARGUMENT, "dtype 99 (file)", __LINE__);
  pool_value(&px, KVCF_FINGERPRINT, 8, 99, KVC_ERROR_INVALID_ARGUMENT, "layout 99 (file)", __LINE__);
  if (seed_len) { /* a seed of the same length but other bytes: another model's blocks */
    ps_buffer s = payload_of(&px.file, KVCF_FINGERPRINT, 0, 0, 0);
    s.data[24] ^= 1;
    const forge_edit ed = {KVCF_FINGERPRINT, 0, 0, 0, F_REPLACE, s.data, s.len, 0};
    POOL_REFUSED(&px, &ed, 1, KVC_ERROR_INVALID_ARGUMENT, "the hash seed");
    free(s.data);
  }
  pool_value(&px, KVCF_FINGERPRINT, groups, 3, KVC_ERROR_INVALID_ARGUMENT, "number of groups 3 (file)", __LINE__);
  pool_value(&px, KVCF_FINGERPRINT, groups + 16, 8, KVC_ERROR_INVALID_ARGUMENT, "group 0: block_size 8", __LINE__);
  pool_value(&px, KVCF_FINGERPRINT, layers, 5, KVC_ERROR_INVALID_ARGUMENT, "number of layers 5 (file)", __LINE__);
  pool_value(&px, KVCF_FINGERPRINT, layers + 8 * (1 + 7 + 2), 99, KVC_ERROR_INVALID_ARGUMENT,
             "layer 1: key_head_dim", __LINE__);
  /* Cut short in each part, and a value too many. */
  const size_t cuts[4] = {8, groups, groups + 16, layers + 24};
  forge_edit ed = {KVCF_FINGERPRINT, 0, 0, 0, F_REPLACE, r.data, 0, 0};
  for (int i = 0; i < 4; i++) {
    ed.bytes = cuts[i];
    POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "pool fingerprint is malformed");
  }
  if (seed_len) {
    ed.bytes = 24 + seed_len / 2; /* ends inside the seed */
    POOL_REFUSED(&px, &ed, 1, KVC_ERROR_INVALID_ARGUMENT, "the hash seed");
  }
  memset(r.data + r.len, 0, 8); /* payload_of left room for one more value */
  ed.bytes = r.len + 8;
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "pool fingerprint is malformed");
  ed.action = F_DROP;
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "has no FPRT section");
  ed.type = KVCF_SEQUENCE;
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "has no PSEQ section");
  free(r.data);
  pool_teardown(&px);
}

static void test_pool_sequence_records(void) {
  pool_fixture px;
  REQUIRE(pool_setup(&px));
  ps_buffer r = payload_of(&px.file, KVCF_SEQUENCE, 0, 0, 0);
  REQUIRE(r.data);
  /* length, committed, the 32-byte root, `length` tokens, then per group: blocks, window_from, hashed, live, flags
   * (byte offsets below). */
  const int64_t length = rec_get(&r, 0);
  const size_t tokens = 8 * (2 + 4), group0 = tokens + 8 * (size_t)length;
  const int64_t blocks0 = rec_get(&r, group0 / 8);
  const size_t group1 = group0 + 8 * (4 + (size_t)blocks0), last_flag = group1 - 8;
  const struct {
    size_t at;
    int64_t v;
    const char* part;
  } cases[] = {
      {0, length + 1000, "its length, root or tokens"},
      {8, length + 1, "its length, root or tokens"}, /* committed past the length */
      {tokens, -5, "a token id outside"},
      {tokens + 8, (int64_t)1 << 31, "a token id outside"},
      {group0, blocks0 + 5, "a group's table"},
      {group0 + 8, blocks0 + 1, "a group's table"},   /* window_from */
      {group0 + 16, 100, "a group's table"},          /* hashed */
      {group0 + 24, 1, "a group's table"},            /* a live state in full attention */
      {group0 + 32, 2, "a table entry's flag|table entry 0 is 2"},
      {group1, 1, "a group's table"},                 /* blocks in a recurrent group */
      {group1 + 24, 2, "a group's table"},
      {last_flag, !rec_get(&r, last_flag / 8), "of another size|table entry"}, /* one block more or fewer than the sections */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    pool_value(&px, KVCF_SEQUENCE, cases[i].at, cases[i].v, KVC_ERROR_IO, cases[i].part, __LINE__);
  rec_insert(&r, r.len / 8, 0);
  forge_edit ed = {KVCF_SEQUENCE, 0, 0, 0, F_REPLACE, r.data, r.len, 0};
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "bytes after the last group");
  /* Block and recurrent sections: missing, or of another size. */
  ed = (forge_edit){KVCF_BLOCKS, 0, 0, 1, F_DROP, NULL, 0, 0};
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "value bytes of layer 0 are missing");
  ed = (forge_edit){KVCF_RECURRENT, 0, 1, 0, F_REPLACE, r.data, 8, 0};
  POOL_REFUSED(&px, &ed, 1, KVC_ERROR_IO, "key bytes of layer 1 are of another size");
  free(r.data);
  pool_teardown(&px);
}

/* ---- the frame: header, footer and table changed, their own checksums recomputed ---------------------------- */

/* Recomputes the checksum (bytes 60..63) of the 64-byte header, section header or footer at `at`. */
static void resign(ps_buffer* b, size_t at) { kvcf_put32(b->data + at, kvci_crc32c_update(0, b->data + at - 60, 60)); }

static void frame_refused(fixture* fx, const ps_buffer* b, const char* part, int line) {
  kvc_cache* out = NULL;
  kvc_error* e = kvc_cache_load_buffer(b->data, b->len, NULL, &out);
  int ok = CHECK(e != NULL) && CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_IO) &&
           CHECK(strstr(kvc_error_message(e), part) != NULL);
  if (!ok) fprintf(TU_LOG, "    line %d: \"%s\" should name \"%s\"\n", line, e ? kvc_error_message(e) : "(accepted)",
                   part);
  kvc_error_destroy(e);
  CHECK_EQ_PTR(out, NULL);
  e = kvc_cache_restore_buffer(fx->target, b->data, b->len);
  CHECK(e != NULL && kvc_error_code(e) == KVC_ERROR_IO);
  kvc_error_destroy(e);
}
#define FRAME_REFUSED(fx, b, part) frame_refused((fx), (b), (part), __LINE__)

static void test_frames(void) {
  fixture fx;
  REQUIRE(setup(&fx));
  ps_buffer b = {0};
  REQUIRE(ps_buffer_write(&b, fx.file.data, fx.file.len) == 0);
  const size_t len = b.len, footer = len - KVCF_FOOTER_BYTES;
  const uint64_t table = kvcf_get64(fx.file.data + footer + 8), count = kvcf_get64(fx.file.data + footer + 16);

  b.len = 10; /* the magic, then the file ends */
  FRAME_REFUSED(&fx, &b, "the file ends inside it");
  b.len = len;
  const struct {
    size_t at; /* a u64 field of the footer */
    uint64_t value;
    const char* part;
  } footers[] = {
      {24, len + 64, "the file should be"},              /* the file's size */
      {8, table + 1, "outside the file"},                /* the table's offset, unaligned */
      {8, 0, "outside the file"},                        /* inside the file header */
      {16, count + 1000, "outside the file"},            /* more sections than the table can hold */
      {8, KVCF_HEADER_BYTES, "the table's section header"}, /* a section's header, not the table's */
      {16, count - 1, "does not describe the table"},
  };
  for (size_t i = 0; i < sizeof footers / sizeof footers[0]; i++) {
    kvcf_put64(b.data + footer + footers[i].at, footers[i].value);
    resign(&b, footer + 60);
    FRAME_REFUSED(&fx, &b, footers[i].part);
    memcpy(b.data, fx.file.data, len);
  }
  /* An object kind this reader does not know (the file header re-signed). */
  kvcf_put32(b.data + 28, 9);
  resign(&b, 60);
  FRAME_REFUSED(&fx, &b, "header size or object kind");
  memcpy(b.data, fx.file.data, len);
  /* The table places the first section elsewhere (the table's checksum in the footer recomputed). */
  unsigned char* entries = b.data + table + KVCF_SECTION_HEADER_BYTES;
  kvcf_put64(entries, KVCF_HEADER_BYTES + KVCF_ALIGN);
  kvcf_put32(b.data + footer + 32, kvci_crc32c_update(0, entries, (size_t)count * KVCF_TABLE_ENTRY_BYTES));
  resign(&b, footer + 60);
  FRAME_REFUSED(&fx, &b, "the table places it elsewhere");
  memcpy(b.data, fx.file.data, len);
  /* The first section's header and its table entry disagree (the header re-signed). */
  kvcf_put32(b.data + KVCF_HEADER_BYTES + 0, KVCF_TAG('X', 'X', 'X', 'X'));
  resign(&b, KVCF_HEADER_BYTES + 60);
  FRAME_REFUSED(&fx, &b, "its header and its table entry disagree");
  memcpy(b.data, fx.file.data, len);
  free(b.data);
  teardown(&fx);
}

int main(void) {
  TU_RUN(test_forger_keeps_a_valid_file_valid);
  TU_RUN(test_layer_records);
  TU_RUN(test_sections);
  TU_RUN(test_fingerprints);
  TU_RUN(test_frames);
  TU_RUN(test_encoder_decoder_without_flags);
  TU_RUN(test_pool_fingerprints);
  TU_RUN(test_pool_sequence_records);
  return tu_finish();
}
