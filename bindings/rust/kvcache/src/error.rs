//! Errors: the C library's returned error objects, as Rust values.

use std::ffi::CStr;
use std::fmt;

use kvcache_sys as sys;

/// What went wrong: the stable `KVC_ERROR_*` codes of `kvcache/error.h`.
///
/// The codes are never renumbered; a code that a newer library adds arrives
/// as [`ErrorCode::Unknown`] with its number. The comment on each variant says
/// which exception transformers raises in the same case.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `KVC_ERROR_INVALID_ARGUMENT` (ValueError/TypeError): a bad value or option.
    InvalidArgument,
    /// `KVC_ERROR_OUT_OF_RANGE` (IndexError): layer or batch index, static cache overflow.
    OutOfRange,
    /// `KVC_ERROR_DTYPE_MISMATCH`: a tensor's dtype differs from the cache's (no silent casts).
    DtypeMismatch,
    /// `KVC_ERROR_SHAPE_MISMATCH`: ndim, batch, heads or head_dim disagree with the cache.
    ShapeMismatch,
    /// `KVC_ERROR_DEVICE_MISMATCH`: a tensor lives on another device than the cache.
    DeviceMismatch,
    /// `KVC_ERROR_UNSUPPORTED` (AttributeError): this layer kind has no such operation.
    Unsupported,
    /// `KVC_ERROR_INVALID_STATE` (RuntimeError): not allowed in this state.
    InvalidState,
    /// `KVC_ERROR_OUT_OF_MEMORY`: an allocation failed (host or device).
    OutOfMemory,
    /// `KVC_ERROR_NO_DEVICE`: no backend or no device for the requested device type.
    NoDevice,
    /// `KVC_ERROR_VERSION_MISMATCH`: a backend plugin, or the loaded library,
    /// speaks another version.
    VersionMismatch,
    /// `KVC_ERROR_INTERNAL`: a bug in kvcache; please report it.
    Internal,
    /// `KVC_ERROR_IO` (OSError): a file could not be read or written, or is
    /// not a valid kvcache file (truncated, corrupted). Since 0.6.
    Io,
    /// `KVC_ERROR_BUSY`: another thread was inside a call on the same handle;
    /// this call did nothing (the handle is unchanged). Since 0.7.
    ///
    /// Safe Rust does not meet it: [`Cache`](crate::Cache) and
    /// [`EncoderDecoderCache`](crate::EncoderDecoderCache) are [`Send`] but
    /// not [`Sync`], so one thread at a time calls them (share one behind a
    /// `Mutex`), and [`Pool`](crate::Pool) serialises its calls on a lock of
    /// its own. It comes from a handle that C code uses at the same time
    /// through its raw pointer.
    Busy,
    /// A code this crate does not know (from a newer library).
    Unknown(i32),
}

impl ErrorCode {
    /// The code for a raw `kvc_code`; `KVC_OK` has none.
    pub fn from_raw(code: sys::kvc_code) -> Option<ErrorCode> {
        Some(match code {
            sys::KVC_OK => return None,
            sys::KVC_ERROR_INVALID_ARGUMENT => ErrorCode::InvalidArgument,
            sys::KVC_ERROR_OUT_OF_RANGE => ErrorCode::OutOfRange,
            sys::KVC_ERROR_DTYPE_MISMATCH => ErrorCode::DtypeMismatch,
            sys::KVC_ERROR_SHAPE_MISMATCH => ErrorCode::ShapeMismatch,
            sys::KVC_ERROR_DEVICE_MISMATCH => ErrorCode::DeviceMismatch,
            sys::KVC_ERROR_UNSUPPORTED => ErrorCode::Unsupported,
            sys::KVC_ERROR_INVALID_STATE => ErrorCode::InvalidState,
            sys::KVC_ERROR_OUT_OF_MEMORY => ErrorCode::OutOfMemory,
            sys::KVC_ERROR_NO_DEVICE => ErrorCode::NoDevice,
            sys::KVC_ERROR_VERSION_MISMATCH => ErrorCode::VersionMismatch,
            sys::KVC_ERROR_INTERNAL => ErrorCode::Internal,
            sys::KVC_ERROR_IO => ErrorCode::Io,
            sys::KVC_ERROR_BUSY => ErrorCode::Busy,
            other => ErrorCode::Unknown(other),
        })
    }

