//! The kinds, presets and option builders of the C ABI.

use std::marker::PhantomData;

use kvcache_sys as sys;

use crate::dtype::DType;
use crate::tensor::TensorRef;

/// How [`CacheBuilder::build`](crate::CacheBuilder::build) makes the layer
/// list: transformers' cache classes (`kvc_preset`).
///
/// Every preset, with the layers it builds:
///
/// ```
/// use kvcache::{Cache, LayerKind::*, LayerType, ModelConfig, Preset, QuantOptions};
/// let kinds = |cache: &Cache| -> Vec<kvcache::LayerKind> {
///     (0..cache.num_layers()).map(|l| cache.layer_info(l).unwrap().kind).collect()
/// };
/// let gemma = ModelConfig::new(2).sliding_window(4);
/// let llama4 = ModelConfig::new(2).attention_chunk_size(8);
/// let full = ModelConfig::new(2);
/// let jamba = ModelConfig::new(2)
///     .layer_types([LayerType::LinearAttention, LayerType::FullAttention])
///     .conv_kernel(4);
///
/// let build = |preset, config: &ModelConfig| {
///     Cache::builder(preset).config(config.clone()).max_cache_len(16).build()
/// };
/// assert_eq!(kinds(&build(Preset::Dynamic, &full)?), [Dynamic, Dynamic]);
/// assert_eq!(kinds(&build(Preset::Static, &full)?), [Static, Static]);
/// assert_eq!(kinds(&build(Preset::SlidingWindow, &gemma)?), [StaticSliding, StaticSliding]);
/// assert_eq!(kinds(&build(Preset::Hybrid, &gemma)?), [StaticSliding, Static]);
/// assert_eq!(kinds(&build(Preset::HybridChunked, &llama4)?), [StaticChunked, Static]);
/// assert_eq!(kinds(&build(Preset::Offloaded, &full)?), [Dynamic, Dynamic]);
/// assert_eq!(kinds(&build(Preset::OffloadedStatic, &full)?), [Static, Static]);
/// assert_eq!(kinds(&build(Preset::OffloadedHybrid, &llama4)?), [StaticChunked, Static]);
/// assert_eq!(kinds(&build(Preset::Mamba, &full)?), [Linear, Linear]);
/// assert_eq!(kinds(&build(Preset::HybridMamba, &jamba)?), [Linear, Dynamic]);
/// let quantized = Cache::builder(Preset::Quantized)
///     .config(full.clone())
///     .quant(QuantOptions::new().nbits(2))
///     .build()?;
/// assert_eq!(kinds(&quantized), [Quantized, Quantized]);
/// let sink = Cache::builder(Preset::Sink)
///     .config(full.clone())
///     .window_length(64)
///     .num_sink_tokens(4)
///     .build()?;
/// assert_eq!(kinds(&sink), [Sink, Sink]);
/// let custom = Cache::builder(Preset::Custom)
///     .layers([kvcache::LayerOptions::dynamic(), kvcache::LayerOptions::sink(8, 2)])
///     .build()?;
/// assert_eq!(kinds(&custom), [Dynamic, Sink]);
/// # Ok::<(), kvcache::Error>(())
/// ```
///
/// A quantized cache in use: old tokens quantized, the newest kept exact.
///
/// ```
/// use kvcache::{Cache, ModelConfig, Preset, QuantOptions, TensorRef};
/// let mut cache = Cache::builder(Preset::Quantized)
///     .config(ModelConfig::new(1))
///     .quant(QuantOptions::new().q_group_size(4).residual_length(2))
///     .build()?;
/// let shape = [1, 1, 1, 4];
/// for t in 0..6 {
///     let x = [t as f32, t as f32 + 0.25, t as f32 + 0.5, t as f32 + 0.75];
///     let k = TensorRef::new(&x, &shape)?;
///     let kv = cache.update(0, &k, &k)?;
///     assert_eq!(kv.key.token::<f32>(0, 0, t)?, &x); // the newest token is exact
/// }
/// assert_eq!(cache.layer_info(0)?.quantized_length, 4);
/// # Ok::<(), kvcache::Error>(())
/// ```
///
/// A sink cache (StreamingLLM): the first tokens stay, the window slides.
///
/// ```
/// use kvcache::{Cache, Preset, TensorRef};
/// let mut cache = Cache::builder(Preset::Sink).window_length(4).num_sink_tokens(1).build()?;
/// let shape = [1, 1, 1, 1];
/// for t in 0..8 {
///     let x = [t as f32];
///     let k = TensorRef::new(&x, &shape)?;
///     cache.update(0, &k, &k)?;
/// }
/// assert_eq!(cache.layer_view(0)?.key.to_vec::<f32>()?, [0.0, 5.0, 6.0, 7.0]);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Preset {
    /// `KVC_PRESET_CUSTOM`: the layers given with
    /// [`CacheBuilder::layers`](crate::CacheBuilder::layers).
    Custom,
    /// `KVC_PRESET_DYNAMIC`: `DynamicCache`. With a config, one dynamic layer
    /// per layer type (full, sliding, chunked); without one, a lazy cache
    /// whose layers appear as they are updated.
    #[default]
    Dynamic,
    /// `KVC_PRESET_STATIC`: `StaticCache(config, max_cache_len)`.
    Static,
    /// `KVC_PRESET_SLIDING_WINDOW`: `SlidingWindowCache`: every layer static
    /// sliding with `config.sliding_window`.
    SlidingWindow,
    /// `KVC_PRESET_HYBRID`: `HybridCache` (Gemma 2/3).
    Hybrid,
    /// `KVC_PRESET_HYBRID_CHUNKED`: `HybridChunkedCache` (Llama 4).
    HybridChunked,
    /// `KVC_PRESET_QUANTIZED`: `QuantizedCache`: one quantized layer per
    /// config layer, with [`CacheBuilder::quant`](crate::CacheBuilder::quant).
    Quantized,
    /// `KVC_PRESET_OFFLOADED`: `OffloadedCache`: dynamic, every layer offloaded.
    Offloaded,
    /// `KVC_PRESET_OFFLOADED_STATIC`: `OffloadedStaticCache`.
    OffloadedStatic,
    /// `KVC_PRESET_OFFLOADED_HYBRID`: `OffloadedHybridCache`.
    OffloadedHybrid,
    /// `KVC_PRESET_SINK`: `SinkCache(window_length, num_sink_tokens)`.
    Sink,
    /// `KVC_PRESET_MAMBA`: `MambaCache`: one linear (recurrent-state) layer
    /// per config layer.
    Mamba,
    /// `KVC_PRESET_HYBRID_MAMBA`: `HybridMambaAttentionDynamicCache` (Jamba,
    /// Bamba): `config.layer_types` with linear and full attention layers.
    HybridMamba,
}

