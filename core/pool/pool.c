/*
 * core/pool/pool.c: creating and destroying a pool (options checked field
 * by field), its stream, its counters, and the cache-wide operations
 * (kvc_pool_clear_cache, kvc_pool_unpin_all).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "pool/cbor.h"
#include "pool/block_hash.h"
#include "pool/vllm_hash.h"
#include "pool_internal.h"

/* Bounds that keep every size and slot computation far from overflow (and the tables' int32 entries valid). */
#define MAX_BLOCK_SIZE (UINT32_C(1) << 20)
#define MAX_BLOCKS     (UINT32_C(1) << 30)
#define MAX_DIM        (INT64_C(1) << 20)
#define MAX_EVENTS     (UINT32_C(1) << 24)
#define MAX_ELEMS      (INT64_C(1) << 44)

void kvc_pool_options_init(kvc_pool_options* options) {
  if (!options) return;
  kvc_pool_options init = KVC_POOL_OPTIONS_INIT;
  *options = init;
}

void kvc_pool_layer_options_init(kvc_pool_layer_options* options) {
  if (!options) return;
  kvc_pool_layer_options init = KVC_POOL_LAYER_OPTIONS_INIT;
  *options = init;
}

static const char* kind_name(kvc_pool_group_kind k) {
  static const char* const NAMES[] = {"", "full", "sliding", "chunked", "recurrent", "latent"};
  return k >= KVC_POOL_GROUP_FULL && k <= KVC_POOL_GROUP_LATENT ? NAMES[k] : "unknown";
}

static kvc_error* check_group(const char* fn, uint32_t i, const kvc_pool_group_options* g, int shared) {
  if (g->struct_size != sizeof(*g))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].struct_size is %u but this library knows only %zu; "
                    "initialize it with KVC_POOL_GROUP_OPTIONS_INIT", fn, i, g->struct_size, sizeof(*g));
  if (g->kind < KVC_POOL_GROUP_FULL || g->kind > KVC_POOL_GROUP_LATENT)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].kind is %d; it must be KVC_POOL_GROUP_FULL (1), "
                    "SLIDING (2), CHUNKED (3), RECURRENT (4) or LATENT (5)", fn, i, (int)g->kind);
  if (g->block_size < 1 || g->block_size > MAX_BLOCK_SIZE)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].block_size is %u; it must be in [1, %u]", fn, i,
                    g->block_size, MAX_BLOCK_SIZE);
  if (!shared && (g->num_blocks < 2 || g->num_blocks > MAX_BLOCKS))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].num_blocks is %u; it must be in [2, %u] (block 0 is "
                    "the null block)", fn, i, g->num_blocks, MAX_BLOCKS);
  int windowed = g->kind == KVC_POOL_GROUP_SLIDING || g->kind == KVC_POOL_GROUP_CHUNKED;
  if (windowed && g->window < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].window is %" PRId64 "; a %s group needs a window "
                    ">= 1", fn, i, g->window, g->kind == KVC_POOL_GROUP_SLIDING ? "sliding" : "chunked");
  if (!windowed && g->window != 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].window is %" PRId64 "; it must be 0 for a %s group",
                    fn, i, g->window, kind_name(g->kind));
  if (g->reserved)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].reserved is %" PRIu64 "; it must be 0", fn, i,
                    g->reserved);
  return NULL;
}

static kvc_error* check_dim(const char* fn, uint32_t i, const char* field, uint32_t v, int64_t lo, const char* why) {
  if ((int64_t)v < lo || (int64_t)v > MAX_DIM)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].%s is %u; %s it must be in [%" PRId64 ", %" PRId64 "]",
                    fn, i, field, v, why, lo, MAX_DIM);
  return NULL;
}

