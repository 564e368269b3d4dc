/*
 * core/kinds/rope_tables.h: the tables of SinkCache's key re-rotation (docs/semantics.md,
 * 'Sink layers'), computed on the host. The rotation of the keys themselves
 * is a backend operation (rerotate_keys_4d, abi/backend/backend.h): keys
 * live wherever the cache does, the tables are small and made once.
 *
 * When a sink layer drops tokens, every kept key moves `shift` slots towards
 * the sinks, and its rotary phase must follow: transformers multiplies it by
 * cos/sin of the angle between its old and new slot, taken from the cos/sin
 * table of the cache slots. The tables are computed in float32 and cast to the
 * key dtype; the rotation is three tensor operations in the key dtype (two
 * products and a sum, each rounded). These functions round the tables at
 * exactly those points; the backends round the rotation likewise, so the
 * keys come out bit-identical to transformers'.
 */
#ifndef KVC_CORE_ROPE_TABLES_H
#define KVC_CORE_ROPE_TABLES_H

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

#endif /* KVC_CORE_ROPE_TABLES_H */