impl Preset {
    /// The raw `kvc_preset`.
    pub fn raw(self) -> sys::kvc_preset {
        match self {
            Preset::Custom => sys::KVC_PRESET_CUSTOM,
            Preset::Dynamic => sys::KVC_PRESET_DYNAMIC,
            Preset::Static => sys::KVC_PRESET_STATIC,
            Preset::SlidingWindow => sys::KVC_PRESET_SLIDING_WINDOW,
            Preset::Hybrid => sys::KVC_PRESET_HYBRID,
            Preset::HybridChunked => sys::KVC_PRESET_HYBRID_CHUNKED,
            Preset::Quantized => sys::KVC_PRESET_QUANTIZED,
            Preset::Offloaded => sys::KVC_PRESET_OFFLOADED,
            Preset::OffloadedStatic => sys::KVC_PRESET_OFFLOADED_STATIC,
            Preset::OffloadedHybrid => sys::KVC_PRESET_OFFLOADED_HYBRID,
            Preset::Sink => sys::KVC_PRESET_SINK,
            Preset::Mamba => sys::KVC_PRESET_MAMBA,
            Preset::HybridMamba => sys::KVC_PRESET_HYBRID_MAMBA,
        }
    }
}

/// The kind of one layer (`kvc_layer_kind`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LayerKind {
    /// `KVC_LAYER_DYNAMIC`: grows without bound; stores every token.
    #[default]
    Dynamic,
    /// `KVC_LAYER_DYNAMIC_SLIDING`: grows up to the window; keeps the last window-1 tokens.
    DynamicSliding,
    /// `KVC_LAYER_DYNAMIC_CHUNKED`: dynamic sliding with window = chunk size.
    DynamicChunked,
    /// `KVC_LAYER_STATIC`: pre-allocated `max_cache_len` slots.
    Static,
    /// `KVC_LAYER_STATIC_SLIDING`: pre-allocated `min(window, max_cache_len)` slots.
    StaticSliding,
    /// `KVC_LAYER_STATIC_CHUNKED`: static sliding with window = chunk size.
    StaticChunked,
    /// `KVC_LAYER_QUANTIZED`: a quantized store plus a full-precision residual.
    Quantized,
    /// `KVC_LAYER_SINK`: the first `num_sink_tokens` plus the most recent
    /// tokens, `window` in all; kept keys re-rotated.
    Sink,
    /// `KVC_LAYER_LINEAR`: recurrent state only (conv and SSM states).
    Linear,
    /// `KVC_LAYER_LINEAR_DYNAMIC`: recurrent state + dynamic attention.
    LinearDynamic,
    /// `KVC_LAYER_LINEAR_DYNAMIC_SLIDING`: recurrent state + dynamic sliding.
    LinearDynamicSliding,
    /// `KVC_LAYER_LINEAR_STATIC`: recurrent state + static attention.
    LinearStatic,
    /// `KVC_LAYER_LINEAR_STATIC_SLIDING`: recurrent state + static sliding.
    LinearStaticSliding,
    /// `KVC_LAYER_QUANTIZED_FP8`: transformers' `Fp8QuantizedLayer`: float8
    /// e4m3fn with one scale per tensor (keys, values) fixed by the first
    /// update, no residual; CPU caches only.
    QuantizedFp8,
    /// `KVC_LAYER_DUMMY`: transformers' `DummyLayer` (5.23): stores nothing,
    /// for blocks without attention and layers that reuse another layer's
    /// K/V. Updates are refused; every other operation leaves it as it is.
    Dummy,
    /// `KVC_LAYER_DYNAMIC_INDEXED`: transformers' `DynamicIndexedLayer`
    /// (5.11): a dynamic layer plus the keys of a sparse-attention indexer
    /// ([`CacheRef::update_indexer`](crate::CacheRef::update_indexer)).
    DynamicIndexed,
    /// `KVC_LAYER_STATIC_INDEXED`: transformers' `StaticIndexedLayer` (5.24):
    /// a static layer plus an indexer buffer of `max_cache_len` slots.
    StaticIndexed,
    /// A kind this crate does not know (from a newer library).
    Unknown(i32),
}

