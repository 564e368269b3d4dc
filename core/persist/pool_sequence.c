/*
 * core/persist/pool_sequence.c: one sequence of a paged pool in a file
 * (docs/file-format.md, 'A pool sequence'), and a new sequence in another
 * pool from it. The pool's own structures are core/pool/pool_internal.h's;
 * this file only reads them to save, and builds the new sequence through
 * the pool's block functions (take, cache) so its books stay right.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../pool/pool_internal.h"
#include "../pool/sha256.h"
#include "persist_internal.h"

/* ------------------------------------------------------------ fingerprint */

enum { GROUP_VALUES = 3, LAYER_VALUES = 7, STORAGE_VALUES = 3 };
static const char* const GROUP_NAMES[GROUP_VALUES] = {"kind", "block_size", "window"};
static const char* const LAYER_NAMES[LAYER_VALUES] = {"group",    "num_kv_heads", "key_head_dim", "value_head_dim",
                                                      "conv_dim", "conv_kernel",  "ssm_state_size"};
static const char* const STORAGE_NAMES[STORAGE_VALUES] = {"storage", "k_scale (float32 bits)",
                                                          "v_scale (float32 bits)"};

/* The section dtype of an fp8 layer's blocks (docs/file-format.md): its codes, which no kvc_dtype names. */
#define FILE_DTYPE_FP8_E4M3 (0x100u + KVC_POOL_STORAGE_FP8_E4M3)

static uint32_t section_dtype(const kvc_pool* p, const kvci_pool_layer* l) {
  return kvci_pool_is_fp8(l) ? FILE_DTYPE_FP8_E4M3 : (uint32_t)p->dtype;
}

static int has_fp8(const kvc_pool* p) {
  for (uint32_t l = 0; l < p->num_layers; l++)
    if (kvci_pool_is_fp8(&p->layers[l])) return 1;
  return 0;
}

static void storage_values(const kvci_pool_layer* l, int64_t v[STORAGE_VALUES]) {
  uint32_t bits[2];
  memcpy(bits, l->scale, sizeof bits);
  v[0] = l->storage, v[1] = bits[0], v[2] = bits[1];
}

static void group_values(const kvci_pool_group* g, int64_t v[GROUP_VALUES]) {
  v[0] = g->kind, v[1] = g->block_size, v[2] = g->window;
}

static void layer_values(const kvci_pool_layer* l, int64_t v[LAYER_VALUES]) {
  const int64_t x[LAYER_VALUES] = {l->group, l->heads, l->kdim, l->vdim, l->conv_dim, l->conv_kernel, l->dstate};
  memcpy(v, x, sizeof x);
}

/* The pool's fingerprint record: dtype, layout, the hash seed, then every group and every layer, and (since 0.7,
   a pool with fp8 layers only, so that other pools' files keep their form) every layer's storage and scales. */
static void pool_fingerprint(const kvc_pool* p, kvci_record* r) {
  kvci_rec_i64(r, p->dtype);
  kvci_rec_i64(r, p->layout);
  kvci_rec_i64(r, (int64_t)p->seed_len);
  kvci_rec_bytes(r, p->seed, p->seed_len);
  kvci_rec_i64(r, p->num_groups);
  int64_t v[LAYER_VALUES];
  for (uint32_t g = 0; g < p->num_groups; g++) {
    group_values(&p->groups[g], v);
    for (int i = 0; i < GROUP_VALUES; i++) kvci_rec_i64(r, v[i]);
  }
  kvci_rec_i64(r, p->num_layers);
  for (uint32_t l = 0; l < p->num_layers; l++) {
    layer_values(&p->layers[l], v);
    for (int i = 0; i < LAYER_VALUES; i++) kvci_rec_i64(r, v[i]);
  }
  if (!has_fp8(p)) return;
  kvci_rec_i64(r, p->num_layers);
  for (uint32_t l = 0; l < p->num_layers; l++) {
    storage_values(&p->layers[l], v);
    for (int i = 0; i < STORAGE_VALUES; i++) kvci_rec_i64(r, v[i]);
  }
}

