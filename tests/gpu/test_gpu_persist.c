/*
 * tests/gpu/test_gpu_persist.c: cache files of device caches (kvcache/persist.h).
 * A device cache and a CPU cache take the same updates (gpu_twin.h); then:
 *  - the device cache's file, written through a 4 KiB host staging buffer
 *    (so whole rows, seq ranges and dim ranges are all cut into chunks), is
 *    byte for byte the CPU cache's file (the device is not part of a file);
 *  - that file loaded on the device and on the CPU, from memory and from a
 *    path, gives a twin equal to the original, and restored into the device cache leaves it equal;
 *  - the restored device cache and the CPU cache take more updates alike.
 * On the emulated device every device pointer is poisoned for the host: a
 * byte the core read or wrote directly instead of through the backend faults.
 */
#include "../persist/persist_test.h" /* ps_buffer: a file in memory */
/* gpu_twin.h's helpers are static; this test uses the update and check ones only. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "gpu_twin.h"

/*
 * `retires`: the caches offload, and keep the device copies the last update's views need until the next update
 * (memory a file does not carry): a cache fresh from a file reports less memory until its next update, so it is
 * compared with the original only after one; the two fresh copies are compared with each other at once.
 */
static void round_trip(twin* t, uint32_t layers, const tw_geom* g, int retires, const char* name) {
  kvc_save_options so = KVC_SAVE_OPTIONS_INIT;
  so.staging_bytes = 4096;
  ps_buffer f[2] = {{0}};
  for (int s = 0; s < 2; s++)
    if (!CHECK_OK(kvc_cache_save_to(t->c[s], ps_buffer_write, &f[s], s == TW_DEV ? &so : NULL))) goto done;
  if (!CHECK(f[0].len == f[1].len && memcmp(f[0].data, f[1].data, f[0].len) == 0))
    printf("    %s: the device cache's file (%zu bytes) differs from the CPU cache's (%zu bytes)\n", name, f[1].len,
           f[0].len);
  twin loaded;
  memset(&loaded, 0, sizeof loaded);
  loaded.device = t->device;
  kvc_load_options lo = KVC_LOAD_OPTIONS_INIT;
  lo.device.device_type = drt_device_type();
  lo.device.device_id = t->device;
  lo.stream = tw_stream;
  if (CHECK_OK(kvc_cache_load_buffer(f[1].data, f[1].len, NULL, &loaded.c[TW_CPU])) &&
      CHECK_OK(kvc_cache_load_buffer(f[1].data, f[1].len, &lo, &loaded.c[TW_DEV]))) {
    tw_check(&loaded, "loaded from the device cache's file");
    twin mixed = {{t->c[TW_CPU], loaded.c[TW_DEV]}, t->device};
    if (!retires) tw_check(&mixed, "the CPU original and the device copy");
  }
  tw_destroy(&loaded);
  /* The same file from a path: the device cache's payloads are read from the file through a host buffer. */
  char path[256];
  ps_path(path, sizeof path, "gpu-round-trip");
  FILE* fp = fopen(path, "wb");
  int written = fp && fwrite(f[1].data, 1, f[1].len, fp) == f[1].len;
  if (fp && fclose(fp)) written = 0;
  memset(&loaded, 0, sizeof loaded);
  loaded.device = t->device;
  if (CHECK(written) && CHECK_OK(kvc_cache_load(path, NULL, &loaded.c[TW_CPU])) &&
      CHECK_OK(kvc_cache_load(path, &lo, &loaded.c[TW_DEV])))
    tw_check(&loaded, "loaded from the device cache's file on disk");
  tw_destroy(&loaded);
  unlink(path);
  /* Restore the device cache from the CPU cache's file, then keep stepping both alike. */
  if (CHECK_OK(kvc_cache_restore_buffer(t->c[TW_DEV], f[0].data, f[0].len))) {
    if (!retires) tw_check(t, "restored");
    for (int step = 0; step < 3; step++) TW_OK(TW_UPDATE_ALL(t, layers, g));
  }
done:
  free(f[0].data);
  free(f[1].data);
}

