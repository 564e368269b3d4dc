//! Caches: [`Cache`] owns a `kvc_cache`; [`CacheRef`] is the borrowed handle
//! every operation is defined on.

use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use kvcache_sys as sys;

use crate::allocator::{Allocator, create_with};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, ErrorCode, Result, check, invalid_argument};
use crate::options::{
    ConvUpdateOptions, InitOptions, LayerKind, LayerOptions, ModelConfig, Offload, Preset,
    QuantOptions, UpdateOptions,
};
use crate::tensor::{KvView, TensorRef, TensorView, ViewBuffer};
use crate::version::check_version;

/// An owned cache: an ordered list of layers, each of one kind, holding the
/// keys and values of transformer inference (`kvc_cache*`). Dropping it frees
/// the cache and everything it owns (`kvc_cache_destroy`).
///
/// All operations are methods of [`CacheRef`], which `Cache` dereferences to.
///
/// # Threads
///
/// The C rule (`kvcache.h`): *"a cache handle (kvc_cache,
/// kvc_encoder_decoder_cache) must be used by one thread at a time; distinct
/// handles are fully independent and may be used concurrently from different
/// threads. Functions taking a const handle do not modify it, so several
/// threads may call them concurrently as long as no thread mutates that cache
/// meanwhile."*
///
/// So `Cache` is [`Send`]: it can move to another thread, and distinct caches
/// can be used from different threads at once. It is deliberately not
/// [`Sync`]: `&Cache` cannot be shared between threads. Concurrent read-only
/// queries are allowed by the C rule today, but keeping the handle to one
/// thread at a time is the promise the header makes for every handle, and it
/// leaves the library free to do per-handle work (such as ordering queries on
/// a GPU stream) in const functions. Share a cache through a `Mutex`.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<kvcache::Cache>(); // a Cache is not Sync
/// ```
///
/// ```
/// use kvcache::{Cache, TensorRef};
/// let mut cache = Cache::new()?;
/// let worker = std::thread::spawn(move || {
///     let data = [0.0f32; 4];
///     let shape = [1, 1, 1, 4];
///     let k = TensorRef::new(&data, &shape)?;
///     cache.update(0, &k, &k)?;
///     Ok::<_, kvcache::Error>(cache) // moved to the thread and back
/// });
/// let cache = worker.join().unwrap()?;
/// assert_eq!(cache.seq_length(0)?, 1);
/// # Ok::<(), kvcache::Error>(())
/// ```
pub struct Cache {
    raw: NonNull<sys::kvc_cache>,
}

// SAFETY: the C rule quoted above: one thread at a time, handles independent.
// `&mut Cache` gives exclusive access; `Cache` is not Sync.
unsafe impl Send for Cache {}

/// A borrowed cache handle: the type of `&Cache` after deref, and of the two
/// caches inside an [`EncoderDecoderCache`](crate::EncoderDecoderCache).
///
/// It is never owned: you only see `&CacheRef` (read-only queries, views of
/// stored layers) and `&mut CacheRef` (updates and every other operation).
/// Views returned by a method borrow the handle, so they cannot outlive the
/// next mutating call.
///
/// `CacheRef` is [`Send`] but not [`Sync`], following the C rule quoted on
/// [`Cache`]: `&mut CacheRef` can move to another thread, `&CacheRef` cannot.
pub struct CacheRef {
    _opaque: [u8; 0],
    _not_sync: PhantomData<(*mut u8, PhantomPinned)>,
}

// SAFETY: as for Cache.
unsafe impl Send for CacheRef {}

impl Cache {
    /// A lazy `DynamicCache` on the CPU: no layers until the first update,
    /// then plain dynamic layers created up to the updated index
    /// (`kvc_cache_create(NULL, ...)`).
    ///
    /// ```
    /// let cache = kvcache::Cache::new()?;
    /// assert_eq!(cache.num_layers(), 0);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn new() -> Result<Cache> {
        check_version()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: NULL options are documented; `raw` is a valid out-pointer.
        check(unsafe { sys::kvc_cache_create(std::ptr::null(), &mut raw) })?;
        // SAFETY: on success the library wrote a new, owned cache.
        Ok(unsafe { Cache::from_raw(raw) })
    }

    /// A builder for any preset: transformers' cache classes, or a custom
    /// list of layers.
    pub fn builder(preset: Preset) -> CacheBuilder {
        CacheBuilder::new(preset)
    }

    /// Stacks the rows of `splits` in order into one new cache
    /// (`from_batch_splits`, `kvc_cache_from_batch_splits`). The splits must
    /// agree on layer kinds, heads, head dims, dtype and stored lengths; they
    /// are only read.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data: Vec<f32> = (0..3 * 4).map(|x| x as f32).collect();
    /// let shape = [3, 1, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut cache = Cache::new()?;
    /// cache.update(0, &k, &k)?;
    /// let splits = cache.batch_split(3, 2)?; // rows [0, 1] and [2]
    /// assert_eq!(splits.len(), 2);
    /// let stacked = Cache::from_batch_splits(&splits)?;
    /// assert_eq!(stacked.layer_view(0)?.key.to_vec::<f32>()?, data);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn from_batch_splits<S: AsRef<CacheRef>>(splits: &[S]) -> Result<Cache> {
        check_version()?;
        let raw: Vec<*const sys::kvc_cache> = splits.iter().map(|s| s.as_ref().as_ptr()).collect();
        let mut out = std::ptr::null_mut();
        // SAFETY: `raw` holds `len` live handles borrowed for the call.
        check(unsafe { sys::kvc_cache_from_batch_splits(raw.as_ptr(), raw.len(), &mut out) })?;
        // SAFETY: on success a new, owned cache.
        Ok(unsafe { Cache::from_raw(out) })
    }

    /// Takes ownership of a raw handle.
    ///
    /// # Safety
    /// `raw` is a live, non-NULL cache handle that nothing else frees or uses
    /// afterwards.
    pub unsafe fn from_raw(raw: *mut sys::kvc_cache) -> Cache {
        Cache {
            raw: NonNull::new(raw).expect("kvcache: a NULL kvc_cache handle"),
        }
    }

    /// Gives up ownership: the caller must free the handle with
    /// `kvc_cache_destroy`.
    pub fn into_raw(self) -> *mut sys::kvc_cache {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // SAFETY: we own the handle; nothing borrows it any more.
        unsafe { sys::kvc_cache_destroy(self.raw.as_ptr()) }
    }
}

impl Deref for Cache {
    type Target = CacheRef;
    fn deref(&self) -> &CacheRef {
        // SAFETY: a live handle; CacheRef is an opaque zero-sized stand-in for it.
        unsafe { CacheRef::from_ptr(self.raw.as_ptr()) }
    }
}

impl DerefMut for Cache {
    fn deref_mut(&mut self) -> &mut CacheRef {
        // SAFETY: as above, exclusively borrowed.
        unsafe { CacheRef::from_ptr_mut(self.raw.as_ptr()) }
    }
}

impl AsRef<CacheRef> for Cache {
    fn as_ref(&self) -> &CacheRef {
        self
    }
}

impl AsRef<CacheRef> for CacheRef {
    fn as_ref(&self) -> &CacheRef {
        self
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Debug for CacheRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Cache");
        s.field("num_layers", &self.num_layers());
        if let Ok(len) = self.seq_length(0) {
            s.field("seq_length", &len);
        }
        s.finish_non_exhaustive()
    }
}

/// The sizes of the key range the next update of `query_length` tokens will
/// return (`get_mask_sizes`), to build the attention mask before the update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaskSizes {
    /// Number of keys the next update returns.
    pub kv_length: i64,
    /// Absolute position of the first of them.
    pub kv_offset: i64,
}

