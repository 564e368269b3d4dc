//! Versions and features of the header and of the loaded library.

use std::ffi::CStr;
use std::fmt;
use std::sync::OnceLock;

use kvcache_sys as sys;

use crate::error::{Error, ErrorCode, Result};

/// A `MAJOR.MINOR.PATCH` version. The major number is the ABI promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The ABI number: also the SONAME's (`libkvcache.so.<major>`).
    pub major: u32,
    /// Grows when entry points, option fields or constants are added.
    pub minor: u32,
    /// Fixes only.
    pub patch: u32,
}

impl Version {
    /// From `MAJOR * 10000 + MINOR * 100 + PATCH` (`KVC_VERSION_NUMBER`).
    pub const fn from_number(number: u32) -> Version {
        Version {
            major: number / 10000,
            minor: number / 100 % 100,
            patch: number % 100,
        }
    }

    /// `MAJOR * 10000 + MINOR * 100 + PATCH`.
    pub const fn number(self) -> u32 {
        self.major * 10000 + self.minor * 100 + self.patch
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the headers these bindings were generated from.
pub const HEADER_VERSION: Version = Version {
    major: sys::KVC_VERSION_MAJOR,
    minor: sys::KVC_VERSION_MINOR,
    patch: sys::KVC_VERSION_PATCH,
};

/// The version of the library actually loaded (`kvc_version`).
///
/// ```
/// let v = kvcache::version();
/// assert_eq!(v.major, kvcache::HEADER_VERSION.major);
/// assert_eq!(v.to_string(), kvcache::version_string());
/// ```
pub fn version() -> Version {
    // SAFETY: never fails; thread-safe.
    Version::from_number(unsafe { sys::kvc_version() })
}

/// The library's version as its static string (`kvc_version_string`).
pub fn version_string() -> &'static str {
    // SAFETY: never NULL, static, owned by the library.
    unsafe { CStr::from_ptr(sys::kvc_version_string()) }
        .to_str()
        .unwrap_or("")
}

/// Checks that the loaded library can serve these bindings: the same major
/// version (the ABI), and at least the header's version (the option structs
/// these bindings pass have the header's sizes, which older libraries do not
/// know). Every constructor of this crate calls it; the answer is computed
/// once.
///
/// ```
/// kvcache::check_version()?;
/// # Ok::<(), kvcache::Error>(())
/// ```
pub fn check_version() -> Result<()> {
    static CHECKED: OnceLock<Result<()>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let lib = version();
            if lib.major != HEADER_VERSION.major || lib < HEADER_VERSION {
                Err(Error::new(
                    ErrorCode::VersionMismatch,
                    format!(
                        "kvcache: these bindings were generated from kvcache {HEADER_VERSION} \
                         headers but the loaded library is {lib}; they need the same major \
                         version and at least {HEADER_VERSION}"
                    ),
                ))
            } else {
                Ok(())
            }
        })
        .clone()
}

/// The capabilities usable now (`kvc_features`): a bit set of backends.
///
/// ```
/// let features = kvcache::features();
/// assert!(features.contains(kvcache::Features::CPU));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Features(u64);

impl Features {
    /// `KVC_FEATURE_CPU`: the CPU backend (always).
    pub const CPU: Features = Features(sys::KVC_FEATURE_CPU);
    /// `KVC_FEATURE_CUDA`: a CUDA backend is available and reports a device.
    pub const CUDA: Features = Features(sys::KVC_FEATURE_CUDA);
    /// `KVC_FEATURE_HIP`: a ROCm/HIP backend is available.
    pub const HIP: Features = Features(sys::KVC_FEATURE_HIP);
    /// `KVC_FEATURE_BACKEND_DL`: the core can load backend plugins.
    pub const BACKEND_DL: Features = Features(sys::KVC_FEATURE_BACKEND_DL);

    /// From raw bits (bits this crate does not name are kept).
    pub const fn from_bits(bits: u64) -> Features {
        Features(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Features {
    type Output = Features;
    fn bitor(self, rhs: Features) -> Features {
        Features(self.0 | rhs.0)
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Features::CPU, "CPU"),
            (Features::CUDA, "CUDA"),
            (Features::HIP, "HIP"),
            (Features::BACKEND_DL, "BACKEND_DL"),
        ];
        let mut set = f.debug_set();
        let mut rest = self.0;
        for (flag, name) in names {
            if self.contains(flag) {
                set.entry(&format_args!("{name}"));
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            set.entry(&format_args!("{rest:#x}"));
        }
        set.finish()
    }
}

/// The features bitmask of the loaded library. May probe for backend plugins
/// on the first call (the result is cached by the library). Thread-safe.
pub fn features() -> Features {
    // SAFETY: never fails; thread-safe.
    Features(unsafe { sys::kvc_features() })
}
