/*
 * kvcache/cache.h: creating, cloning and inspecting caches.
 *
 * A cache is an ordered list of layers, each of one kind. The cache classes of
 * Hugging Face transformers (DynamicCache, StaticCache, SlidingWindowCache,
 * HybridCache, HybridChunkedCache, QuantizedCache, OffloadedCache,
 * OffloadedStaticCache, OffloadedHybridCache, SinkCache, MambaCache,
 * HybridMambaAttentionDynamicCache) are presets: a pattern of layer kinds
 * built from a model configuration, exactly as transformers builds them.
 *
 * Option structs grow only at their end. The library accepts every
 * struct_size it has ever published (the sizes are listed next to each
 * struct) and gives fields beyond the caller's struct_size their defaults,
 * so a program compiled against an older header keeps working.
 */
#ifndef KVCACHE_CACHE_H
#define KVCACHE_CACHE_H

#include "kvcache/allocator.h"
#include "kvcache/error.h"
#include "kvcache/quantized.h"
#include "kvcache/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque cache handle. */
typedef struct kvc_cache kvc_cache;

/* ---------------------------------------------------------------- layers */

/*
 * Layer kinds (docs/semantics.md, 'Layer kinds at a glance'). The chunked kinds
 * behave exactly like the sliding kinds with the chunk size as window
 * (transformers uses the same classes); they differ only in how the attention
 * mask is built, which kvc_layer_info.is_chunked reports.
 *
 * The LINEAR kinds hold recurrent state (conv and SSM states, see
 * kvcache/recurrent.h) instead of, or next to, K/V: KVC_LAYER_LINEAR is
 * transformers' LinearAttentionLayer (Mamba, conv, and the empty layers of
 * moe/mlp blocks before transformers 5.23); the four LINEAR_* kinds are its hybrids with an attention
 * part of the named kind (LinearAttentionAnd{Full,SlidingWindow,
 * StaticFull,StaticSlidingWindow}AttentionLayer).
 */
typedef int32_t kvc_layer_kind;
#define KVC_LAYER_DYNAMIC          1 /**< grows without bound; stores every token */
#define KVC_LAYER_DYNAMIC_SLIDING  2 /**< grows up to the window; stores the last window-1 tokens */
#define KVC_LAYER_DYNAMIC_CHUNKED  3 /**< KVC_LAYER_DYNAMIC_SLIDING with window = chunk size */
#define KVC_LAYER_STATIC           4 /**< pre-allocated max_cache_len slots */
#define KVC_LAYER_STATIC_SLIDING   5 /**< pre-allocated min(window, max_cache_len) slots, shifted */
#define KVC_LAYER_STATIC_CHUNKED   6 /**< KVC_LAYER_STATIC_SLIDING with window = chunk size */
#define KVC_LAYER_QUANTIZED        7 /**< full attention over a quantized store plus a full-precision
                                          residual (kvc_quant_options) */
#define KVC_LAYER_SINK             8 /**< SinkCache: the first num_sink_tokens tokens plus the most
                                          recent ones, window tokens in all; kept keys re-rotated */
#define KVC_LAYER_LINEAR           9 /**< recurrent state only: conv and SSM states, no K/V */
#define KVC_LAYER_LINEAR_DYNAMIC        10 /**< recurrent state + KVC_LAYER_DYNAMIC */
#define KVC_LAYER_LINEAR_DYNAMIC_SLIDING 11 /**< recurrent state + KVC_LAYER_DYNAMIC_SLIDING */
#define KVC_LAYER_LINEAR_STATIC         12 /**< recurrent state + KVC_LAYER_STATIC */
#define KVC_LAYER_LINEAR_STATIC_SLIDING 13 /**< recurrent state + KVC_LAYER_STATIC_SLIDING */
#define KVC_LAYER_QUANTIZED_FP8         14 /**< Fp8QuantizedLayer (transformers >= 5.21): float8 e4m3fn with one
                                                scale per tensor, fixed by the layer's first update; no residual.
                                                The first update returns its inputs, later ones the dequantized
                                                history. Runs on every backend (CPU, CUDA, ROCm). Since 0.4. */
