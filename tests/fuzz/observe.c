/*
 * observe.c: see observe.h.
 */
#include "observe.h"

#include <stdio.h>
#include <string.h>

#include "report.h"
#include "tensor_codec.h"

void check_views(const kvc_kv* kv, const ref_grid* g, int64_t Dk, int64_t Dv, kvc_dtype dt,
                        const char* what) {
  char why[256];
  if (!codec_check_view(&kv->key, g, Dk, dt, 0, why, sizeof why)) fail("%s: %s", what, why);
  if (!codec_check_view(&kv->value, g, Dv, dt, 1, why, sizeof why)) fail("%s: %s", what, why);
}

/* The indexer keys of an indexed layer (data NULL before its first update_indexer); any other layer refuses. */
static void check_indexer(const kvc_cache* c, const ref_layer* L, uint32_t l, const char* name) {
  kvc_tensor t, before;
  memset(&t, 0x5C, sizeof t);
  before = t;
  char what[64];
  snprintf(what, sizeof what, "%s layer %u indexer view", name, l);
  kvc_error* e = kvc_cache_indexer_view(c, l, &t);
  if (!ref_is_indexed_kind(L->kind)) {
    expect_code(e, KVC_ERROR_INVALID_ARGUMENT, what);
    if (memcmp(&t, &before, sizeof t)) fail("%s: a failed indexer_view wrote its out-parameter", what);
    return;
  }
  expect_code(e, KVC_OK, what);
  if (!L->ix_init) {
    if (t.data || t.ndim != 0) fail("%s: expected no indexer (data NULL, ndim 0), got ndim %d", what, t.ndim);
    return;
  }
  char why[256];
  if (!codec_check_indexer_view(&t, &L->ix, L->ix_D, L->ix_dtype, why, sizeof why)) fail("%s: %s", what, why);
}

static void check_layer(const kvc_cache* c, const ref_cache* r, uint32_t l, const char* name) {
  const ref_layer* L = &r->layers[l];
  kvc_layer_info info;
  memset(&info, 0x5A, sizeof info);
  info.struct_size = sizeof info;
  expect_code(kvc_cache_layer_info(c, l, &info), KVC_OK, "layer_info");
  int init = L->initialized;
  int64_t stored = ref_layer_stored_length(L);
  struct {
    const char* field;
    int64_t got, want;
  } f[] = {
      {"kind", info.kind, L->kind},
      {"window", info.window, L->window},
      {"max_cache_len", info.max_cache_len, L->max_cache_len},
      {"capacity", info.capacity, ref_layer_capacity(L)},
      {"is_initialized", info.is_initialized, init},
      {"is_sliding", info.is_sliding, ref_is_sliding_kind(L->kind)},
      {"is_chunked", info.is_chunked,
       L->kind == KVC_LAYER_DYNAMIC_CHUNKED || L->kind == KVC_LAYER_STATIC_CHUNKED},
      {"is_compileable", info.is_compileable, ref_is_static_kind(L->kind) || L->kind == KVC_LAYER_DUMMY},
      {"records_past", info.records_past, L->record},
      {"dtype", info.dtype, init ? L->dtype : KVC_DTYPE_UNSET},
      {"batch_size", info.batch_size, ref_layer_has_batch(L) ? L->B : 0},
      {"num_kv_heads", info.num_kv_heads, init ? L->H : 0},
      {"k_head_dim", info.k_head_dim, init ? L->Dk : 0},
      {"v_head_dim", info.v_head_dim, init ? L->Dv : 0},
      {"seq_length", info.seq_length, ref_seq_length(r, l)},
      {"stored_length", info.stored_length, stored},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].got != f[i].want)
      fail("%s layer %u: layer_info.%s is %lld, reference %lld", name, l, f[i].field, (long long)f[i].got,
           (long long)f[i].want);

  check_indexer(c, L, l, name);
  kvc_kv kv, before;
  memset(&kv, 0xA5, sizeof kv);
  before = kv;
  kvc_error* e = kvc_cache_layer_view(c, l, &kv);
  char what[64];
  snprintf(what, sizeof what, "%s layer %u stored view", name, l);
  if (!init) { /* a dummy layer has no K/V to view at all */
    expect_code(e, L->kind == KVC_LAYER_DUMMY ? KVC_ERROR_UNSUPPORTED : KVC_ERROR_INVALID_STATE, what);
    if (memcmp(&kv, &before, sizeof kv)) fail("%s: a failed layer_view wrote its out-parameter", what);
    return;
  }
  expect_code(e, KVC_OK, what);
  check_views(&kv, &L->stored, L->Dk, L->Dv, L->dtype, what);
}

