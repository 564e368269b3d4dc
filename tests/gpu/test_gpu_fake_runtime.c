/*
 * tests/gpu/test_gpu_fake_runtime.c: what only the fake runtime can show of
 * the real plugin (tests/gpu/fake_runtime): contexts per device and stream
 * capture into a graph.
 *  - A process that uses device 1 alone (from a thread that never chose a
 *    device, whose current device reads 0) gets no context on device 0: the
 *    plugin's device guard must not make device 0 current again on exit.
 *  - An update of an offloading cache and a pool write captured into a
 *    graph break no capture rule (no event query, no synchronisation, no
 *    pageable host copy, no unsafe allocation, no fork left unjoined) and,
 *    replayed, write what eager calls write.
 *  - An FP8 layer's calibration, which must wait for the device, is refused
 *    during a capture instead of breaking it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_pool_util.h"
#include "gpu_test_util.h"
#include "kvcache.h"
#include "test_util.h"

enum { LAYERS = 2, HEADS = 2, DIM = 4 };

/* A [1, HEADS, n, DIM] float32 tensor of `data` on `device`, or on the CPU when `device` < 0. */
static kvc_tensor bhsd(void* data, int64_t* shape, int device) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.ndim = 4;
  t.shape = shape;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  t.device.device_type = device < 0 ? KVC_DEVICE_CPU : drt_device_type();
  t.device.device_id = device < 0 ? 0 : device;
  return t;
}

static void fill_step(float* host, size_t n, int step, int layer, int kv) {
  for (size_t i = 0; i < n; i++) host[i] = (float)(step * 1000 + layer * 100 + kv * 50) + (float)i * 0.5f;
}

/* Layer `layer` of the device cache d equals that of the CPU cache c, element for element. */
static int same_layer(const kvc_cache* d, const kvc_cache* c, uint32_t layer) {
  kvc_kv dv, cv;
  if (!CHECK_OK(kvc_cache_layer_view(d, layer, &dv)) || !CHECK_OK(kvc_cache_layer_view(c, layer, &cv))) return 0;
  int same = 1;
  for (int kv = 0; kv < 2; kv++) {
    size_t nd = 0, nc = 0;
    unsigned char* a = gt_read_tensor(kv ? &dv.value : &dv.key, &nd);
    unsigned char* b = gt_read_tensor(kv ? &cv.value : &cv.key, &nc);
    same = same && a && b && nd == nc && memcmp(a, b, nd) == 0;
    free(a);
    free(b);
  }
  return same;
}

/* ------------------------------------------------------------ device 1 alone */

typedef struct device_one_run {
  int ok;
} device_one_run;

/* A cache on device 1, updated and read back, on a thread that never chose a device (its current device reads 0). */
static void* use_device_one(void* arg) {
  device_one_run* run = (device_one_run*)arg;
  kvc_layer_options layer[LAYERS] = {KVC_LAYER_OPTIONS_INIT, KVC_LAYER_OPTIONS_INIT};
  kvc_cache_options o = tu_custom_options(LAYERS, layer);
  o.device.device_type = drt_device_type();
  o.device.device_id = 1;
  kvc_cache *d = NULL, *c = NULL;
  kvc_cache_options oc = tu_custom_options(LAYERS, layer);
  if (!CHECK_OK(kvc_cache_create(&o, &d)) || !CHECK_OK(kvc_cache_create(&oc, &c))) goto done;
  int64_t shape[4] = {1, HEADS, 3, DIM};
  float host[HEADS * 3 * DIM];
  void* dev[2] = {NULL, NULL};
  for (int step = 0; step < 2; step++)
    for (uint32_t l = 0; l < LAYERS; l++) {
      for (int kv = 0; kv < 2; kv++) {
        fill_step(host, sizeof host / sizeof *host, step, (int)l, kv);
        /* drt_alloc makes device 1 current on this thread, as any CUDA program using it would. */
        if (!dev[kv]) dev[kv] = drt_alloc(1, sizeof host);
        if (!CHECK(dev[kv] != NULL) || !CHECK(drt_upload(1, dev[kv], host, sizeof host, NULL) == 0)) goto done;
      }
      float hk[HEADS * 3 * DIM], hv[HEADS * 3 * DIM];
      fill_step(hk, sizeof hk / sizeof *hk, step, (int)l, 0);
      fill_step(hv, sizeof hv / sizeof *hv, step, (int)l, 1);
      kvc_tensor k = bhsd(dev[0], shape, 1), v = bhsd(dev[1], shape, 1);
      kvc_tensor ck = bhsd(hk, shape, -1), cv = bhsd(hv, shape, -1);
      CHECK_OK(kvc_cache_update(d, l, &k, &v, NULL, NULL));
      CHECK_OK(kvc_cache_update(c, l, &ck, &cv, NULL, NULL));
    }
  run->ok = 1;
  for (uint32_t l = 0; l < LAYERS; l++) run->ok &= CHECK(same_layer(d, c, l));
  drt_free(1, dev[0]);
  drt_free(1, dev[1]);
done:
  kvc_cache_destroy(d);
  kvc_cache_destroy(c);
  return NULL;
}