/// What a layer is and holds (`kvc_layer_info`).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerInfo {
    /// The kind.
    pub kind: LayerKind,
    /// Sliding and chunked kinds: the window or chunk size (sink: the window
    /// length), else 0.
    pub window: i64,
    /// Static kinds: the configured `max_cache_len`, else 0.
    pub max_cache_len: i64,
    /// Slots the layer keeps: static `max_cache_len`, static sliding
    /// `min(window, max_cache_len)`, dynamic sliding `window - 1`, dynamic -1.
    pub capacity: i64,
    /// Storage exists (after the first update or early initialization).
    pub is_initialized: bool,
    /// Sliding or chunked kind.
    pub is_sliding: bool,
    /// Chunked kind: mask with the chunk rule, not the sliding rule.
    pub is_chunked: bool,
    /// Static kinds: fixed addresses, no allocation in update.
    pub is_compileable: bool,
    /// Dynamic sliding layer after `activate_past_recording`.
    pub records_past: bool,
    /// The stored dtype; `None` until initialized.
    pub dtype: Option<DType>,
    /// 0 until initialized.
    pub batch_size: i64,
    /// Heads.
    pub num_kv_heads: i64,
    /// Head dimension of keys.
    pub k_head_dim: i64,
    /// Head dimension of values.
    pub v_head_dim: i64,
    /// What [`seq_length`](CacheRef::seq_length) returns.
    pub seq_length: i64,
    /// Tokens physically stored (the view's length).
    pub stored_length: i64,
    /// Linear kinds (transformers' `is_linear`).
    pub is_linear: bool,
    /// K/V currently in the host tier.
    pub is_offloaded: bool,
    /// Linear kinds: every state has had its first conv update.
    pub has_previous_state: bool,
    /// Linear kinds: state pairs.
    pub num_states: u32,
    /// Linear kinds: the conv state length K, 0 until known.
    pub conv_kernel_size: i64,
    /// Sink layers: tokens kept at the start.
    pub num_sink_tokens: i64,
    /// Quantized layers: tokens held by the quantized store (the rest is the
    /// full-precision residual).
    pub quantized_length: i64,
}

impl LayerInfo {
    fn from_raw(raw: &sys::kvc_layer_info) -> LayerInfo {
        LayerInfo {
            kind: LayerKind::from_raw(raw.kind),
            window: raw.window,
            max_cache_len: raw.max_cache_len,
            capacity: raw.capacity,
            is_initialized: raw.is_initialized != 0,
            is_sliding: raw.is_sliding != 0,
            is_chunked: raw.is_chunked != 0,
            is_compileable: raw.is_compileable != 0,
            records_past: raw.records_past != 0,
            dtype: DType::from_raw(raw.dtype),
            batch_size: raw.batch_size,
            num_kv_heads: raw.num_kv_heads,
            k_head_dim: raw.k_head_dim,
            v_head_dim: raw.v_head_dim,
            seq_length: raw.seq_length,
            stored_length: raw.stored_length,
            is_linear: raw.is_linear != 0,
            is_offloaded: raw.is_offloaded != 0,
            has_previous_state: raw.has_previous_state != 0,
            num_states: raw.num_states,
            conv_kernel_size: raw.conv_kernel_size,
            num_sink_tokens: raw.num_sink_tokens,
            quantized_length: raw.quantized_length,
        }
    }
}

/// Memory a cache holds, in bytes (`kvc_memory_info`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryInfo {
    /// Allocated for K/V storage and scratch, all layers, all tiers.
    pub bytes_reserved: u64,
    /// K/V currently stored (the stored views).
    pub bytes_used: u64,
    /// Of `bytes_reserved`: resident in the device tier.
    pub bytes_device: u64,
    /// Of `bytes_reserved`: resident in the host tier (offloaded layers).
    pub bytes_host: u64,
    /// Quantized layers: packed codes plus scales and zero points.
    pub bytes_quantized: u64,
    /// Linear kinds: conv and recurrent states.
    pub bytes_state: u64,
}

/// The two states of a linear layer's state pair: transformers'
/// `conv_states[i]` and `recurrent_states[i]`. A state not allocated yet is
/// `None`.
#[derive(Clone, Copy, Debug)]
pub struct StateViews<'c> {
    /// `[batch, channels, K]`, time axis last.
    pub conv: Option<TensorView<'c>>,
    /// Batch first, up to 6 dimensions.
    pub recurrent: Option<TensorView<'c>>,
}

fn layer_arg(function: &str, what: &str, value: u32) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::new(
            ErrorCode::OutOfRange,
            format!(
                "{function}: {what} {value} is beyond every layer or state (limit {})",
                i32::MAX
            ),
        )
    })
}

fn counts_match(function: &str, keys: usize, values: usize) -> Result<u32> {
    if keys != values {
        return Err(invalid_argument(format!(
            "{function}: keys has {keys} tensors but values has {values}; one key and one value \
             per layer"
        )));
    }
    u32::try_from(keys).map_err(|_| {
        invalid_argument(format!(
            "{function}: {keys} layers is more than a cache can have"
        ))
    })
}

impl CacheRef {
    /// # Safety
    /// `raw` is a live handle that outlives `'a` and is not used mutably
    /// meanwhile.
    pub(crate) unsafe fn from_ptr<'a>(raw: *const sys::kvc_cache) -> &'a CacheRef {
        // SAFETY: CacheRef is zero-sized with alignment 1; any non-NULL
        // pointer is a valid place for it.
        unsafe { &*(raw as *const CacheRef) }
    }

    /// # Safety
    /// As `from_ptr`, and exclusively borrowed for `'a`.
    pub(crate) unsafe fn from_ptr_mut<'a>(raw: *mut sys::kvc_cache) -> &'a mut CacheRef {
        // SAFETY: as above.
        unsafe { &mut *(raw as *mut CacheRef) }
    }

    /// The raw handle, for calling `kvcache_sys` directly (borrowed).
    pub fn as_ptr(&self) -> *const sys::kvc_cache {
        self as *const CacheRef as *const sys::kvc_cache
    }

    /// The raw handle, for mutating calls through `kvcache_sys` (borrowed).
    pub fn as_mut_ptr(&mut self) -> *mut sys::kvc_cache {
        self as *mut CacheRef as *mut sys::kvc_cache
    }

    // ------------------------------------------------------------ lifecycle

    /// A deep copy (same layers, contents, counters and flags), for prefix
    /// reuse: prefill once, clone per request (`kvc_cache_clone`).
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data = [1.0f32; 4];
    /// let shape = [1, 1, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut prompt = Cache::new()?;
    /// prompt.update(0, &k, &k)?;
    /// let mut request = prompt.try_clone()?;
    /// request.update(0, &k, &k)?;
    /// assert_eq!((prompt.seq_length(0)?, request.seq_length(0)?), (1, 2));
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn try_clone(&self) -> Result<Cache> {
        let mut out = std::ptr::null_mut();
        // SAFETY: a live handle borrowed for the call.
        check(unsafe { sys::kvc_cache_clone(self.as_ptr(), &mut out) })?;
        // SAFETY: on success a new, owned cache.
        Ok(unsafe { Cache::from_raw(out) })
    }

