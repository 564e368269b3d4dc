/*
 * core/kinds/kinds.c: the registry of layer kinds, and the generic code that asks
 * their descriptors (option checks, cache-wide hooks).
 *
 * To add a kind: write its file with its descriptor, then add one line to
 * KVC_KINDS below (docs/adding-a-layer-kind.md).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/base/base_kinds.h"
#include "kind_registry.h"

#define KVC_KINDS(X)                 \
  X(kvc_dynamic_kind)                \
  X(kvc_dynamic_sliding_kind)        \
  X(kvc_dynamic_chunked_kind)        \
  X(kvc_static_kind)                 \
  X(kvc_static_sliding_kind)         \
  X(kvc_static_chunked_kind)         \
  X(kvc_quantized_kind)              \
  X(kvc_sink_kind)                   \
  X(kvc_linear_kind)                 \
  X(kvc_linear_dynamic_kind)         \
  X(kvc_linear_dynamic_sliding_kind) \
  X(kvc_linear_static_kind)          \
  X(kvc_linear_static_sliding_kind)  \
  X(kvc_quantized_fp8_kind)          \
  X(kvc_dummy_kind)                  \
  X(kvc_dynamic_indexed_kind)        \
  X(kvc_static_indexed_kind)         \
  /* one line per kind, above this one */

#define KVC_DECLARE_KIND(k) extern const kvc_kind k;
#define KVC_LIST_KIND(k) &k,
KVC_KINDS(KVC_DECLARE_KIND)
static const kvc_kind* const KINDS[] = {KVC_KINDS(KVC_LIST_KIND)};
#define NUM_KINDS (sizeof KINDS / sizeof KINDS[0])

const kvc_kind* kvci_kind_find(kvc_layer_kind id) {
  for (size_t i = 0; i < NUM_KINDS; i++)
    if (KINDS[i]->id == id) return KINDS[i];
  return NULL;
}

const kvc_kind* kvci_kind_at(size_t i) { return i < NUM_KINDS ? KINDS[i] : NULL; }

kvc_error* kvci_layer_new(const kvc_layer_options* spec, kvc_layer** out) {
  const kvc_kind* kind = kvci_kind_find(spec->kind); /* options were checked by kvci_kind_check_options */
  if (!kind) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "layer kind %d is not registered", (int)spec->kind);
  kvc_layer* l = (kvc_layer*)calloc(1, sizeof(*l));
  if (!l) return kvci_err_oom();
  l->kind = kind->id;
  l->desc = kind;
  l->ops = kind->ops;
  l->window = kvci_layer_is(l, KVC_TRAIT_SLIDING) ? spec->window : 0;
  if (kvci_layer_is(l, KVC_TRAIT_STATIC)) {
    l->max_cache_len = spec->max_cache_len;
    l->slots = kvci_layer_is(l, KVC_TRAIT_SLIDING) && spec->window < spec->max_cache_len ? spec->window
                                                                                         : spec->max_cache_len;
  }
  if (kind->configure) kind->configure(l, spec);
  *out = l;
  return NULL;
}

/* "1 (dynamic), 2 (dynamic sliding), ...": every registered kind, for the message of an unknown one. */
static void kind_list(char* text, size_t size) {
  size_t used = 0;
  text[0] = 0;
  for (size_t i = 0; i < NUM_KINDS && used < size; i++)
    used += (size_t)snprintf(text + used, size - used, "%s%d (%s)", i ? ", " : "", (int)KINDS[i]->id,
                             KINDS[i]->name);
}

kvc_error* kvci_kind_check_options(const char* fn, uint32_t i, const kvc_layer_options* l) {
  const kvc_kind* k = kvci_kind_find(l->kind);
  if (!k) {
    char kinds[1024];
    kind_list(kinds, sizeof kinds);
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->layers[%u].kind is %d; valid kinds are %s", fn, i,
                    (int)l->kind, kinds);
  }
  if ((k->traits & KVC_TRAIT_SLIDING) && (l->window < 1 || l->window > INT32_MAX))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].window is %" PRId64 "; a %s layer needs window in [1, 2^31)", fn, i,
                   l->window, k->name);
  if ((k->traits & KVC_TRAIT_STATIC) && (l->max_cache_len < 1 || l->max_cache_len > INT32_MAX))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].max_cache_len is %" PRId64 "; a %s layer needs max_cache_len in [1, 2^31)",
                   fn, i, l->max_cache_len, k->name);
  return k->check_options ? k->check_options(fn, i, l) : NULL;
}

/* ------------------------------------------------------------ files */

