/*
 * core/kinds/rope_tables.c: the tables of SinkCache's key re-rotation (see the
 * header). Bit-exactness with torch depends on rounding every product and sum
 * on its own: no fused multiply-add may be formed here.
 */
#include "rope_tables.h"

#include "half.h"

/* gcc never contracts in ISO C mode (-std=c11, as this project builds); clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void kvci_rerotation_tables(const float* cos, const float* sin, int64_t dim, int64_t num_sink, int64_t shift,
                           int64_t rows, float* rcos, float* rsin) {
  for (int64_t j = 0; j < rows; j++) {
    const float* oc = cos + (num_sink + shift + j) * dim; /* the slot a kept key leaves */
    const float* os = sin + (num_sink + shift + j) * dim;
    const float* sc = cos + (num_sink + j) * dim; /* the slot it moves to */
    const float* ss = sin + (num_sink + j) * dim;
    for (int64_t d = 0; d < dim; d++) {
      /* Separate statements so that each product is rounded to float32, as torch's tensor ops are. */
      float cc = oc[d] * sc[d];
      float sn = os[d] * ss[d];
      float ns = -os[d] * sc[d];
      float cs = oc[d] * ss[d];
      rcos[j * dim + d] = cc + sn;
      rsin[j * dim + d] = ns + cs;
    }
  }
}

void kvci_round_to_dtype(kvc_dtype dtype, const float* in, int64_t count, float* out) {
  for (int64_t i = 0; i < count; i++) out[i] = kvci_round_to(dtype, in[i]);
}