#define KVC_LAYER_DUMMY                 15 /**< DummyLayer (transformers >= 5.23): a layer that stores nothing, for
                                                blocks without attention ("moe", "mlp") and layers that reuse
                                                another layer's K/V (kv_sharing_modes "reuse"). update is
                                                UNSUPPORTED; crop, reset and the batch operations leave it as it
                                                is; max_length -1; compileable and croppable; skipped by early
                                                initialization; length queries treat it as a linear layer.
                                                Since 0.5. */
#define KVC_LAYER_DYNAMIC_INDEXED       16 /**< DynamicIndexedLayer (transformers >= 5.11): KVC_LAYER_DYNAMIC plus
                                                the keys of a sparse-attention indexer [batch, seq, index_head_dim]
                                                (kvcache/indexer.h), appended by kvc_cache_update_indexer. Since 0.5. */
#define KVC_LAYER_STATIC_INDEXED        17 /**< StaticIndexedLayer (transformers 5.24): KVC_LAYER_STATIC plus an
                                                indexer buffer [batch, max_cache_len, index_head_dim] written at its
                                                own counter. Since 0.5. */

/**
 * One layer of a custom cache.
 * Published sizes: 24 (0.1), 56 (0.2).
 */
typedef struct kvc_layer_options {
  uint32_t struct_size;     /**< sizeof(kvc_layer_options) */
  kvc_layer_kind kind;      /**< default KVC_LAYER_DYNAMIC */
  int64_t window;           /**< sliding and chunked kinds: window or chunk size, in [1, 2^31);
                                 SINK: window_length, in [num_sink_tokens + 1, 2^31) */
  int64_t max_cache_len;    /**< static kinds: number of slots, in [1, 2^31) */
  /* since 0.2 */
  const kvc_quant_options* quant; /**< QUANTIZED: the quantizer (NULL = KVC_QUANT_OPTIONS_INIT);
                                       borrowed for the call, copied */
  int64_t num_sink_tokens;  /**< SINK: tokens kept at the start, in [0, window) */
  uint32_t num_states;      /**< LINEAR kinds: conv/recurrent state pairs (transformers'
                                 number_of_states); 0 means 1 */
  int64_t conv_kernel_size; /**< LINEAR kinds: the conv state's length K; 0 = take it from the
                                 first conv input's last dimension, as transformers does */
} kvc_layer_options;

#define KVC_LAYER_OPTIONS_INIT {sizeof(kvc_layer_options), KVC_LAYER_DYNAMIC, 0, 0, NULL, 0, 0, 0}
/** Sets `options` to KVC_LAYER_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_layer_options_init(kvc_layer_options* options);

/* ----------------------------------------------------------------- presets */

/* Per-layer attention types of a model configuration (`config.layer_types`). */
typedef int32_t kvc_layer_type;
#define KVC_LAYER_TYPE_FULL_ATTENTION    1 /**< "full_attention" */
#define KVC_LAYER_TYPE_SLIDING_ATTENTION 2 /**< "sliding_attention" */
#define KVC_LAYER_TYPE_CHUNKED_ATTENTION 3 /**< "chunked_attention" */
#define KVC_LAYER_TYPE_LINEAR_ATTENTION  4 /**< "linear_attention", "conv", "mamba" (and "moe", "mlp"
                                                before transformers 5.23): a KVC_LAYER_LINEAR layer */
#define KVC_LAYER_TYPE_HYBRID            5 /**< "hybrid": LINEAR_DYNAMIC / LINEAR_STATIC */
#define KVC_LAYER_TYPE_HYBRID_SLIDING    6 /**< "hybrid_sliding": LINEAR_DYNAMIC_SLIDING /
                                                LINEAR_STATIC_SLIDING */
