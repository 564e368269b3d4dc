/*
 * kinds_checks.c: see kinds_checks.h.
 */
#include "kinds_checks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "tensor_codec.h"

/*
 * What each quantized tensor of transformers mode may hold: 0 (its groups
 * spanned batch rows, or a crop dropped them) or one of two groupings (quanto
 * axis 0 falls back to groups of one element when a flush's whole tensor
 * was one group, which depends on the batch it had then).
 */
typedef struct qchoice {
  uint64_t bytes[2];
  int n;
} qchoice;

/* Whether `want` is a sum of one choice (or 0) per tensor. */
static int choice_sum(const qchoice* c, int n, uint64_t want) {
  if (n == 0) return want == 0;
  if (choice_sum(c + 1, n - 1, want)) return 1;
  for (int i = 0; i < c->n; i++)
    if (c->bytes[i] <= want && choice_sum(c + 1, n - 1, want - c->bytes[i])) return 1;
  return 0;
}

/* Bytes of the groups of q quantized tokens of one tensor with head dim d (integral when they exist). */
static uint64_t quant_bytes(const kvc_layer_info* I, const kvc_quant_options* q, int64_t d, int64_t quantized,
                            int* integral) {
  int64_t g = q->q_group_size, rec = 2 * dtype_bytes(I->dtype) + (g * q->nbits + 7) / 8;
  int64_t elems = I->batch_size * I->num_kv_heads * quantized * d;
  *integral = elems % g == 0;
  return (uint64_t)(elems / g * rec);
}

static void check_quantized_layer(const group* g, const snap_layer* L, uint32_t l, int flipped, const char* who,
                                  uint64_t* base, qchoice* items, int* nitems) {
  const kvc_layer_info* I = &L->info;
  kvc_quant_options q = quant_of(g, l, flipped);
  /* Compact mode stores the residual only; the others store every token, the quantized ones dequantized. */
  int64_t quantized = I->quantized_length;
  int64_t stored = I->stored_length + (q.mode == KVC_QUANT_MODE_COMPACT ? quantized : 0);
  if (quantized < 0 || quantized > stored || stored != I->seq_length)
    fail("%s layer %u: quantized_length %lld, stored_length %lld, seq_length %lld (mode %d)", who, l,
         (long long)quantized, (long long)I->stored_length, (long long)I->seq_length, (int)q.mode);
  if (!I->is_initialized || quantized == 0) return;
  int ik, iv;
  uint64_t fk = quant_bytes(I, &q, I->k_head_dim, quantized, &ik), fv = quant_bytes(I, &q, I->v_head_dim, quantized, &iv);
  if (q.mode != KVC_QUANT_MODE_TRANSFORMERS) {
    int channel = q.quantizer == KVC_QUANTIZER_QUANTO ? (q.axis_key == -1 || q.axis_value == -1)
                                                     : (q.axis_key == 0 || q.axis_value == 0);
    int64_t block = channel ? q.q_group_size : 1;
    if (quantized % block)
      fail("%s layer %u: incremental quantized_length %lld is not a multiple of the block of %lld tokens", who, l,
           (long long)quantized, (long long)block);
    if (stored - quantized > q.residual_length + block - 1)
      fail("%s layer %u: incremental mode keeps %lld tokens in the residual (residual_length %lld, block %lld)", who,
           l, (long long)(stored - quantized), (long long)q.residual_length, (long long)block);
    if (!ik || !iv) fail("%s layer %u: %lld quantized tokens do not fill whole groups", who, l, (long long)quantized);
    *base += fk + fv;
  } else {
    int64_t most = q.residual_length > 1 ? q.residual_length - 1 : 0;
    if (stored - quantized > most)
      fail("%s layer %u: transformers mode keeps %lld tokens in the residual (residual_length %lld)", who, l,
           (long long)(stored - quantized), (long long)q.residual_length);
    for (int w = 0; w < 2; w++) {
      qchoice* ch = &items[(*nitems)++];
      ch->n = 0;
      if (w ? iv : ik) ch->bytes[ch->n++] = w ? fv : fk;
      int axis = w ? q.axis_value : q.axis_key;
      if (q.quantizer == KVC_QUANTIZER_QUANTO && axis == 0) {
        kvc_quant_options one = q;
        one.q_group_size = 1;
        int unused;
        ch->bytes[ch->n++] = quant_bytes(I, &one, w ? I->v_head_dim : I->k_head_dim, quantized, &unused);
      }
    }
  }
}