int kvci_pool_fingerprint_digest(const kvc_pool_sequence* s, unsigned char digest[16]) {
  const kvc_pool* p = s->pool;
  kvci_record r = {0};
  pool_fingerprint(p, &r);
  return kvci_fingerprint_record_digest(&r, digest);
}

static kvc_error* pool_differs(const char* fn, const char* where, const char* field, int64_t file, int64_t pool) {
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                  "%s: the file's pool layout differs from the pool's: %s%s%s %" PRId64 " (file) vs %" PRId64 " (pool)",
                  fn, where, *where ? ": " : "", field, file, pool);
}

/* The file's fingerprint against the pool's, value by value (the same order as pool_fingerprint). */
static kvc_error* compare_pool(const char* fn, const kvci_file_section* s, const kvc_pool* p) {
  kvci_record want = {0};
  pool_fingerprint(p, &want);
  if (want.failed) return kvci_rec_free(&want), kvci_err_oom();
  kvci_record_reader file = {s->payload, (size_t)s->h.payload_bytes, 0}, pool = {want.bytes, want.len, 0};
  kvc_error* e = NULL;
  int64_t a, b;
  static const char* const HEAD[3] = {"dtype", "layout", "hash seed length"};
  for (int i = 0; !e && i < 3; i++) {
    if (kvci_rec_get_i64(&file, &a)) e = kvci_err(KVC_ERROR_IO, "%s: the file's pool fingerprint is malformed", fn);
    else if (kvci_rec_get_i64(&pool, &b), a != b) e = pool_differs(fn, "", HEAD[i], a, b);
  }
  const unsigned char *x, *y;
  if (!e && (kvci_rec_get_bytes(&file, &x, p->seed_len) || (kvci_rec_get_bytes(&pool, &y, p->seed_len), 0) ||
             memcmp(x, y, p->seed_len)))
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the file's pool layout differs from the pool's: the hash seed "
                 "(another model's blocks)", fn);
  /* Groups, then layers, then (fp8 pools) the layers' storage: a count, then that many rows of values. */
  static const int VALUES[3] = {GROUP_VALUES, LAYER_VALUES, STORAGE_VALUES};
  static const char* const* const NAMES[3] = {GROUP_NAMES, LAYER_NAMES, STORAGE_NAMES};
  static const char* const COUNTS[3] = {"number of groups", "number of layers", "number of layers (storage)"};
  for (int part = 0; !e && part < 3; part++) {
    int n = VALUES[part];
    const char* const* names = NAMES[part];
    if (part == 2 && !kvci_rec_left(&file) != !kvci_rec_left(&pool)) {
      /* Only a whole storage part (its count the pool's layers) says the file is fp8; other bytes are damage. */
      int64_t c = -1;
      size_t rest = kvci_rec_left(&file);
      if (rest && (kvci_rec_get_i64(&file, &c), c != (int64_t)p->num_layers ||
                   rest != sizeof(int64_t) * (1 + (size_t)c * (size_t)n))) {
        e = kvci_err(KVC_ERROR_IO, "%s: the file's pool fingerprint is malformed", fn);
        break;
      }
      e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the file's pool layout differs from the pool's: the file's blocks "
                   "are %s but the pool's are %s (layers' storage)", fn,
                   kvci_rec_left(&file) ? "fp8 in some layer" : "all in the dtype",
                   kvci_rec_left(&pool) ? "fp8 in some layer" : "all in the dtype");
      break;
    }
    if (part == 2 && !kvci_rec_left(&pool)) break;
    int64_t count, pool_count;
    kvci_rec_get_i64(&pool, &pool_count);
    if (kvci_rec_get_i64(&file, &count)) {
      e = kvci_err(KVC_ERROR_IO, "%s: the file's pool fingerprint is malformed", fn);
    } else if (count != pool_count) {
      e = pool_differs(fn, "", COUNTS[part], count, pool_count);
    }
    for (int64_t row = 0; !e && row < count; row++)
      for (int i = 0; !e && i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "%s %" PRId64, part ? "layer" : "group", row);
        if (kvci_rec_get_i64(&file, &a)) e = kvci_err(KVC_ERROR_IO, "%s: the file's pool fingerprint is malformed", fn);
        else if (kvci_rec_get_i64(&pool, &b), a != b) e = pool_differs(fn, where, names[i], a, b);
      }
  }
  if (!e && kvci_rec_left(&file)) e = kvci_err(KVC_ERROR_IO, "%s: the file's pool fingerprint is malformed", fn);
  kvci_rec_free(&want);
  return e;
}

