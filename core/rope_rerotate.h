/*
 * core/rope_rerotate.h: the arithmetic of SinkCache's key re-rotation (docs/semantics.md,
 * 'Sink layers'), on host memory.
 *
 * When a sink layer drops tokens, every kept key moves `shift` slots towards
 * the sinks, and its rotary phase must follow: transformers multiplies it by
 * cos/sin of the angle between its old and new slot, taken from the cos/sin
 * table of the cache slots. The tables are computed in float32 and cast to the
 * key dtype; the rotation is three tensor operations in the key dtype (two
 * products and a sum, each rounded). These functions round at exactly those
 * points, so the keys come out bit-identical to transformers'.
 */
#ifndef KVC_CORE_ROPE_REROTATE_H
#define KVC_CORE_ROPE_REROTATE_H

#include <stdint.h>

#include "kvcache.h"

/*
 * The re-rotation tables for kept rows j in [0, rows): slot num_sink+shift+j
 * moves to num_sink+j. `cos`/`sin` are the slot table, [>= num_sink+shift+rows][dim]
 * float32; rcos/rsin receive [rows][dim]:
 *   rcos = cos[p]*cos[q] + sin[p]*sin[q],  rsin = -sin[p]*cos[q] + cos[p]*sin[q]
 * with p = num_sink+shift+j, q = num_sink+j, in float32.
 */
void kvci_rerotation_tables(const float* cos, const float* sin, int64_t dim, int64_t num_sink, int64_t shift,
                           int64_t rows, float* rcos, float* rsin);

/* out[i] = in[i] rounded to `dtype` (the cast of the tables to the key dtype). */
void kvci_round_to_dtype(kvc_dtype dtype, const float* in, int64_t count, float* out);

/*
 * Rotates the first shape[3] channels of keys [shape[0], shape[1], shape[2], *]
 * (element strides `strides`, innermost 1) in place:
 *   k' = k * rcos[j] + rotate_half(k) * rsin[j]   for seq row j,
 * rotate_half(x) = concat(-x[h:], x[:h]) with h = shape[3] / 2, every
 * operation rounded to `dtype`. rcos/rsin are [shape[2]][shape[3]] values of
 * `dtype`; `row` is scratch for shape[3] floats.
 */
void kvci_rerotate_keys(kvc_dtype dtype, void* keys, const int64_t strides[4], const int64_t shape[4],
                       const float* rcos, const float* rsin, float* row);

#endif /* KVC_CORE_ROPE_REROTATE_H */
