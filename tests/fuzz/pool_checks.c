/*
 * pool_checks.c: everything a caller can observe of a pool, against the
 * reference model (pool_model.h): the counters of every group, each
 * sequence's lengths, the block tables of all sequences in both formats,
 * every byte of every block that holds data (in both storage layouts, the
 * null block all zero), each sequence gathered into contiguous tensors,
 * the live recurrent states, and the events. See pool_fuzz.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fuzz.h"
#include "report.h"
#include "tensor_codec.h"

size_t pf_elem(kvc_dtype dtype) { return codec_dtype_size(dtype); }

uint32_t pf_bits(uint32_t nonce, int64_t d, int kv, kvc_dtype dtype) {
  return nonce == PM_ZERO ? 0 : codec_bits(nonce, d, kv, dtype);
}

/* The element strides of t (its own, or the compact ones). */
static void strides_of(const kvc_tensor* t, int64_t* st) {
  int64_t stride = 1;
  for (int32_t k = t->ndim; k-- > 0;) {
    st[k] = t->strides ? t->strides[k] : stride;
    stride *= t->shape[k];
  }
}

static unsigned char* elem_ptr(const kvc_tensor* t, const int64_t* idx) {
  int64_t st[8], off = 0;
  strides_of(t, st);
  for (int32_t k = 0; k < t->ndim; k++) off += idx[k] * st[k];
  return (unsigned char*)t->data + t->byte_offset + (size_t)off * (t->dtype.bits / 8);
}

uint32_t pf_read(const kvc_tensor* t, const int64_t* idx) {
  return codec_get_bits(elem_ptr(t, idx), t->dtype.bits / 8);
}

void pf_write_elem(const kvc_tensor* t, const int64_t* idx, uint32_t bits) {
  unsigned char* p = elem_ptr(t, idx);
  if (t->dtype.bits == 32) {
    memcpy(p, &bits, 4);
  } else {
    uint16_t b = (uint16_t)bits;
    memcpy(p, &b, 2);
  }
}

/* Device CPU, `ndim`, the pool's dtype, the shape. */
static void check_tensor(const ctx* c, const kvc_tensor* t, int32_t ndim, const int64_t* shape, kvc_dtype dtype,
                         const char* what) {
  kvc_data_type dt = codec_data_type(dtype);
  if (t->device.device_type != KVC_DEVICE_CPU) fail("%s: device type %d, not CPU", what, t->device.device_type);
  if (t->ndim != ndim) fail("%s: ndim %d, expected %d", what, t->ndim, ndim);
  if (t->dtype.code != dt.code || t->dtype.bits != dt.bits || t->dtype.lanes != 1)
    fail("%s: dtype {%u,%u,%u}, expected {%u,%u,1}", what, t->dtype.code, t->dtype.bits, t->dtype.lanes, dt.code,
         dt.bits);
  if (!t->shape) fail("%s: shape NULL", what);
  for (int32_t k = 0; k < ndim; k++)
    if (t->shape[k] != shape[k])
      fail("%s: shape[%d] is %lld, expected %lld", what, k, (long long)t->shape[k], (long long)shape[k]);
  if (!t->data && ndim && shape[0]) fail("%s: data NULL", what);
  (void)c;
}

/* ------------------------------------------------------------ counters */

