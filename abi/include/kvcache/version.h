/*
 * kvcache/version.h: export macro, version numbers and the features bitmask.
 *
 * Every binding compares KVC_VERSION_MAJOR (the header it was generated from)
 * with kvc_version() / 10000 (the library it loaded) and refuses to run when
 * they differ: the major number is the ABI promise, and it is also the number
 * in the shared library's SONAME (libkvcache.so.<major>).
 */
#ifndef KVCACHE_VERSION_H
#define KVCACHE_VERSION_H

#include <stdint.h>

#if defined(_WIN32)
#  if defined(KVC_BUILDING_LIBRARY)
#    define KVC_API __declspec(dllexport)
#  else
#    define KVC_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define KVC_API __attribute__((visibility("default")))
#else
#  define KVC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 7
#define KVC_VERSION_PATCH 0
/** MAJOR * 10000 + MINOR * 100 + PATCH, comparable with kvc_version(). */
#define KVC_VERSION_NUMBER \
  (KVC_VERSION_MAJOR * 10000 + KVC_VERSION_MINOR * 100 + KVC_VERSION_PATCH)

/** Version of the library actually loaded, as KVC_VERSION_NUMBER. Never fails. */
KVC_API uint32_t kvc_version(void);

/** The same as a static string "MAJOR.MINOR.PATCH". Never NULL; owned by the library. */
KVC_API const char* kvc_version_string(void);

/*
 * Features: bits of kvc_features(). A bit that is set means the capability is
 * usable now; KVC_FEATURE_CUDA is set only when the CUDA backend is linked in
 * or its plugin can be loaded and reports a device. Bits are never reused.
 */
#define KVC_FEATURE_CPU        (UINT64_C(1) << 0) /**< the CPU backend (always) */
#define KVC_FEATURE_CUDA       (UINT64_C(1) << 1) /**< a CUDA backend is available */
#define KVC_FEATURE_HIP        (UINT64_C(1) << 2) /**< a ROCm/HIP backend is available */
#define KVC_FEATURE_BACKEND_DL (UINT64_C(1) << 3) /**< the core can load backend plugins */

/**
 * The features bitmask. May probe for backend plugins on first call (the
 * result is cached). Thread-safe.
 */
KVC_API uint64_t kvc_features(void);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_VERSION_H */