/* A scale of an fp8 layer (finite, > 0), or of any other, which must keep its default 1. */
static kvc_error* check_scale(const char* fn, uint32_t i, const char* field, float v, int used, const char* why) {
  if (used && !(isfinite(v) && v > 0))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].%s is %.9g; an fp8 layer's scale must be finite "
                    "and > 0", fn, i, field, (double)v);
  if (!used && v != 1.0f)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].%s is %.9g; it must be 1 %s", fn, i, field,
                    (double)v, why);
  return NULL;
}

/* Since 0.7: how the layer's blocks hold it (fp8 needs K/V blocks) and its scales. */
static kvc_error* check_storage(const char* fn, uint32_t i, const kvc_pool_layer_options* l, kvc_pool_group_kind kind) {
  if (l->storage != KVC_POOL_STORAGE_DTYPE && l->storage != KVC_POOL_STORAGE_FP8_E4M3)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].storage is %d; it must be KVC_POOL_STORAGE_DTYPE (0) "
                    "or KVC_POOL_STORAGE_FP8_E4M3 (1)", fn, i, (int)l->storage);
  int fp8 = l->storage == KVC_POOL_STORAGE_FP8_E4M3;
  if (fp8 && kind == KVC_POOL_GROUP_RECURRENT)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].storage is KVC_POOL_STORAGE_FP8_E4M3 but the layer is "
                    "in a recurrent group, whose states stay in the pool's dtype", fn, i);
  kvc_error* e = check_scale(fn, i, "k_scale", l->k_scale, fp8, "unless storage is KVC_POOL_STORAGE_FP8_E4M3");
  if (!e)
    e = check_scale(fn, i, "v_scale", l->v_scale, fp8 && kind != KVC_POOL_GROUP_LATENT,
                    kind == KVC_POOL_GROUP_LATENT ? "in a latent group, which has no V"
                                                  : "unless storage is KVC_POOL_STORAGE_FP8_E4M3");
  return e;
}

static kvc_error* check_layer(const char* fn, uint32_t i, const kvc_pool_layer_options* l,
                              const kvc_pool_options* o) {
  if (l->group >= o->num_groups)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].group is %u but there are %u groups", fn, i, l->group,
                    o->num_groups);
  kvc_pool_group_kind kind = o->groups[l->group].kind;
  int rec = kind == KVC_POOL_GROUP_RECURRENT, latent = kind == KVC_POOL_GROUP_LATENT;
  const char* in = rec ? "in a recurrent group" : latent ? "in a latent group (one row per token, no V)"
                                                         : "in an attention group";
  kvc_error* e = check_dim(fn, i, "num_kv_heads", l->num_kv_heads, 1, "");
  if (!e && latent && l->num_kv_heads != 1)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].num_kv_heads is %u; it must be 1 %s", fn, i,
                 l->num_kv_heads, in);
  if (!e) e = check_dim(fn, i, "key_head_dim", l->key_head_dim, 1, "");
  if (!e && !rec && !latent) e = check_dim(fn, i, "value_head_dim", l->value_head_dim, 0, "(0 = key_head_dim)");
  if (!e && (rec || latent) && l->value_head_dim)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].value_head_dim is %u; it must be 0 %s", fn, i,
                 l->value_head_dim, in);
  const uint32_t* rf[3] = {&l->conv_dim, &l->conv_kernel, &l->ssm_state_size};
  static const char* rn[3] = {"conv_dim", "conv_kernel", "ssm_state_size"};
  for (int k = 0; !e && k < 3; k++) {
    if (rec)
      e = check_dim(fn, i, rn[k], *rf[k], 1, "in a recurrent group");
    else if (*rf[k])
      e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].%s is %u; it must be 0 %s", fn, i, rn[k], *rf[k], in);
  }
  if (!e && l->reserved)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].reserved is %" PRIu64 "; it must be 0", fn, i,
                 l->reserved);
  if (!e) e = check_storage(fn, i, l, kind);
  return e;
}

