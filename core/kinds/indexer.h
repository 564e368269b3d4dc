/*
 * core/kinds/indexer.h: the indexer keys of the indexed kinds (docs/indexed-layers.md),
 * shared by layer_indexed.c (the kinds and the storage) and ops_indexer.c
 * (the entry points).
 *
 * The store is [batch, cap, width] with the batch first, so it is one row
 * buffer (KVC_ROWS_INDEXER): reorder, select, repeat, split, stack and clone
 * move its rows with no code of their own. It lives in layer->ext, which
 * exists exactly while the indexer is initialized (transformers'
 * is_indexer_initialized): the first update_indexer allocates it, the reset
 * of a dynamic indexed layer frees it.
 */
#ifndef KVC_CORE_INDEXER_H
#define KVC_CORE_INDEXER_H

#include "kinds/base/base_kinds.h"

typedef struct kvc_indexer {
  kvc_row_buffer rows; /* cap * width * elem bytes per batch row */
  kvc_dtype dtype;
  int64_t width;       /* index_head_dim */
  int64_t cap;         /* slots per row: grows (dynamic), max_cache_len (static) */
  int64_t len;         /* stored tokens (dynamic) or the counter (static) */
  int64_t shape[3], strides[3]; /* the view, kept in sync with the batch (sync_ext) */
} kvc_indexer;

static inline kvc_indexer* kvci_indexer_of(const kvc_layer* l) { return (kvc_indexer*)l->ext; }

/*
 * The room phase of update_indexer: allocates the indexer (dtype, batch,
 * width) if the layer has none, and makes room for `n` more tokens after
 * `len` (a dynamic store grows geometrically). On error nothing changed.
 */
kvc_error* kvci_indexer_make_room(const kvc_cache* cache, kvc_layer* layer, kvc_dtype dtype, int64_t batch,
                                 int64_t width, int64_t n);
/* Copies x, given as 4-D [batch, 1, n, width] strides and base, into slots len..len+n-1 and advances len. */
void kvci_indexer_append(const kvc_cache* cache, kvc_layer* layer, const void* src, const int64_t src_strides[4],
                        int64_t n);
/* The store's bytes, [lo, hi) (empty when not allocated). */
kvc_span kvci_indexer_span(const kvc_layer* layer);
/* The view of the store (data NULL and ndim 0 when not initialized), on the cache's device. */
void kvci_indexer_view(const kvc_cache* cache, const kvc_layer* layer, kvc_tensor* out);

#endif /* KVC_CORE_INDEXER_H */