static void check_lengths(const kvc_cache* c, const ref_cache* r, uint32_t l, const char* name) {
  int64_t v = -7, len = -7, off = -7, want = -7;
  kvc_code wc = ref_cache_seq_length(r, l, &want);
  expect_code(kvc_cache_seq_length(c, l, &v), wc, "seq_length");
  if (v != want) fail("%s: seq_length(%u) = %lld, reference %lld", name, l, (long long)v, (long long)want);
  expect_code(kvc_cache_max_length(c, (int32_t)l, &v), KVC_OK, "max_length");
  if (v != ref_max_length(r, (int32_t)l))
    fail("%s: max_length(%u) = %lld, reference %lld", name, l, (long long)v,
         (long long)ref_max_length(r, (int32_t)l));
  static const int64_t qs[] = {1, 2, 5};
  for (size_t i = 0; i < 3; i++) {
    int64_t wl, wo;
    kvc_code mc = ref_mask_sizes(r, qs[i], l, &wl, &wo);
    if (mc) wl = wo = -7; /* a refusal writes nothing */
    len = off = -7;
    expect_code(kvc_cache_mask_sizes(c, qs[i], l, &len, &off), mc, "mask_sizes");
    if (len != wl || off != wo)
      fail("%s: mask_sizes(q=%lld, layer %u) = (%lld, %lld), reference (%lld, %lld)", name, (long long)qs[i], l,
           (long long)len, (long long)off, (long long)wl, (long long)wo);
    expect_code(kvc_cache_usable_length(c, qs[i] - 1, l, &v), KVC_OK, "usable_length");
    if (v != ref_usable_length(r, qs[i] - 1, l))
      fail("%s: usable_length(%lld, layer %u) = %lld, reference %lld", name, (long long)(qs[i] - 1), l,
           (long long)v, (long long)ref_usable_length(r, qs[i] - 1, l));
  }
}

static uint64_t ref_bytes_used(const ref_cache* r) {
  uint64_t sum = 0;
  for (uint32_t l = 0; l < r->num_layers; l++) {
    const ref_layer* L = &r->layers[l];
    if (L->initialized)
      sum += (uint64_t)(L->B * L->H * L->stored.L * (L->Dk + L->Dv)) * codec_dtype_size(L->dtype);
  }
  return sum;
}

void check_cache(const kvc_cache* c, const ref_cache* r, const char* name) {
  uint32_t n = kvc_cache_num_layers(c);
  if (n != r->num_layers) fail("%s: num_layers %u, reference %u", name, n, r->num_layers);
  for (uint32_t l = 0; l < n; l++) {
    check_layer(c, r, l, name);
    check_lengths(c, r, l, name);
  }
  check_lengths(c, r, n, name); /* beyond the layers: 0, -1, (q, 0) */
  check_lengths(c, r, n + 3, name);

  kvc_layer_info info, before;
  memset(&info, 0x3C, sizeof info);
  info.struct_size = sizeof info;
  before = info;
  expect_code(kvc_cache_layer_info(c, n, &info), KVC_ERROR_OUT_OF_RANGE, "layer_info beyond the layers");
  if (memcmp(&info, &before, sizeof info)) fail("%s: a failed layer_info wrote its out-parameter", name);
  kvc_kv kv, kv_before;
  memset(&kv, 0xC3, sizeof kv);
  kv_before = kv;
  expect_code(kvc_cache_layer_view(c, n, &kv), KVC_ERROR_OUT_OF_RANGE, "layer_view beyond the layers");
  if (memcmp(&kv, &kv_before, sizeof kv)) fail("%s: a failed layer_view wrote its out-parameter", name);

  int64_t v = -7, want;
  expect_code(kvc_cache_max_length(c, KVC_ALL_LAYERS, &v), KVC_OK, "max_length(all)");
  if (v != ref_max_length(r, KVC_ALL_LAYERS))
    fail("%s: max_length(all) = %lld, reference %lld", name, (long long)v,
         (long long)ref_max_length(r, KVC_ALL_LAYERS));
  v = -7;
  kvc_code wc = ref_batch_size(r, &want);
  expect_code(kvc_cache_batch_size(c, &v), wc, "batch_size");
  if (wc == KVC_OK && v != want) fail("%s: batch_size %lld, reference %lld", name, (long long)v, (long long)want);
  if (wc != KVC_OK && v != -7) fail("%s: a failed batch_size wrote its out-parameter", name);

  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  expect_code(kvc_cache_memory(c, &mem), KVC_OK, "memory");
  if (mem.bytes_used != ref_bytes_used(r))
    fail("%s: memory.bytes_used %llu, reference %llu (the stored views' bytes)", name,
         (unsigned long long)mem.bytes_used, (unsigned long long)ref_bytes_used(r));
  if (mem.bytes_reserved < mem.bytes_used)
    fail("%s: memory.bytes_reserved %llu < bytes_used %llu", name, (unsigned long long)mem.bytes_reserved,
         (unsigned long long)mem.bytes_used);
}

void check_ed(const kvc_encoder_decoder_cache* ed, const ref_ed* r, const char* name) {
  char sub[32];
  snprintf(sub, sizeof sub, "%s.self", name);
  check_cache(kvc_encoder_decoder_cache_self_attention((kvc_encoder_decoder_cache*)ed), &r->self, sub);
  snprintf(sub, sizeof sub, "%s.cross", name);
  check_cache(kvc_encoder_decoder_cache_cross_attention((kvc_encoder_decoder_cache*)ed), &r->cross, sub);
  uint32_t n = r->cross.num_layers > r->num_flags ? r->cross.num_layers : r->num_flags;
  for (uint32_t l = 0; l < n + 2; l++) {
    int32_t u = -7;
    expect_code(kvc_encoder_decoder_cache_is_updated(ed, l, &u), KVC_OK, "is_updated");
    if (u != ref_ed_is_updated(r, l))
      fail("%s: is_updated(%u) = %d, reference %d", name, l, u, ref_ed_is_updated(r, l));
  }
}