impl LayerKind {
    /// The raw `kvc_layer_kind`.
    pub fn raw(self) -> sys::kvc_layer_kind {
        match self {
            LayerKind::Dynamic => sys::KVC_LAYER_DYNAMIC,
            LayerKind::DynamicSliding => sys::KVC_LAYER_DYNAMIC_SLIDING,
            LayerKind::DynamicChunked => sys::KVC_LAYER_DYNAMIC_CHUNKED,
            LayerKind::Static => sys::KVC_LAYER_STATIC,
            LayerKind::StaticSliding => sys::KVC_LAYER_STATIC_SLIDING,
            LayerKind::StaticChunked => sys::KVC_LAYER_STATIC_CHUNKED,
            LayerKind::Quantized => sys::KVC_LAYER_QUANTIZED,
            LayerKind::Sink => sys::KVC_LAYER_SINK,
            LayerKind::Linear => sys::KVC_LAYER_LINEAR,
            LayerKind::LinearDynamic => sys::KVC_LAYER_LINEAR_DYNAMIC,
            LayerKind::LinearDynamicSliding => sys::KVC_LAYER_LINEAR_DYNAMIC_SLIDING,
            LayerKind::LinearStatic => sys::KVC_LAYER_LINEAR_STATIC,
            LayerKind::LinearStaticSliding => sys::KVC_LAYER_LINEAR_STATIC_SLIDING,
            LayerKind::QuantizedFp8 => sys::KVC_LAYER_QUANTIZED_FP8,
            LayerKind::Dummy => sys::KVC_LAYER_DUMMY,
            LayerKind::DynamicIndexed => sys::KVC_LAYER_DYNAMIC_INDEXED,
            LayerKind::StaticIndexed => sys::KVC_LAYER_STATIC_INDEXED,
            LayerKind::Unknown(raw) => raw,
        }
    }

    /// The kind of a raw `kvc_layer_kind`.
    pub fn from_raw(raw: sys::kvc_layer_kind) -> LayerKind {
        match raw {
            sys::KVC_LAYER_DYNAMIC => LayerKind::Dynamic,
            sys::KVC_LAYER_DYNAMIC_SLIDING => LayerKind::DynamicSliding,
            sys::KVC_LAYER_DYNAMIC_CHUNKED => LayerKind::DynamicChunked,
            sys::KVC_LAYER_STATIC => LayerKind::Static,
            sys::KVC_LAYER_STATIC_SLIDING => LayerKind::StaticSliding,
            sys::KVC_LAYER_STATIC_CHUNKED => LayerKind::StaticChunked,
            sys::KVC_LAYER_QUANTIZED => LayerKind::Quantized,
            sys::KVC_LAYER_SINK => LayerKind::Sink,
            sys::KVC_LAYER_LINEAR => LayerKind::Linear,
            sys::KVC_LAYER_LINEAR_DYNAMIC => LayerKind::LinearDynamic,
            sys::KVC_LAYER_LINEAR_DYNAMIC_SLIDING => LayerKind::LinearDynamicSliding,
            sys::KVC_LAYER_LINEAR_STATIC => LayerKind::LinearStatic,
            sys::KVC_LAYER_LINEAR_STATIC_SLIDING => LayerKind::LinearStaticSliding,
            sys::KVC_LAYER_QUANTIZED_FP8 => LayerKind::QuantizedFp8,
            sys::KVC_LAYER_DUMMY => LayerKind::Dummy,
            sys::KVC_LAYER_DYNAMIC_INDEXED => LayerKind::DynamicIndexed,
            sys::KVC_LAYER_STATIC_INDEXED => LayerKind::StaticIndexed,
            other => LayerKind::Unknown(other),
        }
    }
}