static kvc_error* check_options(const char* fn, const kvc_pool_options* o) {
  if (!kvc_dtype_size(o->dtype))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.dtype is %d; pass KVC_DTYPE_FLOAT32, FLOAT16 or "
                    "BFLOAT16 (a pool's dtype is fixed at creation)", fn, (int)o->dtype);
  if (!o->num_groups || !o->groups)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.num_groups is %u and options.groups is %s; pass at least "
                    "one group", fn, o->num_groups, o->groups ? "set" : "NULL");
  if (!o->num_layers || !o->layers)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.num_layers is %u and options.layers is %s; pass at least "
                    "one layer", fn, o->num_layers, o->layers ? "set" : "NULL");
  if (o->layout != KVC_POOL_LAYOUT_NHD && o->layout != KVC_POOL_LAYOUT_HND)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.layout is %d; it must be KVC_POOL_LAYOUT_NHD (0) or "
                    "KVC_POOL_LAYOUT_HND (1)", fn, (int)o->layout);
  if (!o->hash_seed && o->hash_seed_len)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.hash_seed is NULL but hash_seed_len is %zu", fn,
                    o->hash_seed_len);
  if (o->hash_seed_len > UINT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.hash_seed_len is %zu; the block hash takes at most "
                    "4294967295 bytes of seed", fn, o->hash_seed_len);
  if (o->enable_prefix_caching != 0 && o->enable_prefix_caching != 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.enable_prefix_caching is %d; it must be 0 or 1", fn,
                    (int)o->enable_prefix_caching);
  if (o->hash_mode != KVC_POOL_HASH_KVCACHE && o->hash_mode != KVC_POOL_HASH_VLLM_SHA256_CBOR)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.hash_mode is %d; it must be KVC_POOL_HASH_KVCACHE (0) or "
                    "KVC_POOL_HASH_VLLM_SHA256_CBOR (1)", fn, (int)o->hash_mode);
  if (o->hash_mode == KVC_POOL_HASH_VLLM_SHA256_CBOR && !kvci_utf8_valid(o->hash_seed, o->hash_seed_len))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.hash_seed (%zu bytes) is not UTF-8; a "
                    "KVC_POOL_HASH_VLLM_SHA256_CBOR pool hashes it as vLLM's NONE_HASH seed, a str", fn,
                    o->hash_seed_len);
  if (o->event_capacity > MAX_EVENTS)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.event_capacity is %u; it must be at most %u", fn,
                    o->event_capacity, MAX_EVENTS);
  kvc_error* e = NULL;
  for (uint32_t i = 0; !e && i < o->num_groups; i++) e = check_group(fn, i, &o->groups[i], o->shared_budget_bytes != 0);
  for (uint32_t i = 0; !e && i < o->num_layers; i++) e = check_layer(fn, i, &o->layers[i], o);
  for (uint32_t g = 0; !e && g < o->num_groups; g++) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->num_layers; i++) n += o->layers[i].group == g;
    if (!n) e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u] has no layer; every group needs one", fn, g);
  }
  if (!e) e = kvci_pool_budget_options_check(fn, o);
  return e;
}

/* The storage view descriptors of an attention layer: [layout][k|v] over its group's blocks (latent: K only). */
static void layer_views(kvc_pool* p, kvci_pool_layer* l, const kvci_pool_group* g) {
  int64_t nb = g->num_blocks, bs = g->block_size, h = l->heads;
  for (int kv = 0; kv < kvci_pool_parts(l); kv++) {
    int64_t d = kv ? l->vdim : l->kdim;
    /* Strides of the physical layout along (token in block, head). */
    int64_t s_tok = p->layout == KVC_POOL_LAYOUT_NHD ? h * d : d;
    int64_t s_head = p->layout == KVC_POOL_LAYOUT_NHD ? d : bs * d;
    int64_t nhd[4] = {nb, bs, h, d}, nhd_s[4] = {l->stride[kv], s_tok, s_head, 1};
    int64_t hnd[4] = {nb, h, bs, d}, hnd_s[4] = {l->stride[kv], s_head, s_tok, 1};
    memcpy(l->shape[KVC_POOL_LAYOUT_NHD][kv], nhd, sizeof nhd);
    memcpy(l->strides[KVC_POOL_LAYOUT_NHD][kv], nhd_s, sizeof nhd_s);
    memcpy(l->shape[KVC_POOL_LAYOUT_HND][kv], hnd, sizeof hnd);
    memcpy(l->strides[KVC_POOL_LAYOUT_HND][kv], hnd_s, sizeof hnd_s);
  }
}

