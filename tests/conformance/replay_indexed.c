/*
 * replay_indexed.c: the conformance operations of indexed layers
 * (transformers' DynamicIndexedLayer and StaticIndexedLayer with
 * Cache.update_indexer; docs/semantics.md, 'Indexed layers'; generate_indexed.py's
 * v5_indexed family):
 *
 *   iupdate S L X OUTCOME [RET]   kvc_cache_update_indexer of X ([batch, n, index_head_dim]) on layer L;
 *                                 RET the returned indexer keys
 *   iview S L T                   kvc_cache_indexer_view (layers[L].indexer_keys): T `0` before the first
 *                                 update_indexer (transformers' None)
 *
 * X, RET and T are N-D tensors (replay.h: NDIM, then the shape padded with trailing 1s). The layers are
 * created, updated, cropped, reordered, reset and cloned by the core operations, whose `create`, `layers`
 * and `layout` know the indexed kinds (`di`, `si`) and the layer type `i`.
 */
#include <string.h>

#include "replay.h"

static kvc_error* call_update_indexer(kvc_cache* c, const kvc_tensor* x, kvc_tensor* out, const void* layer) {
  return kvc_cache_update_indexer(c, *(const uint32_t*)layer, x, out);
}

static void op_iupdate(replay* r) {
  int64_t si = num(r);
  uint32_t layer = (uint32_t)num(r);
  replay_nd_update(r, si, "iupdate", "returned indexer keys", call_update_indexer, &layer);
}

static void op_iview(replay* r) {
  int64_t si = num(r), layer = num(r);
  ndtensor want;
  parse_nd(r, &want);
  if (runnable(r)) {
    kvc_tensor got;
    memset(&got, 0, sizeof(got));
    if (must(r, kvc_cache_indexer_view(cache_at(r, si), (uint32_t)layer, &got), "kvc_cache_indexer_view"))
      check_nd(r, "stored indexer keys", &got, &want);
  }
  tensor_free(&want.t);
}

const replay_op replay_ops_indexed[] = {{"iupdate", op_iupdate}, {"iview", op_iview}, {NULL, NULL}};