/* ----------------------------------------------------------------- saving */

/* The slots a sequence holds in group g, in table order (the live state's for a recurrent group). */
static uint64_t held_slots(const kvc_pool_sequence* s, uint32_t g, uint32_t* out) {
  const kvci_pool_seq_group* sg = &s->groups[g];
  uint64_t n = 0;
  if (kvci_pool_is_recurrent(&s->pool->groups[g])) {
    if (sg->live && out) out[0] = sg->live;
    return sg->live ? 1 : 0;
  }
  for (uint64_t i = 0; i < sg->num_blocks; i++)
    if (sg->table[i]) {
      if (out) out[n] = sg->table[i];
      n++;
    }
  return n;
}

/* The sequence record: length, committed, root, tokens, then per group its table's shape and flags. */
static void sequence_record(const kvc_pool_sequence* s, kvci_record* r) {
  kvci_rec_i64(r, (int64_t)s->length);
  kvci_rec_i64(r, (int64_t)s->committed);
  kvci_rec_bytes(r, s->root, KVC_BLOCK_HASH_SIZE);
  for (uint64_t i = 0; i < s->length; i++) kvci_rec_i64(r, s->tokens[i]);
  for (uint32_t g = 0; g < s->pool->num_groups; g++) {
    const kvci_pool_seq_group* sg = &s->groups[g];
    const int64_t v[4] = {(int64_t)sg->num_blocks, (int64_t)sg->window_from, (int64_t)sg->hashed, sg->live != 0};
    for (int i = 0; i < 4; i++) kvci_rec_i64(r, v[i]);
    for (uint64_t i = 0; i < sg->num_blocks; i++) kvci_rec_i64(r, sg->table[i] != 0);
  }
}

/* K (which 0) or V (1) of `count` slots of layer `layer` as one section: the slots' bytes in order. */
static void save_slots(kvci_out* out, kvci_stage* st, const kvc_pool* p, uint32_t layer, int which,
                       const uint32_t* slots, uint64_t count) {
  const kvci_pool_layer* l = &p->layers[layer];
  int64_t per = which ? l->v_block : l->k_block;
  kvcf_section s;
  memset(&s, 0, sizeof s);
  s.type = kvci_pool_is_recurrent(&p->groups[l->group]) ? KVCF_RECURRENT : KVCF_BLOCKS;
  s.index = layer, s.sub = (uint32_t)which;
  s.payload_bytes = count * (uint64_t)per * l->elem;
  s.dims[0] = (uint32_t)count, s.dims[1] = s.dims[2] = 1, s.dims[3] = (uint32_t)per;
  s.dtype = section_dtype(p, l), s.elem_bytes = (uint32_t)l->elem;
  kvci_out_begin(out, &s);
  const int64_t strides[4] = {per, per, per, 1}, shape[4] = {1, 1, 1, per};
  for (uint64_t i = 0; i < count; i++)
    kvci_xfer_save(out, st, kvci_pool_block_at(p, l, which, slots[i]), strides, shape, l->elem);
  kvci_out_end(out);
}