    /// Allocates every layer not yet initialized now instead of at its first
    /// update (transformers' `early_initialization`): static layers get their
    /// zeroed buffers, dynamic layers an empty store.
    pub fn early_initialization(&mut self, options: &InitOptions<'_>) -> Result<()> {
        const FN: &str = "kvc_cache_early_initialization";
        let layers = self.num_layers() as usize;
        let (heads, dims) = options.per_layer_lens();
        for (what, len) in [
            ("num_kv_heads_per_layer", heads),
            ("head_dim_per_layer", dims),
        ] {
            if let Some(len) = len {
                if len < layers {
                    return Err(invalid_argument(format!(
                        "{FN}: options.{what} has {len} entries but the cache has {layers} \
                         layers; give one per layer"
                    )));
                }
            }
        }
        // SAFETY: the per-layer arrays hold at least one entry per layer.
        check(unsafe { sys::kvc_cache_early_initialization(self.as_mut_ptr(), options.as_raw()) })
    }

    // -------------------------------------------------------------- queries

    /// Number of layers (a lazy cache: the layers touched so far).
    pub fn num_layers(&self) -> u32 {
        // SAFETY: a live handle.
        unsafe { sys::kvc_cache_num_layers(self.as_ptr()) }
    }

    /// What layer `layer` is and holds (`kvc_cache_layer_info`).
    ///
    /// ```
    /// # use kvcache::{Cache, LayerKind, ModelConfig, Preset};
    /// let cache = Cache::builder(Preset::Static)
    ///     .config(ModelConfig::new(2))
    ///     .max_cache_len(64)
    ///     .build()?;
    /// let info = cache.layer_info(1)?;
    /// assert_eq!((info.kind, info.capacity, info.is_initialized), (LayerKind::Static, 64, false));
    /// assert_eq!(cache.layer_info(2).unwrap_err().code(), kvcache::ErrorCode::OutOfRange);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn layer_info(&self, layer: u32) -> Result<LayerInfo> {
        let mut raw = sys::kvc_layer_info::default();
        // SAFETY: `raw.struct_size` is set; the library writes within it.
        check(unsafe { sys::kvc_cache_layer_info(self.as_ptr(), layer, &mut raw) })?;
        Ok(LayerInfo::from_raw(&raw))
    }

    /// The stored K/V of layer `layer` (transformers'
    /// `cache.layers[i].keys/values`): dynamic layers every stored token,
    /// dynamic sliding the kept tail, static layers the whole buffer.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom).layer(LayerOptions::static_(4)).build()?;
    /// let data = [1.0f32; 2];
    /// let shape = [1, 1, 1, 2];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// let kv = cache.layer_view(0)?; // the whole static buffer
    /// assert_eq!(kv.key.shape(), &[1, 1, 4, 2]);
    /// assert_eq!(kv.key.as_slice::<f32>()?, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn layer_view(&self, layer: u32) -> Result<KvView<'_>> {
        let mut out = sys::kvc_kv::default();
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_layer_view(self.as_ptr(), layer, &mut out) })?;
        // SAFETY: views stay valid until the next mutating call, which the
        // shared borrow of `self` excludes.
        Ok(unsafe { KvView::from_raw(out) })
    }

    /// `get_seq_length(layer)`: tokens seen (static and sliding layers) or
    /// stored (dynamic layers); 0 for a layer beyond the layers.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom)
    ///     .layers([LayerOptions::dynamic(), LayerOptions::dynamic_sliding(2)])
    ///     .build()?;
    /// let data = [0.0f32; 5];
    /// let shape = [1, 1, 5, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// cache.update(1, &k, &k)?;
    /// // Dynamic layers count stored tokens, sliding layers tokens seen.
    /// assert_eq!((cache.seq_length(0)?, cache.seq_length(1)?), (5, 5));
    /// assert_eq!(cache.layer_info(1)?.stored_length, 1);
    /// assert_eq!(cache.seq_length(7)?, 0);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn seq_length(&self, layer: u32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_seq_length(self.as_ptr(), layer, &mut out) })?;
        Ok(out)
    }

    /// `get_max_length(layer)`: -1 for unbounded (dynamic), the window for
    /// dynamic sliding, `max_cache_len` for static and `min(window,
    /// max_cache_len)` for static sliding layers; -1 beyond the layers.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset};
    /// let cache = Cache::builder(Preset::Custom)
    ///     .layers([
    ///         LayerOptions::dynamic(),
    ///         LayerOptions::dynamic_sliding(8),
    ///         LayerOptions::static_(64),
    ///         LayerOptions::static_sliding(16, 64),
    ///     ])
    ///     .build()?;
    /// let lengths: Vec<i64> = (0..5).map(|l| cache.max_length(l)).collect::<Result<_, _>>()?;
    /// assert_eq!(lengths, [-1, 8, 64, 16, -1]);
    /// assert_eq!(cache.max_length_all()?, 64);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn max_length(&self, layer: u32) -> Result<i64> {
        let Ok(layer) = i32::try_from(layer) else {
            return Ok(-1); // beyond every layer
        };
        self.max_length_raw(layer)
    }

    /// `get_max_length()` of the whole cache: the maximum over all layers
    /// (`KVC_ALL_LAYERS`; -1 for a cache without layers).
    pub fn max_length_all(&self) -> Result<i64> {
        self.max_length_raw(sys::KVC_ALL_LAYERS)
    }

    fn max_length_raw(&self, layer: i32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_max_length(self.as_ptr(), layer, &mut out) })?;
        Ok(out)
    }

    /// `get_usable_length(new_seq_length, layer)`: the stored length old
    /// models use as `kv_seq_len`. `new_seq_length` in `[0, 2^31)`.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom).layer(LayerOptions::static_(8)).build()?;
    /// let data = [0.0f32; 6];
    /// let shape = [1, 1, 6, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// assert_eq!(cache.usable_length(2, 0)?, 6); // 6 + 2 fits in 8
    /// assert_eq!(cache.usable_length(3, 0)?, 5); // 8 - 3
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn usable_length(&self, new_seq_length: i64, layer: u32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe {
            sys::kvc_cache_usable_length(self.as_ptr(), new_seq_length, layer, &mut out)
        })?;
        Ok(out)
    }

    /// `get_mask_sizes(query_length, layer)`: the length and absolute offset
    /// of the keys the next update of `query_length` tokens returns.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom)
    ///     .layer(LayerOptions::dynamic_sliding(4))
    ///     .build()?;
    /// let data = [0.0f32; 6 * 2];
    /// let shape = [1, 1, 6, 2];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?; // a 6-token prompt; the layer keeps 3
    /// let sizes = cache.mask_sizes(1, 0)?;
    /// assert_eq!((sizes.kv_length, sizes.kv_offset), (4, 3));
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn mask_sizes(&self, query_length: i64, layer: u32) -> Result<MaskSizes> {
        let (mut kv_length, mut kv_offset) = (0, 0);
        // SAFETY: a live handle and valid out-pointers.
        check(unsafe {
            sys::kvc_cache_mask_sizes(
                self.as_ptr(),
                query_length,
                layer,
                &mut kv_length,
                &mut kv_offset,
            )
        })?;
        Ok(MaskSizes {
            kv_length,
            kv_offset,
        })
    }

    /// The batch size of the initialized static layers (transformers'
    /// `Cache.batch_size`), or `None` if there are none.
    ///
    /// ```
    /// # use kvcache::{Cache, DType, InitOptions, ModelConfig, Preset};
    /// let mut cache = Cache::builder(Preset::Static)
    ///     .config(ModelConfig::new(2))
    ///     .max_cache_len(16)
    ///     .build()?;
    /// assert_eq!(cache.batch_size()?, None);
    /// cache.early_initialization(&InitOptions::new(4, 2, 8, DType::BF16))?;
    /// assert_eq!(cache.batch_size()?, Some(4));
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn batch_size(&self) -> Result<Option<i64>> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_batch_size(self.as_ptr(), &mut out) })?;
        Ok((out >= 0).then_some(out))
    }

    /// `get_query_offset(layer)` (`kvc_cache_query_offset`, transformers 5.14): where the next
    /// forward's queries start: `seq_length(layer)` plus what the cache's [`QueryOffsetRule`] adds.
    pub fn query_offset(&self, layer: u32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_query_offset(self.as_ptr(), layer, &mut out) })?;
        Ok(out)
    }

    /// `is_croppable` of one layer, or of every layer for `None` (`kvc_cache_is_croppable`,
    /// transformers 5.17; 5.24's answers unless the cache follows an older release).
    pub fn is_croppable(&self, layer: Option<u32>) -> Result<bool> {
        let layer = match layer {
            None => sys::KVC_ALL_LAYERS,
            Some(i) => i32::try_from(i).map_err(|_| {
                invalid_argument(format!(
                    "kvc_cache_is_croppable: layer is {i}; it must be below 2^31"
                ))
            })?,
        };
        let mut out = 0u8;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_is_croppable(self.as_ptr(), layer, &mut out) })?;
        Ok(out != 0)
    }

    /// `DFlashCache.set_previous_accepted_tokens` (`kvc_cache_set_previous_accepted_tokens`):
    /// only on a cache built with [`QueryOffsetRule::DFlash`].
    pub fn set_previous_accepted_tokens(&mut self, tokens: i64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::kvc_cache_set_previous_accepted_tokens(self.as_mut_ptr(), tokens) })
    }

    /// The memory the cache holds (`kvc_cache_memory`).
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef, f16};
    /// let mut cache = Cache::builder(Preset::Custom).layer(LayerOptions::static_(10)).build()?;
    /// let data = [f16::ONE; 4];
    /// let shape = [1, 1, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// let memory = cache.memory()?;
    /// assert_eq!(memory.bytes_reserved, 2 * 10 * 4 * 2); // K and V, 10 slots of 4 halves
    /// assert_eq!(memory.bytes_used, memory.bytes_reserved); // a static view is the whole buffer
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn memory(&self) -> Result<MemoryInfo> {
        let mut raw = sys::kvc_memory_info::default();
        // SAFETY: `raw.struct_size` is set; the library writes within it.
        check(unsafe { sys::kvc_cache_memory(self.as_ptr(), &mut raw) })?;
        Ok(MemoryInfo {
            bytes_reserved: raw.bytes_reserved,
            bytes_used: raw.bytes_used,
            bytes_device: raw.bytes_device,
            bytes_host: raw.bytes_host,
            bytes_quantized: raw.bytes_quantized,
            bytes_state: raw.bytes_state,
        })
    }

    // ------------------------------------------------------------- updates

    /// `update(key, value, layer)`: stores the new tokens of one layer and
    /// returns the keys and values attention must use now (zero-copy views,
    /// valid while `self` stays borrowed).
    ///
    /// `key` is `[batch, heads, new, k_head_dim]`, `value` `[batch, heads,
    /// new, v_head_dim]`, of the cache's dtype and device; they are copied.
    /// The first update of a layer fixes its batch, heads, head dims and
    /// dtype. On error nothing has changed.
    ///
    /// ```
    /// use kvcache::{Cache, TensorRef, bf16};
    /// let mut cache = Cache::new()?;
    /// let data = vec![bf16::from_f32(0.25); 8 * 64];
    /// let shape = [1, 8, 1, 64];
    /// let k = TensorRef::new(&data, &shape)?;
    /// for step in 1..=3 {
    ///     let kv = cache.update(0, &k, &k)?;
    ///     assert_eq!(kv.key.shape()[2], step);
    /// }
    /// // A tensor of another dtype is refused, and changes nothing.
    /// let other = vec![0.25f32; 8 * 64];
    /// let wrong = TensorRef::new(&other, &shape)?;
    /// let err = cache.update(0, &wrong, &wrong).unwrap_err();
    /// assert_eq!(err.code(), kvcache::ErrorCode::DtypeMismatch);
    /// assert_eq!(cache.seq_length(0)?, 3);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    #[inline]
    pub fn update(
        &mut self,
        layer: u32,
        key: &TensorRef<'_>,
        value: &TensorRef<'_>,
    ) -> Result<KvView<'_>> {
        self.update_raw(layer, key, value, std::ptr::null())
    }

    /// [`update`](Self::update) with options: static layers' explicit
    /// `cache_position`, sink layers' RoPE tables.
    #[inline]
    pub fn update_with(
        &mut self,
        layer: u32,
        key: &TensorRef<'_>,
        value: &TensorRef<'_>,
        options: &UpdateOptions<'_>,
    ) -> Result<KvView<'_>> {
        self.update_raw(layer, key, value, options.as_raw())
    }

    #[inline]
    fn update_raw(
        &mut self,
        layer: u32,
        key: &TensorRef<'_>,
        value: &TensorRef<'_>,
        options: *const sys::kvc_update_options,
    ) -> Result<KvView<'_>> {
        let mut out = std::mem::MaybeUninit::<sys::kvc_kv>::uninit();
        // SAFETY: a live, exclusively borrowed handle; inputs borrowed for the call.
        check(unsafe {
            sys::kvc_cache_update(
                self.as_mut_ptr(),
                layer,
                key.as_raw(),
                value.as_raw(),
                options,
                out.as_mut_ptr(),
            )
        })?;
        // SAFETY: on success the library wrote both views; they are valid until
        // the next mutating call, excluded by the borrow.
        Ok(unsafe { KvView::from_raw(out.assume_init()) })
    }

    /// One decode or prefill step for layers `0..keys.len()` in one call:
    /// the same as [`update`](Self::update) for each layer in order, but
    /// validated as a whole first, so either every layer is updated or none
    /// is. The views are written into `views` (reused from step to step, so a
    /// decode step allocates nothing) and returned.
    ///
    /// ```
    /// use kvcache::{Cache, TensorRef, ViewBuffer};
    /// let mut cache = Cache::new()?;
    /// let data = [0.5f32; 2 * 16];
    /// let shape = [1, 2, 1, 16];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let (keys, values) = ([k; 4], [k; 4]); // 4 layers
    /// let mut views = ViewBuffer::new();
    /// for _ in 0..3 {
    ///     let kv = cache.update_all(&keys, &values, &mut views)?;
    ///     assert_eq!(kv.len(), 4);
    /// }
    /// assert_eq!(cache.seq_length(3)?, 3);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    #[inline]
    pub fn update_all<'s>(
        &'s mut self,
        keys: &[TensorRef<'_>],
        values: &[TensorRef<'_>],
        views: &'s mut ViewBuffer,
    ) -> Result<&'s [KvView<'s>]> {
        self.update_all_raw(keys, values, std::ptr::null(), views)
    }

    /// [`update_all`](Self::update_all) with options (applied to every layer).
    ///
    /// ```
    /// # use kvcache::{Cache, ModelConfig, Preset, TensorRef, UpdateOptions, ViewBuffer};
    /// let mut cache = Cache::builder(Preset::Static)
    ///     .config(ModelConfig::new(2))
    ///     .max_cache_len(8)
    ///     .build()?;
    /// let data = [1.0f32; 4];
    /// let shape = [1, 1, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut views = ViewBuffer::new();
    /// let at = UpdateOptions::new().cache_position(&[3]);
    /// cache.update_all_with(&[k, k], &[k, k], &at, &mut views)?;
    /// assert_eq!(cache.seq_length(1)?, 4);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    #[inline]
    pub fn update_all_with<'s>(
        &'s mut self,
        keys: &[TensorRef<'_>],
        values: &[TensorRef<'_>],
        options: &UpdateOptions<'_>,
        views: &'s mut ViewBuffer,
    ) -> Result<&'s [KvView<'s>]> {
        self.update_all_raw(keys, values, options.as_raw(), views)
    }

    #[inline]
    fn update_all_raw<'s>(
        &'s mut self,
        keys: &[TensorRef<'_>],
        values: &[TensorRef<'_>],
        options: *const sys::kvc_update_options,
        views: &'s mut ViewBuffer,
    ) -> Result<&'s [KvView<'s>]> {
        let layers = counts_match("kvc_cache_update_all", keys.len(), values.len())?;
        let out = views.slots(keys.len());
        // SAFETY: TensorRef is repr(transparent) over kvc_tensor, so the slices
        // are `layers` consecutive kvc_tensor; `out` has room for `layers` views.
        check(unsafe {
            sys::kvc_cache_update_all(
                self.as_mut_ptr(),
                layers,
                keys.as_ptr().cast(),
                values.as_ptr().cast(),
                options,
                out,
            )
        })?;
        // SAFETY: the views are valid until the next mutating call, excluded
        // by the borrow of `self` for 's.
        Ok(unsafe { views.views() })
    }

    // ----------------------------------------------------------- operations

    /// `crop(tokens)` on every layer: `tokens < 0` removes the last
    /// `|tokens|` tokens; `0` is a no-op on full-attention layers (a
    /// recording sliding layer drops its extra tokens); `tokens > 0` keeps
    /// the first `tokens` (legacy). Static layers: `Unsupported`; sliding
    /// layers past their window: `InvalidState` unless recording.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut cache = Cache::new()?;
    /// let data = [0.0f32; 5 * 2];
    /// let shape = [1, 1, 5, 2];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// cache.crop(-2)?; // speculative tokens rejected
    /// assert_eq!(cache.seq_length(0)?, 3);
    /// cache.crop(1)?; // legacy absolute length
    /// assert_eq!(cache.seq_length(0)?, 1);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn crop(&mut self, tokens: i64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_crop(self.as_mut_ptr(), tokens) })
    }

    /// `activate_past_recording()`: sliding layers keep every token from now
    /// on, so that assisted decoding can roll back rejected tokens with a
    /// negative crop; each crop trims the layer back to its window.
    ///
    /// ```
    /// # use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom)
    ///     .layer(LayerOptions::dynamic_sliding(4))
    ///     .build()?;
    /// cache.activate_past_recording()?;
    /// let data = [0.0f32; 6 * 2];
    /// let shape = [1, 1, 6, 2];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// assert!(cache.layer_info(0)?.records_past);
    /// cache.crop(-2)?; // allowed while recording, even past the window
    /// assert_eq!(cache.seq_length(0)?, 4);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn activate_past_recording(&mut self) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_activate_past_recording(self.as_mut_ptr()) })
    }

    /// `reorder_cache(beam_idx)`: row `b` of every non-empty layer becomes
    /// former row `beam_idx[b]` (beam search). Only rows that change are
    /// copied.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data = [0.0f32, 1.0, 2.0]; // three beams, one value each
    /// let shape = [3, 1, 1, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut cache = Cache::new()?;
    /// cache.update(0, &k, &k)?;
    /// cache.reorder(&[2, 2, 0])?;
    /// assert_eq!(cache.layer_view(0)?.key.to_vec::<f32>()?, [2.0, 2.0, 0.0]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn reorder(&mut self, beam_idx: &[i64]) -> Result<()> {
        // SAFETY: `beam_idx` has `len` entries, borrowed for the call.
        check(unsafe {
            sys::kvc_cache_reorder(self.as_mut_ptr(), beam_idx.as_ptr(), beam_idx.len())
        })
    }

    /// `batch_repeat_interleave(repeats)`: row `i` becomes rows
    /// `i*repeats .. i*repeats+repeats-1` (contrastive search). Dynamic kinds
    /// only.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data = [1.0f32, 2.0];
    /// let shape = [2, 1, 1, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut cache = Cache::new()?;
    /// cache.update(0, &k, &k)?;
    /// cache.batch_repeat_interleave(2)?;
    /// assert_eq!(cache.layer_view(0)?.key.to_vec::<f32>()?, [1.0, 1.0, 2.0, 2.0]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn batch_repeat_interleave(&mut self, repeats: i64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_batch_repeat_interleave(self.as_mut_ptr(), repeats) })
    }

    /// `batch_select_indices(indices)`: keeps rows `indices` in that order.
    /// Dynamic kinds only.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data = [1.0f32, 2.0, 3.0];
    /// let shape = [3, 1, 1, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut cache = Cache::new()?;
    /// cache.update(0, &k, &k)?;
    /// cache.batch_select_indices(&[2, 0])?;
    /// assert_eq!(cache.layer_view(0)?.key.to_vec::<f32>()?, [3.0, 1.0]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn batch_select_indices(&mut self, indices: &[i64]) -> Result<()> {
        // SAFETY: `indices` has `len` entries, borrowed for the call.
        check(unsafe {
            sys::kvc_cache_batch_select_indices(self.as_mut_ptr(), indices.as_ptr(), indices.len())
        })
    }

    /// The largest batch size over the initialized layers (0 if none).
    fn largest_batch(&self) -> i64 {
        (0..self.num_layers())
            .filter_map(|layer| self.layer_info(layer).ok())
            .map(|info| info.batch_size)
            .max()
            .unwrap_or(0)
    }

    /// `batch_split(full_batch_size, split_size)`: new caches holding rows
    /// `[i, i + split_size)`, with the same layers, counters and flags.
    /// `full_batch_size` must be the cache's batch size.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let data = [0.0f32, 1.0, 2.0, 3.0, 4.0];
    /// let shape = [5, 1, 1, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let mut cache = Cache::new()?;
    /// cache.update(0, &k, &k)?;
    /// let splits = cache.batch_split(5, 2)?;
    /// let rows: Vec<i64> = splits.iter().map(|s| s.layer_info(0).map(|i| i.batch_size)).collect::<Result<_, _>>()?;
    /// assert_eq!(rows, [2, 2, 1]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn batch_split(&self, full_batch_size: i64, split_size: i64) -> Result<Vec<Cache>> {
        let capacity = split_capacity(full_batch_size, split_size, self.largest_batch());
        let mut out = vec![std::ptr::null_mut(); capacity];
        let mut count = 0usize;
        // SAFETY: `out` has room for `capacity` handles.
        check(unsafe {
            sys::kvc_cache_batch_split(
                self.as_ptr(),
                full_batch_size,
                split_size,
                out.as_mut_ptr(),
                capacity,
                &mut count,
            )
        })?;
        // SAFETY: on success `count` new, owned caches.
        Ok(out[..count]
            .iter()
            .map(|&raw| unsafe { Cache::from_raw(raw) })
            .collect())
    }

    /// Reserves room for `tokens` tokens in every dynamic full-attention
    /// layer, like `Vec::reserve`: updates up to that length neither allocate
    /// nor copy history. Never shrinks. `tokens` in `[0, 2^31)`.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut cache = Cache::new()?;
    /// cache.reserve(1024)?;
    /// let data = [0.0f32; 8];
    /// let shape = [1, 1, 1, 8];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// let reserved = cache.memory()?.bytes_reserved;
    /// assert_eq!(reserved, 2 * 1024 * 8 * 4); // K and V, exactly what was asked for
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn reserve(&mut self, tokens: i64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_reserve(self.as_mut_ptr(), tokens) })
    }

    /// Binds a device cache to a CUDA or HIP stream (`kvc_cache_set_stream`):
    /// from then on all of the cache's device work is issued on `stream`, in
    /// call order, without waiting for it; work issued before, on the old
    /// stream, is ordered before anything issued afterwards. A null pointer is
    /// the default stream; a CPU cache accepts only that.
    ///
    /// # Safety
    ///
    /// `stream` must be null or a live `cudaStream_t` / `hipStream_t` of the
    /// cache's device, and must stay alive until the cache is rebound or
    /// dropped: the cache issues work on it from later calls.
    ///
    /// ```
    /// # use kvcache::{Cache, ErrorCode};
    /// let mut cache = Cache::new()?;
    /// // SAFETY: null is the default stream.
    /// unsafe { cache.set_stream(std::ptr::null_mut())? };
    /// // A CPU cache has no streams: anything else is refused, and nothing changes.
    /// let err = unsafe { cache.set_stream(0x1234 as *mut std::ffi::c_void) }.unwrap_err();
    /// assert_eq!(err.code(), ErrorCode::InvalidArgument);
    /// assert!(cache.stream().is_null());
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub unsafe fn set_stream(&mut self, stream: *mut std::ffi::c_void) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle; the caller vouches for the stream.
        check(unsafe { sys::kvc_cache_set_stream(self.as_mut_ptr(), stream) })
    }

    /// The stream the cache is bound to (`kvc_cache_stream`): null for the
    /// default stream and for CPU caches.
    pub fn stream(&self) -> *mut std::ffi::c_void {
        // SAFETY: a live handle; the call only reads it.
        unsafe { sys::kvc_cache_stream(self.as_ptr()) }
    }

    /// `reset()`: every layer becomes empty (static buffers zeroed, counters
    /// 0; dynamic layers keep their storage for reuse).
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut cache = Cache::new()?;
    /// let data = [1.0f32; 3];
    /// let shape = [1, 1, 3, 1];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// cache.reset()?; // a new request on the same storage
    /// assert_eq!(cache.seq_length(0)?, 0);
    /// assert!(cache.layer_info(0)?.is_initialized);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_reset(self.as_mut_ptr()) })
    }

    // ------------------------------------------------------------- offload

    /// Moves layer `layer`'s K/V to the host tier. A layer already there, not
    /// initialized, or of a kind whose K/V never moves (the linear kinds but
    /// [`LayerKind::LinearDynamic`], quantized and sink layers) is left as it
    /// is. Caches created with offloading do this themselves in `update`.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut cache = Cache::new()?;
    /// let data = [1.0f32; 8];
    /// let shape = [1, 2, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// cache.update(0, &k, &k)?;
    /// cache.offload(0)?;
    /// assert!(cache.layer_info(0)?.is_offloaded);
    /// assert!(cache.memory()?.bytes_host > 0);
    /// cache.prefetch(0)?;
    /// assert!(!cache.layer_info(0)?.is_offloaded);
    /// assert_eq!(cache.layer_view(0)?.key.to_vec::<f32>()?, data);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn offload(&mut self, layer: u32) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_offload(self.as_mut_ptr(), layer) })
    }

    /// Moves layer `layer`'s K/V back to the device tier.
    pub fn prefetch(&mut self, layer: u32) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_cache_prefetch(self.as_mut_ptr(), layer) })
    }

    // --------------------------------------------------- recurrent states

    /// `update_conv_state(x, layer, state_idx)` on a linear layer: `x` is
    /// `[batch, channels, n]`. The first call returns `x` left-padded with
    /// zeros to K columns; later calls return the stored K columns followed
    /// by `x` (no padding while recording past). The state keeps the last K
    /// columns; the first call after a reset is a first call again. With
    /// [`ConvUpdateOptions::cache_position`] the legacy MambaCache rule applies.
    ///
    /// ```
    /// use kvcache::{Cache, ConvUpdateOptions, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom)
    ///     .layer(LayerOptions::linear(1).conv_kernel_size(4))
    ///     .build()?;
    /// let x = [1.0f32, 2.0]; // [batch 1, channels 1, 2 columns]
    /// let shape = [1, 1, 2];
    /// let conv = TensorRef::new(&x, &shape)?;
    /// let full = cache.update_conv_state(0, &conv, &ConvUpdateOptions::new())?;
    /// assert_eq!(full.to_vec::<f32>()?, [0.0, 0.0, 1.0, 2.0]); // left-padded to K
    /// let y = [3.0f32];
    /// let one = [1, 1, 1];
    /// let full = cache.update_conv_state(0, &TensorRef::new(&y, &one)?, &ConvUpdateOptions::new())?;
    /// assert_eq!(full.to_vec::<f32>()?, [0.0, 0.0, 1.0, 2.0, 3.0]); // stored K columns + x
    /// assert!(cache.has_previous_state(Some(0), None)?);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn update_conv_state(
        &mut self,
        layer: u32,
        x: &TensorRef<'_>,
        options: &ConvUpdateOptions<'_>,
    ) -> Result<TensorView<'_>> {
        let mut out = sys::kvc_tensor::default();
        // SAFETY: a live, exclusively borrowed handle; inputs borrowed for the call.
        check(unsafe {
            sys::kvc_cache_update_conv_state(
                self.as_mut_ptr(),
                layer,
                x.as_raw(),
                options.as_raw(),
                &mut out,
            )
        })?;
        // SAFETY: valid until the next mutating call, excluded by the borrow.
        Ok(unsafe { TensorView::from_raw(out) })
    }

    /// `update_recurrent_state(state, layer, state_idx)` (MambaCache's
    /// `update_ssm_state`): copies `state` (batch first, 1 to 6 dimensions)
    /// into the layer's recurrent state, in place, and returns a view of it.
    ///
    /// ```
    /// use kvcache::{Cache, LayerOptions, ModelConfig, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Mamba)
    ///     .config(ModelConfig::new(2).conv_kernel(4))
    ///     .build()?;
    /// let ssm: Vec<f32> = (0..2 * 3 * 4).map(|x| x as f32).collect(); // [batch, d_inner, d_state]
    /// let shape = [2, 3, 4];
    /// let state = cache.update_recurrent_state(1, 0, &TensorRef::new(&ssm, &shape)?)?;
    /// assert_eq!(state.as_slice::<f32>()?, &ssm[..]);
    /// let views = cache.state_view(1, 0)?;
    /// assert!(views.conv.is_none()); // no conv update yet
    /// assert_eq!(views.recurrent.unwrap().shape(), &[2, 3, 4]);
    /// assert!(!cache.has_previous_state(None, None)?);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn update_recurrent_state(
        &mut self,
        layer: u32,
        state_index: u32,
        state: &TensorRef<'_>,
    ) -> Result<TensorView<'_>> {
        let mut out = sys::kvc_tensor::default();
        // SAFETY: as update_conv_state.
        check(unsafe {
            sys::kvc_cache_update_recurrent_state(
                self.as_mut_ptr(),
                layer,
                state_index,
                state.as_raw(),
                &mut out,
            )
        })?;
        // SAFETY: valid until the next mutating call, excluded by the borrow.
        Ok(unsafe { TensorView::from_raw(out) })
    }

    /// `Cache.update_indexer(indexer_key_states, layer)` (transformers >=
    /// 5.11): `x` is `[batch, n, index_head_dim]`. A
    /// [`LayerKind::DynamicIndexed`](crate::LayerKind::DynamicIndexed) layer
    /// appends it and returns every stored indexer key `[batch, total,
    /// index_head_dim]`; a [`LayerKind::StaticIndexed`](crate::LayerKind::StaticIndexed)
    /// one writes it at its counter and returns the whole `[batch,
    /// max_cache_len, index_head_dim]` buffer. Errors leave the cache unchanged.
    ///
    /// ```
    /// use kvcache::{Cache, LayerOptions, Preset, TensorRef};
    /// let mut cache = Cache::builder(Preset::Custom).layer(LayerOptions::dynamic_indexed()).build()?;
    /// let x = [1.0f32, 2.0, 3.0, 4.0]; // [batch 1, 2 tokens, index_head_dim 2]
    /// let shape = [1, 2, 2];
    /// let all = cache.update_indexer(0, &TensorRef::new(&x, &shape)?)?;
    /// assert_eq!(all.shape(), &[1, 2, 2]);
    /// let y = [5.0f32, 6.0];
    /// let one = [1, 1, 2];
    /// let all = cache.update_indexer(0, &TensorRef::new(&y, &one)?)?;
    /// assert_eq!(all.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn update_indexer(&mut self, layer: u32, x: &TensorRef<'_>) -> Result<TensorView<'_>> {
        let mut out = sys::kvc_tensor::default();
        // SAFETY: a live, exclusively borrowed handle; the input borrowed for the call.
        check(unsafe {
            sys::kvc_cache_update_indexer(self.as_mut_ptr(), layer, x.as_raw(), &mut out)
        })?;
        // SAFETY: valid until the next mutating call, excluded by the borrow.
        Ok(unsafe { TensorView::from_raw(out) })
    }

    /// `layers[layer].indexer_keys`: the indexer store of an indexed layer,
    /// as [`update_indexer`](Self::update_indexer) returns it; `None` before
    /// its first update (transformers' `None`).
    pub fn indexer_view(&self, layer: u32) -> Result<Option<TensorView<'_>>> {
        let mut out = sys::kvc_tensor::default();
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe { sys::kvc_cache_indexer_view(self.as_ptr(), layer, &mut out) })?;
        // SAFETY: valid until the next mutating call, excluded by the borrow.
        Ok((!out.data.is_null() || out.ndim != 0).then(|| unsafe { TensorView::from_raw(out) }))
    }

    /// Views of a linear layer's state pair `state_index` (transformers'
    /// `conv_states[i]` and `recurrent_states[i]`).
    pub fn state_view(&self, layer: u32, state_index: u32) -> Result<StateViews<'_>> {
        let mut conv = sys::kvc_tensor::default();
        let mut recurrent = sys::kvc_tensor::default();
        // SAFETY: a live handle and valid out-pointers.
        check(unsafe {
            sys::kvc_cache_state_view(self.as_ptr(), layer, state_index, &mut conv, &mut recurrent)
        })?;
        let wrap = |raw: sys::kvc_tensor| {
            // SAFETY: valid until the next mutating call, excluded by the borrow.
            (!raw.data.is_null() || raw.ndim != 0).then(|| unsafe { TensorView::from_raw(raw) })
        };
        Ok(StateViews {
            conv: wrap(conv),
            recurrent: wrap(recurrent),
        })
    }

    /// `has_previous_state(layer, state_idx)`: whether the state(s) have had
    /// their first conv update. `layer` `None` means the last linear layer;
    /// `state_index` `None` means every state of the layer.
    pub fn has_previous_state(&self, layer: Option<u32>, state_index: Option<u32>) -> Result<bool> {
        const FN: &str = "kvc_cache_has_previous_state";
        let layer = match layer {
            Some(layer) => layer_arg(FN, "layer", layer)?,
            None => sys::KVC_ALL_LAYERS,
        };
        let state_index = match state_index {
            Some(index) => layer_arg(FN, "state_index", index)?,
            None => -1,
        };
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe {
            sys::kvc_cache_has_previous_state(self.as_ptr(), layer, state_index, &mut out)
        })?;
        Ok(out != 0)
    }
}

