/*
 * core/internal.h: the whole core's internal interface in one include, for the floors at the top (pool/, persist/,
 * tier/) and the tree's tests. Each folder below them includes only the headers of the floors it stands on
 * (core/README.md says which; scripts/check_layering.py checks it), never this file.
 */
#ifndef KVC_CORE_INTERNAL_H
#define KVC_CORE_INTERNAL_H

#include "util/error.h"
#include "util/options.h"
#include "util/registry.h"
#include "util/tensor.h"
#include "model/model.h"
#include "kinds/base/base_kinds.h"
#include "kinds/kind_registry.h"
#include "cache/cache_ops.h"

/*
 * The guards of the pool's handles, whose structs are private to core/pool/ (guard.h), NULL for NULL: a pool's
 * and the pool of a sequence (its calls go through its pool).
 */
kvci_guard* kvci_pool_guard(const kvc_pool* pool);
kvci_guard* kvci_sequence_guard(const kvc_pool_sequence* sequence);
/* Whether a pool sequence was created with extra keys (an adapter key or multimodal items). */
int kvci_pool_sequence_has_extra_keys(const kvc_pool_sequence* sequence);

#endif /* KVC_CORE_INTERNAL_H */