static void test_device_one_alone(void) {
  /* Before anything of this process touched a device: the main thread has only counted them. */
  CHECK_EQ_I64(kvc_fake_contexts(0), 0);
  device_one_run run = {0};
  pthread_t t;
  if (!CHECK(pthread_create(&t, NULL, use_device_one, &run) == 0)) return;
  pthread_join(t, NULL);
  CHECK(run.ok);
  CHECK_EQ_I64(kvc_fake_contexts(1), 1);
  /* The plugin's device guard must not have made device 0 current (which creates its context) on the way out. */
  CHECK_EQ_I64(kvc_fake_contexts(0), 0);
}

/* ------------------------------------------------------------ capture */

static void* upload_new(const float* host, size_t bytes) {
  void* p = drt_alloc(0, bytes);
  if (p && drt_upload(0, p, host, bytes, NULL)) {
    drt_free(0, p);
    p = NULL;
  }
  return p;
}

/* Ends the capture on `stream`: the graph, instantiated, or NULL. The capture broke no rule. */
static cudaGraphExec_t end_capture(cudaStream_t stream, long violations_before) {
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture(stream, &graph);
  CHECK_EQ_I64(kvc_fake_capture_violations() - violations_before, 0);
  if (!CHECK_EQ_I64(e, cudaSuccess)) {
    printf("  cudaStreamEndCapture: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return NULL;
  }
  cudaGraphExec_t exec = NULL;
  if (!CHECK_EQ_I64(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess)) exec = NULL;
  cudaGraphDestroy(graph);
  return exec;
}

/*
 * An offloading cache's step captured: the capture breaks no rule (the pinned-buffer reuse used to query events
 * recorded in it, and reused a buffer the graph reads), and the graph, replayed with the step's inputs, leaves the
 * cache as a CPU cache updated eagerly. Replayed once: the step frees device stores allocated before the capture
 * (the retired store, the store a prefetch replaced), and a graph frees such memory each time it runs, so a second
 * replay would free them again (the fake reports that; docs/gpus.md, 'Graph capture').
 */
static void test_capture_offloaded_update(void) {
  cudaStream_t stream = (cudaStream_t)drt_stream_create(0);
  if (!CHECK(stream != NULL)) return;
  kvc_layer_options layer[LAYERS] = {KVC_LAYER_OPTIONS_INIT, KVC_LAYER_OPTIONS_INIT};
  kvc_cache_options o = tu_custom_options(LAYERS, layer);
  o.offload = KVC_OFFLOAD_ALL;
  o.device.device_type = drt_device_type();
  kvc_cache *d = NULL, *twin = NULL; /* twin: on the CPU, both steps eagerly */
  kvc_cache_options oc = tu_custom_options(LAYERS, layer);
  int64_t shape[4] = {1, HEADS, 1, DIM};
  enum { N = HEADS * DIM };
  float host[2][LAYERS][2][N];
  void* dev[LAYERS][2] = {{NULL, NULL}, {NULL, NULL}};
  cudaGraphExec_t exec = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &d)) || !CHECK_OK(kvc_cache_set_stream(d, stream)) ||
      !CHECK_OK(kvc_cache_create(&oc, &twin)))
    goto done;
  for (int s = 0; s < 2; s++)
    for (int l = 0; l < LAYERS; l++)
      for (int kv = 0; kv < 2; kv++) fill_step(host[s][l][kv], N, s, l, kv);
  /* Step 0 eagerly; the device inputs stay allocated for the capture. */
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (int kv = 0; kv < 2; kv++)
      if (!CHECK((dev[l][kv] = upload_new(host[0][l][kv], sizeof host[0][l][kv])) != NULL)) goto done;
    kvc_tensor k = bhsd(dev[l][0], shape, 0), v = bhsd(dev[l][1], shape, 0);
    if (!CHECK_OK(kvc_cache_update(d, l, &k, &v, NULL, NULL))) goto done;
    for (int s = 0; s < 2; s++) {
      kvc_tensor ck = bhsd(host[s][l][0], shape, -1), cv = bhsd(host[s][l][1], shape, -1);
      CHECK_OK(kvc_cache_update(twin, l, &ck, &cv, NULL, NULL));
    }
  }
  /* Step 1's inputs in place; the step captured: nothing runs yet. */
  for (int l = 0; l < LAYERS; l++)
    for (int kv = 0; kv < 2; kv++) CHECK(drt_upload(0, dev[l][kv], host[1][l][kv], sizeof host[1][l][kv], stream) == 0);
  long before = kvc_fake_capture_violations();
  if (!CHECK_EQ_I64(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess)) goto done;
  for (uint32_t l = 0; l < LAYERS; l++) {
    kvc_tensor k = bhsd(dev[l][0], shape, 0), v = bhsd(dev[l][1], shape, 0);
    CHECK_OK(kvc_cache_update(d, l, &k, &v, NULL, NULL));
  }
  exec = end_capture(stream, before);
  if (!exec) goto done;
  CHECK_EQ_I64(cudaGraphLaunch(exec, stream), cudaSuccess);
  for (uint32_t l = 0; l < LAYERS; l++)
    if (!CHECK(same_layer(d, twin, l))) printf("  layer %u differs from the CPU cache after the replay\n", l);
  CHECK_EQ_I64(kvc_fake_capture_violations() - before, 0);