/// Room for the splits: `ceil(batch / split)` for the batch the library will
/// split, never more than the largest stored batch allows (a wrong
/// `full_batch_size` is refused by the library before it needs any room).
pub(crate) fn split_capacity(full_batch_size: i64, split_size: i64, largest_batch: i64) -> usize {
    if split_size < 1 || full_batch_size < 1 || full_batch_size > largest_batch {
        return 0;
    }
    // Rounded up without full_batch_size + split_size - 1, which overflows
    // for a split_size near i64::MAX.
    (full_batch_size / split_size + i64::from(full_batch_size % split_size != 0)) as usize
}

/// Options of a new cache (`kvc_cache_options`), for every preset.
///
/// ```
/// use kvcache::{Cache, LayerType, ModelConfig, Preset};
/// // transformers' StaticCache for a Gemma-like model: sliding and full layers.
/// let cache = Cache::builder(Preset::Static)
///     .config(
///         ModelConfig::new(2)
///             .layer_types([LayerType::SlidingAttention, LayerType::FullAttention])
///             .sliding_window(128),
///     )
///     .max_cache_len(1024)
///     .build()?;
/// assert_eq!(cache.max_length(0)?, 128);
/// assert_eq!(cache.max_length(1)?, 1024);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct CacheBuilder {
    preset: Preset,
    config: Option<ModelConfig>,
    max_cache_len: i64,
    layers: Vec<LayerOptions>,
    device: Device,
    quant: Option<QuantOptions>,
    offload: Offload,
    window_length: i64,
    num_sink_tokens: i64,
    transformers_release: u32,
    query_offset_rule: QueryOffsetRule,
    allocator: Option<Arc<dyn Allocator>>,
}