/* The quantizer of the QUANTIZED preset's runs. */
static const kvc_quant_options* preset_quant;

static void run_preset_geom(kvc_preset preset, uint32_t layers, int64_t max_cache_len, kvc_offload offload,
                            tw_geom g, const char* name) {
  kvc_model_config cfg = tu_config(layers, NULL, 6, 6);
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = preset;
  o.config = &cfg;
  o.max_cache_len = max_cache_len;
  o.offload = offload;
  o.quant = preset_quant;
  twin t;
  if (!tw_create(&t, &o, 0)) return;
  TW_OK(TW_UPDATE_ALL(&t, layers, &g));
  g.n = 1;
  for (int step = 0; step < 4; step++) TW_OK(TW_UPDATE_ALL(&t, layers, &g));
  round_trip(&t, layers, &g, offload != KVC_OFFLOAD_DEFAULT || preset == KVC_PRESET_OFFLOADED ||
                                  preset == KVC_PRESET_OFFLOADED_STATIC,
             name);
  tw_destroy(&t);
}

static void run_preset(kvc_preset preset, uint32_t layers, int64_t max_cache_len, kvc_offload offload,
                       const char* name) {
  const kvc_dtype dts[3] = {KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT16, KVC_DTYPE_FLOAT32};
  tw_geom g = {2, 3, 9, 16, 16, dts[preset % 3], 0};
  run_preset_geom(preset, layers, max_cache_len, offload, g, name);
}

/* Keys of 4 KiB per position (a chunk is a range of positions) and values of 8 KiB (a range of one position). */
static void test_wide_rows(void) {
  tw_geom g = {2, 2, 5, 1024, 2048, KVC_DTYPE_FLOAT32, 0};
  run_preset_geom(KVC_PRESET_DYNAMIC, 2, 0, KVC_OFFLOAD_DEFAULT, g, "wide rows");
}

/* Quantized codes and scales are row buffers: they go through the stage too. Every mode. */
static void test_quantized(void) {
  static const kvc_quant_mode modes[3] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS,
                                          KVC_QUANT_MODE_COMPACT};
  for (int m = 0; m < 3; m++) {
    kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
    q.mode = modes[m];
    q.q_group_size = 16;
    q.residual_length = 3;
    preset_quant = &q;
    tw_nan_equal = 1; /* as test_gpu_caches: a NaN of any payload equals any other */
    run_preset(KVC_PRESET_QUANTIZED, 2, 0, KVC_OFFLOAD_DEFAULT, "quantized");
    tw_nan_equal = 0;
    preset_quant = NULL;
  }
}

static void test_dynamic(void) { run_preset(KVC_PRESET_DYNAMIC, 3, 0, KVC_OFFLOAD_DEFAULT, "dynamic"); }
static void test_static(void) { run_preset(KVC_PRESET_STATIC, 2, 32, KVC_OFFLOAD_DEFAULT, "static"); }
static void test_hybrid(void) { run_preset(KVC_PRESET_HYBRID, 3, 32, KVC_OFFLOAD_DEFAULT, "hybrid"); }
static void test_offloaded(void) { run_preset(KVC_PRESET_OFFLOADED, 3, 0, KVC_OFFLOAD_DEFAULT, "offloaded"); }
static void test_offloaded_static(void) {
  run_preset(KVC_PRESET_OFFLOADED_STATIC, 2, 32, KVC_OFFLOAD_DEFAULT, "offloaded static");
}

int main(void) {
  void* stream = tw_start_on_a_stream("test_gpu_persist");
  TU_RUN(test_dynamic);
  TU_RUN(test_static);
  TU_RUN(test_hybrid);
  TU_RUN(test_offloaded);
  TU_RUN(test_offloaded_static);
  TU_RUN(test_wide_rows);
  TU_RUN(test_quantized);
  tw_stream = NULL;
  TU_RUN(test_dynamic);
  drt_stream_destroy(0, stream);
  return tu_finish();
}
