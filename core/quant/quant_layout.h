/*
 * core/quant/quant_layout.h: how transformers groups the tensor it quantizes, the
 * host-side planning of transformers-mode quantized layers
 * (layer_quantized_transformers.c): which group sizes transformers accepts
 * for a shape (and its error's numbers), and where each group's values sit,
 * as the affine span the backend's quantize_groups takes.
 */
#ifndef KVC_CORE_QUANT_LAYOUT_H
#define KVC_CORE_QUANT_LAYOUT_H

#include <stdint.h>

#include "backend.h"
#include "kvcache.h"

/*
 * How transformers splits a contiguous [B, H, S, D] tensor into the groups
 * of one quantizer call (docs/semantics.md, 'quanto quantizer' and 'HQQ quantizer'):
 *  - quanto axis 0: G consecutive elements of the row-major flattening
 *    (optimum-quanto's group(): G must divide H*S*D and not exceed it). When
 *    the whole tensor is one group (B == 1, H*S*D == G), quanto's optimizer
 *    falls back to one scale per element: group 1, G groups (lossless).
 *  - quanto axis -1: channel d over G consecutive positions of the flattened
 *    (b, h, s) order (G must divide B*H*S and not exceed it); group
 *    d * (B*H*S/G) + j holds positions j*G .. j*G + G-1.
 *  - HQQ axis 1: reshape(-1, G), G consecutive elements (G must divide the
 *    element count).
 *  - HQQ axis 0: reshape(G, -1), group j = elements j + k * (numel/G),
 *    k < G (G must divide the element count).
 */
typedef struct kvc_quant_layout {
  kvc_quantizer quantizer;
  int axis;
  int64_t shape[4];   /* B, H, S, D */
  int64_t ngroups;    /* groups of one call */
  int64_t group;      /* values per group */
  int64_t axis_numel; /* the N of transformers' error: quanto "Group size (G) must be a divisor of
                         (N)" (numel / shape[axis]); HQQ's element count */
} kvc_quant_layout;

/*
 * Fills *layout for quantizer `q` along `axis` (quanto 0 or -1, HQQ 1 or 0)
 * with group size `group` >= 1. Returns 0, or -1 when transformers refuses
 * the group size for this shape (or the tensor is empty); then only
 * layout->axis_numel is meaningful, for the caller's error message.
 */
int kvci_quant_layout_init(kvc_quant_layout* layout, kvc_quantizer q, int axis, int64_t group, const int64_t shape[4]);
/* Copies the contiguous tensor x into groups [ngroups][group], and back. */
void kvci_quant_gather(const kvc_quant_layout* layout, const float* x, float* groups);
void kvci_quant_scatter(const kvc_quant_layout* layout, const float* groups, float* x);

/*
 * The layout's groups in a contiguous [B, H, S, D] tensor as one call of a
 * quantize job (kvc_quant_span), or, for quanto (which has no state across
 * groups) with per_row set, as one call per batch row when every group lies
 * in one row; group k of a call is then the k-th of that row in the layout's
 * order.
 */
kvc_quant_span kvci_quant_layout_span(const kvc_quant_layout* layout, int per_row);

#endif /* KVC_CORE_QUANT_LAYOUT_H */