/// A per-layer attention type of a model configuration (`config.layer_types`,
/// `kvc_layer_type`).
#[non_exhaustive]
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerType {
    /// `"full_attention"`.
    FullAttention = sys::KVC_LAYER_TYPE_FULL_ATTENTION,
    /// `"sliding_attention"`.
    SlidingAttention = sys::KVC_LAYER_TYPE_SLIDING_ATTENTION,
    /// `"chunked_attention"`.
    ChunkedAttention = sys::KVC_LAYER_TYPE_CHUNKED_ATTENTION,
    /// `"linear_attention"`, `"conv"`, `"mamba"` (and `"moe"`, `"mlp"` before
    /// transformers 5.23): a linear layer.
    LinearAttention = sys::KVC_LAYER_TYPE_LINEAR_ATTENTION,
    /// `"hybrid"`: linear state + full attention.
    Hybrid = sys::KVC_LAYER_TYPE_HYBRID,
    /// `"hybrid_sliding"`: linear state + sliding attention.
    HybridSliding = sys::KVC_LAYER_TYPE_HYBRID_SLIDING,
    /// `"dummy"`, and since transformers 5.23 `"moe"`, `"mlp"` and the layers
    /// whose `kv_sharing_modes` entry is `"reuse"`: a [`LayerKind::Dummy`] layer.
    Dummy = sys::KVC_LAYER_TYPE_DUMMY,
    /// `"indexed_attention"` (DeepSeek V3.2, GLM-MoE-DSA): a
    /// [`LayerKind::DynamicIndexed`] layer in the dynamic presets, a
    /// [`LayerKind::StaticIndexed`] one in the static presets.
    IndexedAttention = sys::KVC_LAYER_TYPE_INDEXED_ATTENTION,
}

impl LayerType {
    /// The raw `kvc_layer_type`.
    pub fn raw(self) -> sys::kvc_layer_type {
        self as sys::kvc_layer_type
    }
}

/// Offloading of a cache (`kvc_offload`, transformers' `offloading` and
/// `offload_only_non_sliding`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Offload {
    /// `KVC_OFFLOAD_DEFAULT`: the preset's own choice (off, except the
    /// `Offloaded*` presets).
    #[default]
    Default,
    /// `KVC_OFFLOAD_NONE`: never offload.
    Off,
    /// `KVC_OFFLOAD_ALL`: offload every non-linear layer
    /// (`offload_only_non_sliding=False`).
    All,
    /// `KVC_OFFLOAD_NON_SLIDING`: sliding layers stay on the device
    /// (`offload_only_non_sliding=True`).
    NonSliding,
}

impl Offload {
    /// The raw `kvc_offload`.
    pub fn raw(self) -> sys::kvc_offload {
        match self {
            Offload::Default => sys::KVC_OFFLOAD_DEFAULT,
            Offload::Off => sys::KVC_OFFLOAD_NONE,
            Offload::All => sys::KVC_OFFLOAD_ALL,
            Offload::NonSliding => sys::KVC_OFFLOAD_NON_SLIDING,
        }
    }
}

/// The quantizer of quantized layers (`kvc_quantizer`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Quantizer {
    /// `KVC_QUANTIZER_QUANTO`: optimum-quanto's asymmetric min/max; nbits 2
    /// or 4; axis 0 or -1.
    #[default]
    Quanto,
    /// `KVC_QUANTIZER_HQQ`: Half-Quadratic Quantization; nbits 1, 2, 3, 4 or
    /// 8; axis 0 or 1.
    Hqq,
}

impl Quantizer {
    /// The raw `kvc_quantizer`.
    pub fn raw(self) -> sys::kvc_quantizer {
        match self {
            Quantizer::Quanto => sys::KVC_QUANTIZER_QUANTO,
            Quantizer::Hqq => sys::KVC_QUANTIZER_HQQ,
        }
    }
}

/// When quantized layers quantize (`kvc_quant_mode`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QuantMode {
    /// `KVC_QUANT_MODE_INCREMENTAL`: each token once, when it ages out of the
    /// residual; an update costs the same at any context length.
    #[default]
    Incremental,
    /// `KVC_QUANT_MODE_TRANSFORMERS`: transformers' timeline exactly (5.23):
    /// the prefill returned unquantized, a flush when the residual plus the
    /// new tokens reach `residual_length`, the whole history re-quantized at
    /// each flush; for identical outputs.
    Transformers,
    /// `KVC_QUANT_MODE_COMPACT`: quantized as in incremental mode, but only
    /// the packed groups and the residual are kept; each update dequantizes
    /// the history into a working copy shared by the cache's layers. Saves
    /// memory; a step costs O(context).
    Compact,
}

