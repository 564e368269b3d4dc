//! Element types: the storage dtypes of a cache and the DLPack triples.

use std::fmt;

use half::{bf16, f16};
use kvcache_sys as sys;

/// A storage dtype of a cache (`kvc_dtype`). A cache stores exactly one and
/// accepts only tensors of that dtype: copies are bit-exact, nothing is
/// converted silently.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `KVC_DTYPE_FLOAT32`: `f32`.
    F32,
    /// `KVC_DTYPE_FLOAT16`: [`half::f16`].
    F16,
    /// `KVC_DTYPE_BFLOAT16`: [`half::bf16`].
    BF16,
}

impl DType {
    /// The raw `kvc_dtype`.
    pub fn raw(self) -> sys::kvc_dtype {
        match self {
            DType::F32 => sys::KVC_DTYPE_FLOAT32,
            DType::F16 => sys::KVC_DTYPE_FLOAT16,
            DType::BF16 => sys::KVC_DTYPE_BFLOAT16,
        }
    }

    /// The dtype of a raw `kvc_dtype`; `None` for `KVC_DTYPE_UNSET` and for
    /// values this crate does not know.
    pub fn from_raw(raw: sys::kvc_dtype) -> Option<DType> {
        match raw {
            sys::KVC_DTYPE_FLOAT32 => Some(DType::F32),
            sys::KVC_DTYPE_FLOAT16 => Some(DType::F16),
            sys::KVC_DTYPE_BFLOAT16 => Some(DType::BF16),
            _ => None,
        }
    }

    /// Bytes per element (`kvc_dtype_size`).
    ///
    /// ```
    /// assert_eq!(kvcache::DType::BF16.size(), 2);
    /// assert_eq!(kvcache::DType::F32.size(), 4);
    /// ```
    pub fn size(self) -> usize {
        // SAFETY: never fails.
        unsafe { sys::kvc_dtype_size(self.raw()) }
    }

    /// The DLPack triple (`kvc_dtype_to_data_type`).
    ///
    /// ```
    /// use kvcache::{DType, DataType};
    /// assert_eq!(DType::BF16.data_type(), DataType { code: 4, bits: 16, lanes: 1 });
    /// assert_eq!(DType::from_data_type(DType::F16.data_type()), Some(DType::F16));
    /// ```
    pub fn data_type(self) -> DataType {
        // SAFETY: never fails.
        DataType::from_raw(unsafe { sys::kvc_dtype_to_data_type(self.raw()) })
    }

    /// The storage dtype of a DLPack triple (`kvc_dtype_from_data_type`), or
    /// `None` if kvcache cannot store it.
    pub fn from_data_type(data_type: DataType) -> Option<DType> {
        // SAFETY: never fails.
        DType::from_raw(unsafe { sys::kvc_dtype_from_data_type(data_type.raw()) })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
        })
    }
}

/// A DLPack `DLDataType`: `{code, bits, lanes}` (`kvc_data_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataType {
    /// `KVC_TYPE_CODE_*`: 0 int, 1 uint, 2 float, 4 bfloat.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes; kvcache accepts 1.
    pub lanes: u16,
}

impl DataType {
    /// `KVC_TYPE_CODE_INT`.
    pub const CODE_INT: u8 = sys::KVC_TYPE_CODE_INT;
    /// `KVC_TYPE_CODE_UINT`.
    pub const CODE_UINT: u8 = sys::KVC_TYPE_CODE_UINT;
    /// `KVC_TYPE_CODE_FLOAT`.
    pub const CODE_FLOAT: u8 = sys::KVC_TYPE_CODE_FLOAT;
    /// `KVC_TYPE_CODE_BFLOAT`.
    pub const CODE_BFLOAT: u8 = sys::KVC_TYPE_CODE_BFLOAT;

    pub(crate) fn from_raw(raw: sys::kvc_data_type) -> DataType {
        DataType {
            code: raw.code,
            bits: raw.bits,
            lanes: raw.lanes,
        }
    }

    pub(crate) fn raw(self) -> sys::kvc_data_type {
        sys::kvc_data_type {
            code: self.code,
            bits: self.bits,
            lanes: self.lanes,
        }
    }

    /// The storage dtype, if kvcache can store this type.
    pub fn dtype(self) -> Option<DType> {
        DType::from_data_type(self)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype() {
            Some(dtype) => write!(f, "{dtype}"),
            None => write!(
                f,
                "{{code {}, bits {}, lanes {}}}",
                self.code, self.bits, self.lanes
            ),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A Rust element type kvcache stores: `f32`, [`half::f16`] or [`half::bf16`].
///
/// Every bit pattern of these types is a valid value, which is what lets
/// views hand out `&[T]` into cache memory.
pub trait Element: sealed::Sealed + Copy + Send + Sync + fmt::Debug + 'static {
    /// The matching storage dtype.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
}