static void check_stats(ctx* c) {
  for (uint32_t g = 0; g < c->m.ng; g++) {
    kvc_pool_stats st;
    memset(&st, 0xA5, sizeof st);
    st.struct_size = sizeof st;
    expect_code(kvc_pool_stats_get(c->pool, g, &st), KVC_OK, "kvc_pool_stats_get");
    pm_stats w;
    pm_stats_of(&c->m, g, &w);
    const char* names[] = {"num_blocks",     "free_blocks",  "cached_blocks", "used_blocks",
                           "pinned_blocks",  "prefix_queries", "prefix_hits", "evictions"};
    uint64_t got[] = {st.num_blocks,    st.free_blocks,    st.cached_blocks, st.used_blocks,
                      st.pinned_blocks, st.prefix_queries, st.prefix_hits,   st.evictions};
    uint64_t want[] = {w.num_blocks,    w.free_blocks,    w.cached_blocks, w.used_blocks,
                       w.pinned_blocks, w.prefix_queries, w.prefix_hits,   w.evictions};
    if (st.group != g) fail("stats of group %u: group field %u", g, st.group);
    for (int k = 0; k < 8; k++)
      if (got[k] != want[k])
        fail("stats of group %u: %s is %llu, the model says %llu", g, names[k], (unsigned long long)got[k],
             (unsigned long long)want[k]);
  }
  for (int i = 0; i < PM_SEQS; i++) {
    const pm_seq* s = &c->m.s[i];
    if (!s->used) continue;
    if (kvc_pool_sequence_length(c->h[i]) != s->len)
      fail("s%d: length %llu, the model says %u", i, (unsigned long long)kvc_pool_sequence_length(c->h[i]), s->len);
    if (kvc_pool_sequence_committed(c->h[i]) != s->committed)
      fail("s%d: committed %llu, the model says %u", i, (unsigned long long)kvc_pool_sequence_committed(c->h[i]),
           s->committed);
  }
}

/* ------------------------------------------------------------- tables */

static int32_t read_i32(const kvc_tensor* t, int64_t i, int64_t j) {
  int64_t idx[2] = {i, j};
  return (int32_t)pf_read(t, idx);
}

/* The live sequences in slot order (the batch the tables are made of). */
static int live_batch(const ctx* c, const kvc_pool_sequence** seqs, int* which) {
  int n = 0;
  for (int i = 0; i < PM_SEQS; i++)
    if (c->m.s[i].used) {
      which[n] = i;
      seqs[n++] = c->h[i];
    }
  return n;
}

/* The table views of group g in c->tables against the model. */
static void verify_tables(ctx* c, uint32_t g, const char* when) {
  int which[PM_SEQS];
  const kvc_pool_sequence* seqs[PM_SEQS];
  int n = live_batch(c, seqs, which);
  uint32_t maxb = 0, total = 0;
  for (int k = 0; k < n; k++) {
    uint32_t len = pm_table_len(&c->m, &c->m.s[which[k]], g);
    if (len > maxb) maxb = len;
    total += len;
  }
  char what[96];
  const kvc_pool_table* t = &c->tables[g][KVC_POOL_TABLE_PADDED];
  snprintf(what, sizeof what, "padded block table of group %u%s", g, when);
  int64_t shape[2] = {n, maxb};
  check_tensor(c, &t->table, 2, shape, KVC_DTYPE_UNSET, what);
  for (int k = 0; k < n; k++) {
    const pm_seq* s = &c->m.s[which[k]];
    uint32_t len = pm_table_len(&c->m, s, g);
    for (uint32_t j = 0; j < maxb; j++) {
      int32_t want = j < len ? (int32_t)s->table[g][j] : 0;
      int32_t got = read_i32(&t->table, k, j);
      if (got != want) fail("%s: row %d (s%d) entry %u is %d, the model says %d", what, k, which[k], j, got, want);
    }
  }
  t = &c->tables[g][KVC_POOL_TABLE_CSR];
  snprintf(what, sizeof what, "CSR block table of group %u%s", g, when);
  int64_t ishape[1] = {n + 1}, xshape[1] = {total}, lshape[1] = {n};
  check_tensor(c, &t->indptr, 1, ishape, KVC_DTYPE_UNSET, what);
  check_tensor(c, &t->table, 1, xshape, KVC_DTYPE_UNSET, what);
  check_tensor(c, &t->last_page_len, 1, lshape, KVC_DTYPE_UNSET, what);
  uint32_t at = 0;
  for (int k = 0; k < n; k++) {
    const pm_seq* s = &c->m.s[which[k]];
    uint32_t len = pm_table_len(&c->m, s, g);
    int64_t i0[1] = {k}, i1[1] = {k + 1};
    if ((int32_t)pf_read(&t->indptr, i0) != (int32_t)at || (int32_t)pf_read(&t->indptr, i1) != (int32_t)(at + len))
      fail("%s: indptr[%d..%d] = %d..%d, the model says %u..%u", what, k, k + 1, (int32_t)pf_read(&t->indptr, i0),
           (int32_t)pf_read(&t->indptr, i1), at, at + len);
    for (uint32_t j = 0; j < len; j++) {
      int64_t ij[1] = {at + j};
      if ((int32_t)pf_read(&t->table, ij) != (int32_t)s->table[g][j])
        fail("%s: s%d entry %u is %d, the model says %u", what, which[k], j, (int32_t)pf_read(&t->table, ij),
             s->table[g][j]);
    }
    at += len;
    /* "tokens in each sequence's last block, 1..block_size"; "An empty sequence has no entries and a
     * last_page_len of 0". */
    int32_t last = s->len ? (int32_t)((s->len - 1) % c->m.g[g].bs + 1) : 0;
    if ((int32_t)pf_read(&t->last_page_len, i0) != last)
      fail("%s: last_page_len of s%d is %d, the model says %d", what, which[k], (int32_t)pf_read(&t->last_page_len, i0),
           last);
  }
}

