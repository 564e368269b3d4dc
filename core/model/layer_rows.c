/*
 * core/model/layer_rows.c: the buffers of a kind's extension state whose first
 * dimension is the batch (quantized codes and scales, recurrent states).
 * Kinds only list them (kvc_layer_ops.row_buffers); batch operations, split,
 * stack and clone move their rows here, with the same row plans as K/V.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

int kvci_layer_rows(kvc_layer* l, kvc_row_buffer** out) {
  *out = NULL;
  if (!l->ext || !l->ops->row_buffers) return 0;
  return l->ops->row_buffers(l, out);
}

uint64_t kvci_layer_row_bytes(const kvc_layer* l, int role) {
  kvc_row_buffer* rb = NULL;
  int n = kvci_layer_rows((kvc_layer*)l, &rb);
  uint64_t total = 0;
  for (int i = 0; i < n; i++)
    if (rb[i].ptr && (role == 0 || rb[i].role == role)) total += (uint64_t)rb[i].row_bytes * (uint64_t)l->batch;
  return total;
}

int kvci_layer_holds_rows(const kvc_layer* l) {
  if (l->initialized && l->ops->seq_length(l) > 0) return 1;
  return kvci_layer_row_bytes(l, 0) > 0;
}

void kvci_layer_rows_free(const kvc_cache* c, kvc_layer* l) {
  kvc_row_buffer* rb = NULL;
  int n = kvci_layer_rows(l, &rb);
  for (int i = 0; i < n; i++) {
    if (rb[i].ptr) c->backend->free(c->backend->ctx, &c->exec, rb[i].ptr);
    rb[i].ptr = NULL;
  }
}

/* Row r of a row buffer as a 4-D [rows, 1, 1, row_bytes] tensor of bytes. */
static void byte_rows(int64_t row_bytes, int64_t strides[4], int64_t shape[4]) {
  strides[0] = row_bytes;
  strides[1] = row_bytes;
  strides[2] = row_bytes;
  strides[3] = 1;
  shape[0] = 1;
  shape[1] = 1;
  shape[2] = 1;
  shape[3] = row_bytes;
}

int kvci_layer_rows_copy_new(const kvc_cache* c, const kvc_layer* src, kvc_layer* dst, const int64_t* src_rows,
                            int64_t count) {
  kvc_row_buffer *srb = NULL, *drb = NULL;
  int n = kvci_layer_rows((kvc_layer*)src, &srb);
  int m = kvci_layer_rows(dst, &drb);
  if (n != m) return -1;
  const kvc_backend* be = c->backend;
  const kvc_exec* dev = &c->exec;
  int64_t* dst_rows = (int64_t*)malloc(sizeof(int64_t) * (size_t)(count > 0 ? count : 1));
  if (!dst_rows) return -1;
  for (int64_t r = 0; r < count; r++) dst_rows[r] = r;
  for (int i = 0; i < n; i++) {
    drb[i].ptr = NULL;
    if (!srb[i].ptr || count == 0) continue;
    drb[i].ptr = be->alloc_zeroed(be->ctx, dev, (size_t)(srb[i].row_bytes * count));
    if (!drb[i].ptr) {
      for (int j = 0; j < i; j++)
        if (drb[j].ptr) {
          be->free(be->ctx, dev, drb[j].ptr);
          drb[j].ptr = NULL;
        }
      free(dst_rows);
      return -1;
    }
    int64_t st[4], shape[4];
    byte_rows(srb[i].row_bytes, st, shape);
    KVCI_BE(c, copy_rows, drb[i].ptr, st, dst_rows, srb[i].ptr, st, src_rows, count, shape, 1);
  }
  free(dst_rows);
  return 0;
}