#define KVC_LAYER_TYPE_DUMMY             7 /**< "dummy", and since transformers 5.23 "moe", "mlp" and every
                                                layer whose config.kv_sharing_modes entry is "reuse": a
                                                KVC_LAYER_DUMMY layer in every preset that takes layer types
                                                (QUANTIZED refuses it, as it refuses every type but full
                                                attention). Since 0.5. */
#define KVC_LAYER_TYPE_INDEXED_ATTENTION 8 /**< "indexed_attention" (DeepSeek V3.2, GLM-MoE-DSA, ...): a
                                                KVC_LAYER_DYNAMIC_INDEXED layer in the dynamic presets, a
                                                KVC_LAYER_STATIC_INDEXED one in the static presets (QUANTIZED
                                                refuses it). Since 0.5. */

/**
 * The parts of a transformers model configuration that decide a cache's
 * layers (docs/semantics.md, 'Layer types and presets'). Zero means "absent"
 * for every field.
 * Published sizes: 40 (0.1), 56 (0.2).
 */
typedef struct kvc_model_config {
  uint32_t struct_size;              /**< sizeof(kvc_model_config) */
  uint32_t num_hidden_layers;        /**< >= 1 */
  const kvc_layer_type* layer_types; /**< NULL, or num_hidden_layers entries; borrowed for the call */
  int64_t sliding_window;            /**< window of sliding layers, or 0 */
  int64_t attention_chunk_size;      /**< chunk size of chunked layers, or 0 */
  uint32_t num_kv_shared_layers;     /**< the last n layers share KV and get no cache */
  uint32_t sliding_window_pattern;   /**< HYBRID presets without layer_types: every n-th layer is
                                          full attention (transformers' default 2 when 0) */
  /* since 0.2 */
  uint32_t number_of_conv_states;    /**< linear layers: state pairs per layer (0 means 1) */
  int64_t conv_kernel;               /**< linear layers: conv state length K (config.conv_kernel);
                                          0 = from the first conv input */
} kvc_model_config;

#define KVC_MODEL_CONFIG_INIT {sizeof(kvc_model_config), 0, NULL, 0, 0, 0, 0, 0, 0}
/** Sets `config` to KVC_MODEL_CONFIG_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_model_config_init(kvc_model_config* config);

/*
 * Presets: how kvc_cache_create builds the layer list.
 *
 * KVC_PRESET_DYNAMIC: DynamicCache. With a config, one dynamic layer per
 *   layer type (full -> DYNAMIC, sliding -> DYNAMIC_SLIDING, chunked ->
 *   DYNAMIC_CHUNKED). Without a config, a lazy cache: no layers until the
 *   first update, then plain dynamic layers created up to the updated index.
 * KVC_PRESET_STATIC: StaticCache(config, max_cache_len): one static layer per
 *   layer type (full -> STATIC, sliding -> STATIC_SLIDING, chunked ->
 *   STATIC_CHUNKED).
 * KVC_PRESET_SLIDING_WINDOW: SlidingWindowCache: every layer STATIC_SLIDING
 *   with config.sliding_window (required).
 * KVC_PRESET_HYBRID: HybridCache (Gemma 2/3): layer_types if given, else
 *   layer i is sliding unless (i + 1) % sliding_window_pattern == 0;
 *   config.sliding_window required.
 * KVC_PRESET_HYBRID_CHUNKED: HybridChunkedCache (Llama 4): layer_types if
 *   given, else the pattern rule with chunked layers; the window is
 *   attention_chunk_size, else sliding_window (one is required).
 * KVC_PRESET_CUSTOM: the layers listed in kvc_cache_options.layers.
 * KVC_PRESET_QUANTIZED: QuantizedCache(backend, config, ...): one QUANTIZED
 *   layer per config.num_hidden_layers (not truncated by
 *   num_kv_shared_layers, as transformers), with options.quant; every layer
 *   type must be full attention.
 * KVC_PRESET_OFFLOADED: OffloadedCache: KVC_PRESET_DYNAMIC with offload
 *   KVC_OFFLOAD_ALL (config optional).
 * KVC_PRESET_OFFLOADED_STATIC: OffloadedStaticCache: KVC_PRESET_STATIC with
 *   offload KVC_OFFLOAD_NON_SLIDING.
 * KVC_PRESET_OFFLOADED_HYBRID: OffloadedHybridCache: KVC_PRESET_HYBRID_CHUNKED
 *   with offload KVC_OFFLOAD_NON_SLIDING.
 * KVC_PRESET_SINK: SinkCache(window_length, num_sink_tokens): SINK layers
 *   with options.window_length and options.num_sink_tokens; without a config
 *   a lazy cache (layers appear as they are updated), with one
 *   num_hidden_layers layers.
 * KVC_PRESET_MAMBA: MambaCache: one LINEAR layer per config layer with
 *   config.conv_kernel and number_of_conv_states.
 * KVC_PRESET_HYBRID_MAMBA: HybridMambaAttentionDynamicCache (Jamba, Bamba):
 *   config.layer_types (required) with LINEAR_ATTENTION for mamba layers and
 *   FULL_ATTENTION for attention layers; this is what DynamicCache(config)
 *   builds for such models in transformers >= 5.5.
 *
 * With KVC_PRESET_DYNAMIC and KVC_PRESET_STATIC, LINEAR_ATTENTION, HYBRID and
 * HYBRID_SLIDING layer types map to the LINEAR kinds as in docs/semantics.md,
 * 'Layer types and presets'.
 *
 * Layer types are derived as transformers does: without layer_types, all
 * layers are sliding if sliding_window is set, else chunked if
 * attention_chunk_size is set, else full; the last num_kv_shared_layers
 * entries are dropped.
 */