/// What the query offset and the mask sizes add (`kvc_query_offset_rule`, transformers 5.14/5.15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueryOffsetRule {
    /// Every `Cache`: the query offset is the sequence length.
    #[default]
    Plain,
    /// `MtpCache`: layer k's queries run k + 1 tokens ahead (query offset and `kv_offset`).
    Mtp,
    /// `DFlashCache`: the previously accepted tokens are added (query offset and `kv_length`).
    DFlash,
}

impl QueryOffsetRule {
    fn raw(self) -> sys::kvc_query_offset_rule {
        match self {
            QueryOffsetRule::Plain => sys::KVC_QUERY_OFFSET_PLAIN as _,
            QueryOffsetRule::Mtp => sys::KVC_QUERY_OFFSET_MTP as _,
            QueryOffsetRule::DFlash => sys::KVC_QUERY_OFFSET_DFLASH as _,
        }
    }
}

impl CacheBuilder {
    /// Options for `preset` with every other field at its default.
    pub fn new(preset: Preset) -> CacheBuilder {
        CacheBuilder {
            preset,
            ..CacheBuilder::default()
        }
    }

    setters! {
        /// The preset.
        preset(preset: Preset) => preset;

        /// The model configuration the presets build their layers from.
        config(config: ModelConfig) => config = Some(config);

        /// Static, sliding-window and hybrid presets: slots per layer, >= 1.
        max_cache_len(max_cache_len: i64) => max_cache_len;
    }

