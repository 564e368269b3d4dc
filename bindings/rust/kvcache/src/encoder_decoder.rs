//! `EncoderDecoderCache`: a self-attention cache, a cross-attention cache and,
//! per layer, whether the cross-attention K/V are computed ("is_updated").

use std::fmt;
use std::ptr::NonNull;

use kvcache_sys as sys;

use crate::cache::{Cache, CacheRef, split_capacity};
use crate::error::{Result, check};
use crate::tensor::{KvView, TensorRef};
use crate::version::check_version;

/// `kvc_encoder_decoder_cache_self_attention` or `_cross_attention`.
type PartAccessor =
    unsafe extern "C" fn(*mut sys::kvc_encoder_decoder_cache) -> *mut sys::kvc_cache;

/// transformers' `EncoderDecoderCache` (`kvc_encoder_decoder_cache*`): owns
/// both caches; dropping it frees them.
///
/// Thread safety is the C rule quoted on [`Cache`]: `Send`, not `Sync`.
///
/// ```
/// use kvcache::{Cache, EncoderDecoderCache, TensorRef};
///
/// let mut cache = EncoderDecoderCache::new(Cache::new()?, Cache::new()?)?;
/// let encoder_out = [0.5f32; 7 * 4]; // 7 encoder positions
/// let cross_shape = [1, 1, 7, 4];
/// let cross = TensorRef::new(&encoder_out, &cross_shape)?;
/// let token = [1.0f32; 4];
/// let self_shape = [1, 1, 1, 4];
/// let k = TensorRef::new(&token, &self_shape)?;
/// for _step in 0..3 {
///     // Self-attention over the generated tokens.
///     cache.self_attention_mut().update(0, &k, &k)?;
///     // Cross-attention K/V: computed at the first step, reused afterwards.
///     let (key, value) = if cache.is_updated(0)? { (None, None) } else { (Some(&cross), Some(&cross)) };
///     let kv = cache.update_cross(0, key, value)?;
///     assert_eq!(kv.key.shape()[2], 7);
/// }
/// assert_eq!(cache.self_attention().seq_length(0)?, 3);
/// # Ok::<(), kvcache::Error>(())
/// ```
pub struct EncoderDecoderCache {
    raw: NonNull<sys::kvc_encoder_decoder_cache>,
}

// SAFETY: the C rule quoted on `Cache`: one thread at a time, handles
// independent; not Sync.
unsafe impl Send for EncoderDecoderCache {}

impl EncoderDecoderCache {
    /// Pairs `self_attention` and `cross_attention`
    /// (`kvc_encoder_decoder_cache_create`); both are owned by the pair from
    /// now on. `is_updated(i)` starts as "cross-attention layer `i` holds
    /// tokens". On error both caches are dropped.
    pub fn new(self_attention: Cache, cross_attention: Cache) -> Result<EncoderDecoderCache> {
        check_version()?;
        let mut out = std::ptr::null_mut();
        let (a, b) = (self_attention.into_raw(), cross_attention.into_raw());
        // SAFETY: two distinct live handles (two owned Caches); on success the
        // pair owns them.
        let result = check(unsafe { sys::kvc_encoder_decoder_cache_create(a, b, &mut out) });
        if let Err(e) = result {
            // SAFETY: on error the caller still owns both.
            unsafe {
                drop(Cache::from_raw(a));
                drop(Cache::from_raw(b));
            }
            return Err(e);
        }
        // SAFETY: on success a new, owned pair.
        Ok(unsafe { EncoderDecoderCache::from_raw(out) })
    }

    /// Takes ownership of a raw handle.
    ///
    /// # Safety
    /// `raw` is a live, non-NULL handle that nothing else frees or uses afterwards.
    pub unsafe fn from_raw(raw: *mut sys::kvc_encoder_decoder_cache) -> EncoderDecoderCache {
        EncoderDecoderCache {
            raw: NonNull::new(raw).expect("kvcache: a NULL kvc_encoder_decoder_cache handle"),
        }
    }