typedef int32_t kvc_preset;
#define KVC_PRESET_CUSTOM         0
#define KVC_PRESET_DYNAMIC        1
#define KVC_PRESET_STATIC         2
#define KVC_PRESET_SLIDING_WINDOW 3
#define KVC_PRESET_HYBRID         4
#define KVC_PRESET_HYBRID_CHUNKED 5
#define KVC_PRESET_QUANTIZED      6
#define KVC_PRESET_OFFLOADED      7
#define KVC_PRESET_OFFLOADED_STATIC 8
#define KVC_PRESET_OFFLOADED_HYBRID 9
#define KVC_PRESET_SINK           10
#define KVC_PRESET_MAMBA          11
#define KVC_PRESET_HYBRID_MAMBA   12

/*
 * Offloading (docs/semantics.md, 'Offloading'): layers keep their K/V in the host tier
 * between updates. Before layer i is updated the next offloadable layer is
 * prefetched to the device tier; after it, layer i is offloaded. Linear
 * layers are never offloaded; with KVC_OFFLOAD_NON_SLIDING sliding layers stay
 * on the device (transformers' offload_only_non_sliding=True).
 * KVC_OFFLOAD_DEFAULT is the preset's own choice (NONE, except the OFFLOADED
 * presets).
 */
typedef int32_t kvc_offload;
#define KVC_OFFLOAD_DEFAULT     0
#define KVC_OFFLOAD_NONE        1
#define KVC_OFFLOAD_ALL         2 /**< offload_only_non_sliding=False */
#define KVC_OFFLOAD_NON_SLIDING 3 /**< offload_only_non_sliding=True */

/*
 * Query offset rules (transformers >= 5.14/5.15): where the queries of the
 * next forward start, relative to the cache (kvc_cache_query_offset), and what
 * the mask sizes add.
 *
 * KVC_QUERY_OFFSET_PLAIN: every Cache: the query offset is get_seq_length.
 * KVC_QUERY_OFFSET_MTP: MtpCache (5.14), multi-token prediction: the queries
 *   of depth (layer) k run k+1 tokens ahead, so the query offset and the
 *   kv_offset of the mask sizes add layer + 1.
 * KVC_QUERY_OFFSET_DFLASH: DFlashCache (5.15): the query offset and the
 *   kv_length of the mask sizes add the number of tokens the previous step
 *   accepted (kvc_cache_set_previous_accepted_tokens, 0 at creation).
 */