static kvc_error* build_groups(kvc_pool* p, const kvc_pool_options* o) {
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    kvci_pool_group* g = &p->groups[gi];
    const kvc_pool_group_options* go = &o->groups[gi];
    g->kind = go->kind;
    g->block_size = go->block_size;
    g->window = go->window;
    for (uint32_t i = 0; i < o->num_layers; i++) g->num_layers += o->layers[i].group == gi;
    g->layers = (uint32_t*)calloc(g->num_layers, sizeof(*g->layers));
    if (!g->layers) return kvci_err_oom();
    g->num_layers = 0;
    for (uint32_t i = 0; i < o->num_layers; i++)
      if (o->layers[i].group == gi) g->layers[g->num_layers++] = i;
  }
  kvc_error* e = kvci_pool_budgets_build(p, o);
  for (uint32_t gi = 0; !e && gi < p->num_groups; gi++) {
    kvci_pool_group* g = &p->groups[gi];
    uint32_t map_size = 4;
    while (map_size < 2 * (uint64_t)g->num_blocks) map_size *= 2; /* load at most 1/2 */
    g->map_mask = map_size - 1;
    g->map = (uint32_t*)calloc(map_size, sizeof(*g->map));
    if (!g->map) e = kvci_err_oom();
  }
  return e;
}

/* A layer's K or V storage (zeroed), from the caller's allocator when the pool has one. */
static void* alloc_buffer(const kvc_pool* p, size_t bytes) {
  if (p->allocator) return kvci_allocator_take(p->allocator, p->backend, &p->exec, p->device, bytes, 1);
  return p->backend->alloc_zeroed(p->backend->ctx, &p->exec, bytes);
}

static void free_buffer(const kvc_pool* p, void* ptr) {
  if (ptr && !(p->allocator && kvci_allocator_give(p->allocator, &p->exec, p->device, ptr)))
    p->backend->free(p->backend->ctx, &p->exec, ptr);
}

/* A shared budget's storage: one buffer of pages, every layer placed in them. */
static kvc_error* alloc_arena(const char* fn, kvc_pool* p) {
  uint64_t bytes = p->page_bytes * p->shared_budget.num_blocks;
  if (bytes / p->elem > (uint64_t)MAX_ELEMS)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.shared_budget_bytes gives %u pages of %" PRIu64 " bytes, "
                    "more than 2^44 elements in one buffer", fn, p->shared_budget.num_blocks, p->page_bytes);
  p->arena = alloc_buffer(p, (size_t)bytes);
  if (!p->arena)
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: the %s could not allocate %" PRIu64 " bytes for the shared budget "
                    "(%u pages of %" PRIu64 " bytes)", fn, p->allocator ? "caller's allocator (options.allocator)"
                    : p->backend->name, bytes, p->shared_budget.num_blocks, p->page_bytes);
  kvci_pool_budget_place_layers(p);
  for (uint32_t i = 0; i < p->num_layers; i++) {
    kvci_pool_layer* l = &p->layers[i];
    kvci_pool_layer_rows(p, l);
    if (!kvci_pool_is_recurrent(&p->groups[l->group])) layer_views(p, l, &p->groups[l->group]);
  }
  return NULL;
}