/* The tables of every attention group in both formats, taken one after the other and checked at once: "tables
 * of several groups coexist" ("kvc_pool_block_table ... replaces only the previous table of the same group and
 * format"). */
static void check_tables(ctx* c) {
  int which[PM_SEQS];
  const kvc_pool_sequence* seqs[PM_SEQS];
  int n = live_batch(c, seqs, which);
  if (!n) return;
  for (uint32_t g = 0; g < c->m.ng; g++)
    for (int f = 0; f < 2 && pm_is_attention(&c->m, g); f++)
      expect_code(kvc_pool_block_table(c->pool, seqs, (size_t)n, g, f, &c->tables[g][f]), KVC_OK,
                  "kvc_pool_block_table");
  for (uint32_t g = 0; g < c->m.ng; g++)
    if (pm_is_attention(&c->m, g)) verify_tables(c, g, "");
}

/* ------------------------------------------------------------ storage */


static void check_storage(ctx* c) {
  const pool_model* m = &c->m;
  for (uint32_t l = 0; l < m->nl; l++) {
    uint32_t g = m->l[l].group;
    if (!pm_is_attention(m, g)) continue;
    const pm_group* G = &m->g[g];
    const pm_layer* L = &m->l[l];
    for (kvc_pool_layout lay = KVC_POOL_LAYOUT_NHD; lay <= KVC_POOL_LAYOUT_HND; lay++) {
      kvc_kv kv;
      char what[64];
      snprintf(what, sizeof what, "storage of layer %u (%s)", l, lay == KVC_POOL_LAYOUT_NHD ? "NHD" : "HND");
      expect_code(kvc_pool_layer_storage(c->pool, l, lay, &kv), KVC_OK, what);
      for (int kvi = 0; kvi < 2; kvi++) {
        const kvc_tensor* t = kvi ? &kv.value : &kv.key;
        const kvc_tensor* t0 = kvi ? &c->storage[l][lay].value : &c->storage[l][lay].key;
        int64_t D = kvi ? L->Dv : L->Dk;
        int64_t shape[4] = {G->nb, lay == KVC_POOL_LAYOUT_NHD ? G->bs : L->H, lay == KVC_POOL_LAYOUT_NHD ? L->H : G->bs,
                            D};
        check_tensor(c, t, 4, shape, m->dtype, what);
        if (t->data != t0->data || t->byte_offset != t0->byte_offset)
          fail("%s: the storage moved (\"a pool's storage never moves\")", what);
        /* Both layouts are views of one memory: each element at the same address. Both address maps are
         * affine, so the first element and the last along each dimension decide it. */
        if (lay == KVC_POOL_LAYOUT_HND) {
          const kvc_tensor* a = kvi ? &c->storage[l][0].value : &c->storage[l][0].key;
          int64_t hi[4] = {G->nb - 1, G->bs - 1, L->H - 1, D - 1};
          for (int k = -1; k < 4; k++) {
            int64_t in_nhd[4] = {0, 0, 0, 0};
            if (k >= 0) in_nhd[k] = hi[k];
            int64_t in_hnd[4] = {in_nhd[0], in_nhd[2], in_nhd[1], in_nhd[3]};
            if (elem_ptr(a, in_nhd) != elem_ptr(t, in_hnd))
              fail("%s: element [%lld, %lld, %lld, %lld] (NHD) is at another address than in the NHD view", what,
                   (long long)in_nhd[0], (long long)in_nhd[1], (long long)in_nhd[2], (long long)in_nhd[3]);
          }
        }
        if (lay != m->layout) continue; /* the other layout: the same memory (checked above), read once */
        int64_t st[4];
        size_t es = pf_elem(m->dtype);
        strides_of(t, st);
        int64_t sr = lay == KVC_POOL_LAYOUT_NHD ? st[1] : st[2], sh = lay == KVC_POOL_LAYOUT_NHD ? st[2] : st[1];
        const unsigned char* base = (const unsigned char*)t->data + t->byte_offset;
        for (uint32_t x = 0; x < G->nb; x++) {
          const pm_block* b = &m->b[g][x];
          if (x && !b->ref && !b->cached) continue;
          for (uint32_t r = 0; r < G->bs; r++) {
            /* Block 0 is never handed out: it stays as the pool was created, zeroed. */
            uint32_t nonce = x ? b->row[r][l] : PM_ZERO;
            if (nonce == PM_UNKNOWN) continue;
            for (int64_t h = 0; h < L->H; h++)
              for (int64_t d = 0; d < D; d++) {
                uint32_t want = pf_bits(nonce, h * D + d, kvi, m->dtype);
                uint32_t got = codec_get_bits(base + (size_t)(x * st[0] + r * sr + h * sh + d * st[3]) * es, es);
                if (got != want)
                  fail("%s %s: block %u row %u head %lld dim %lld holds 0x%x, the model says 0x%x (block ref %d%s)",
                       what, kvi ? "V" : "K", x, r, (long long)h, (long long)d, got, want, b->ref,
                       b->cached ? ", cached" : "");
              }
          }
        }
      }
    }
  }
}