typedef int32_t kvc_query_offset_rule;
#define KVC_QUERY_OFFSET_PLAIN  0
#define KVC_QUERY_OFFSET_MTP    1
#define KVC_QUERY_OFFSET_DFLASH 2

/**
 * Options of kvc_cache_create.
 * Published sizes: 48 (0.1), 80 (0.2), 88 (0.5), 96 (0.7).
 */
typedef struct kvc_cache_options {
  uint32_t struct_size;                 /**< sizeof(kvc_cache_options) */
  kvc_preset preset;                    /**< default KVC_PRESET_DYNAMIC */
  const kvc_model_config* config;       /**< presets; borrowed for the call */
  int64_t max_cache_len;                /**< STATIC, SLIDING_WINDOW, HYBRID, HYBRID_CHUNKED: >= 1 */
  uint32_t num_layers;                  /**< CUSTOM: number of entries in `layers` */
  const kvc_layer_options* layers;      /**< CUSTOM: borrowed for the call */
  kvc_device device;                    /**< where the cache lives; default {KVC_DEVICE_CPU, 0} */
  /* since 0.2 */
  const kvc_quant_options* quant;       /**< QUANTIZED: NULL = KVC_QUANT_OPTIONS_INIT; borrowed */
  kvc_offload offload;                  /**< any preset; default KVC_OFFLOAD_DEFAULT */
  int64_t window_length;                /**< SINK: window_length, >= num_sink_tokens + 1 */
  int64_t num_sink_tokens;              /**< SINK: num_sink_tokens, >= 0 */
  /* since 0.5 */
  uint32_t transformers_release;        /**< the transformers release whose behaviour to follow where
                                             releases differ, as MAJOR*10000 + MINOR*100 (52300 for
                                             5.23); 0 = the newest kvcache follows (5.24). Below 52400
                                             static layers have no crop (UNSUPPORTED) and report
                                             is_croppable as 5.23 did (docs/transformers-5.24.md) */
  kvc_query_offset_rule query_offset_rule; /**< KVC_QUERY_OFFSET_PLAIN (0), _MTP (MtpCache) or
                                             _DFLASH (DFlashCache): what kvc_cache_query_offset and
                                             kvc_cache_mask_sizes add; any preset */
  /* since 0.7 */
  const kvc_allocator* allocator;       /**< NULL (default): the backend allocates the K/V stores; else
                                             they come from it (kvcache/allocator.h). The struct is
                                             copied; its ctx and functions must outlive the cache and
                                             every cache made from it. Since 0.7. */
} kvc_cache_options;

#define KVC_CACHE_OPTIONS_INIT                                                                 \
  {sizeof(kvc_cache_options), KVC_PRESET_DYNAMIC, NULL, 0, 0, NULL, {KVC_DEVICE_CPU, 0}, NULL, \
   KVC_OFFLOAD_DEFAULT, 0, 0, 0, KVC_QUERY_OFFSET_PLAIN, NULL}
/** Sets `options` to KVC_CACHE_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_cache_options_init(kvc_cache_options* options);

/* --------------------------------------------------------- create/destroy */

/**
 * Creates a cache. `options` is borrowed for the call (NULL = a lazy
 * DynamicCache on the CPU). On success `*out` is a new cache owned by the
 * caller (free it with kvc_cache_destroy); on error `*out` is untouched.
 * Layers allocate their storage lazily, from the first update (or from
 * kvc_cache_early_initialization), taking batch, heads, head_dims and dtype
 * from it.
 * Errors: INVALID_ARGUMENT (bad options or struct_size), NO_DEVICE.
 */
KVC_API kvc_error* kvc_cache_create(const kvc_cache_options* options, kvc_cache** out);

