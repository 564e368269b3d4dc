/*
 * core/pool/budget.c: where a group's blocks come from (kvci_pool_budget):
 * its own num_blocks, or one budget every group of the pool shares
 * (kvc_pool_options.shared_budget_bytes; docs/pool.md, 'One budget for all
 * groups').
 *
 * A shared budget is vLLM's hybrid allocator with its page size unified: all
 * blocks are pages of one size, the largest group's block (every layer of the
 * group, K then V, each rounded up to 16 bytes; an fp8 layer counts its
 * one-byte codes, a latent layer its K alone), in one buffer. Page b holds
 * block b of whichever group took it last, laid out as the tier payload of
 * that group is (its layers in order, K then V), so block ids, the free list
 * and the LRU are pool-wide and a group's layer sees its blocks a page apart.
 * A group whose block is smaller than the page leaves the rest unused, which
 * is why the docs advise block sizes that make the groups' blocks equal.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

#define SEGMENT_ALIGN 16                          /* bytes: a layer's K or V in a page starts at a multiple */
#define MAX_PAGE_BYTES (UINT64_C(1) << 50)         /* far from overflow in pages * bytes */
#define MAX_SHARED_BLOCKS (UINT64_C(1) << 30)      /* as a group's num_blocks (int32 table entries) */

static uint64_t align_up(uint64_t n) { return (n + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN; }

/* Elements of one block of a layer's K (kv 0) or V (kv 1): attention per block, recurrent per state slot; a latent
   layer has no V. */
static uint64_t layer_block_elems(const kvc_pool_options* o, const kvc_pool_layer_options* l, int kv) {
  const kvc_pool_group_options* g = &o->groups[l->group];
  if (g->kind == KVC_POOL_GROUP_RECURRENT)
    return kv ? (uint64_t)l->num_kv_heads * l->key_head_dim * l->ssm_state_size
              : (uint64_t)l->conv_dim * l->conv_kernel;
  if (kv && g->kind == KVC_POOL_GROUP_LATENT) return 0;
  uint64_t d = kv && l->value_head_dim ? l->value_head_dim : l->key_head_dim;
  return (uint64_t)g->block_size * l->num_kv_heads * d;
}

uint64_t kvci_pool_group_block_bytes(const kvc_pool_options* o, uint32_t g) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < o->num_layers && bytes <= MAX_PAGE_BYTES; i++) {
    const kvc_pool_layer_options* l = &o->layers[i];
    /* Each layer's own element: an fp8 layer stores one-byte codes whatever the pool's dtype. */
    uint64_t elem = l->storage == KVC_POOL_STORAGE_FP8_E4M3 ? 1 : kvc_dtype_size(o->dtype);
    if (l->group == g)
      for (int kv = 0; kv < 2; kv++) bytes += align_up(layer_block_elems(o, l, kv) * elem);
  }
  return bytes; /* each term is below 2^62 (dims are bounded): past MAX_PAGE_BYTES the caller refuses */
}

/* The page: the largest group's block; *widest receives that group. */
static uint64_t page_bytes(const kvc_pool_options* o, uint32_t* widest) {
  uint64_t page = 0;
  for (uint32_t g = 0; g < o->num_groups; g++) {
    uint64_t b = kvci_pool_group_block_bytes(o, g);
    if (b > page) page = b, *widest = g;
  }
  return page;
}

kvc_error* kvci_pool_budget_options_check(const char* fn, const kvc_pool_options* o) {
  if (!o->shared_budget_bytes) return NULL;
  for (uint32_t g = 0; g < o->num_groups; g++)
    if (o->groups[g].num_blocks)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u].num_blocks is %u but options.shared_budget_bytes is "
                      "%" PRIu64 "; with a shared budget the groups take their blocks from it, so num_blocks must "
                      "be 0", fn, g, o->groups[g].num_blocks, o->shared_budget_bytes);
  uint32_t widest = 0;
  uint64_t page = page_bytes(o, &widest);
  if (page > MAX_PAGE_BYTES)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: groups[%u]'s block takes more than 2^50 bytes; a shared budget's "
                    "page is at most that", fn, widest);
  uint64_t pages = o->shared_budget_bytes / page;
  if (pages < 2)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.shared_budget_bytes is %" PRIu64 ", %" PRIu64 " pages of "
                    "%" PRIu64 " bytes (the block of groups[%u], the largest); it must hold at least 2 (page 0 is "
                    "the null block)", fn, o->shared_budget_bytes, pages, page, widest);
  if (pages > MAX_SHARED_BLOCKS)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.shared_budget_bytes is %" PRIu64 ", %" PRIu64 " pages of "
                    "%" PRIu64 " bytes; it must hold at most 2^30", fn, o->shared_budget_bytes, pages, page);
  return NULL;
}