static kvc_error* alloc_storage(const char* fn, kvc_pool* p, const kvc_pool_options* o) {
  for (uint32_t i = 0; i < p->num_layers; i++) {
    const kvc_pool_layer_options* lo = &o->layers[i];
    kvci_pool_layer* l = &p->layers[i];
    const kvci_pool_group* g = &p->groups[lo->group];
    l->group = lo->group;
    l->heads = lo->num_kv_heads;
    l->kdim = lo->key_head_dim;
    l->storage = lo->storage;
    l->elem = kvci_pool_is_fp8(l) ? 1 : p->elem;
    l->scale[0] = lo->k_scale;
    l->scale[1] = lo->v_scale;
    if (kvci_pool_is_recurrent(g)) {
      l->conv_dim = lo->conv_dim;
      l->conv_kernel = lo->conv_kernel;
      l->dstate = lo->ssm_state_size;
      l->k_block = l->conv_dim * l->conv_kernel;
      l->v_block = l->heads * l->kdim * l->dstate;
      int64_t conv[4] = {1, l->conv_dim, l->conv_kernel, 0}, ssm[4] = {1, l->heads, l->kdim, l->dstate};
      memcpy(l->state_shape[0], conv, sizeof conv);
      memcpy(l->state_shape[1], ssm, sizeof ssm);
    } else {
      l->vdim = g->kind == KVC_POOL_GROUP_LATENT ? 0 : lo->value_head_dim ? lo->value_head_dim : lo->key_head_dim;
      l->k_block = (int64_t)g->block_size * l->heads * l->kdim;
      l->v_block = (int64_t)g->block_size * l->heads * l->vdim;
    }
  }
  if (p->shared) return alloc_arena(fn, p);
  for (uint32_t i = 0; i < p->num_layers; i++) {
    const kvc_pool_layer_options* lo = &o->layers[i];
    kvci_pool_layer* l = &p->layers[i];
    const kvci_pool_group* g = &p->groups[lo->group];
    l->stride[0] = l->k_block;
    l->stride[1] = l->v_block;
    kvci_pool_layer_rows(p, l);
    if (!kvci_pool_is_recurrent(g)) layer_views(p, l, g);
    if (l->k_block * (int64_t)g->num_blocks > MAX_ELEMS || l->v_block * (int64_t)g->num_blocks > MAX_ELEMS)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u] would hold more than 2^44 elements per buffer "
                      "(groups[%u].num_blocks %u)", fn, i, lo->group, g->num_blocks);
    size_t kb = (size_t)(l->k_block * g->num_blocks) * l->elem, vb = (size_t)(l->v_block * g->num_blocks) * l->elem;
    l->k = alloc_buffer(p, kb);
    l->v = l->k && vb ? alloc_buffer(p, vb) : NULL;
    if (!l->k || (vb && !l->v))
      return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: the %s could not allocate %zu bytes for layers[%u] "
                      "(groups[%u]: %u blocks)", fn, p->allocator ? "caller's allocator (options.allocator)"
                      : p->backend->name, l->k ? vb : kb, i, lo->group, g->num_blocks);
  }
  return NULL;
}

_Static_assert(offsetof(kvc_pool_options, allocator) == 80 && offsetof(kvc_pool_options, shared_budget_bytes) == 88 &&
                   offsetof(kvc_pool_options, hash_mode) == 96 && sizeof(kvc_pool_options) == 104,
               "kvc_pool_options changed size");

/* The caller's options in this library's layout: a published smaller size (0.6's 80, before the allocator; 88,
   before shared_budget_bytes; 96, before hash_mode) keeps the defaults of the fields it lacks. */