/**
 * Builds a cache from existing per-layer tensors: transformers' legacy tuple
 * format `((k0, v0), (k1, v1), ...)` and the DynamicCache(ddp_cache_data)
 * constructor. The cache is created from `options` as kvc_cache_create does,
 * then layer i receives update(keys[i], values[i]). The tensors are borrowed
 * for the call and copied. On error nothing is created.
 */
KVC_API kvc_error* kvc_cache_create_from_tensors(const kvc_cache_options* options,
                                                 uint32_t num_layers,
                                                 const kvc_tensor* keys,
                                                 const kvc_tensor* values,
                                                 kvc_cache** out);

/**
 * A deep copy of `cache` (same layers, contents, counters and flags), for
 * prefix reuse: prefill once, clone per request. `cache` is borrowed for the
 * call. On success `*out` is owned by the caller.
 */
KVC_API kvc_error* kvc_cache_clone(const kvc_cache* cache, kvc_cache** out);

/** Frees `cache` and all memory it owns; views into it become invalid. Accepts NULL. */
KVC_API void kvc_cache_destroy(kvc_cache* cache);

/* ----------------------------------------------------------------- streams */

/**
 * Binds a device cache to the caller's stream (a cudaStream_t or hipStream_t
 * passed as void*; NULL = the device's default stream, the binding of a new
 * cache). From then on all of the cache's device work (copies, allocations,
 * frees, the offloading tier moves) is issued on that stream in call order,
 * and calls return without waiting for it: returned views may be read by
 * work the caller issues on the same stream next. Work issued before this
 * call, on the old stream, is ordered before anything issued afterwards (an
 * event the new stream waits for; no host synchronisation). Clones, batch
 * splits and stacks inherit the stream of the cache they come from. The
 * stream is borrowed: it must outlive its use by the cache (rebind or
 * destroy the cache before destroying the stream). A CPU cache accepts only
 * NULL. Since 0.3.
 * Errors: INVALID_ARGUMENT (cache NULL, or a non-NULL stream for a CPU
 * cache), OUT_OF_MEMORY (the event could not be made; the cache keeps its
 * stream).
 */
KVC_API kvc_error* kvc_cache_set_stream(kvc_cache* cache, void* stream);

/** The stream `cache` is bound to (NULL: the default stream, or a CPU cache, or cache NULL). Since 0.3. */
KVC_API void* kvc_cache_stream(const kvc_cache* cache);

/** Options of kvc_cache_early_initialization. */
typedef struct kvc_init_options {
  uint32_t struct_size;        /**< sizeof(kvc_init_options) */
  int64_t batch_size;          /**< >= 1 */
  int64_t num_kv_heads;        /**< >= 1; ignored where num_kv_heads_per_layer is given */
  int64_t k_head_dim;          /**< >= 1 */
  int64_t v_head_dim;          /**< 0 = same as k_head_dim */
  kvc_dtype dtype;             /**< required */
  const int64_t* num_kv_heads_per_layer; /**< NULL or one entry per layer; borrowed */
  const int64_t* head_dim_per_layer;     /**< NULL or one entry per layer (keys and values); borrowed */
} kvc_init_options;

#define KVC_INIT_OPTIONS_INIT {sizeof(kvc_init_options), 0, 0, 0, 0, KVC_DTYPE_UNSET, NULL, NULL}
/** Sets `options` to KVC_INIT_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_init_options_init(kvc_init_options* options);

/**
 * Allocates every not-yet-initialized layer now instead of at its first
 * update (transformers' early_initialization): static layers get their zeroed
 * buffers, dynamic layers an empty store. Already initialized layers are
 * skipped. A lazy cache without layers is left as it is.
 */
KVC_API kvc_error* kvc_cache_early_initialization(kvc_cache* cache, const kvc_init_options* options);

/* ----------------------------------------------------------------- queries */

/** Number of layers (for a lazy cache: the layers touched so far). 0 for NULL. */
KVC_API uint32_t kvc_cache_num_layers(const kvc_cache* cache);

/**
 * What a layer is and holds. Fill struct_size before the call; the library
 * writes only the fields that fit in it.
 * Published sizes: 96 (0.1), 128 (0.2).
 */