    /// [`Preset::Custom`]: appends one layer.
    pub fn layer(mut self, layer: LayerOptions) -> Self {
        self.layers.push(layer);
        self
    }

    /// [`Preset::Custom`]: appends layers.
    pub fn layers(mut self, layers: impl IntoIterator<Item = LayerOptions>) -> Self {
        self.layers.extend(layers);
        self
    }

    setters! {
        /// Where the cache lives (default the CPU).
        device(device: Device) => device;

        /// [`Preset::Quantized`]: the quantizer (default `QuantOptions::default()`).
        quant(quant: QuantOptions) => quant = Some(quant);

        /// Offloading, for any preset (default: the preset's choice).
        offload(offload: Offload) => offload;

        /// [`Preset::Sink`]: `window_length`, >= `num_sink_tokens + 1`.
        window_length(tokens: i64) => window_length;

        /// [`Preset::Sink`]: `num_sink_tokens`, >= 0.
        num_sink_tokens(tokens: i64) => num_sink_tokens;

        /// The transformers release whose behaviour to follow where releases differ, as
        /// `MAJOR * 10000 + MINOR * 100` (0, the default: the newest, 5.24). Below 52400 static
        /// layers have no `crop`, as in 5.23.
        transformers_release(release: u32) => transformers_release;

        /// The [`QueryOffsetRule`] (`MtpCache`, `DFlashCache`); default [`QueryOffsetRule::Plain`].
        query_offset_rule(rule: QueryOffsetRule) => query_offset_rule;

        /// Takes the K/V stores of every layer from `allocator` (`kvc_cache_options.allocator`, see
        /// [`Allocator`]) instead of the library's own memory: views returned by updates and
        /// [`layer_view`](CacheRef::layer_view) are then slices of memory `allocator` handed out (a
        /// framework's tensor, an arena). A layer allocates at its first update (or
        /// [`reserve`](CacheRef::reserve), [`early_initialization`](CacheRef::early_initialization)); a
        /// dynamic layer that grows gets a new store and gives the old one back. Clones, batch splits and
        /// stacks of the cache use the same allocator; it is kept alive until the last of them is dropped.
        /// Not from it: quantized records, recurrent states, indexer keys and the host tier of offloaded
        /// layers. When it refuses, the call that needed memory fails with
        /// [`ErrorCode::OutOfMemory`] and the cache is unchanged.
        ///
        /// ```
        /// # use std::ptr::NonNull;
        /// # use std::sync::{Arc, Mutex};
        /// use kvcache::{Allocator, Cache, Device, LayerOptions, Preset, TensorRef};
        ///
        /// /// Hands out the 256-byte-aligned chunks of one buffer the caller owns, once each.
        /// struct Arena(Mutex<(Vec<u8>, usize)>);
        /// // SAFETY: each chunk is handed out once and never touched by Rust code afterwards.
        /// unsafe impl Allocator for Arena {
        ///     fn alloc(&self, bytes: usize, align: usize, _: Device, _: *mut std::ffi::c_void) -> Option<NonNull<u8>> {
        ///         let mut arena = self.0.lock().unwrap();
        ///         let (buf, used) = &mut *arena;
        ///         let at = (buf.as_ptr() as usize + *used).next_multiple_of(align) - buf.as_ptr() as usize;
        ///         let chunk = buf.get_mut(at..at.checked_add(bytes)?)?;
        ///         *used = at + bytes;
        ///         NonNull::new(chunk.as_mut_ptr())
        ///     }
        ///     unsafe fn free(&self, _: NonNull<u8>, _: usize, _: Device, _: *mut std::ffi::c_void) {}
        /// }
        ///
        /// let arena = Arc::new(Arena(Mutex::new((vec![0u8; 1 << 16], 0))));
        /// let mut cache = Cache::builder(Preset::Custom)
        ///     .layer(LayerOptions::static_(8))
        ///     .allocator(arena.clone())
        ///     .build()?;
        /// let data = [1.0f32; 4];
        /// let kv = cache.update(0, &TensorRef::new(&data, &[1, 1, 1, 4])?, &TensorRef::new(&data, &[1, 1, 1, 4])?)?;
        /// let base = arena.0.lock().unwrap().0.as_ptr() as usize;
        /// assert!((base..base + (1 << 16)).contains(&(kv.key.data_ptr() as usize)));
        /// # Ok::<(), kvcache::Error>(())
        /// ```
        allocator(allocator: Arc<dyn Allocator>) => allocator = Some(allocator);
    }