void snap_storage(const ctx* c, storage_snap* s) {
  memset(s, 0, sizeof *s);
  for (uint32_t l = 0; l < c->m.nl; l++) {
    if (!pm_is_attention(&c->m, c->m.l[l].group)) continue;
    for (int kvi = 0; kvi < 2; kvi++) {
      const kvc_tensor* t = kvi ? &c->storage[l][c->m.layout].value : &c->storage[l][c->m.layout].key;
      size_t n = pf_elem(c->m.dtype);
      for (int k = 0; k < 4; k++) n *= (size_t)t->shape[k];
      s->size[l][kvi] = n;
      s->bytes[l][kvi] = malloc(n);
      if (!s->bytes[l][kvi]) abort();
      memcpy(s->bytes[l][kvi], (const unsigned char*)t->data + t->byte_offset, n);
    }
  }
}

void check_storage_unchanged(const ctx* c, storage_snap* s, const char* what) {
  for (uint32_t l = 0; l < PM_LAYERS; l++)
    for (int kvi = 0; kvi < 2; kvi++) {
      if (!s->bytes[l][kvi]) continue;
      const kvc_tensor* t = kvi ? &c->storage[l][c->m.layout].value : &c->storage[l][c->m.layout].key;
      if (memcmp(s->bytes[l][kvi], (const unsigned char*)t->data + t->byte_offset, s->size[l][kvi]))
        fail("%s: a failed call wrote the %s storage of layer %u", what, kvi ? "V" : "K", l);
      free(s->bytes[l][kvi]);
      s->bytes[l][kvi] = NULL;
    }
}

