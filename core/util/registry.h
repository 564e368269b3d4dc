/*
 * core/util/registry.h: the backend registry (registry.c): the CPU backend built in, GPU plugins loaded on demand.
 */
#ifndef KVC_CORE_UTIL_REGISTRY_H
#define KVC_CORE_UTIL_REGISTRY_H

#include "kvcache.h"
#include "backend.h"

/* Registry (registry.c). */
kvc_error* kvci_backend_for(const char* fn, const kvc_device* device, const kvc_backend** out);

#endif /* KVC_CORE_UTIL_REGISTRY_H */