void kvci_save_pool_sequence(kvci_out* out, const kvc_pool_sequence* s) {
  const kvc_pool* p = s->pool;
  kvci_stage st;
  if (kvci_out_stage_open(out, p->backend, &p->exec, p->device, &st)) return;
  kvci_record r = {0};
  pool_fingerprint(p, &r);
  kvci_out_record(out, KVCF_FINGERPRINT, 0, 0, &r);
  sequence_record(s, &r);
  kvci_out_record(out, KVCF_SEQUENCE, 0, 0, &r);
  for (uint32_t g = 0; g < p->num_groups && !out->err; g++) {
    uint64_t n = held_slots(s, g, NULL);
    uint32_t* slots = (uint32_t*)malloc((n ? n : 1) * sizeof(uint32_t));
    if (!slots) {
      kvci_out_fail(out, kvci_err_oom());
      break;
    }
    held_slots(s, g, slots);
    const kvci_pool_group* grp = &p->groups[g];
    for (uint32_t i = 0; i < grp->num_layers; i++)
      for (int which = 0; which < kvci_pool_parts(&p->layers[grp->layers[i]]); which++)
        save_slots(out, &st, p, grp->layers[i], which, slots, n);
    free(slots);
  }
  kvci_stage_close(&st);
}

/* ---------------------------------------------------------------- loading */

/* A group of the sequence as its file describes it. */
typedef struct group_rec {
  int64_t num_blocks, window_from, hashed, live;
  const unsigned char* present; /* num_blocks records of one i64 each (0 or 1) */
  uint64_t held;
} group_rec;

typedef struct sequence_rec {
  int64_t length, committed;
  const unsigned char* root;
  const unsigned char* tokens; /* `length` i64 records */
  group_rec* groups;
} sequence_rec;

static kvc_error* bad_sequence(const char* fn, const char* what) {
  return kvci_err(KVC_ERROR_IO, "%s: the file's sequence record (PSEQ section) is malformed: %s", fn, what);
}

static kvc_error* read_sequence(const char* fn, const kvci_file_section* s, const kvc_pool* p, sequence_rec* q) {
  kvci_record_reader in = {s->payload, (size_t)s->h.payload_bytes, 0};
  if (kvci_rec_get_range(&in, 0, (int64_t)kvci_rec_left(&in) / 8, &q->length) ||
      kvci_rec_get_range(&in, 0, q->length, &q->committed) ||
      kvci_rec_get_bytes(&in, &q->root, KVC_BLOCK_HASH_SIZE) ||
      kvci_rec_get_bytes(&in, &q->tokens, (size_t)q->length * 8))
    return bad_sequence(fn, "its length, root or tokens");
  for (int64_t i = 0; i < q->length; i++) {
    int64_t t = (int64_t)kvcf_get64(q->tokens + 8 * i);
    if (t < 0 || t > INT32_MAX) return bad_sequence(fn, "a token id outside [0, 2^31)");
  }
  for (uint32_t g = 0; g < p->num_groups; g++) {
    group_rec* r = &q->groups[g];
    const kvci_pool_group* grp = &p->groups[g];
    int64_t most = kvci_pool_is_recurrent(grp) ? 0 : (int64_t)kvci_pool_blocks_for((uint64_t)q->length, grp->block_size);
    if (kvci_rec_get_range(&in, 0, most, &r->num_blocks) || kvci_rec_get_range(&in, 0, r->num_blocks, &r->window_from) ||
        kvci_rec_get_range(&in, 0, q->committed / grp->block_size, &r->hashed) ||
        kvci_rec_get_range(&in, 0, kvci_pool_is_recurrent(grp), &r->live) ||
        kvci_rec_get_bytes(&in, &r->present, (size_t)r->num_blocks * 8))
      return bad_sequence(fn, "a group's table");
    /* The group's geometry (pool_internal.h, kvci_pool_seq_group): an attention group's table has an entry per
     * block of the sequence; those before window_from were given back by the window, the others are held. */
    char what[192];
    if (!kvci_pool_is_recurrent(grp) && r->num_blocks != most) {
      snprintf(what, sizeof what, "group %u's num_blocks is %" PRId64 "; %" PRId64 " tokens in blocks of %u make %" PRId64,
               g, r->num_blocks, q->length, grp->block_size, most);
      return bad_sequence(fn, what);
    }
    r->held = (uint64_t)r->live;
    for (int64_t i = 0; i < r->num_blocks; i++) {
      uint64_t f = kvcf_get64(r->present + 8 * i);
      if (f != (uint64_t)(i >= r->window_from)) {
        snprintf(what, sizeof what, "group %u's table entry %" PRId64 " is %llu; entries before window_from (%" PRId64
                 ") are given back (0), the others held (1)", g, i, (unsigned long long)f, r->window_from);
        return bad_sequence(fn, what);
      }
      r->held += f;
    }
  }
  return kvci_rec_left(&in) ? bad_sequence(fn, "bytes after the last group") : NULL;
}