    /// Gives up ownership (free with `kvc_encoder_decoder_cache_destroy`).
    pub fn into_raw(self) -> *mut sys::kvc_encoder_decoder_cache {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// The raw handle (borrowed).
    pub fn as_ptr(&self) -> *const sys::kvc_encoder_decoder_cache {
        self.raw.as_ptr()
    }

    /// Stacks splits of both caches; `is_updated` of the result is that of
    /// `splits[0]`.
    pub fn from_batch_splits(splits: &[&EncoderDecoderCache]) -> Result<EncoderDecoderCache> {
        check_version()?;
        let raw: Vec<*const sys::kvc_encoder_decoder_cache> =
            splits.iter().map(|s| s.as_ptr()).collect();
        let mut out = std::ptr::null_mut();
        // SAFETY: `len` live handles borrowed for the call.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_from_batch_splits(raw.as_ptr(), raw.len(), &mut out)
        })?;
        // SAFETY: on success a new, owned pair.
        Ok(unsafe { EncoderDecoderCache::from_raw(out) })
    }

    pub(crate) fn raw_mut(&mut self) -> *mut sys::kvc_encoder_decoder_cache {
        self.raw.as_ptr()
    }

    /// The self-attention cache (for `update`, `seq_length`, `max_length`,
    /// `mask_sizes`: transformers delegates those to it).
    pub fn self_attention(&self) -> &CacheRef {
        self.part(sys::kvc_encoder_decoder_cache_self_attention)
    }

    /// The self-attention cache, for updates.
    pub fn self_attention_mut(&mut self) -> &mut CacheRef {
        self.part_mut(sys::kvc_encoder_decoder_cache_self_attention)
    }

    /// The cross-attention cache.
    pub fn cross_attention(&self) -> &CacheRef {
        self.part(sys::kvc_encoder_decoder_cache_cross_attention)
    }

    /// The cross-attention cache, mutably.
    pub fn cross_attention_mut(&mut self) -> &mut CacheRef {
        self.part_mut(sys::kvc_encoder_decoder_cache_cross_attention)
    }

    /// The sub-cache `accessor` returns, borrowed with the pair.
    fn part(&self, accessor: PartAccessor) -> &CacheRef {
        // SAFETY: the accessor only reads the pair; the sub-cache lives as
        // long as the pair and is borrowed with it.
        unsafe { CacheRef::from_ptr(accessor(self.raw.as_ptr())) }
    }

    /// As `part`, exclusively borrowed through `self`.
    fn part_mut(&mut self, accessor: PartAccessor) -> &mut CacheRef {
        // SAFETY: as in `part`, exclusively borrowed through `self`.
        unsafe { CacheRef::from_ptr_mut(accessor(self.raw_mut())) }
    }

    /// Whether cross-attention layer `layer` is computed (false beyond the layers).
    pub fn is_updated(&self, layer: u32) -> Result<bool> {
        let mut out = 0;
        // SAFETY: a live handle and a valid out-pointer.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_is_updated(self.raw.as_ptr(), layer, &mut out)
        })?;
        Ok(out != 0)
    }

    /// The cross-attention protocol for one layer: if `layer` is not yet
    /// updated, store `key`/`value` in the cross-attention cache and mark it
    /// updated; either way return the cross-attention views. Once updated,
    /// `key` and `value` may be `None`.
    pub fn update_cross(
        &mut self,
        layer: u32,
        key: Option<&TensorRef<'_>>,
        value: Option<&TensorRef<'_>>,
    ) -> Result<KvView<'_>> {
        let mut out = sys::kvc_kv::default();
        let key = key.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        let value = value.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: a live, exclusively borrowed handle; inputs borrowed for the call.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_update_cross(self.raw_mut(), layer, key, value, &mut out)
        })?;
        // SAFETY: valid until the next mutating call, excluded by the borrow.
        Ok(unsafe { KvView::from_raw(out) })
    }

    /// Crops the self-attention cache only (cross K/V are never cropped).
    ///
    /// ```
    /// # use kvcache::{Cache, EncoderDecoderCache, TensorRef};
    /// let data = [0.0f32; 4];
    /// let shape = [1, 1, 4, 1];
    /// let t = TensorRef::new(&data, &shape)?;
    /// let mut cache = EncoderDecoderCache::new(Cache::new()?, Cache::new()?)?;
    /// cache.self_attention_mut().update(0, &t, &t)?;
    /// cache.update_cross(0, Some(&t), Some(&t))?;
    /// cache.crop(-1)?;
    /// assert_eq!(cache.self_attention().seq_length(0)?, 3);
    /// assert_eq!(cache.cross_attention().seq_length(0)?, 4);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn crop(&mut self, tokens: i64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_encoder_decoder_cache_crop(self.raw_mut(), tokens) })
    }

    /// Reorders both caches (beam search).
    ///
    /// ```
    /// # use kvcache::{Cache, EncoderDecoderCache, TensorRef};
    /// let data = [0.0f32, 1.0];
    /// let shape = [2, 1, 1, 1]; // two beams
    /// let t = TensorRef::new(&data, &shape)?;
    /// let mut cache = EncoderDecoderCache::new(Cache::new()?, Cache::new()?)?;
    /// cache.self_attention_mut().update(0, &t, &t)?;
    /// cache.update_cross(0, Some(&t), Some(&t))?;
    /// cache.reorder(&[1, 1])?;
    /// assert_eq!(cache.cross_attention().layer_view(0)?.key.to_vec::<f32>()?, [1.0, 1.0]);
    /// cache.batch_select_indices(&[0])?;
    /// cache.batch_repeat_interleave(3)?;
    /// assert_eq!(cache.self_attention().layer_info(0)?.batch_size, 3);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn reorder(&mut self, beam_idx: &[i64]) -> Result<()> {
        // SAFETY: `beam_idx` has `len` entries, borrowed for the call.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_reorder(
                self.raw_mut(),
                beam_idx.as_ptr(),
                beam_idx.len(),
            )
        })
    }

    /// `batch_repeat_interleave` on both caches (both must be dynamic).
    pub fn batch_repeat_interleave(&mut self, repeats: i64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_batch_repeat_interleave(self.raw_mut(), repeats)
        })
    }

    /// `batch_select_indices` on both caches (both must be dynamic).
    pub fn batch_select_indices(&mut self, indices: &[i64]) -> Result<()> {
        // SAFETY: `indices` has `len` entries, borrowed for the call.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_batch_select_indices(
                self.raw_mut(),
                indices.as_ptr(),
                indices.len(),
            )
        })
    }

    /// Splits both caches (legacy `EncoderDecoderCache.batch_split`); both
    /// must be dynamic.
    ///
    /// ```
    /// # use kvcache::{Cache, EncoderDecoderCache, TensorRef};
    /// let data = [0.0f32, 1.0, 2.0];
    /// let shape = [3, 1, 1, 1];
    /// let t = TensorRef::new(&data, &shape)?;
    /// let mut cache = EncoderDecoderCache::new(Cache::new()?, Cache::new()?)?;
    /// cache.self_attention_mut().update(0, &t, &t)?;
    /// cache.update_cross(0, Some(&t), Some(&t))?;
    /// let splits = cache.batch_split(3, 2)?;
    /// assert_eq!(splits.len(), 2);
    /// let back = EncoderDecoderCache::from_batch_splits(&[&splits[0], &splits[1]])?;
    /// assert_eq!(back.cross_attention().layer_view(0)?.key.to_vec::<f32>()?, data);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn batch_split(
        &self,
        full_batch_size: i64,
        split_size: i64,
    ) -> Result<Vec<EncoderDecoderCache>> {
        let largest = [self.self_attention(), self.cross_attention()]
            .iter()
            .flat_map(|c| (0..c.num_layers()).filter_map(|l| c.layer_info(l).ok()))
            .map(|info| info.batch_size)
            .max()
            .unwrap_or(0);
        let capacity = split_capacity(full_batch_size, split_size, largest);
        let mut out = vec![std::ptr::null_mut(); capacity];
        let mut count = 0usize;
        // SAFETY: `out` has room for `capacity` handles.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_batch_split(
                self.raw.as_ptr(),
                full_batch_size,
                split_size,
                out.as_mut_ptr(),
                capacity,
                &mut count,
            )
        })?;
        // SAFETY: on success `count` new, owned pairs.
        Ok(out[..count]
            .iter()
            .map(|&raw| unsafe { EncoderDecoderCache::from_raw(raw) })
            .collect())
    }

    /// Resets both caches and marks every cross-attention layer not updated.
    ///
    /// ```
    /// # use kvcache::{Cache, EncoderDecoderCache, TensorRef};
    /// let data = [0.0f32; 2];
    /// let shape = [1, 1, 2, 1];
    /// let t = TensorRef::new(&data, &shape)?;
    /// let mut cache = EncoderDecoderCache::new(Cache::new()?, Cache::new()?)?;
    /// cache.update_cross(0, Some(&t), Some(&t))?;
    /// let copy = cache.try_clone()?;
    /// cache.reset()?;
    /// assert!(!cache.is_updated(0)? && copy.is_updated(0)?);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: a live, exclusively borrowed handle.
        check(unsafe { sys::kvc_encoder_decoder_cache_reset(self.raw_mut()) })
    }

    /// A deep copy of both caches and the `is_updated` flags.
    pub fn try_clone(&self) -> Result<EncoderDecoderCache> {
        let mut out = std::ptr::null_mut();
        // SAFETY: a live handle borrowed for the call.
        check(unsafe { sys::kvc_encoder_decoder_cache_clone(self.raw.as_ptr(), &mut out) })?;
        // SAFETY: on success a new, owned pair.
        Ok(unsafe { EncoderDecoderCache::from_raw(out) })
    }
}

impl Drop for EncoderDecoderCache {
    fn drop(&mut self) {
        // SAFETY: we own the pair (and through it both caches).
        unsafe { sys::kvc_encoder_decoder_cache_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for EncoderDecoderCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncoderDecoderCache")
            .field("self_attention", self.self_attention())
            .field("cross_attention", self.cross_attention())
            .finish()
    }
}
