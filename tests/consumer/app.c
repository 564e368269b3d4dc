/* The consumer projects' program: the version it runs against, one decode step through a cache, and where the
 * library looks for a GPU plugin (its own directory first), which must follow the library when its prefix moves. */
#include <kvcache.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  printf("kvcache %s\n", kvc_version_string());
  if (kvc_version() / 10000 != KVC_VERSION_MAJOR) {
    fprintf(stderr, "built against major %d, running %u\n", KVC_VERSION_MAJOR, (unsigned)kvc_version() / 10000);
    return 1;
  }
  kvc_model_config config = KVC_MODEL_CONFIG_INIT;
  config.num_hidden_layers = 1;
  kvc_cache_options options = KVC_CACHE_OPTIONS_INIT;
  options.preset = KVC_PRESET_DYNAMIC;
  options.config = &config;
  kvc_cache* cache = NULL;
  kvc_error* err = kvc_cache_create(&options, &cache);
  if (err) {
    fprintf(stderr, "%s\n", kvc_error_message(err));
    kvc_error_destroy(err);
    return 1;
  }
  static float k[2 * 4];
  int64_t shape[4] = {1, 2, 1, 4};
  kvc_tensor key = {k, {KVC_DEVICE_CPU, 0}, 4, {KVC_TYPE_CODE_FLOAT, 32, 1}, shape, NULL, 0};
  kvc_kv kv;
  err = kvc_cache_update(cache, 0, &key, &key, NULL, &kv);
  if (err) {
    fprintf(stderr, "%s\n", kvc_error_message(err));
    kvc_error_destroy(err);
    kvc_cache_destroy(cache);
    return 1;
  }
  printf("one update: %lld keys\n", (long long)kv.key.shape[2]);
  kvc_cache_destroy(cache);

  /* No GPU here (or no plugin): the error lists the paths tried, the library's own directory among them. */
  kvc_cache_options gpu = KVC_CACHE_OPTIONS_INIT;
  gpu.preset = KVC_PRESET_DYNAMIC;
  gpu.config = &config;
  gpu.device = (kvc_device){KVC_DEVICE_CUDA, 0};
  err = kvc_cache_create(&gpu, &cache);
  if (err) {
    printf("cuda: %s\n", kvc_error_message(err));
    kvc_error_destroy(err);
  } else {
    printf("cuda: a device cache\n");
    kvc_cache_destroy(cache);
  }
  return 0;
}