done:
  if (exec) cudaGraphExecDestroy(exec);
  kvc_cache_destroy(d);
  kvc_cache_destroy(twin);
  for (int l = 0; l < LAYERS; l++)
    for (int kv = 0; kv < 2; kv++) drt_free(0, dev[l][kv]);
  drt_stream_destroy(0, stream);
}

/* A pool step write (tokens 4..5 of sequence a) captured, replayed, and read back by a gather. */
static void test_capture_pool_write(void) {
  cudaStream_t stream = (cudaStream_t)drt_stream_create(0);
  if (!CHECK(stream != NULL)) return;
  kvc_pool* p = NULL;
  kvc_pool_sequence* a = NULL;
  cudaGraphExec_t exec = NULL;
  kvc_tensor k[3], v[3];
  memset(k, 0, sizeof k);
  memset(v, 0, sizeof v);
  int64_t ks[3] = {2, 2, 4}, vs[3] = {2, 2, 3};
  int32_t tokens[6] = {1, 2, 3, 4, 5, 6};
  int64_t slots[32]; /* room for every group's slots */
  if (!CHECK_OK(gp_create(KVC_POOL_LAYOUT_NHD, &p)) || !CHECK_OK(kvc_pool_set_stream(p, stream)) ||
      !CHECK_OK(kvc_pool_sequence_create(p, NULL, &a)) || !CHECK_OK(kvc_pool_reserve(a, tokens, 4, slots)) ||
      !CHECK_OK(write_tokens(p, 3, slots, 0, 4)) || !CHECK_OK(kvc_pool_reserve(a, tokens + 4, 2, slots)))
    goto done;
  /* The step's inputs, in device memory before the capture (allocating is not allowed during one). */
  float hk[2 * 8], hv[2 * 6];
  for (uint32_t l = 0; l < 2; l++) {
    for (int64_t t = 0; t < 2; t++)
      for (int64_t h = 0; h < 2; h++) {
        for (int64_t dd = 0; dd < 4; dd++) hk[t * 8 + h * 4 + dd] = value(l, 0, 4 + t, h, dd);
        for (int64_t dd = 0; dd < 3; dd++) hv[t * 6 + h * 3 + dd] = value(l, 1, 4 + t, h, dd);
      }
    k[l] = dtensor(ks, 3, hk, 16);
    v[l] = dtensor(vs, 3, hv, 12);
  }
  if (!CHECK(drt_stream_synchronize(0, stream) == 0)) goto done;
  long before = kvc_fake_capture_violations();
  if (!CHECK_EQ_I64(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess)) goto done;
  CHECK_OK(kvc_pool_write(p, k, v, 3, slots, 2));
  exec = end_capture(stream, before);
  if (!exec) goto done;
  CHECK(gather_mismatches(a, 0) > 0); /* tokens 4 and 5: not written before a replay */
  CHECK_EQ_I64(cudaGraphLaunch(exec, stream), cudaSuccess);
  CHECK_EQ_I64(gather_mismatches(a, 0), 0);
  CHECK_EQ_I64(gather_mismatches(a, 1), 0);
done:
  if (exec) cudaGraphExecDestroy(exec);
  for (int l = 0; l < 2; l++) {
    drt_free(0, k[l].data);
    drt_free(0, v[l].data);
  }
  kvc_pool_destroy(p);
  drt_stream_destroy(0, stream);
}