    /// The raw `kvc_code`.
    pub fn raw(self) -> sys::kvc_code {
        match self {
            ErrorCode::InvalidArgument => sys::KVC_ERROR_INVALID_ARGUMENT,
            ErrorCode::OutOfRange => sys::KVC_ERROR_OUT_OF_RANGE,
            ErrorCode::DtypeMismatch => sys::KVC_ERROR_DTYPE_MISMATCH,
            ErrorCode::ShapeMismatch => sys::KVC_ERROR_SHAPE_MISMATCH,
            ErrorCode::DeviceMismatch => sys::KVC_ERROR_DEVICE_MISMATCH,
            ErrorCode::Unsupported => sys::KVC_ERROR_UNSUPPORTED,
            ErrorCode::InvalidState => sys::KVC_ERROR_INVALID_STATE,
            ErrorCode::OutOfMemory => sys::KVC_ERROR_OUT_OF_MEMORY,
            ErrorCode::NoDevice => sys::KVC_ERROR_NO_DEVICE,
            ErrorCode::VersionMismatch => sys::KVC_ERROR_VERSION_MISMATCH,
            ErrorCode::Internal => sys::KVC_ERROR_INTERNAL,
            ErrorCode::Io => sys::KVC_ERROR_IO,
            ErrorCode::Busy => sys::KVC_ERROR_BUSY,
            ErrorCode::Unknown(code) => code,
        }
    }

    /// The library's name for the code (`kvc_code_name`):
    /// `"KVC_ERROR_OUT_OF_RANGE"`, or `"KVC_ERROR_UNKNOWN"`.
    ///
    /// ```
    /// assert_eq!(kvcache::ErrorCode::OutOfRange.name(), "KVC_ERROR_OUT_OF_RANGE");
    /// assert_eq!(kvcache::ErrorCode::Unknown(999).name(), "KVC_ERROR_UNKNOWN");
    /// ```
    pub fn name(self) -> &'static str {
        // SAFETY: kvc_code_name never fails and returns a static, never NULL,
        // NUL-terminated ASCII string.
        unsafe { CStr::from_ptr(sys::kvc_code_name(self.raw())) }
            .to_str()
            .unwrap_or("KVC_ERROR_UNKNOWN")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error from kvcache: the code and the library's message, which names the
/// function, the argument, the value and the rule.
///
/// A call that returns an error has changed nothing: the cache is exactly as
/// it was before the call (the C library validates everything first). The one
/// exception is a GPU that fails after the call began writing: the cache or
/// pool is then poisoned, and every later call returns
/// `ErrorCode::InvalidState` until the cache is reset or dropped
/// (kvcache/error.h, docs/gpus.md, 'When the device fails').
///
/// ```
/// use kvcache::{Cache, ErrorCode, TensorRef};
///
/// let mut cache = Cache::new()?;
/// let data = [0.0f32; 2 * 4];
/// let shape = [2, 1, 1, 4]; // two rows
/// let k = TensorRef::new(&data, &shape)?;
/// cache.update(0, &k, &k)?;
/// let err = cache.reorder(&[0, 3]).unwrap_err(); // there is no row 3
/// assert_eq!(err.code(), ErrorCode::OutOfRange);
/// assert!(err.message().contains("kvc_cache_reorder"), "{err}");
/// assert_eq!(cache.seq_length(0)?, 1); // and nothing changed
/// # Ok::<(), kvcache::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
}

/// `Result<T, kvcache::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error made on the Rust side of the binding (before calling the
    /// library), with the same conventions as the library's.
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// Takes ownership of a non-NULL `kvc_error*`, copies its code and message
    /// and frees it.
    ///
    /// # Safety
    /// `raw` must be an error object returned by the library and not freed yet;
    /// it is freed here.
    pub unsafe fn from_raw(raw: *mut sys::kvc_error) -> Error {
        debug_assert!(!raw.is_null());
        // SAFETY: the caller hands over a live error object; its message is
        // never NULL and valid until kvc_error_destroy.
        unsafe {
            let code = sys::kvc_error_code(raw);
            let message = CStr::from_ptr(sys::kvc_error_message(raw))
                .to_string_lossy()
                .into_owned();
            sys::kvc_error_destroy(raw);
            Error {
                code: ErrorCode::from_raw(code).unwrap_or(ErrorCode::Internal),
                message,
            }
        }
    }

    /// What kind of error this is.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The raw `kvc_code` (a stable integer).
    pub fn raw_code(&self) -> i32 {
        self.code.raw()
    }

    /// The library's message, e.g. `"kvc_cache_update: key.shape[1]
    /// (num_kv_heads) is 4 but layer 2 holds 8 heads; ..."`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code.name())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code)
            .field("message", &self.message)
            .finish()
    }
}

impl std::error::Error for Error {}

/// `Ok(())` for NULL, else the error (taking ownership of it).
#[inline]
pub(crate) fn check(raw: *mut sys::kvc_error) -> Result<()> {
    if raw.is_null() {
        Ok(())
    } else {
        // SAFETY: a non-NULL return of a kvc_* function is a live error object
        // owned by the caller.
        Err(unsafe { Error::from_raw(raw) })
    }
}

/// An `INVALID_ARGUMENT` error made by the binding.
pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidArgument, message)
}