typedef struct kvc_layer_info {
  uint32_t struct_size;     /**< set by the caller: sizeof(kvc_layer_info) */
  kvc_layer_kind kind;
  int64_t window;           /**< sliding/chunked kinds, else 0 */
  int64_t max_cache_len;    /**< static kinds: the configured max_cache_len, else 0 */
  int64_t capacity;         /**< slots the layer keeps: static max_cache_len, static sliding
                                 min(window, max_cache_len), dynamic sliding window-1, dynamic -1 */
  uint8_t is_initialized;   /**< storage exists (after first update or early initialization) */
  uint8_t is_sliding;       /**< sliding or chunked kind */
  uint8_t is_chunked;       /**< chunked kind: mask with the chunk rule, not the sliding rule */
  uint8_t is_compileable;   /**< static kinds: fixed addresses, no allocation in update */
  uint8_t records_past;     /**< dynamic sliding layer after kvc_cache_activate_past_recording */
  kvc_dtype dtype;          /**< KVC_DTYPE_UNSET until initialized */
  int64_t batch_size;       /**< 0 until initialized */
  int64_t num_kv_heads;
  int64_t k_head_dim;
  int64_t v_head_dim;
  int64_t seq_length;       /**< what kvc_cache_seq_length returns */
  int64_t stored_length;    /**< tokens physically stored (view length) */
  /* since 0.2 */
  uint8_t is_linear;        /**< transformers' is_linear: LINEAR (5.24); with transformers_release
                                 below 52400 also the sliding and static hybrids, as 5.23 */
  uint8_t is_offloaded;     /**< K/V currently in the host tier */
  uint8_t has_previous_state; /**< LINEAR kinds: every state has had its first conv update */
  uint8_t reserved0;
  uint32_t num_states;      /**< LINEAR kinds: state pairs */
  int64_t conv_kernel_size; /**< LINEAR kinds: K, 0 until known */
  int64_t num_sink_tokens;  /**< SINK */
  int64_t quantized_length; /**< QUANTIZED: tokens held by the quantized store (the rest is the
                                 full-precision residual) */
} kvc_layer_info;

/** Fills `*out` (whose struct_size the caller sets). Errors: OUT_OF_RANGE for a bad layer. */
KVC_API kvc_error* kvc_cache_layer_info(const kvc_cache* cache, uint32_t layer, kvc_layer_info* out);

/**
 * Per-layer stored K/V views (transformers' `cache.layers[i].keys/values`):
 * dynamic layers all stored tokens, dynamic sliding the kept tail, static
 * layers the whole buffer including unwritten (zero) slots. Views are owned by
 * the cache and valid until its next mutating call. Errors: OUT_OF_RANGE, and
 * INVALID_STATE for a layer that is not initialized.
 */
KVC_API kvc_error* kvc_cache_layer_view(const kvc_cache* cache, uint32_t layer, kvc_kv* out);

/**
 * get_seq_length(layer): tokens seen (static and sliding layers: the counter
 * of all tokens written; dynamic layers: tokens stored). 0 for a layer index
 * beyond the layers (transformers' lazy-cache rule) or an uninitialized layer.
 */
KVC_API kvc_error* kvc_cache_seq_length(const kvc_cache* cache, uint32_t layer, int64_t* out);

/** Pass as `layer` to ask about the whole cache. */
#define KVC_ALL_LAYERS (-1)

/**
 * get_max_length(layer) (formerly get_max_cache_shape): -1 for unbounded
 * (dynamic), the window for dynamic sliding, max_cache_len for static, and
 * min(window, max_cache_len) for static sliding layers. With KVC_ALL_LAYERS,
 * the maximum over all layers (-1 for a cache without layers). A layer index
 * beyond the layers gives -1.
 */
KVC_API kvc_error* kvc_cache_max_length(const kvc_cache* cache, int32_t layer, int64_t* out);