/* The section of layer `layer`'s K or V slots, which must hold `count` slots. */
static kvc_error* slot_section(const char* fn, const kvci_file* f, const kvc_pool* p, uint32_t layer, int which,
                               uint64_t count, const kvci_file_section** out) {
  const kvci_pool_layer* l = &p->layers[layer];
  uint32_t type = kvci_pool_is_recurrent(&p->groups[l->group]) ? KVCF_RECURRENT : KVCF_BLOCKS;
  const kvci_file_section* s = kvci_file_find(f, type, 0, layer, (uint32_t)which);
  const uint64_t per = (uint64_t)(which ? l->v_block : l->k_block), bytes = count * per * l->elem;
  if (s && (s->h.dims[0] != (uint32_t)count || s->h.dims[1] != 1 || s->h.dims[2] != 1 || s->h.dims[3] != (uint32_t)per ||
            s->h.dtype != section_dtype(p, l) || s->h.elem_bytes != (uint32_t)l->elem))
    return kvci_err(KVC_ERROR_IO,
                    "%s: the file's %s section of layer %u (sub %d): dims [%u, %u, %u, %u], dtype %u and elem_bytes %u; "
                    "the pool's layout makes them [%llu, 1, 1, %llu], %u and %u",
                    fn, type == KVCF_RECURRENT ? "RECS" : "BLKS", layer, which, s->h.dims[0], s->h.dims[1],
                    s->h.dims[2], s->h.dims[3], s->h.dtype, s->h.elem_bytes, (unsigned long long)count,
                    (unsigned long long)per, section_dtype(p, l), (uint32_t)l->elem);
  if (!s || s->h.payload_bytes != bytes)
    return kvci_err(KVC_ERROR_IO, "%s: the file's %s bytes of layer %u are %s (%llu bytes expected)", fn,
                    which ? "value" : "key", layer, s ? "of another size" : "missing", (unsigned long long)bytes);
  *out = s;
  return NULL;
}

static uint64_t held_of(const void* q, uint32_t g, uint64_t* lost) {
  (void)lost;
  return ((const sequence_rec*)q)->groups[g].held;
}

/* Every check that needs no allocation: the sections' sizes, then room in every group. The pool is untouched. */
static kvc_error* check_room(const char* fn, const kvci_file* f, const kvc_pool* p, const sequence_rec* q) {
  for (uint32_t g = 0; g < p->num_groups; g++) {
    const kvci_pool_group* grp = &p->groups[g];
    for (uint32_t i = 0; i < grp->num_layers; i++)
      for (int which = 0; which < kvci_pool_parts(&p->layers[grp->layers[i]]); which++) {
        const kvci_file_section* src;
        kvc_error* e = slot_section(fn, f, p, grp->layers[i], which, q->groups[g].held, &src);
        if (e) return e;
      }
  }
  return kvci_pool_budget_check(fn, p, held_of, q, "for the sequence");
}