impl QuantMode {
    /// The raw `kvc_quant_mode`.
    pub fn raw(self) -> sys::kvc_quant_mode {
        match self {
            QuantMode::Incremental => sys::KVC_QUANT_MODE_INCREMENTAL,
            QuantMode::Transformers => sys::KVC_QUANT_MODE_TRANSFORMERS,
            QuantMode::Compact => sys::KVC_QUANT_MODE_COMPACT,
        }
    }
}

/// How a quantized layer quantizes (`kvc_quant_options`). The defaults are
/// transformers': quanto, 4 bits, axes 0, groups of 64, a residual of 128
/// tokens, incremental mode.
///
/// ```
/// use kvcache::{QuantMode, QuantOptions, Quantizer};
/// let q = QuantOptions::new()
///     .quantizer(Quantizer::Hqq)
///     .nbits(8)
///     .axis_key(1)
///     .axis_value(1)
///     .q_group_size(32)
///     .residual_length(16)
///     .mode(QuantMode::Transformers);
/// assert_eq!(q.as_raw().nbits, 8);
/// assert_eq!(QuantOptions::default().as_raw().q_group_size, 64);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantOptions {
    raw: sys::kvc_quant_options,
}

impl QuantOptions {
    /// `KVC_QUANT_OPTIONS_INIT`.
    pub fn new() -> QuantOptions {
        QuantOptions::default()
    }

    setters! {
        /// The quantizer (default quanto).
        quantizer(quantizer: Quantizer) => raw.quantizer = quantizer.raw();

        /// Incremental (default) or transformers' timeline.
        mode(mode: QuantMode) => raw.mode = mode.raw();

        /// Bits per value: quanto 2 or 4; hqq 1, 2, 3, 4 or 8 (default 4).
        nbits(nbits: i32) => raw.nbits;

        /// Grouping axis of keys: quanto 0 or -1; hqq 0 or 1 (default 0).
        axis_key(axis: i32) => raw.axis_key;

        /// Grouping axis of values (as `axis_key`).
        axis_value(axis: i32) => raw.axis_value;

        /// Elements per group, in `[1, 2^31)` (default 64).
        q_group_size(size: i64) => raw.q_group_size;

        /// Full-precision tokens kept, in `[0, 2^31)` (default 128).
        residual_length(tokens: i64) => raw.residual_length;
    }

    /// The raw struct.
    pub fn as_raw(&self) -> &sys::kvc_quant_options {
        &self.raw
    }
}

/// One layer of a [`Preset::Custom`] cache (`kvc_layer_options`).
///
/// ```
/// use kvcache::{Cache, LayerKind, LayerOptions, Preset};
/// let cache = Cache::builder(Preset::Custom)
///     .layer(LayerOptions::dynamic())
///     .layer(LayerOptions::dynamic_sliding(4))
///     .layer(LayerOptions::static_(16))
///     .layer(LayerOptions::static_sliding(4, 16))
///     .build()?;
/// assert_eq!(cache.num_layers(), 4);
/// assert_eq!(cache.layer_info(3)?.kind, LayerKind::StaticSliding);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct LayerOptions {
    raw: sys::kvc_layer_options,
    quant: Option<QuantOptions>,
}

// One constructor per kind, each taking the parameters its kind needs: they
// look alike on purpose (the kinds' traits live in the C registry).
impl LayerOptions {
    /// A layer of `kind` with every parameter at its default.
    pub fn new(kind: LayerKind) -> LayerOptions {
        LayerOptions::default().kind(kind)
    }

    /// `KVC_LAYER_DYNAMIC`.
    pub fn dynamic() -> LayerOptions {
        LayerOptions::new(LayerKind::Dynamic)
    }