/**
 * get_usable_length(new_seq_length, layer): the stored length old models use
 * as kv_seq_len: max_length(layer) - new_seq_length when the layer is bounded
 * and seq_length + new_seq_length exceeds it, else seq_length.
 * new_seq_length must be in [0, 2^31).
 */
KVC_API kvc_error* kvc_cache_usable_length(const kvc_cache* cache, int64_t new_seq_length,
                                           uint32_t layer, int64_t* out);

/**
 * get_mask_sizes(query_length, layer): the length and absolute offset of the
 * key range the next update of `query_length` tokens will return, so the
 * attention mask can be built before the update. (query_length, 0) for a
 * layer index beyond the layers. query_length must be in [0, 2^31).
 */
KVC_API kvc_error* kvc_cache_mask_sizes(const kvc_cache* cache, int64_t query_length, uint32_t layer,
                                        int64_t* kv_length, int64_t* kv_offset);

/**
 * The batch size of the initialized static layers (transformers'
 * `Cache.batch_size`): -1 if there are none. Errors: INVALID_STATE if the
 * layers disagree.
 */
KVC_API kvc_error* kvc_cache_batch_size(const kvc_cache* cache, int64_t* out);

/**
 * get_query_offset(layer) (transformers >= 5.14): where the queries of the
 * next forward start: kvc_cache_seq_length(layer) plus what the cache's
 * query_offset_rule adds (layer + 1 for MTP, the previously accepted tokens
 * for DFLASH). Since 0.5.
 */
KVC_API kvc_error* kvc_cache_query_offset(const kvc_cache* cache, uint32_t layer, int64_t* out);

/**
 * DFlashCache.set_previous_accepted_tokens: the number of tokens the previous
 * step accepted, which a KVC_QUERY_OFFSET_DFLASH cache adds to the query
 * offset and to kv_length. Errors: INVALID_ARGUMENT when tokens is outside
 * [0, 2^31), and UNSUPPORTED for a cache of another rule (DFlashCache is the
 * only class with the method). Since 0.5.
 */
KVC_API kvc_error* kvc_cache_set_previous_accepted_tokens(kvc_cache* cache, int64_t tokens);

/**
 * is_croppable (transformers >= 5.17): whether kvc_cache_crop can put `layer`
 * (KVC_ALL_LAYERS: every layer) back as it was, as transformers reports it:
 * dynamic and dynamic sliding layers yes; static layers yes (5.24); static
 * sliding and chunked layers when their configured max_cache_len is at most
 * the window (5.24); quantized layers no (5.24); linear kinds once a conv
 * state is written and while no recurrent state is; sink layers no. With
 * transformers_release below 52400, 5.23's answers: static kinds no,
 * quantized kinds yes. A layer index beyond the layers is OUT_OF_RANGE.
 * Since 0.5.
 */
KVC_API kvc_error* kvc_cache_is_croppable(const kvc_cache* cache, int32_t layer, uint8_t* out);

/**
 * Memory a cache holds. Fill struct_size before the call; the library writes
 * only the fields that fit in it.
 * Published sizes: 24 (0.1), 56 (0.2).
 */
typedef struct kvc_memory_info {
  uint32_t struct_size;     /**< set by the caller: sizeof(kvc_memory_info) */
  uint64_t bytes_reserved;  /**< bytes allocated for K/V storage and scratch, all layers, all tiers */
  uint64_t bytes_used;      /**< bytes of K/V currently stored (the stored views) */
  /* since 0.2 */
  uint64_t bytes_device;    /**< of bytes_reserved: resident in the device tier */
  uint64_t bytes_host;      /**< of bytes_reserved: resident in the host tier (offloaded layers) */
  uint64_t bytes_quantized; /**< QUANTIZED layers: packed codes plus scales and zero points */
  uint64_t bytes_state;     /**< LINEAR kinds: conv and recurrent states */
} kvc_memory_info;

/** Fills `*out` (whose struct_size the caller sets). */
KVC_API kvc_error* kvc_cache_memory(const kvc_cache* cache, kvc_memory_info* out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_CACHE_H */
