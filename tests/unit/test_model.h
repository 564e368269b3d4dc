/*
 * test_model.h: a reference model of what one layer stores and returns,
 * written from the update rules of docs/semantics.md (dynamic, dynamic sliding, static and static sliding layers), for tests that
 * feed a layer tokens 0, 1, 2, ... (token = absolute position).
 * Positions are listed oldest first; -1 stands for a zero (unwritten) slot.
 * Dynamic sliding layers with window 1 and recording layers are not modelled.
 */
#ifndef KVCACHE_TEST_MODEL_H
#define KVCACHE_TEST_MODEL_H

#include <stdint.h>

#include "test_util.h"

typedef struct model {
  kvc_layer_kind kind;
  int64_t window, max_cache_len;
  int64_t slots; /* static kinds: min(window, max_cache_len) or max_cache_len */
  int64_t cum;   /* tokens 0..cum-1 were written */
} model;

static TU_UNUSED int model_is_static(kvc_layer_kind k) { return k >= KVC_LAYER_STATIC; }

static TU_UNUSED model model_new(kvc_layer_kind kind, int64_t window, int64_t m) {
  model r = {kind, window, m, 0, 0};
  if (kind == KVC_LAYER_STATIC) r.slots = m;
  if (kind == KVC_LAYER_STATIC_SLIDING || kind == KVC_LAYER_STATIC_CHUNKED) r.slots = window < m ? window : m;
  return r;
}

/* Positions the layer stores after `cum` tokens (-1 = zero slot); returns the count. */
static TU_UNUSED int64_t model_stored(const model* m, int64_t cum, int64_t* out) {
  int64_t n = 0;
  switch (m->kind) {
    case KVC_LAYER_DYNAMIC:
      for (int64_t p = 0; p < cum; p++) out[n++] = p;
      break;
    case KVC_LAYER_DYNAMIC_SLIDING:
    case KVC_LAYER_DYNAMIC_CHUNKED: {
      int64_t keep = cum < m->window - 1 ? cum : m->window - 1;
      for (int64_t p = cum - keep; p < cum; p++) out[n++] = p;
      break;
    }
    default:
      if (cum <= m->slots) {
        for (int64_t p = 0; p < m->slots; p++) out[n++] = p < cum ? p : -1;
      } else {
        for (int64_t p = cum - m->slots; p < cum; p++) out[n++] = p;
      }
  }
  return n;
}

/* Positions update(n) returns, from the update rules (not from the mask formulas);
   m->cum counts the tokens before the call, the caller advances it afterwards. */
static TU_UNUSED int64_t model_returned(const model* m, int64_t n, int64_t* out) {
  int64_t c = m->cum, k = 0;
  switch (m->kind) {
    case KVC_LAYER_DYNAMIC:
      return model_stored(m, c + n, out);
    case KVC_LAYER_DYNAMIC_SLIDING:
    case KVC_LAYER_DYNAMIC_CHUNKED:
      k = model_stored(m, c, out); /* the kept tail, then the new tokens */
      for (int64_t p = c; p < c + n; p++) out[k++] = p;
      return k;
    case KVC_LAYER_STATIC:
      return model_stored(m, c + n, out);
    default:
      if (c >= m->slots && n == 1) return model_stored(m, c + 1, out);          /* roll */
      if (c >= m->slots) {                                                       /* buffer[1:] + new */
        for (int64_t p = c - m->slots + 1; p < c + n; p++) out[k++] = p;
        return k;
      }
      if (c + n > m->slots) {                                                    /* buffer[:c] + new */
        for (int64_t p = 0; p < c + n; p++) out[k++] = p;
        return k;
      }
      return model_stored(m, c + n, out);                                        /* the buffer */
  }
}

static TU_UNUSED int64_t model_max_length(const model* m) {
  if (m->kind == KVC_LAYER_DYNAMIC) return -1;
  if (!model_is_static(m->kind)) return m->window;
  return m->slots;
}

#endif /* KVCACHE_TEST_MODEL_H */