    /// `KVC_LAYER_DYNAMIC_SLIDING` with `window`.
    pub fn dynamic_sliding(window: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::DynamicSliding).window(window)
    }

    /// `KVC_LAYER_DYNAMIC_CHUNKED` with `chunk_size`.
    pub fn dynamic_chunked(chunk_size: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::DynamicChunked).window(chunk_size)
    }

    /// `KVC_LAYER_STATIC` with `max_cache_len` slots.
    pub fn static_(max_cache_len: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::Static).max_cache_len(max_cache_len)
    }

    /// `KVC_LAYER_STATIC_SLIDING` with `window` and `max_cache_len`.
    pub fn static_sliding(window: i64, max_cache_len: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::StaticSliding)
            .window(window)
            .max_cache_len(max_cache_len)
    }

    /// `KVC_LAYER_STATIC_CHUNKED` with `chunk_size` and `max_cache_len`.
    pub fn static_chunked(chunk_size: i64, max_cache_len: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::StaticChunked)
            .window(chunk_size)
            .max_cache_len(max_cache_len)
    }

    /// `KVC_LAYER_QUANTIZED` with `quant`.
    pub fn quantized(quant: QuantOptions) -> LayerOptions {
        LayerOptions::new(LayerKind::Quantized).quant(quant)
    }

    /// `KVC_LAYER_QUANTIZED_FP8` (no options).
    pub fn quantized_fp8() -> LayerOptions {
        LayerOptions::new(LayerKind::QuantizedFp8)
    }

    /// `KVC_LAYER_DUMMY`: transformers' `DummyLayer`, a layer that stores nothing.
    pub fn dummy() -> LayerOptions {
        LayerOptions::new(LayerKind::Dummy)
    }

    /// `KVC_LAYER_DYNAMIC_INDEXED`: transformers' `DynamicIndexedLayer`.
    pub fn dynamic_indexed() -> LayerOptions {
        LayerOptions::new(LayerKind::DynamicIndexed)
    }

    /// `KVC_LAYER_STATIC_INDEXED` with `max_cache_len` slots: transformers' `StaticIndexedLayer`.
    pub fn static_indexed(max_cache_len: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::StaticIndexed).max_cache_len(max_cache_len)
    }

    /// `KVC_LAYER_SINK`: `num_sink_tokens` kept at the start, `window_length`
    /// tokens in all.
    pub fn sink(window_length: i64, num_sink_tokens: i64) -> LayerOptions {
        LayerOptions::new(LayerKind::Sink)
            .window(window_length)
            .num_sink_tokens(num_sink_tokens)
    }

    /// `KVC_LAYER_LINEAR` with `num_states` state pairs (0 means 1).
    pub fn linear(num_states: u32) -> LayerOptions {
        LayerOptions::new(LayerKind::Linear).num_states(num_states)
    }

    setters! {
        /// The kind.
        kind(kind: LayerKind) => raw.kind = kind.raw();

        /// Sliding and chunked kinds: window or chunk size, in `[1, 2^31)`;
        /// sink: the window length.
        window(window: i64) => raw.window;

        /// Static kinds: number of slots, in `[1, 2^31)`.
        max_cache_len(max_cache_len: i64) => raw.max_cache_len;

        /// Quantized layers: the quantizer (default `QuantOptions::default()`).
        quant(quant: QuantOptions) => quant = Some(quant);

        /// Sink layers: tokens kept at the start, in `[0, window)`.
        num_sink_tokens(tokens: i64) => raw.num_sink_tokens;

        /// Linear kinds: conv/recurrent state pairs (0 means 1).
        num_states(num_states: u32) => raw.num_states;

        /// Linear kinds: the conv state's length K (0 = from the first conv input).
        conv_kernel_size(k: i64) => raw.conv_kernel_size;
    }

    /// The raw struct, with `quant` pointing into `self` (valid while `self` is
    /// borrowed).
    pub(crate) fn raw_for_call(&self) -> sys::kvc_layer_options {
        let mut raw = self.raw;
        raw.quant = self.quant.as_ref().map_or(std::ptr::null(), |q| q.as_raw());
        raw
    }
}

/// The parts of a transformers model configuration that decide a cache's
/// layers (`kvc_model_config`). Zero means "absent" for every number.
///
/// ```
/// use kvcache::{Cache, LayerKind, LayerType, ModelConfig, Preset};
/// let config = ModelConfig::new(4)
///     .layer_types([
///         LayerType::SlidingAttention,
///         LayerType::FullAttention,
///         LayerType::SlidingAttention,
///         LayerType::FullAttention,
///     ])
///     .sliding_window(512);
/// let cache = Cache::builder(Preset::Dynamic).config(config).build()?;
/// assert_eq!(cache.layer_info(0)?.kind, LayerKind::DynamicSliding);
/// assert_eq!(cache.layer_info(1)?.kind, LayerKind::Dynamic);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ModelConfig {
    raw: sys::kvc_model_config,
    layer_types: Option<Vec<LayerType>>,
}

// SAFETY: the raw struct's only pointer (layer_types) is NULL until `raw_for_call`
// points it at `self.layer_types`; ModelConfig owns its data.
unsafe impl Send for ModelConfig {}
// SAFETY: as above.
unsafe impl Sync for ModelConfig {}

impl ModelConfig {
    /// A configuration of `num_hidden_layers` layers (>= 1).
    pub fn new(num_hidden_layers: u32) -> ModelConfig {
        let mut config = ModelConfig::default();
        config.raw.num_hidden_layers = num_hidden_layers;
        config
    }

