/*
 * tests/gpu/gpu_pool_util.h: what the device tests of the block pool share:
 * a pool of two attention layers and a recurrent one, the step write of
 * known values through a slot mapping, and the gather that reads them back.
 * Static functions: include it from exactly one translation unit per test.
 */
#ifndef KVC_TESTS_GPU_POOL_UTIL_H
#define KVC_TESTS_GPU_POOL_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "device_runtime.h"
#include "kvcache.h"
#include "test_util.h"

static TU_UNUSED float value(uint32_t layer, int kv, int64_t token, int64_t head, int64_t dim) {
  return (float)(layer * 100000 + kv * 50000 + token * 100 + head * 10 + dim) + 0.25f;
}

static TU_UNUSED kvc_device dev(void) {
  kvc_device d = {drt_device_type(), 0};
  return d;
}

/* A device tensor of `ndim` sizes holding `host` (n floats), or zeroed when host is NULL. */
static TU_UNUSED kvc_tensor dtensor(int64_t* shape, int ndim, const float* host, size_t n) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = drt_alloc(0, n * sizeof(float));
  if (host && t.data) drt_upload(0, t.data, host, n * sizeof(float), NULL);
  t.device = dev();
  t.ndim = ndim;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  t.shape = shape;
  return t;
}

/* Writes tokens [first, first + n) of attention layers 0 and 1 (of `nl` layers) through `slots`. */
static TU_UNUSED kvc_error* write_tokens(kvc_pool* p, uint32_t nl, const int64_t* slots, int64_t first, int64_t n) {
  int64_t ks[3] = {n, 2, 4}, vs[3] = {n, 2, 3};
  kvc_tensor k[3], v[3];
  memset(k, 0, sizeof k);
  memset(v, 0, sizeof v);
  float hk[64 * 8], hv[64 * 6];
  for (uint32_t l = 0; l < 2; l++) {
    for (int64_t t = 0; t < n; t++)
      for (int64_t h = 0; h < 2; h++) {
        for (int64_t d = 0; d < 4; d++) hk[t * 8 + h * 4 + d] = value(l, 0, first + t, h, d);
        for (int64_t d = 0; d < 3; d++) hv[t * 6 + h * 3 + d] = value(l, 1, first + t, h, d);
      }
    k[l] = dtensor(ks, 3, hk, (size_t)(n * 8));
    v[l] = dtensor(vs, 3, hv, (size_t)(n * 6));
  }
  kvc_error* e = kvc_pool_write(p, k, v, nl, slots, (size_t)n);
  for (int l = 0; l < 2; l++) {
    drt_free(0, k[l].data);
    drt_free(0, v[l].data);
  }
  return e;
}

/* Gathers layer `layer` of s (on the device, or into host memory for a CPU pool's sequence), downloads it and
   counts the elements unlike `value`. */
static TU_UNUSED long gather_mismatches_on(const kvc_pool_sequence* s, uint32_t layer, int on_host) {
  int64_t n = (int64_t)kvc_pool_sequence_length(s);
  int64_t ks[4] = {1, 2, n, 4}, vs[4] = {1, 2, n, 3};
  size_t kn = (size_t)(n * 8) * sizeof(float), vn = (size_t)(n * 6) * sizeof(float);
  kvc_tensor k = dtensor(ks, 4, NULL, (size_t)(n * 8)), v = dtensor(vs, 4, NULL, (size_t)(n * 6));
  float* hk = (float*)malloc(kn);
  float* hv = (float*)malloc(vn);
  kvc_tensor hkt = k, hvt = v;
  hkt.data = hk;
  hvt.data = hv;
  hkt.device.device_type = hvt.device.device_type = KVC_DEVICE_CPU;
  kvc_error* e = on_host ? kvc_pool_gather(s, layer, &hkt, &hvt) : kvc_pool_gather(s, layer, &k, &v);
  long bad = e ? -1 : 0;
  kvc_error_destroy(e);
  if (!bad && !on_host && (drt_download(0, hk, k.data, kn) || drt_download(0, hv, v.data, vn))) bad = -2;
  for (int64_t h = 0; !bad && h < 2; h++)
    for (int64_t t = 0; t < n; t++) {
      for (int64_t d = 0; d < 4; d++) bad += hk[(h * n + t) * 4 + d] != value(layer, 0, t, h, d);
      for (int64_t d = 0; d < 3; d++) bad += hv[(h * n + t) * 3 + d] != value(layer, 1, t, h, d);
    }
  free(hk);
  free(hv);
  drt_free(0, k.data);
  drt_free(0, v.data);
  return bad;
}

static TU_UNUSED long gather_mismatches(const kvc_pool_sequence* s, uint32_t layer) {
  return gather_mismatches_on(s, layer, 0);
}

/* The pool: attention layers 0 and 1 (2 heads, keys of 4 and values of 3 floats) in a group of 8 blocks of 4
   tokens, and recurrent layer 2 in a group of 6 state slots, in `layout`, on device 0. */
static TU_UNUSED kvc_error* gp_create(kvc_pool_layout layout, kvc_pool** out) {
  kvc_pool_group_options g[2] = {KVC_POOL_GROUP_OPTIONS_INIT, KVC_POOL_GROUP_OPTIONS_INIT};
  g[0].block_size = 4;
  g[0].num_blocks = 8;
  g[1].kind = KVC_POOL_GROUP_RECURRENT;
  g[1].block_size = 4;
  g[1].num_blocks = 6;
  kvc_pool_layer_options l[3] = {KVC_POOL_LAYER_OPTIONS_INIT, KVC_POOL_LAYER_OPTIONS_INIT,
                                 KVC_POOL_LAYER_OPTIONS_INIT};
  for (int i = 0; i < 2; i++) {
    l[i].num_kv_heads = 2;
    l[i].key_head_dim = 4;
    l[i].value_head_dim = 3;
  }
  l[2].group = 1;
  l[2].num_kv_heads = 2;
  l[2].key_head_dim = 4;
  l[2].conv_dim = 3;
  l[2].conv_kernel = 2;
  l[2].ssm_state_size = 2;
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT32;
  o.device = dev();
  o.num_groups = 2;
  o.groups = g;
  o.num_layers = 3;
  o.layers = l;
  o.layout = layout;
  return kvc_pool_create(&o, out);
}

#endif /* KVC_TESTS_GPU_POOL_UTIL_H */
