/*
 * core/model/copy_batch.c: the copies of one update, issued as one backend call.
 *
 * A decode step writes one token into every layer: 2 x layers tiny copies.
 * On a GPU each would be a kernel launch (a few microseconds each, more than
 * the bytes cost), so a device cache gathers the writes of an update and
 * hands them to copy_4d_batch at the end: one launch per step, however many
 * layers. Only writes of new tokens are gathered (kvci_layer_write); every
 * other backend call runs when issued, which is why gathering starts only
 * after the room-making phase and why an offloading cache drains before it
 * moves a layer between tiers. The CPU backend gains nothing from this and
 * never gathers, so a CPU cache's copies happen exactly when issued.
 */
#include <stdlib.h>

#include "model.h"

void kvci_copy_batch_grow(const kvc_cache* c, int64_t copies) {
  kvc_copy_batch* b = c->batch;
  if (!b || copies <= b->cap || copies > INT32_MAX) return;
  kvc_copy_4d* p = (kvc_copy_4d*)realloc(b->copies, sizeof(*p) * (size_t)copies);
  if (!p) return; /* kvci_copy_4d_issue drains when full: more launches, same bytes */
  b->copies = p;
  b->cap = (int32_t)copies;
}

void kvci_copy_batch_issue(const kvc_cache* c) {
  kvc_copy_batch* b = c->batch;
  KVCI_BE(c, copy_4d_batch, b->copies, b->count);
  b->count = 0;
}

/* kvci_copy_4d_issue while a batch is gathering (the test is inline in model.h). */
void kvci_copy_4d_gather(const kvc_cache* c, void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                         const int64_t shape[4], size_t elem) {
  kvc_copy_batch* b = c->batch;
  if (shape[0] == 0 || shape[1] == 0 || shape[2] == 0 || shape[3] == 0) return;
  if (b->count == b->cap) kvci_copy_batch_drain(c);
  if (!b->cap) { /* no room could be reserved at all */
    KVCI_BE(c, copy_4d, dst, ds, src, ss, shape, elem);
    return;
  }
  kvc_copy_4d* d = &b->copies[b->count++];
  d->dst = dst;
  d->src = src;
  for (int i = 0; i < 4; i++) {
    d->dst_strides[i] = ds[i];
    d->src_strides[i] = ss[i];
    d->shape[i] = shape[i];
  }
  d->elem_size = elem;
}