    setters! {
        /// `config.layer_types`: one entry per hidden layer.
        layer_types(types: impl IntoIterator<Item = LayerType>) => layer_types = Some(types.into_iter().collect());

        /// `config.sliding_window` (0 = absent).
        sliding_window(window: i64) => raw.sliding_window;

        /// `config.attention_chunk_size` (0 = absent).
        attention_chunk_size(size: i64) => raw.attention_chunk_size;

        /// `config.num_kv_shared_layers`: the last n layers share KV and get no cache.
        num_kv_shared_layers(n: u32) => raw.num_kv_shared_layers;

        /// Hybrid presets without layer types: every n-th layer is full attention
        /// (transformers' default 2 when 0).
        sliding_window_pattern(n: u32) => raw.sliding_window_pattern;

        /// Linear layers: state pairs per layer (`config.number_of_conv_states`; 0 means 1).
        number_of_conv_states(n: u32) => raw.number_of_conv_states;

        /// Linear layers: the conv state length K (`config.conv_kernel`; 0 = from
        /// the first conv input).
        conv_kernel(k: i64) => raw.conv_kernel;
    }

    /// The raw struct, with `layer_types` pointing into `self`.
    pub(crate) fn raw_for_call(&self) -> sys::kvc_model_config {
        let mut raw = self.raw;
        raw.layer_types = self
            .layer_types
            .as_ref()
            // LayerType is repr(i32) with the C values: the slice is a
            // `const kvc_layer_type*` as it is.
            .map_or(std::ptr::null(), |t| {
                t.as_ptr().cast::<sys::kvc_layer_type>()
            });
        raw
    }

    /// Number of entries in `layer_types` (or `None`): the library reads
    /// `num_hidden_layers` of them, so the binding checks the count first.
    pub(crate) fn layer_types_len(&self) -> Option<usize> {
        self.layer_types.as_ref().map(Vec::len)
    }

    /// `num_hidden_layers`.
    pub fn num_hidden_layers(&self) -> u32 {
        self.raw.num_hidden_layers
    }
}

/// Options of [`early_initialization`](crate::CacheRef::early_initialization)
/// (`kvc_init_options`): allocate every layer now instead of at its first
/// update.
///
/// ```
/// use kvcache::{Cache, DType, InitOptions, LayerOptions, Preset};
/// let mut cache = Cache::builder(Preset::Custom)
///     .layer(LayerOptions::static_(8))
///     .layer(LayerOptions::static_(8))
///     .build()?;
/// let heads = [2, 4];
/// cache.early_initialization(
///     &InitOptions::new(1, 2, 16, DType::F32).num_kv_heads_per_layer(&heads),
/// )?;
/// assert_eq!(cache.layer_info(1)?.num_kv_heads, 4);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct InitOptions<'a> {
    raw: sys::kvc_init_options,
    heads_len: Option<usize>,
    dims_len: Option<usize>,
    _borrow: PhantomData<&'a [i64]>,
}

// SAFETY: the raw pointers borrow `&'a [i64]` slices (Send and Sync).
unsafe impl Send for InitOptions<'_> {}
// SAFETY: as above.
unsafe impl Sync for InitOptions<'_> {}

impl<'a> InitOptions<'a> {
    /// `batch_size` rows, `num_kv_heads` heads of `head_dim` (keys and
    /// values), of `dtype`.
    pub fn new(batch_size: i64, num_kv_heads: i64, head_dim: i64, dtype: DType) -> Self {
        let mut raw = sys::kvc_init_options::default();
        raw.batch_size = batch_size;
        raw.num_kv_heads = num_kv_heads;
        raw.k_head_dim = head_dim;
        raw.dtype = dtype.raw();
        InitOptions {
            raw,
            heads_len: None,
            dims_len: None,
            _borrow: PhantomData,
        }
    }

    setters! {
        /// A head dimension of values different from the keys'.
        v_head_dim(v_head_dim: i64) => raw.v_head_dim;
    }

    /// One head count per layer (overrides `num_kv_heads`).
    pub fn num_kv_heads_per_layer(mut self, heads: &'a [i64]) -> Self {
        self.raw.num_kv_heads_per_layer = heads.as_ptr();
        self.heads_len = Some(heads.len());
        self
    }

    /// One head dimension per layer (keys and values).
    pub fn head_dim_per_layer(mut self, head_dims: &'a [i64]) -> Self {
        self.raw.head_dim_per_layer = head_dims.as_ptr();
        self.dims_len = Some(head_dims.len());
        self
    }

    /// The raw struct.
    pub fn as_raw(&self) -> &sys::kvc_init_options {
        &self.raw
    }

    pub(crate) fn per_layer_lens(&self) -> (Option<usize>, Option<usize>) {
        (self.heads_len, self.dims_len)
    }
}