static kvc_error* read_options(const char* fn, const kvc_pool_options* in, kvc_pool_options* out) {
  *out = (kvc_pool_options)KVC_POOL_OPTIONS_INIT;
  size_t n = in->struct_size;
  if (n != offsetof(kvc_pool_options, allocator) && n != offsetof(kvc_pool_options, shared_budget_bytes) &&
      n != offsetof(kvc_pool_options, hash_mode) && n != sizeof(*in))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.struct_size is %u but this library knows only %zu, %zu, "
                    "%zu and %zu; initialize it with KVC_POOL_OPTIONS_INIT or kvc_pool_options_init", fn,
                    in->struct_size, offsetof(kvc_pool_options, allocator),
                    offsetof(kvc_pool_options, shared_budget_bytes), offsetof(kvc_pool_options, hash_mode),
                    sizeof(*in));
  memcpy(out, in, n);
  out->struct_size = sizeof(*out);
  return NULL;
}

_Static_assert(offsetof(kvc_pool_layer_options, storage) == 40 && sizeof(kvc_pool_layer_options) == 56,
               "kvc_pool_layer_options changed size");

/*
 * The caller's layers in this library's layout, in a copy (`*copy`, the caller frees it): an array's stride is its
 * first entry's struct_size, 40 (0.6: the fields since 0.7 keep their defaults) or 56.
 */
static kvc_error* read_layers(const char* fn, const kvc_pool_options* o, kvc_pool_layer_options** copy) {
  *copy = NULL;
  if (!o->num_layers || !o->layers) return NULL; /* check_options names it */
  const size_t old = offsetof(kvc_pool_layer_options, storage), now = sizeof(kvc_pool_layer_options);
  const uint32_t size = o->layers[0].struct_size;
  if (size != old && size != now)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[0].struct_size is %u but this library knows only %zu and "
                    "%zu; initialize it with KVC_POOL_LAYER_OPTIONS_INIT or kvc_pool_layer_options_init", fn, size, old,
                    now);
  kvc_pool_layer_options* c = (kvc_pool_layer_options*)malloc(o->num_layers * now);
  if (!c) return kvci_err_oom();
  for (uint32_t i = 0; i < o->num_layers; i++) {
    const char* at = (const char*)o->layers + (size_t)i * size;
    uint32_t own;
    memcpy(&own, at, sizeof own);
    if (own != size) {
      free(c);
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layers[%u].struct_size is %u but layers[0]'s is %u; every entry "
                      "of the array has the same size", fn, i, own, size);
    }
    c[i] = (kvc_pool_layer_options)KVC_POOL_LAYER_OPTIONS_INIT;
    memcpy(&c[i], at, size);
    c[i].struct_size = (uint32_t)now;
  }
  *copy = c;
  return NULL;
}

kvc_error* kvci_pool_options_read(const char* fn, const kvc_pool_options* in, kvc_pool_options* out,
                                  kvc_pool_layer_options** layers) {
  *layers = NULL;
  kvc_error* e = read_options(fn, in, out);
  if (!e) e = read_layers(fn, out, layers);
  if (!e && *layers) out->layers = *layers;
  if (!e) e = check_options(fn, out);
  if (e) {
    free(*layers);
    *layers = NULL;
  }
  return e;
}

/* Since 0.7: fp8 layers need the backend's fp8 entries (backend.h, version 8). */
static kvc_error* check_backend(const char* fn, const kvc_pool_options* o, const kvc_backend* b) {
  if (b->fp8_encode_rows && b->fp8_decode_4d) return NULL;
  for (uint32_t i = 0; i < o->num_layers; i++)
    if (o->layers[i].storage == KVC_POOL_STORAGE_FP8_E4M3)
      return kvci_err(KVC_ERROR_UNSUPPORTED, "%s: layers[%u].storage is KVC_POOL_STORAGE_FP8_E4M3 but the %s backend "
                      "has no fp8 pool kernels (fp8_encode_rows, fp8_decode_4d) in this release; create the pool on "
                      "the CPU or with storage KVC_POOL_STORAGE_DTYPE", fn, i, b->name);
  return NULL;
}

static kvc_error* create_checked(const char* FN, const kvc_pool_options* options, kvc_pool** out);