static void check_states(const snap_layer* L, uint32_t l, const char* who, uint64_t* state_bytes) {
  const kvc_layer_info* I = &L->info;
  int all = L->num_states > 0;
  for (uint32_t i = 0; i < L->num_states; i++) {
    const snap_state* S = &L->states[i];
    if (S->view_code != KVC_OK) fail("%s layer %u: state_view(%u) returned %s", who, l, i, kvc_code_name(S->view_code));
    if (S->prev_code != KVC_OK || (S->prev != 0 && S->prev != 1))
      fail("%s layer %u: has_previous_state(%u) gave %s, %d", who, l, i, kvc_code_name(S->prev_code), S->prev);
    all = all && S->prev;
    if (S->conv.ndim != 0 && S->conv.ndim != 3) fail("%s layer %u: conv state %u has ndim %d", who, l, i, S->conv.ndim);
    if (S->conv.ndim == 3) {
      if (S->conv.shape[0] != I->batch_size)
        fail("%s layer %u: conv state %u has batch %lld, the layer %lld", who, l, i, (long long)S->conv.shape[0],
             (long long)I->batch_size);
      if (i == 0 && !I->records_past && S->conv.shape[2] != I->conv_kernel_size)
        fail("%s layer %u: conv state 0 holds %lld columns but conv_kernel_size is %lld", who, l,
             (long long)S->conv.shape[2], (long long)I->conv_kernel_size);
      *state_bytes += S->conv.nbytes;
    }
    if (S->rec.ndim < 0 || S->rec.ndim > 6) fail("%s layer %u: recurrent state %u has ndim %d", who, l, i, S->rec.ndim);
    if (S->rec.ndim) {
      if (S->rec.shape[0] != I->batch_size)
        fail("%s layer %u: recurrent state %u has batch %lld, the layer %lld", who, l, i, (long long)S->rec.shape[0],
             (long long)I->batch_size);
      *state_bytes += S->rec.nbytes;
    }
  }
  if (L->prev_all_code != KVC_OK || L->prev_all != all || I->has_previous_state != all)
    fail("%s layer %u: has_previous_state(-1) is %d (%s) and info.has_previous_state %d, but the states say %d", who,
         l, L->prev_all, kvc_code_name(L->prev_all_code), I->has_previous_state, all);
}

