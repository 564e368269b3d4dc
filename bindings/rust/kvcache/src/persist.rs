//! Cache files (`docs/file-format.md`, C header `kvcache/persist.h`).
//!
//! A file holds everything that makes a cache behave as the one saved (stored
//! keys and values, counters, quantized codes and scales, recurrent states,
//! sink tables, indexer keys, offloaded layers; for an encoder-decoder cache
//! both halves). [`CacheRef::save`] writes one (beside the path, then renamed),
//! [`Cache::load`] makes a new cache from one (on the CPU), and
//! [`CacheRef::restore`] replaces a cache's contents with a file's whose model
//! fingerprint matches:
//!
//! ```
//! # use kvcache::{Cache, ErrorCode, TensorRef};
//! let data = [1.0f32, 2.0, 3.0, 4.0];
//! let k = TensorRef::new(&data, &[1, 1, 1, 4])?;
//! let mut cache = Cache::new()?;
//! cache.update(0, &k, &k)?;
//! let path = std::env::temp_dir().join(format!("kvcache-doc-{}.kvc", std::process::id()));
//! cache.save(&path)?;
//! let copy = Cache::load(&path)?;
//! assert_eq!(copy.layer_view(0)?.key.to_vec::<f32>()?, data);
//! std::fs::write(&path, b"not a cache file")?;
//! assert_eq!(Cache::load(&path).unwrap_err().code(), ErrorCode::Io);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A mismatched file is refused with `InvalidArgument` naming the first
//! difference (`layer 3: kind dynamic sliding (file) vs static (cache)`), one
//! of another format version with `VersionMismatch`, a truncated or corrupted
//! one with [`ErrorCode::Io`] naming the section and offset; the cache is
//! unchanged on every error.
//!
//! A pool sequence has files of its own: [`Sequence::save`](crate::Sequence::save)
//! and [`Pool::load_sequence`](crate::Pool::load_sequence).

use std::ffi::CString;
use std::path::Path;

use kvcache_sys as sys;

use crate::cache::{Cache, CacheRef};
use crate::encoder_decoder::EncoderDecoderCache;
use crate::error::{Result, check, invalid_argument};
use crate::version::check_version;

/// The cache file format version this library writes and reads.
pub const FILE_FORMAT_VERSION: u32 = sys::KVC_FILE_FORMAT_VERSION;

/// How [`Cache::load_with`] and [`EncoderDecoderCache::load_with`] read a file
/// (C `kvc_load_options`).
///
/// A file's capacity may lawfully be far past its tokens (a dynamic layer keeps
/// the capacity it grew to), so a file of kilobytes can ask for gigabytes. A
/// program loading files it did not write sets [`max_bytes`](Self::max_bytes):
///
/// ```
/// # use kvcache::{Cache, ErrorCode, LoadOptions, TensorRef};
/// let data = [1.0f32; 8];
/// let k = TensorRef::new(&data, &[1, 2, 1, 4])?;
/// let mut cache = Cache::new()?;
/// cache.update(0, &k, &k)?;
/// let path = std::env::temp_dir().join(format!("kvcache-doc-max-{}.kvc", std::process::id()));
/// cache.save(&path)?;
/// let err = Cache::load_with(&path, &LoadOptions::new().max_bytes(16)).unwrap_err();
/// assert_eq!(err.code(), ErrorCode::OutOfMemory); // its layer declares 64 bytes or more
/// assert!(err.message().contains("options->max_bytes (16)"));
/// let copy = Cache::load_with(&path, &LoadOptions::new().max_bytes(1 << 20))?;
/// # drop(copy);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    max_bytes: u64,
}

impl LoadOptions {
    /// No limit: what [`Cache::load`] uses.
    pub fn new() -> LoadOptions {
        LoadOptions::default()
    }