/* What holds for every kind: a store exactly on initialized layers of kinds that keep K/V. */
static kvc_error* check_loaded_generic(const char* fn, const char* where, const kvc_layer* l) {
  if (l->initialized && !kvci_layer_is(l, KVC_TRAIT_HAS_KV))
    return kvci_loaded_refuse(fn, where, "initialized", l->initialized, "a %s layer keeps no keys and values",
                              l->desc->name);
  if (!l->initialized && (l->cap || l->start || l->end))
    return kvci_loaded_refuse(fn, where, "the store's capacity", l->cap,
                              "a layer that is not initialized has no store (capacity and region 0)");
  /* The offload code moves stores of the kinds that offload, and only of layers created to take part. */
  if ((l->offloadable && !kvci_layer_is(l, KVC_TRAIT_OFFLOADS)) || (l->offloaded && !l->offloadable))
    return kvci_loaded_refuse(fn, where, "offloadable", l->offloadable,
                              "only layers of kinds that offload take part (a %s layer %s), and only those may be "
                              "offloaded (offloaded is %d)",
                              l->desc->name, kvci_layer_is(l, KVC_TRAIT_OFFLOADS) ? "may" : "may not", l->offloaded);
  return NULL;
}

kvc_error* kvci_kind_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  if (!l->desc->check_loaded)
    return kvci_err(KVC_ERROR_INTERNAL,
                    "%s: the %s kind defines no check_loaded hook, so its layers cannot be read from files "
                    "(core/model/kind.h)",
                    fn, l->desc->name);
  kvc_error* e = check_loaded_generic(fn, where, l);
  return e ? e : l->desc->check_loaded(fn, where, l);
}

/* ------------------------------------------------------ cache-wide hooks */

/* Bit `id` set: a layer of kind id is among first..first+count-1 (lazy layers the call creates included). */
static uint64_t kinds_named(const kvc_cache* c, uint32_t first, uint32_t count) {
  uint64_t mask = 0;
  for (uint64_t i = first; i < (uint64_t)first + count; i++) {
    if (i >= c->num_layers) {
      if (c->lazy) mask |= 1ull << (c->lazy_spec.kind & 63);
      break;
    }
    mask |= 1ull << (c->layers[i]->kind & 63);
  }
  return mask;
}

/* Bit `id` set: kind id has the check_call (prepare 0) or prepare_call (1) hook. The registry is constant, so
   the masks are computed once; a race computes the same values twice. */
static uint64_t kinds_hooked(int prepare) {
  static _Atomic uint64_t masks[2]; /* bit 63: computed (kind ids are below KVC_KIND_SLOTS) */
  uint64_t m = atomic_load_explicit(&masks[prepare], memory_order_relaxed);
  if (m) return m;
  m = 1ull << 63;
  for (size_t k = 0; k < NUM_KINDS; k++)
    if (prepare ? KINDS[k]->prepare_call != NULL : KINDS[k]->check_call != NULL) m |= 1ull << (KINDS[k]->id & 63);
  atomic_store_explicit(&masks[prepare], m, memory_order_relaxed);
  return m;
}

/* Runs the check_call (prepare 0) or prepare_call (1) hooks of the kinds in `named`, in registry order. */
static kvc_error* run_call_hooks(uint64_t named, int prepare, const kvc_call* call, kvc_cache* c, uint32_t first,
                                 uint32_t count, const kvc_tensor* keys, const kvc_update_options* o) {
  for (size_t k = 0; named && k < NUM_KINDS; k++) {
    const kvc_kind* d = KINDS[k];
    if (!(named & (1ull << (d->id & 63)))) continue;
    kvc_error* e = prepare ? d->prepare_call(call, c, first, count) : d->check_call(call, c, first, count, keys, o);
    if (e) return e;
  }
  return NULL;
}

/* Both run twice per update: a per-layer update of a kind without hooks (most) returns after one mask test. */
kvc_error* kvci_kinds_check_call(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count,
                                const kvc_tensor* keys, const kvc_update_options* o) {
  uint64_t named = kinds_named(c, first, count) & kinds_hooked(0) & ~(1ull << 63);
  return named ? run_call_hooks(named, 0, call, c, first, count, keys, o) : NULL;
}

kvc_error* kvci_kinds_prepare_call(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count) {
  uint64_t named = kinds_named(c, first, count) & kinds_hooked(1) & ~(1ull << 63);
  return named ? run_call_hooks(named, 1, call, c, first, count, NULL, NULL) : NULL;
}

uint64_t kvci_kinds_state_bytes(const kvc_cache* c) {
  uint64_t bytes = 0;
  for (size_t k = 0; k < NUM_KINDS; k++)
    if (KINDS[k]->state_bytes) bytes += KINDS[k]->state_bytes(c);
  return bytes;
}

kvc_error* kvci_kinds_clone_state(const kvc_cache* src, kvc_cache* dst) {
  for (size_t k = 0; k < NUM_KINDS; k++) {
    kvc_error* e = KINDS[k]->clone_state ? KINDS[k]->clone_state(src, dst) : NULL;
    if (e) return e; /* what was cloned so far is freed with dst (kvci_kinds_free_state) */
  }
  return NULL;
}

void kvci_kinds_free_state(kvc_cache* c) {
  for (size_t k = 0; k < NUM_KINDS; k++)
    if (KINDS[k]->free_state) KINDS[k]->free_state(c);
}