/* Takes the group's blocks and fills them with the file's bytes. */
static kvc_error* fill_group(const char* fn, const kvci_file* f, kvc_pool* p, kvc_pool_sequence* s, uint32_t g,
                             const group_rec* r, kvci_stage* st) {
  kvci_pool_seq_group* sg = &s->groups[g];
  const kvci_pool_group* grp = &p->groups[g];
  uint32_t* slots = (uint32_t*)malloc((r->held ? r->held : 1) * sizeof(uint32_t));
  if (!slots) return kvci_err_oom();
  uint64_t n = 0;
  for (int64_t i = 0; i < r->num_blocks; i++) {
    sg->table[i] = kvcf_get64(r->present + 8 * i) ? kvci_pool_block_take(p, g) : 0;
    if (sg->table[i]) slots[n++] = sg->table[i];
    sg->num_blocks = (uint64_t)i + 1; /* from here on destroy releases it */
  }
  sg->window_from = (uint64_t)r->window_from;
  if (r->live) slots[n++] = sg->live = kvci_pool_block_take(p, g);
  kvc_error* e = NULL;
  for (uint32_t i = 0; !e && i < grp->num_layers; i++) {
    const kvci_pool_layer* l = &p->layers[grp->layers[i]];
    for (int which = 0; !e && which < kvci_pool_parts(l); which++) {
      const kvci_file_section* src;
      int64_t per = which ? l->v_block : l->k_block;
      const int64_t strides[4] = {per, per, per, 1}, shape[4] = {1, 1, 1, per};
      e = slot_section(fn, f, p, grp->layers[i], which, n, &src);
      kvci_section_reader in = {f, src, 0, 0}; /* the blocks in file order, one after another */
      for (uint64_t k = 0; !e && k < n; k++)
        e = kvci_section_load(fn, &in, st, kvci_pool_block_at(p, l, which, slots[k]), strides, shape, l->elem);
    }
  }
  free(slots);
  return e;
}

/* The chain of the committed full blocks, and (prefix caching) their blocks cached under it, as a commit does. */
static void cache_chain(kvc_pool* p, kvc_pool_sequence* s, uint32_t g, uint64_t hashed) {
  kvci_pool_seq_group* sg = &s->groups[g];
  const kvci_pool_group* grp = &p->groups[g];
  kvci_pool_chain(s, s->tokens, grp->block_size, 0, hashed, sg->hashes);
  sg->hashed = hashed;
  if (!p->prefix_caching || kvci_pool_is_recurrent(grp)) return;
  for (uint64_t i = 0; i < hashed; i++)
    if (sg->table[i]) kvci_pool_block_cache(p, g, sg->table[i], s, s->tokens, i);
}

kvc_error* kvci_load_pool_sequence(const char* fn, const kvci_file* f, kvc_pool* p, kvc_pool_sequence** out) {
  const kvci_file_section* fp = kvci_file_find(f, KVCF_FINGERPRINT, 0, 0, 0);
  const kvci_file_section* sq = kvci_file_find(f, KVCF_SEQUENCE, 0, 0, 0);
  if (!fp || !sq) return kvci_err(KVC_ERROR_IO, "%s: the file has no %s section", fn, fp ? "PSEQ" : "FPRT");
  kvc_error* e = compare_pool(fn, fp, p);
  if (e) return e;
  sequence_rec q;
  memset(&q, 0, sizeof q);
  q.groups = (group_rec*)calloc(p->num_groups ? p->num_groups : 1, sizeof(*q.groups));
  if (!q.groups) return kvci_err_oom();
  e = read_sequence(fn, sq, p, &q);
  if (!e) e = check_room(fn, f, p, &q);
  kvc_pool_sequence* s = NULL;
  kvci_stage st;
  memset(&st, 0, sizeof st);
  if (!e) e = kvci_stage_open(fn, p->backend, &p->exec, p->device, 0, &st);
  if (!e) e = kvci_pool_sequence_create(p, NULL, &s); /* the load holds the pool's guard */
  if (!e && kvci_pool_seq_grow(s, (uint64_t)q.length)) e = kvci_err_oom();
  if (!e) {
    memcpy(s->root, q.root, KVC_BLOCK_HASH_SIZE);
    for (int64_t i = 0; i < q.length; i++) s->tokens[i] = (int32_t)kvcf_get64(q.tokens + 8 * i);
    s->length = (uint64_t)q.length;
    s->committed = (uint64_t)q.committed;
  }
  for (uint32_t g = 0; !e && g < p->num_groups; g++) e = fill_group(fn, f, p, s, g, &q.groups[g], &st);
  if (!e) e = kvci_file_check_rest(fn, f); /* before any block is cached under the sequence's chain */
  for (uint32_t g = 0; !e && g < p->num_groups; g++) cache_chain(p, s, g, (uint64_t)q.groups[g].hashed);
  kvci_stage_close(&st);
  free(q.groups);
  if (e) {
    kvci_pool_sequence_free(s);
    return e;
  }
  *out = s;
  return NULL;
}