void check_invariants(const group* g, const cache_snap* s, int flipped, const char* who) {
  uint64_t used = 0, state_bytes = 0, qbase = 0;
  qchoice qitems[2 * MAX_LAYERS + 8];
  int nitems = 0, any_offloaded = 0, any_state = 0;
  for (uint32_t l = 0; l < s->num_layers; l++) {
    const snap_layer* L = &s->layers[l];
    const kvc_layer_info* I = &L->info;
    if (L->info_code != KVC_OK) fail("%s: layer_info(%u) returned %s", who, l, kvc_code_name(L->info_code));
    int has_kv = kind_has_kv(I->kind);
    if (has_kv) {
      kvc_code want = I->is_initialized ? KVC_OK : KVC_ERROR_INVALID_STATE;
      if (L->view_code != want)
        fail("%s layer %u: layer_view returned %s, is_initialized %d", who, l, kvc_code_name(L->view_code),
             I->is_initialized);
      if (L->view_code == KVC_OK) {
        const snap_tensor* kv[2] = {&L->key, &L->value};
        for (int w = 0; w < 2; w++) {
          const snap_tensor* t = kv[w];
          int64_t want_shape[4] = {I->batch_size, I->num_kv_heads, I->stored_length, w ? I->v_head_dim : I->k_head_dim};
          if (t->ndim != 4 || memcmp(t->shape, want_shape, sizeof want_shape))
            fail("%s layer %u: stored %s view [%lld,%lld,%lld,%lld] (ndim %d) but info says [%lld,%lld,%lld,%lld]", who,
                 l, w ? "value" : "key", (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                 (long long)t->shape[3], t->ndim, (long long)want_shape[0], (long long)want_shape[1],
                 (long long)want_shape[2], (long long)want_shape[3]);
          kvc_data_type dt = codec_data_type(I->dtype);
          if (t->nbytes && (t->dtype.code != dt.code || t->dtype.bits != dt.bits))
            fail("%s layer %u: stored %s view dtype {%u,%u}, info dtype %d", who, l, w ? "value" : "key",
                 t->dtype.code, t->dtype.bits, I->dtype);
          used += t->nbytes;
        }
      } else if (I->stored_length != 0) {
        fail("%s layer %u: not initialized but stored_length %lld", who, l, (long long)I->stored_length);
      }
      if (L->seq_code != KVC_OK || L->seq != I->seq_length)
        fail("%s layer %u: seq_length gave %lld (%s), info.seq_length %lld", who, l, (long long)L->seq,
             kvc_code_name(L->seq_code), (long long)I->seq_length);
      for (int q = 0; q < SNAP_NQ; q++)
        if (L->mask_code[q] != KVC_OK)
          fail("%s layer %u: mask_sizes(%lld) returned %s", who, l, (long long)snap_queries[q],
               kvc_code_name(L->mask_code[q]));
    } else if (L->view_code != KVC_ERROR_UNSUPPORTED) {
      fail("%s layer %u: layer_view of a layer without K/V (kind %d) returned %s", who, l, I->kind,
           kvc_code_name(L->view_code));
    }
    if (I->kind == KVC_LAYER_QUANTIZED)
      check_quantized_layer(g, L, l, flipped, who, &qbase, qitems, &nitems);
    else if (I->quantized_length != 0)
      fail("%s layer %u: a %d layer reports quantized_length %lld", who, l, I->kind, (long long)I->quantized_length);
    if (I->is_offloaded) {
      if (!is_offloading_kind(I->kind)) fail("%s layer %u: a layer of kind %d is offloaded", who, l, I->kind);
      any_offloaded = 1;
    }
    if (snap_kind_is_linear(I->kind)) {
      if (L->num_states != I->num_states || I->num_states < 1)
        fail("%s layer %u: %u state pairs", who, l, I->num_states);
      check_states(L, l, who, &state_bytes);
      any_state |= state_allocated(L);
    }
  }
  const kvc_memory_info* m = &s->mem;
  if (s->mem_code != KVC_OK) fail("%s: memory returned %s", who, kvc_code_name(s->mem_code));
  if (m->bytes_used != used)
    fail("%s: memory.bytes_used %llu but the stored views hold %llu bytes", who, (unsigned long long)m->bytes_used,
         (unsigned long long)used);
  if (m->bytes_state < state_bytes || (!any_state && m->bytes_state))
    fail("%s: memory.bytes_state %llu but the allocated states hold %llu bytes", who,
         (unsigned long long)m->bytes_state, (unsigned long long)state_bytes);
  if (m->bytes_device + m->bytes_host != m->bytes_reserved)
    fail("%s: memory.bytes_device %llu + bytes_host %llu != bytes_reserved %llu", who,
         (unsigned long long)m->bytes_device, (unsigned long long)m->bytes_host,
         (unsigned long long)m->bytes_reserved);
  if (!any_offloaded && m->bytes_host)
    fail("%s: no layer is offloaded but memory.bytes_host is %llu", who, (unsigned long long)m->bytes_host);
  if (m->bytes_reserved < m->bytes_used + m->bytes_quantized + m->bytes_state)
    fail("%s: memory.bytes_reserved %llu < used %llu + quantized %llu + state %llu", who,
         (unsigned long long)m->bytes_reserved, (unsigned long long)m->bytes_used,
         (unsigned long long)m->bytes_quantized, (unsigned long long)m->bytes_state);
  if (m->bytes_quantized < qbase || !choice_sum(qitems, nitems, m->bytes_quantized - qbase))
    fail("%s: memory.bytes_quantized %llu does not match the quantized lengths (incremental layers %llu, %d "
         "transformers-mode tensors)",
         who, (unsigned long long)m->bytes_quantized, (unsigned long long)qbase, nitems);
}

/* Tokens [from, to) of a compact [B, H, L, D] snapshot. */
static void slice_tokens(const snap_tensor* a, int64_t from, int64_t to, snap_tensor* out) {
  *out = *a;
  out->bytes = NULL;
  out->nbytes = 0;
  if (a->ndim != 4) return;
  int64_t B = a->shape[0], H = a->shape[1], L = a->shape[2], D = a->shape[3];
  out->shape[2] = to - from;
  out->nbytes = (size_t)(B * H * (to - from) * D) * a->elem;
  if (!out->nbytes) return;
  out->bytes = malloc(out->nbytes);
  if (!out->bytes) abort();
  size_t row = (size_t)((to - from) * D) * a->elem;
  for (int64_t bh = 0; bh < B * H; bh++)
    memcpy(out->bytes + (size_t)bh * row, a->bytes + (size_t)((bh * L + from) * D) * a->elem, row);
}

/*
 * m0 and a member whose quantized layers run the other of incremental and
 * compact modes: a compact layer's stored view is the incremental layer's
 * view without its quantized tokens (the residual); transformers-mode
 * layers are not flipped and must agree entirely.
 */
void check_flipped_stores(const group* g, int i) {
  char why[160];
  for (uint32_t l = 0; l < g->snap[0].num_layers; l++) {
    const snap_layer *a = &g->snap[0].layers[l], *b = &g->snap[i].layers[l];
    if (a->info.kind != KVC_LAYER_QUANTIZED || a->view_code != KVC_OK) continue;
    kvc_quant_mode mode = quant_of(g, l, 0).mode;
    const snap_layer* full = mode == KVC_QUANT_MODE_COMPACT ? b : a;
    const snap_layer* compact = full == a ? b : a;
    int64_t from = mode == KVC_QUANT_MODE_TRANSFORMERS ? 0 : full->info.quantized_length;
    const snap_tensor* fk[2] = {&full->key, &full->value};
    const snap_tensor* ck[2] = {&compact->key, &compact->value};
    for (int w = 0; w < 2; w++) {
      snap_tensor want;
      slice_tokens(fk[w], from, fk[w]->ndim == 4 ? fk[w]->shape[2] : 0, &want);
      int same = snap_tensor_equal(&want, ck[w], 0, why, sizeof why);
      snap_tensor_free(&want);
      if (!same)
        fail("layer %u: the %s stored %s of %s are not the other mode's %s from token %lld: %s", l,
             mode == KVC_QUANT_MODE_TRANSFORMERS ? "transformers-mode" : "compact", w ? "values" : "keys",
             mname(g, compact == a ? 0 : i), w ? "values" : "keys", (long long)from, why);
    }
  }
}

/* Rows rows[0..n) of a compact tensor snapshot (first dim the batch). */
static void gather_rows(const snap_tensor* a, const int64_t* rows, int64_t n, snap_tensor* out) {
  *out = *a;
  out->shape[0] = n;
  size_t row = a->shape[0] ? a->nbytes / (size_t)a->shape[0] : 0;
  out->nbytes = row * (size_t)n;
  out->bytes = out->nbytes ? malloc(out->nbytes) : NULL;
  if (out->nbytes && !out->bytes) abort();
  for (int64_t i = 0; row && i < n; i++) memcpy(out->bytes + (size_t)i * row, a->bytes + (size_t)rows[i] * row, row);
}

/*
 * After a batch operation that made rows[0..n) of the old rows: a tensor
 * of a layer that takes part holds those rows; one that does not either
 * kept its old rows or holds them too (nothing says which for an empty one).
 */
void check_tensor_rows(const snap_tensor* before, const snap_tensor* after, const int64_t* rows, int64_t n, int must,
                       const char* what, uint32_t l, const char* part) {
  char why[160], why2[160];
  if (before->ndim == 0) {
    if (after->ndim != 0) fail("%s: layer %u %s appeared (ndim %d)", what, l, part, after->ndim);
    return;
  }
  int64_t repeat[MAX_BATCH * 4];
  if (!rows) { /* repeat-interleave by n: rows of this tensor's own batch */
    int64_t rep = n;
    n = before->shape[0] * rep;
    if (n > MAX_BATCH * 4) fail("%s: layer %u %s: a batch of %lld", what, l, part, (long long)before->shape[0]);
    for (int64_t i = 0; i < n; i++) repeat[i] = i / rep;
    rows = repeat;
  }
  int in_range = 1;
  for (int64_t i = 0; i < n; i++) in_range = in_range && rows[i] >= 0 && rows[i] < before->shape[0];
  int moved = 0;
  if (in_range) {
    snap_tensor want;
    gather_rows(before, rows, n, &want);
    moved = snap_tensor_equal(&want, after, 1, why, sizeof why);
    snap_tensor_free(&want);
  } else {
    snprintf(why, sizeof why, "rows beyond its batch of %lld", (long long)before->shape[0]);
  }
  if (moved) return;
  if (!must && snap_tensor_equal(before, after, 1, why2, sizeof why2)) return;
  fail("%s: layer %u %s is not the rows of the views before (%s)", what, l, part, why);
}

/* rows NULL: batch_repeat_interleave(n), whose rows depend on each layer's batch. */
void check_rows(const cache_snap* before, const cache_snap* after, const int64_t* rows, int64_t n, const char* what) {
  if (before->num_layers != after->num_layers) fail("%s: the number of layers changed", what);
  for (uint32_t l = 0; l < before->num_layers; l++) {
    const snap_layer *x = &before->layers[l], *y = &after->layers[l];
    int must = takes_part(x);
    if (x->view_code != y->view_code) fail("%s: layer %u layer_view code changed", what, l);
    check_tensor_rows(&x->key, &y->key, rows, n, must, what, l, "keys");
    check_tensor_rows(&x->value, &y->value, rows, n, must, what, l, "values");
    const kvc_layer_info *a = &x->info, *b = &y->info;
    if (a->seq_length != b->seq_length || a->stored_length != b->stored_length ||
        a->quantized_length != b->quantized_length || a->is_initialized != b->is_initialized ||
        a->has_previous_state != b->has_previous_state || a->records_past != b->records_past)
      fail("%s: layer %u lengths or flags changed (seq %lld->%lld, stored %lld->%lld, quantized %lld->%lld)", what,
           l, (long long)a->seq_length, (long long)b->seq_length, (long long)a->stored_length,
           (long long)b->stored_length, (long long)a->quantized_length, (long long)b->quantized_length);
    int64_t want_batch = rows ? n : a->batch_size * n;
    if (must && b->batch_size != want_batch)
      fail("%s: layer %u takes part but has batch %lld, not %lld", what, l, (long long)b->batch_size,
           (long long)want_batch);
    for (uint32_t i = 0; i < x->num_states && i < y->num_states; i++) {
      char part[32];
      snprintf(part, sizeof part, "conv state %u", i);
      check_tensor_rows(&x->states[i].conv, &y->states[i].conv, rows, n, must, what, l, part);
      snprintf(part, sizeof part, "recurrent state %u", i);
      check_tensor_rows(&x->states[i].rec, &y->states[i].rec, rows, n, must, what, l, part);
    }
  }
}

/* A row-range check of one split against its source. */
void check_split(const cache_snap* src, const cache_snap* part, int64_t first, int64_t n, size_t k) {
  int64_t rows[MAX_BATCH];
  for (int64_t i = 0; i < n; i++) rows[i] = first + i;
  char what[48];
  snprintf(what, sizeof what, "batch_split: split %zu", k);
  for (uint32_t l = 0; l < src->num_layers && l < part->num_layers; l++) {
    /* A split holds the rows of every layer with storage, taking part or not. */
    const snap_layer *x = &src->layers[l], *y = &part->layers[l];
    check_tensor_rows(&x->key, &y->key, rows, n, x->view_code == KVC_OK, what, l, "keys");
    check_tensor_rows(&x->value, &y->value, rows, n, x->view_code == KVC_OK, what, l, "values");
    for (uint32_t i = 0; i < x->num_states && i < y->num_states; i++) {
      check_tensor_rows(&x->states[i].conv, &y->states[i].conv, rows, n, 1, what, l, "conv state");
      check_tensor_rows(&x->states[i].rec, &y->states[i].rec, rows, n, 1, what, l, "recurrent state");
    }
    if (x->info.seq_length != y->info.seq_length || x->info.quantized_length != y->info.quantized_length)
      fail("%s: layer %u seq_length %lld / quantized_length %lld, the source's %lld / %lld", what, l,
           (long long)y->info.seq_length, (long long)y->info.quantized_length, (long long)x->info.seq_length,
           (long long)x->info.quantized_length);
  }
  if (src->num_layers != part->num_layers) fail("%s: %u layers, the source %u", what, part->num_layers, src->num_layers);
}

/*
 * Whether mask_sizes promises the length the next update of `layer` returns.
 * Not on a recording dynamic sliding layer that a crop left with fewer
 * tokens than its counter within the window: transformers' get_mask_sizes
 * counts min(cumulative_length, W-1) keys but the update returns min(stored,
 * W-1) plus the new ones, and kvcache mirrors both.
 */
int mask_promised(const cache_snap* before, uint32_t layer) {
  if (layer >= before->num_layers) return 1;
  const kvc_layer_info* I = &before->layers[layer].info;
  if (!is_dynamic_sliding_kind(I->kind) || !I->records_past) return 1;
  int64_t w = I->window - 1, a = I->seq_length < w ? I->seq_length : w, b = I->stored_length < w ? I->stored_length : w;
  return a == b;
}