static kvc_error* budget_init(kvci_pool_budget* u, uint32_t num_blocks) {
  u->blocks = (kvci_pool_block*)calloc(num_blocks, sizeof(*u->blocks));
  if (!u->blocks) return kvci_err_oom();
  u->num_blocks = num_blocks;
  u->lru_head = u->lru_tail = KVCI_NIL;
  u->free_head = KVCI_NIL;
  /* Pushed from the top, so that block 1 is taken first: block ids in order of first use, easy to read. */
  for (uint32_t b = num_blocks - 1; b >= 1; b--) {
    u->blocks[b].next = u->free_head;
    u->blocks[b].prev = KVCI_NIL;
    u->free_head = b;
  }
  u->n_free = num_blocks - 1;
  return NULL;
}

kvc_error* kvci_pool_budgets_build(kvc_pool* p, const kvc_pool_options* o) {
  if (o->shared_budget_bytes) {
    uint32_t widest = 0;
    p->shared = 1;
    p->page_bytes = page_bytes(o, &widest);
    kvc_error* e = budget_init(&p->shared_budget, (uint32_t)(o->shared_budget_bytes / p->page_bytes));
    if (e) return e;
  }
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    kvci_pool_group* g = &p->groups[gi];
    if (p->shared) {
      g->budget = &p->shared_budget;
    } else {
      kvc_error* e = budget_init(&g->own, o->groups[gi].num_blocks);
      if (e) return e;
      g->budget = &g->own;
    }
    g->blocks = g->budget->blocks;
    g->num_blocks = g->budget->num_blocks;
  }
  return NULL;
}

void kvci_pool_budgets_free(kvc_pool* p) {
  for (uint32_t gi = 0; gi < p->num_groups; gi++) free(p->groups[gi].own.blocks);
  free(p->shared_budget.blocks);
}

void kvci_pool_budget_place_layers(kvc_pool* p) {
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    const kvci_pool_group* g = &p->groups[gi];
    uint64_t at = 0;
    for (uint32_t i = 0; i < g->num_layers; i++) {
      kvci_pool_layer* l = &p->layers[g->layers[i]];
      l->k = (char*)p->arena + at;
      at += align_up((uint64_t)l->k_block * l->elem);
      l->v = l->v_block ? (char*)p->arena + at : NULL; /* latent: no V, nothing placed */
      at += align_up((uint64_t)l->v_block * l->elem);
      /* In this layer's own elements (an fp8 layer's are bytes); the page is a multiple of SEGMENT_ALIGN. */
      l->stride[0] = l->stride[1] = (int64_t)(p->page_bytes / l->elem);
    }
  }
}

void kvci_pool_layer_rows(const kvc_pool* p, kvci_pool_layer* l) {
  for (int kv = 0; kv < kvci_pool_parts(l); kv++) {
    if (kvci_pool_is_recurrent(&p->groups[l->group])) {
      l->row_unit[kv] = l->rows_per_block[kv] = l->rows_per_token[kv] = 1;
      continue;
    }
    /*
     * A slot's row start is block * stride + token * tok elements (tok: a token's elements in the layout, all
     * heads in NHD, one head's in HND). copy_rows takes rows of one stride, so the row is the gcd of the two:
     * compact storage gets today's rows (the slot itself in NHD), a page-strided one rows that still divide.
     */
    int64_t d = kv ? l->vdim : l->kdim;
    int64_t tok = p->layout == KVC_POOL_LAYOUT_NHD ? l->heads * d : d;
    int64_t unit = (int64_t)kvci_pool_gcd((uint64_t)l->stride[kv], (uint64_t)tok);
    l->row_unit[kv] = unit;
    l->rows_per_block[kv] = l->stride[kv] / unit;
    l->rows_per_token[kv] = tok / unit;
  }
}

kvc_error* kvci_pool_budget_check(const char* fn, const kvc_pool* p, kvci_pool_need_fn need, const void* arg,
                                  const char* what) {
  uint64_t sum_take = 0, sum_lost = 0;
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    const kvci_pool_group* g = &p->groups[gi];
    uint64_t l = 0, t = need(arg, gi, &l);
    if (p->shared) {
      sum_take += t;
      sum_lost += l;
      continue;
    }
    if (t && t > kvci_pool_available(g) - l)
      return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: group %u needs %" PRIu64 " %s %s but %" PRIu64 " are free or "
                      "evictable (%u %s); nothing changed", fn, gi, t,
                      kvci_pool_is_recurrent(g) ? "state slots" : "blocks", what, kvci_pool_available(g) - l,
                      g->num_blocks - 1, kvci_pool_is_recurrent(g) ? "slots" : "blocks");
  }
  const kvci_pool_budget* u = &p->shared_budget;
  if (sum_take && sum_take > u->n_free + u->n_lru - sum_lost)
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: the groups need %" PRIu64 " blocks of their shared budget %s but %"
                    PRIu64 " are free or evictable (%u blocks); nothing changed", fn, sum_take, what,
                    u->n_free + u->n_lru - sum_lost, u->num_blocks - 1);
  return NULL;
}