/* ------------------------------------------------------------- gather */

/* A [1, H, T, D] tensor, compact or with the memory of [1, T, H, D] (any strides are the caller's). */
typedef struct out4 {
  kvc_tensor t;
  int64_t shape[4], strides[4];
  unsigned char* mem;
} out4;

static void out4_make(out4* o, kvc_dtype dtype, int64_t H, int64_t T, int64_t D, int token_major) {
  memset(o, 0, sizeof *o);
  size_t es = pf_elem(dtype);
  size_t n = (size_t)(H * T * D);
  o->mem = malloc(n * es + 1);
  if (!o->mem) abort();
  memset(o->mem, 0x5A, n * es + 1); /* what the gather must overwrite */
  o->shape[0] = 1;
  o->shape[1] = H;
  o->shape[2] = T;
  o->shape[3] = D;
  o->t.data = o->mem;
  o->t.device.device_type = KVC_DEVICE_CPU;
  o->t.ndim = 4;
  o->t.dtype = codec_data_type(dtype);
  o->t.shape = o->shape;
  if (token_major) {
    o->strides[0] = H * T * D;
    o->strides[1] = D;
    o->strides[2] = H * D;
    o->strides[3] = 1;
    o->t.strides = o->strides;
  }
}

static void check_gather(ctx* c) {
  const pool_model* m = &c->m;
  for (int i = 0; i < PM_SEQS; i++) {
    const pm_seq* s = &m->s[i];
    if (!s->used) continue;
    for (uint32_t l = 0; l < m->nl; l++) {
      uint32_t g = m->l[l].group;
      if (!pm_is_attention(m, g)) continue;
      const pm_layer* L = &m->l[l];
      out4 k, v;
      int token_major = (int)((c->m.call + (uint64_t)i + l) % 2);
      out4_make(&k, m->dtype, L->H, s->len, L->Dk, token_major);
      out4_make(&v, m->dtype, L->H, s->len, L->Dv, !token_major);
      char what[64];
      snprintf(what, sizeof what, "gather of s%d layer %u", i, l);
      int64_t missing = pm_first_missing(m, s, g);
      kvc_error* e = kvc_pool_gather(c->h[i], l, &k.t, &v.t);
      if (missing >= 0) {
        /* "gathering such a sequence is INVALID_STATE naming the first missing token" */
        char tok[32];
        snprintf(tok, sizeof tok, "%lld", (long long)missing);
        const char* msg = kvc_error_message(e);
        if (kvc_error_code(e) == KVC_ERROR_INVALID_STATE && (!msg || !strstr(msg, tok)))
          fail("%s: the message \"%s\" does not name the first missing token %s", what, msg ? msg : "", tok);
        expect_code(e, KVC_ERROR_INVALID_STATE, what);
        c->gathers_refused++;
      } else {
        expect_code(e, KVC_OK, what);
        size_t es = pf_elem(m->dtype);
        int64_t kst[4], vst[4];
        strides_of(&k.t, kst);
        strides_of(&v.t, vst);
        for (uint32_t p = 0; p < s->len; p++) {
          uint32_t nonce = s->want[p][l];
          if (nonce == PM_UNKNOWN) continue;
          for (int kvi = 0; kvi < 2; kvi++) {
            const out4* o = kvi ? &v : &k;
            const int64_t* st = kvi ? vst : kst;
            int64_t D = kvi ? L->Dv : L->Dk;
            for (int64_t h = 0; h < L->H; h++)
              for (int64_t d = 0; d < D; d++) {
                uint32_t want = pf_bits(nonce, h * D + d, kvi, m->dtype);
                uint32_t got = codec_get_bits(o->mem + (size_t)(h * st[1] + p * st[2] + d * st[3]) * es, es);
                if (got != want)
                  fail("%s %s: token %u head %lld dim %lld is 0x%x, the sequence wrote 0x%x", what, kvi ? "V" : "K", p,
                       (long long)h, (long long)d, got, want);
              }
          }
        }
      }
      free(k.mem);
      free(v.mem);
    }
  }
}