/// Options of [`update_with`](crate::CacheRef::update_with) and
/// [`update_all_with`](crate::CacheRef::update_all_with)
/// (`kvc_update_options`).
///
/// ```
/// use kvcache::{Cache, LayerOptions, Preset, TensorRef, UpdateOptions};
/// // transformers 4.57's explicit cache_position on a static layer.
/// let mut cache = Cache::builder(Preset::Custom).layer(LayerOptions::static_(8)).build()?;
/// let data = [1.0f32; 2 * 4];
/// let shape = [1, 1, 2, 4];
/// let k = TensorRef::new(&data, &shape)?;
/// let positions = [5, 6];
/// cache.update_with(0, &k, &k, &UpdateOptions::new().cache_position(&positions))?;
/// assert_eq!(cache.seq_length(0)?, 7);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct UpdateOptions<'a> {
    raw: sys::kvc_update_options,
    _borrow: PhantomData<&'a TensorRef<'a>>,
}

// SAFETY: the raw pointers borrow `&'a` slices and tensors (Send and Sync).
unsafe impl Send for UpdateOptions<'_> {}
// SAFETY: as above.
unsafe impl Sync for UpdateOptions<'_> {}

impl Default for UpdateOptions<'_> {
    fn default() -> Self {
        UpdateOptions {
            raw: sys::kvc_update_options::default(),
            _borrow: PhantomData,
        }
    }
}

impl<'a> UpdateOptions<'a> {
    /// `KVC_UPDATE_OPTIONS_INIT`: write at the layer's counter, no RoPE.
    pub fn new() -> Self {
        UpdateOptions::default()
    }

    /// Static layers (transformers 4.57): the absolute slots to write, one
    /// per new token.
    pub fn cache_position(mut self, positions: &'a [i64]) -> Self {
        self.raw.cache_position = positions.as_ptr();
        // A length beyond u32 cannot match the new tokens (< 2^31): the
        // library refuses it, naming the lengths.
        self.raw.cache_position_length = u32::try_from(positions.len()).unwrap_or(u32::MAX);
        self
    }

    /// Sink layers: the RoPE cos and sin the model used, `[seq, dim]` (the
    /// whole table) or `[batch, seq, dim]` (this call's positions), so that
    /// kept keys can be re-rotated.
    pub fn rope(mut self, cos: &'a TensorRef<'a>, sin: &'a TensorRef<'a>) -> Self {
        self.raw.rope_cos = cos.as_raw();
        self.raw.rope_sin = sin.as_raw();
        self
    }

    setters! {
        /// Sink layers: only the first `n` key channels are rotary (0 = all).
        partial_rotation_size(n: i64) => raw.partial_rotation_size;
    }

    /// The raw struct.
    pub fn as_raw(&self) -> &sys::kvc_update_options {
        &self.raw
    }
}

/// Options of [`update_conv_state`](crate::CacheRef::update_conv_state)
/// (`kvc_conv_update_options`).
#[derive(Clone, Copy, Debug)]
pub struct ConvUpdateOptions<'a> {
    raw: sys::kvc_conv_update_options,
    _borrow: PhantomData<&'a [i64]>,
}

// SAFETY: the raw pointer borrows a `&'a [i64]` (Send and Sync).
unsafe impl Send for ConvUpdateOptions<'_> {}
// SAFETY: as above.
unsafe impl Sync for ConvUpdateOptions<'_> {}

impl Default for ConvUpdateOptions<'_> {
    fn default() -> Self {
        ConvUpdateOptions {
            raw: sys::kvc_conv_update_options::default(),
            _borrow: PhantomData,
        }
    }
}

impl<'a> ConvUpdateOptions<'a> {
    /// `KVC_CONV_UPDATE_OPTIONS_INIT`: state 0, the current API.
    pub fn new() -> Self {
        ConvUpdateOptions::default()
    }

    setters! {
        /// Which state pair (`< num_states`).
        state_index(index: u32) => raw.state_index;

        /// K for a state not yet allocated when the layer has none configured
        /// (0 = the input's last dimension, as transformers). Once K is known,
        /// any other nonzero value is refused (`InvalidArgument`).
        conv_kernel_size(k: i64) => raw.conv_kernel_size;
    }

    /// The legacy MambaCache API (transformers <= 5.4): roll the state left
    /// by one and write the input's columns at `clamp(position, 0, K-1)`; one
    /// position per input column.
    pub fn cache_position(mut self, positions: &'a [i64]) -> Self {
        self.raw.cache_position = positions.as_ptr();
        self.raw.cache_position_length = u32::try_from(positions.len()).unwrap_or(u32::MAX);
        self
    }

    /// The raw struct.
    pub fn as_raw(&self) -> &sys::kvc_conv_update_options {
        &self.raw
    }
}

// SAFETY: the raw struct's `quant` pointer is always NULL in a stored
// LayerOptions (`to_raw` fills it for the call); everything else is owned.
unsafe impl Send for LayerOptions {}
// SAFETY: as above.
unsafe impl Sync for LayerOptions {}
