/* core/quant/quant_layout.c: transformers' grouping of a [B, H, S, D] tensor for each quantizer and axis (quant_layout.h). */
#include <string.h>

#include "quant_layout.h"

int kvci_quant_layout_init(kvc_quant_layout* layout, kvc_quantizer q, int axis, int64_t group, const int64_t shape[4]) {
  kvc_quant_layout l;
  memset(&l, 0, sizeof l);
  l.quantizer = q;
  l.axis = axis;
  memcpy(l.shape, shape, sizeof l.shape);
  int64_t numel = shape[0] * shape[1] * shape[2] * shape[3];
  if (q == KVC_QUANTIZER_QUANTO) {
    /* optimum-quanto's group(): the elements per index of the kept axis (batch, or head_dim) */
    l.axis_numel = numel == 0 ? 0 : numel / (axis == 0 ? shape[0] : shape[3]);
    if (group > l.axis_numel || l.axis_numel % group != 0) {
      *layout = l;
      return -1;
    }
    l.group = group;
    l.ngroups = numel / group;
    if (axis == 0 && l.ngroups == 1) { /* MaxOptimizer's per-tensor fallback reduces over nothing */
      l.group = 1;
      l.ngroups = numel;
    }
  } else {
    l.axis_numel = numel;
    if (numel == 0 || numel % group != 0) {
      *layout = l;
      return -1;
    }
    l.group = group;
    l.ngroups = numel / group;
  }
  *layout = l;
  return 0;
}

/* Strided layouts: element i of group k sits at x[index(k, i)]; see quantize.h. */
static int consecutive(const kvc_quant_layout* l) {
  return l->quantizer == KVC_QUANTIZER_QUANTO ? l->axis == 0 : l->axis == 1;
}

static inline void copy_one(float* group_elem, float* x_elem, int to_groups) {
  if (to_groups)
    *group_elem = *x_elem;
  else
    *x_elem = *group_elem;
}

/* Moves values between x and the groups: gather (to_groups 1) or scatter (0), by one index map. */
static void move(const kvc_quant_layout* l, float* x, float* groups, int to_groups) {
  const int64_t numel = l->ngroups * l->group;
  if (consecutive(l)) {
    if (to_groups)
      memcpy(groups, x, (size_t)numel * sizeof *x);
    else
      memcpy(x, groups, (size_t)numel * sizeof *x);
  } else if (l->quantizer == KVC_QUANTIZER_QUANTO) {
    /* rows of D values, one per (b, h, s) position n; position n is element n % G of group d * N/G + n / G */
    const int64_t dim = l->shape[3], positions = numel / dim, per_channel = positions / l->group;
    for (int64_t n = 0; n < positions; n++)
      for (int64_t d = 0; d < dim; d++)
        copy_one(&groups[(d * per_channel + n / l->group) * l->group + n % l->group], &x[n * dim + d], to_groups);
  } else {
    /* x viewed as [G][ngroups]: a transpose */
    for (int64_t i = 0; i < l->group; i++)
      for (int64_t k = 0; k < l->ngroups; k++)
        copy_one(&groups[k * l->group + i], &x[i * l->ngroups + k], to_groups);
  }
}

void kvci_quant_gather(const kvc_quant_layout* l, const float* x, float* groups) { move(l, (float*)x, groups, 1); }
void kvci_quant_scatter(const kvc_quant_layout* l, const float* groups, float* x) { move(l, x, (float*)groups, 0); }

kvc_quant_span kvci_quant_layout_span(const kvc_quant_layout* l, int per_row) {
  kvc_quant_span s;
  memset(&s, 0, sizeof s);
  s.calls[0] = s.calls[1] = 1;
  s.groups[0] = 1;
  if (consecutive(l)) { /* G consecutive elements (the per-tensor fallback too: groups of one) */
    s.groups[1] = l->ngroups;
    s.group_strides[1] = l->group;
    s.value_stride = 1;
  } else if (l->quantizer == KVC_QUANTIZER_QUANTO) {
    /* group d * (P/G) + j holds channel d of positions j*G .. j*G + G-1 (P positions (b, h, s), D values each) */
    const int64_t dim = l->shape[3], positions = l->ngroups * l->group / dim;
    s.groups[0] = dim;
    s.groups[1] = positions / l->group;
    s.group_strides[0] = 1;
    s.group_strides[1] = l->group * dim;
    s.value_stride = dim;
    if (per_row && l->shape[0] > 1) { /* a row's groups: every channel, over that row's positions */
      s.calls[0] = l->shape[0];
      s.call_strides[0] = positions / l->shape[0] * dim;
      s.groups[1] /= l->shape[0];
    }
  } else { /* HQQ axis 0: [G][ngroups], group k is column k */
    s.groups[1] = l->ngroups;
    s.group_strides[1] = 1;
    s.value_stride = l->ngroups;
  }
  return s;
}