    /// Calls `f` with the raw options, whose pointers stay valid during `f`.
    fn with_raw<R>(&self, f: impl FnOnce(&sys::kvc_cache_options) -> Result<R>) -> Result<R> {
        const FN: &str = "kvc_cache_create";
        let config = self
            .config
            .as_ref()
            .map(|c| (c.raw_for_call(), c.layer_types_len(), c.num_hidden_layers()));
        if let Some((_, Some(types), layers)) = config {
            if types != layers as usize {
                return Err(invalid_argument(format!(
                    "{FN}: options->config->layer_types has {types} entries but \
                     num_hidden_layers is {layers}; give one type per layer"
                )));
            }
        }
        let num_layers = u32::try_from(self.layers.len())
            .map_err(|_| invalid_argument(format!("{FN}: too many layers")))?;
        let layers: Vec<sys::kvc_layer_options> =
            self.layers.iter().map(LayerOptions::raw_for_call).collect();
        let mut raw = sys::kvc_cache_options {
            preset: self.preset.raw(),
            max_cache_len: self.max_cache_len,
            num_layers,
            device: self.device.raw(),
            offload: self.offload.raw(),
            window_length: self.window_length,
            num_sink_tokens: self.num_sink_tokens,
            transformers_release: self.transformers_release,
            query_offset_rule: self.query_offset_rule.raw(),
            ..sys::kvc_cache_options::default()
        };
        if let Some((config, _, _)) = &config {
            raw.config = config;
        }
        if !layers.is_empty() {
            raw.layers = layers.as_ptr();
        }
        if let Some(quant) = &self.quant {
            raw.quant = quant.as_raw();
        }
        create_with(self.allocator.as_ref(), |allocator| {
            raw.allocator = allocator;
            f(&raw)
        })
    }