/* ---------------------------------------------------- recurrent states */

static void check_recurrent(ctx* c) {
  const pool_model* m = &c->m;
  for (int i = 0; i < PM_SEQS; i++) {
    const pm_seq* s = &m->s[i];
    if (!s->used) continue;
    for (uint32_t l = 0; l < m->nl; l++) {
      uint32_t g = m->l[l].group;
      if (pm_is_attention(m, g)) continue;
      const pm_layer* L = &m->l[l];
      kvc_tensor conv, ssm;
      char what[64];
      snprintf(what, sizeof what, "recurrent state of s%d layer %u", i, l);
      if (!s->live[g]) { /* "INVALID_STATE (no live state yet: kvc_pool_reserve or a match gives one)" */
        expect_code(kvc_pool_recurrent_state(c->h[i], l, &conv, &ssm), KVC_ERROR_INVALID_STATE, what);
        continue;
      }
      expect_code(kvc_pool_recurrent_state(c->h[i], l, &conv, &ssm), KVC_OK, what);
      c->states[i][l][0] = conv;
      c->states[i][l][1] = ssm;
      int64_t cs[3] = {1, L->C, L->K}, ss[4] = {1, L->H, L->Dk, L->N};
      check_tensor(c, &conv, 3, cs, m->dtype, what);
      check_tensor(c, &ssm, 4, ss, m->dtype, what);
      uint32_t nonce = s->state[l];
      if (nonce == PM_UNKNOWN) continue;
      for (int64_t a = 0; a < L->C; a++)
        for (int64_t b = 0; b < L->K; b++) {
          int64_t idx[3] = {0, a, b};
          uint32_t want = pf_bits(nonce, a * L->K + b, 0, m->dtype);
          if (pf_read(&conv, idx) != want)
            fail("%s: conv [%lld, %lld] is 0x%x, the model says 0x%x", what, (long long)a, (long long)b,
                 pf_read(&conv, idx), want);
        }
      for (int64_t h = 0; h < L->H; h++)
        for (int64_t d = 0; d < L->Dk; d++)
          for (int64_t n = 0; n < L->N; n++) {
            int64_t idx[4] = {0, h, d, n};
            uint32_t want = pf_bits(nonce, (h * L->Dk + d) * L->N + n, 1, m->dtype);
            if (pf_read(&ssm, idx) != want)
              fail("%s: SSM [%lld, %lld, %lld] is 0x%x, the model says 0x%x", what, (long long)h, (long long)d,
                   (long long)n, pf_read(&ssm, idx), want);
          }
    }
  }
}

/* The views taken earlier in check_all, after calls that "do not count as mutating": the tables (the queries,
 * write-free checks, gathers, storage and state views ran since) and the live states. */
static void check_views_still_valid(ctx* c) {
  int which[PM_SEQS];
  const kvc_pool_sequence* seqs[PM_SEQS];
  if (live_batch(c, seqs, which))
    for (uint32_t g = 0; g < c->m.ng; g++)
      if (pm_is_attention(&c->m, g)) verify_tables(c, g, " (taken before the other checks' calls)");
  for (int i = 0; i < PM_SEQS; i++)
    for (uint32_t l = 0; c->m.s[i].used && l < c->m.nl; l++) {
      uint32_t g = c->m.l[l].group;
      if (pm_is_attention(&c->m, g) || !c->m.s[i].live[g]) continue;
      kvc_tensor conv, ssm;
      expect_code(kvc_pool_recurrent_state(c->h[i], l, &conv, &ssm), KVC_OK, "kvc_pool_recurrent_state");
      if (conv.data != c->states[i][l][0].data || ssm.data != c->states[i][l][1].data)
        fail("recurrent state of s%d layer %u moved without a mutating call", i, l);
    }
}