    /// The most bytes the new cache's stores may take as the file declares them
    /// (batch x heads x capacity x (key dim + value dim) x element size per
    /// layer, both halves of an encoder-decoder file together); a file declaring
    /// more is [`ErrorCode::OutOfMemory`](crate::ErrorCode::OutOfMemory), refused
    /// before that memory is asked for. 0: no limit.
    pub fn max_bytes(mut self, bytes: u64) -> LoadOptions {
        self.max_bytes = bytes;
        self
    }

    fn raw(&self) -> sys::kvc_load_options {
        // SAFETY: a plain C struct; kvc_load_options_init writes every field.
        let mut o: sys::kvc_load_options = unsafe { std::mem::zeroed() };
        // SAFETY: a valid, writable struct.
        unsafe { sys::kvc_load_options_init(&mut o) };
        o.max_bytes = self.max_bytes;
        o
    }
}

/// A path as the C library takes it: its bytes, NUL-terminated.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| invalid_argument(format!("path {} is not valid UTF-8", path.display())))?
        .as_bytes()
        .to_vec();
    CString::new(bytes)
        .map_err(|_| invalid_argument(format!("path {} contains a NUL byte", path.display())))
}

impl CacheRef {
    /// Writes the cache to the file `path` (created or replaced; written
    /// beside it and renamed, so a crash never leaves a partial file). The
    /// cache is not changed.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live handle and a NUL-terminated path borrowed for the call; NULL options are documented.
        check(unsafe { sys::kvc_cache_save(self.as_ptr(), path.as_ptr(), std::ptr::null()) })
    }

    /// Replaces the cache's contents with the file's. The file's model
    /// fingerprint must equal the cache's. Views taken before are invalid
    /// afterwards (the borrow checker already ends them). On error the cache
    /// is unchanged.
    pub fn restore(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live handle, exclusively borrowed, and a path borrowed for the call.
        check(unsafe { sys::kvc_cache_restore(self.as_mut_ptr(), path.as_ptr()) })
    }
}

impl Cache {
    /// A new cache on the CPU from the file `path` (a regular file, read whole; one that changes while it is
    /// read is an error, never a crash).
    pub fn load(path: impl AsRef<Path>) -> Result<Cache> {
        Cache::load_with(path, &LoadOptions::new())
    }

    /// [`Cache::load`] with options: a limit on what the file may make it allocate.
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Cache> {
        check_version()?;
        let path = c_path(path.as_ref())?;
        let o = options.raw();
        let mut out = std::ptr::null_mut();
        // SAFETY: a path and options borrowed for the call, a valid out-pointer.
        check(unsafe { sys::kvc_cache_load(path.as_ptr(), &o, &mut out) })?;
        // SAFETY: on success a new, owned cache.
        Ok(unsafe { Cache::from_raw(out) })
    }
}

impl EncoderDecoderCache {
    /// Writes both halves and the is_updated flags to the file `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live handle and a path borrowed for the call.
        check(unsafe {
            sys::kvc_encoder_decoder_cache_save(self.as_ptr(), path.as_ptr(), std::ptr::null())
        })
    }

    /// Replaces both halves and the flags with the file's (the fingerprints
    /// must match); unchanged on error.
    pub fn restore(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live handle, exclusively borrowed, and a path borrowed for the call.
        check(unsafe { sys::kvc_encoder_decoder_cache_restore(self.raw_mut(), path.as_ptr()) })
    }

    /// A new encoder-decoder cache on the CPU from the file `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<EncoderDecoderCache> {
        EncoderDecoderCache::load_with(path, &LoadOptions::new())
    }

    /// [`EncoderDecoderCache::load`] with options; `max_bytes` bounds both halves together.
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<EncoderDecoderCache> {
        check_version()?;
        let path = c_path(path.as_ref())?;
        let o = options.raw();
        let mut out = std::ptr::null_mut();
        // SAFETY: a path and options borrowed for the call, a valid out-pointer.
        check(unsafe { sys::kvc_encoder_decoder_cache_load(path.as_ptr(), &o, &mut out) })?;
        // SAFETY: on success a new, owned encoder-decoder cache.
        Ok(unsafe { EncoderDecoderCache::from_raw(out) })
    }
}
