/* core/util/version.c: run-time version and features. */
#include "error.h"
#include "registry.h"

#define KVC_STR2(x) #x
#define KVC_STR(x) KVC_STR2(x)

uint32_t kvc_version(void) { return KVC_VERSION_NUMBER; }

const char* kvc_version_string(void) {
  return KVC_STR(KVC_VERSION_MAJOR) "." KVC_STR(KVC_VERSION_MINOR) "." KVC_STR(KVC_VERSION_PATCH);
}

uint64_t kvc_features(void) {
  uint64_t f = KVC_FEATURE_CPU;
#if defined(KVC_BACKEND_DL) && KVC_BACKEND_DL
  f |= KVC_FEATURE_BACKEND_DL;
#endif
  const kvc_backend* b = NULL;
  kvc_device cuda = {KVC_DEVICE_CUDA, 0}, rocm = {KVC_DEVICE_ROCM, 0};
  kvc_error* e = kvci_backend_for("kvc_features", &cuda, &b);
  if (!e) f |= KVC_FEATURE_CUDA;
  kvc_error_destroy(e);
  e = kvci_backend_for("kvc_features", &rocm, &b);
  if (!e) f |= KVC_FEATURE_HIP;
  kvc_error_destroy(e);
  return f;
}
