/*
 * core/model/kind.h: what a layer kind is to the rest of the core.
 *
 * Every kind's file defines one descriptor (struct kvc_kind) and
 * core/kinds/kinds.c lists them. The rest of the core never asks "which kind is
 * this?": it asks the descriptor for a trait, an option check, the capacity
 * it reports, its per-layer operations (kvc_layer_ops, model/model.h) or its
 * cache-wide hooks. Adding a kind is its own file plus one line in
 * core/kinds/kinds.c (docs/adding-a-layer-kind.md).
 */
#ifndef KVC_CORE_KIND_H
#define KVC_CORE_KIND_H

#include <stdint.h>

#include "kvcache.h"

typedef struct kvc_layer kvc_layer;
typedef struct kvc_layer_ops kvc_layer_ops;
typedef struct kvci_record kvci_record;               /* core/persist/record.h */
typedef struct kvci_record_reader kvci_record_reader;

/*
 * Traits: facts about a kind that generic code acts on. A hybrid (linear
 * state + attention) carries the traits of its attention part too.
 */
enum {
  KVC_TRAIT_HAS_KV = 1u << 0,       /* holds keys and values (a store) */
  KVC_TRAIT_STATIC = 1u << 1,       /* fixed slots from initialization (max_cache_len); compileable */
  KVC_TRAIT_SLIDING = 1u << 2,      /* keeps a window of `window` tokens (is_sliding) */
  KVC_TRAIT_CHUNKED = 1u << 3,      /* the window is an attention chunk (is_chunked) */
  KVC_TRAIT_LINEAR = 1u << 4,       /* conv and recurrent states (the LINEAR family): no early initialization */
  KVC_TRAIT_IS_LINEAR = 1u << 5,    /* transformers' is_linear (every LINEAR kind but the full-attention hybrid) */
  KVC_TRAIT_OFFLOADS = 1u << 6,     /* its K/V moves to the host tier when the cache offloads */
  KVC_TRAIT_RECORDS_PAST = 1u << 7, /* kvc_cache_activate_past_recording switches it on */
  KVC_TRAIT_RESERVABLE = 1u << 8,   /* kvc_cache_reserve pre-sizes its store */
};

/*
 * The call an operation runs for. Behaviour that depends on the caller
 * reads the flags; `fn` is for messages only.
 */
typedef struct kvc_call {
  const char* fn;
  uint32_t flags;
} kvc_call;
enum {
  KVC_CALL_PER_LAYER_ARGS = 1u << 0, /* inputs are keys[i]/values[i] (update_all and friends), not key/value */
  KVC_CALL_FILLS_LAYERS = 1u << 1,   /* builds a cache from tensors: no offloading path (transformers' ddp data) */
};

typedef struct kvc_kind {
  kvc_layer_kind id;
  const char* name; /* in messages: "dynamic sliding" */
  uint32_t traits;
  const kvc_layer_ops* ops;
  /*
   * Checks the kind's own fields of options->layers[index] (NULL: none).
   * The generic check already covered window (SLIDING) and max_cache_len
   * (STATIC).
   */
  kvc_error* (*check_options)(const char* fn, uint32_t index, const kvc_layer_options* spec);
  /* Copies the kind's parameters from a checked spec into a new layer (NULL: none). */
  void (*configure)(kvc_layer* layer, const kvc_layer_options* spec);
  /* kvc_layer_info.capacity: tokens it holds at most, 0 for none, -1 unbounded (NULL: -1). */
  int64_t (*capacity)(const kvc_layer* layer);
  /*
   * transformers' is_croppable of the layer, as the release `release`
   * (MAJOR*10000 + MINOR*100; 0 = the newest) reports it (NULL: always, as
   * DynamicLayer). kvc_cache_is_croppable asks it.
   */
  int (*is_croppable)(const kvc_layer* layer, uint32_t release);
  /*
   * A kind that adds state to another kind's K/V store (the linear hybrids,
   * the indexed kinds): that kind's ops table, which the kvci_store_*
   * entries (KVC_STORE_DELEGATE_OPS, internal.h) call. NULL for the others.
   */
  const kvc_layer_ops* store_ops;

  /*
   * Cache-wide state of the kind (kvc_cache.kind_state[id]): all optional,
   * called only when the update names a layer of the kind.
   *  - check_call: phase 1 of an update of layers first..first+count-1:
   *    rules that depend on the whole call; may create the (empty) state;
   *  - prepare_call: phase 2 (room), after new layers are initialized and
   *    before any store grows; nothing visible may change on error;
   *  - state_bytes / clone_state / free_state: memory accounting, clone and
   *    split, kvc_cache_destroy.
   */
  kvc_error* (*check_call)(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count,
                           const kvc_tensor* keys, const kvc_update_options* opts);
  kvc_error* (*prepare_call)(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count);
  uint64_t (*state_bytes)(const kvc_cache* cache);
  kvc_error* (*clone_state)(const kvc_cache* src, kvc_cache* dst);
  void (*free_state)(kvc_cache* cache);

  /*
   * Cache files (core/persist/, docs/file-format.md). All optional:
   *  - describe: the kind's own fields of a layer spec, the inverse of
   *    configure (quant: storage for the quantizer options it points
   *    spec->quant at), so a file names a layer by the options that rebuild
   *    it and restore compares them;
   *  - save_state / load_state: the cache-wide state (kind_state[id]) as a
   *    record, when there is one; load_state builds it on a new cache whose
   *    layers are loaded (it checks what it reads; the cache is discarded on
   *    error). A kind whose state is only scratch regrown on demand (the
   *    quantized kind's) has neither.
   */
  void (*describe)(const kvc_layer* layer, kvc_layer_options* spec, kvc_quant_options* quant);
  void (*save_state)(const kvc_cache* cache, kvci_record* out);
  kvc_error* (*load_state)(const char* fn, kvc_cache* cache, kvci_record_reader* in);
  /*
   * REQUIRED of every kind (files: kvci_kind_check_loaded refuses to load a
   * layer of a kind without it, and tests/unit/test_internal_kinds_registry.c
   * fails): checks a layer just read from a file (its counters, its store,
   * its extension state and row buffers, all filled from the file) against
   * the geometry the kind itself allocates for the layer's options: every
   * capacity, size, shape and count its operations index memory with. A
   * checksum only proves the bytes are the ones a writer wrote; this hook is
   * what keeps a wrong writer's numbers out of the cache's memory. The
   * generic part (a store only on initialized layers of kinds with K/V, no
   * size that overflows) ran before. `where` names the layer and its
   * section ("layer 3 (LAYR section, part 0)"); a refusal is
   * kvci_loaded_refuse's KVC_ERROR_IO naming the field, its value and the
   * rule. A kind whose state is only its store returns NULL, explicitly.
   */
  kvc_error* (*check_loaded)(const char* fn, const char* where, const kvc_layer* layer);
} kvc_kind;

/* Slots of kvc_cache.kind_state: one per kind id. */
#define KVC_KIND_SLOTS 32

#endif /* KVC_CORE_KIND_H */