kvc_error* kvc_pool_create(const kvc_pool_options* caller_options, kvc_pool** out) {
  static const char* FN = "kvc_pool_create";
  if (!caller_options) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL; pass a kvc_pool_options", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_pool_options read;
  kvc_pool_layer_options* layers = NULL;
  kvc_error* e = kvci_pool_options_read(FN, caller_options, &read, &layers);
  if (!e) e = create_checked(FN, &read, out);
  free(layers);
  return e;
}

/* A pool whose arrays create_checked allocated but whose exec is not open yet: nothing else to release. */
static void free_unopened(kvc_pool* p) {
  free(p->groups);
  free(p->layers);
  free(p->seed);
  free(p->events);
  kvci_allocator_release(p->allocator);
  free(p);
}

/* kvc_pool_create once the options are read and checked. */
static kvc_error* create_checked(const char* FN, const kvc_pool_options* options, kvc_pool** out) {
  const kvc_backend* b = NULL;
  kvc_error* e = kvci_backend_for(FN, &options->device, &b);
  if (!e) e = check_backend(FN, options, b);
  if (e) return e;
  kvci_allocator* allocator = NULL;
  if ((e = kvci_allocator_new(FN, "options.allocator", options->allocator, &allocator))) return e;
  kvc_pool* p = (kvc_pool*)calloc(1, sizeof(*p));
  if (!p) {
    kvci_allocator_release(allocator);
    return kvci_err_oom();
  }
  p->allocator = allocator;
  p->backend = b;
  p->device = options->device;
  p->dtype = options->dtype;
  p->elem = kvc_dtype_size(options->dtype);
  p->layout = options->layout;
  p->prefix_caching = options->enable_prefix_caching;
  p->num_groups = options->num_groups;
  p->num_layers = options->num_layers;
  p->event_cap = options->event_capacity;
  p->groups = (kvci_pool_group*)calloc(p->num_groups, sizeof(*p->groups));
  p->layers = (kvci_pool_layer*)calloc(p->num_layers, sizeof(*p->layers));
  p->seed = malloc(options->hash_seed_len ? options->hash_seed_len : 1);
  p->events = p->event_cap ? (kvc_pool_event*)calloc(p->event_cap, sizeof(*p->events)) : NULL;
  if (!p->groups || !p->layers || !p->seed || (p->event_cap && !p->events)) {
    free_unopened(p);
    return kvci_err_oom();
  }
  if (options->hash_seed_len) memcpy(p->seed, options->hash_seed, options->hash_seed_len);
  p->seed_len = options->hash_seed_len;
  p->hash_mode = options->hash_mode;
  p->block_hash = p->hash_mode == KVC_POOL_HASH_VLLM_SHA256_CBOR ? kvci_vllm_block_hash : kvci_block_hash;
  kvci_vllm_none_hash(p->seed, p->seed_len, p->vllm_root);
  p->exec.device_id = options->device.device_id;
  if (b->exec_open(b->ctx, &p->exec)) {
    free_unopened(p);
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: the %s backend could not prepare device %d for a pool (streams, "
                    "events)", FN, b->name, (int)options->device.device_id);
  }
  e = build_groups(p, options);
  if (!e && kvci_pool_events_init(p)) e = kvci_err_oom();
  if (!e) e = alloc_storage(FN, p, options);
  if (e) {
    kvc_pool_destroy(p);
    return e;
  }
  kvci_allocator_adopt(p->allocator);
  *out = p;
  return NULL;
}

kvci_guard* kvci_pool_guard(const kvc_pool* pool) { return kvci_guard_of(pool); }