    /// Creates the cache (`kvc_cache_create`). Layers allocate their storage
    /// at their first update (or [`early_initialization`](CacheRef::early_initialization)).
    pub fn build(&self) -> Result<Cache> {
        check_version()?;
        self.with_raw(|options| {
            let mut out = std::ptr::null_mut();
            // SAFETY: every pointer in `options` is valid for the call; an allocator's context is the
            // library's once the call succeeds (create_with).
            check(unsafe { sys::kvc_cache_create(options, &mut out) })?;
            // SAFETY: on success a new, owned cache.
            Ok(unsafe { Cache::from_raw(out) })
        })
    }

    /// Creates the cache and gives layer `i` the update `(keys[i],
    /// values[i])`: transformers' legacy tuple format
    /// `((k0, v0), (k1, v1), ...)` (`kvc_cache_create_from_tensors`). The
    /// tensors are copied. On error nothing is created.
    ///
    /// ```
    /// # use kvcache::{Cache, Preset, TensorRef};
    /// let data = [1.0f32; 2 * 4];
    /// let shape = [1, 1, 2, 4];
    /// let t = TensorRef::new(&data, &shape)?;
    /// let cache = Cache::builder(Preset::Dynamic).build_from_tensors(&[t, t], &[t, t])?;
    /// assert_eq!((cache.num_layers(), cache.seq_length(1)?), (2, 2));
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn build_from_tensors(
        &self,
        keys: &[TensorRef<'_>],
        values: &[TensorRef<'_>],
    ) -> Result<Cache> {
        check_version()?;
        let layers = counts_match("kvc_cache_create_from_tensors", keys.len(), values.len())?;
        self.with_raw(|options| {
            let mut out = std::ptr::null_mut();
            // SAFETY: every pointer in `options` is valid for the call; the
            // slices are `layers` consecutive kvc_tensor (repr(transparent)).
            check(unsafe {
                sys::kvc_cache_create_from_tensors(
                    options,
                    layers,
                    keys.as_ptr().cast(),
                    values.as_ptr().cast(),
                    &mut out,
                )
            })?;
            // SAFETY: on success a new, owned cache.
            Ok(unsafe { Cache::from_raw(out) })
        })
    }
}