void check_all(ctx* c) {
  check_stats(c);
  check_tables(c);
  check_storage(c);
  check_gather(c);
  check_recurrent(c);
  check_views_still_valid(c);
}

/* -------------------------------------------------------------- events */

static int event_equal(const kvc_pool_event* a, const pm_event* b) {
  const kvc_pool_event* e = &b->e;
  if (a->kind != e->kind) return 0;
  if (e->kind == KVC_POOL_EVENT_ALL_CLEARED) return 1;
  if (a->group != e->group || memcmp(a->block_hash, e->block_hash, 32)) return 0;
  if (b->check_block_id && a->block_id != e->block_id) return 0;
  if (e->kind == KVC_POOL_EVENT_BLOCK_STORED &&
      (memcmp(a->parent_hash, e->parent_hash, 32) || a->num_tokens != e->num_tokens))
    return 0;
  return 1;
}

static const char* kind_name(kvc_pool_event_kind k) {
  return k == KVC_POOL_EVENT_BLOCK_STORED ? "STORED" : k == KVC_POOL_EVENT_BLOCK_REMOVED ? "REMOVED" : "ALL_CLEARED";
}

/* Compares the events of the oldest calls whose events are all pulled: "oldest first", in an order the header
 * leaves open within one call. */
static void settle_events(ctx* c) {
  while (c->nmpending) {
    uint64_t call = c->mpending[0].call;
    size_t k = 0;
    while (k < c->nmpending && c->mpending[k].call == call) k++;
    if (c->m.q_count && c->m.q[c->m.q_head].call == call) return; /* more of this call still queued */
    if (c->m.last_dropped_call != call) {
      int used[PF_MAX_PENDING] = {0};
      for (size_t a = 0; a < k; a++) {
        size_t b = 0;
        while (b < k && (used[b] || !event_equal(&c->pending[a], &c->mpending[b]))) b++;
        if (b == k)
          fail("event %llu (%s, group %u, block %u, %u tokens) matches none the model expects of that call "
               "(first expected: %s, group %u, block %u)",
               (unsigned long long)c->pending[a].id, kind_name(c->pending[a].kind), c->pending[a].group,
               c->pending[a].block_id, c->pending[a].num_tokens, kind_name(c->mpending[0].e.kind),
               c->mpending[0].e.group, c->mpending[0].e.block_id);
        used[b] = 1;
      }
      c->events_compared += k;
    }
    memmove(c->pending, c->pending + k, (c->npending - k) * sizeof *c->pending);
    memmove(c->mpending, c->mpending + k, (c->nmpending - k) * sizeof *c->mpending);
    c->npending -= k;
    c->nmpending -= k;
  }
}

void check_events_pull(ctx* c, size_t cap) {
  kvc_pool_event ev[PM_EVENTS];
  pm_event mev[PM_EVENTS];
  if (cap > PM_EVENTS) cap = PM_EVENTS;
  size_t count = 12345;
  memset(ev, 0, sizeof ev);
  expect_code(kvc_pool_events_pull(c->pool, ev, cap, &count), KVC_OK, "kvc_pool_events_pull");
  size_t want = pm_events_pull(&c->m, mev, cap);
  if (count != want) fail("events_pull(capacity %zu) took %zu events, the model queued %zu", cap, count, want);
  for (size_t k = 0; k < count; k++) {
    if (ev[k].id != mev[k].e.id)
      fail("event %zu of the pull has id %llu, the model says %llu (ids count 1, 2, 3, ... and gaps are drops)", k,
           (unsigned long long)ev[k].id, (unsigned long long)mev[k].e.id);
    c->pending[c->npending++] = ev[k];
    c->mpending[c->nmpending++] = mev[k];
  }
  settle_events(c);
}