void kvc_pool_destroy(kvc_pool* pool) {
  kvci_guard_retire(kvci_guard_of(pool), "kvc_pool_destroy");
  if (!pool) return;
  while (pool->sequences) kvci_pool_sequence_free(pool->sequences);
  kvci_pool_tiers_free(pool);
  kvci_pool_slot_memo_free(pool);
  const kvc_backend* b = pool->backend;
  for (uint32_t i = 0; i < pool->num_layers && !pool->shared; i++) {
    free_buffer(pool, pool->layers[i].k);
    free_buffer(pool, pool->layers[i].v);
  }
  free_buffer(pool, pool->arena);
  for (uint32_t g = 0; g < pool->num_groups; g++) {
    kvci_pool_group* grp = &pool->groups[g];
    for (int f = 0; f < 2; f++)
      if (grp->table_buf[f]) b->free(b->ctx, &pool->exec, grp->table_buf[f]);
    free(grp->map);
    free(grp->layers);
  }
  kvci_pool_budgets_free(pool);
  kvci_allocator_release(pool->allocator);
  b->exec_close(b->ctx, &pool->exec);
  free(pool->groups);
  free(pool->layers);
  free(pool->seed);
  kvci_pool_events_free(pool);
  free(pool);
}

kvc_error* kvc_pool_set_stream(kvc_pool* pool, void* stream) {
  static const char* FN = "kvc_pool_set_stream";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (stream == pool->exec.stream) return NULL;
  if (pool->device.device_type == KVC_DEVICE_CPU)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: stream is %p but the pool lives on the CPU, which has no "
                    "streams; pass NULL", FN, stream);
  int rc = pool->backend->exec_set_stream(pool->backend->ctx, &pool->exec, stream);
  return rc ? kvci_fault_error(FN, pool->backend, "exec_set_stream", rc, "the pool keeps its stream") : NULL;
}

kvc_error* kvci_pool_check_out(const char* fn, const kvc_pool* pool, const void* out, size_t size, const char* type) {
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", fn);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  uint32_t got = *(const uint32_t*)out;
  if (got != size)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out->struct_size is %u but this library knows only %zu; set it "
                    "to sizeof(%s) before the call", fn, got, size, type);
  return NULL;
}

kvc_error* kvc_pool_stats_get(const kvc_pool* pool, uint32_t group, kvc_pool_stats* out) {
  static const char* FN = "kvc_pool_stats_get";
  KVCI_GUARD_SHARED(kvci_guard_of(pool), FN);
  kvc_error* e = kvci_pool_check_out(FN, pool, out, sizeof(*out), "kvc_pool_stats");
  if (e) return e;
  if (group >= pool->num_groups)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: group is %u but the pool has %u groups", FN, group,
                    pool->num_groups);
  const kvci_pool_group* g = &pool->groups[group];
  out->group = group;
  out->num_blocks = g->num_blocks - 1;
  out->free_blocks = g->budget->n_free;
  out->cached_blocks = g->n_lru;
  out->used_blocks = g->n_used;
  out->pinned_blocks = g->n_pinned;
  out->prefix_queries = g->prefix_queries;
  out->prefix_hits = g->prefix_hits;
  out->evictions = g->evictions;
  return NULL;
}

kvc_error* kvc_pool_clear_cache(kvc_pool* pool) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), "kvc_pool_clear_cache");
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_clear_cache: pool is NULL");
  kvci_pool_evict_all_quietly(pool);
  kvci_pool_event_push(pool, KVC_POOL_EVENT_ALL_CLEARED, 0, 0, NULL, NULL, NULL, 0);
  return NULL;
}

kvc_error* kvc_pool_unpin_all(kvc_pool* pool) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), "kvc_pool_unpin_all");
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_unpin_all: pool is NULL");
  for (uint32_t gi = 0; gi < pool->num_groups; gi++) {
    kvci_pool_group* g = &pool->groups[gi];
    for (uint32_t b = 1; g->n_pinned && b < g->num_blocks; b++)
      if (g->blocks[b].pinned && g->blocks[b].group == gi) kvci_pool_block_set_pinned(g, b, 0);
  }
  return NULL;
}