/* An FP8 layer's first update calibrates its scale, which waits for the device: refused during a capture. */
static void test_capture_refuses_fp8_calibration(void) {
  cudaStream_t stream = (cudaStream_t)drt_stream_create(0);
  if (!CHECK(stream != NULL)) return;
  kvc_layer_options layer = KVC_LAYER_OPTIONS_INIT;
  layer.kind = KVC_LAYER_QUANTIZED_FP8;
  kvc_cache_options o = tu_custom_options(1, &layer);
  o.device.device_type = drt_device_type();
  kvc_cache* d = NULL;
  int64_t shape[4] = {1, HEADS, 4, 64};
  float host[HEADS * 4 * 64];
  fill_step(host, sizeof host / sizeof *host, 0, 0, 0);
  void* dev = upload_new(host, sizeof host);
  if (CHECK(dev != NULL) && CHECK_OK(kvc_cache_create(&o, &d)) && CHECK_OK(kvc_cache_set_stream(d, stream))) {
    long before = kvc_fake_capture_violations();
    CHECK_EQ_I64(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    kvc_tensor k = bhsd(dev, shape, 0);
    kvc_error* e = kvc_cache_update(d, 0, &k, &k, NULL, NULL);
    CHECK(e != NULL);
    if (e) printf("  refused, as it must be: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    cudaGraph_t graph = NULL;
    CHECK_EQ_I64(cudaStreamEndCapture(stream, &graph), cudaSuccess); /* the capture itself is intact */
    CHECK_EQ_I64(kvc_fake_capture_violations() - before, 0);
    cudaGraphDestroy(graph);
  }
  kvc_cache_destroy(d);
  drt_free(0, dev);
  drt_stream_destroy(0, stream);
}

int main(void) {
  gt_open_or_skip("test_gpu_fake_runtime");
  if (!CHECK(drt_device_count() >= 2)) return tu_finish(); /* CTest runs it with KVC_FAKE_GPU_DEVICES=2 */
  TU_RUN(test_device_one_alone); /* first: nothing else may have touched device 0 */
  TU_RUN(test_capture_offloaded_update);
  TU_RUN(test_capture_pool_write);
  TU_RUN(test_capture_refuses_fp8_calibration);
  return tu_finish();
}
