//! DLPack exchange (feature `dlpack`): cache views out as
//! `DLManagedTensorVersioned`, DLPack tensors in as [`TensorRef`] inputs.
//!
//! The types are declared here from the DLPack 1.1 specification
//! (`dlpack.h`); `kvc_tensor` is laid out exactly as `DLTensor`, so neither
//! direction converts anything.
//!
//! ```
//! use kvcache::{Cache, TensorRef};
//!
//! let mut cache = Cache::new()?;
//! let data: Vec<f32> = (0..8).map(|x| x as f32).collect();
//! let shape = [1, 2, 1, 4];
//! let k = TensorRef::new(&data, &shape)?;
//! let kv = cache.update(0, &k, &k)?;
//!
//! // Zero-copy export: valid while the view is (the borrow says so).
//! let exported = kv.key.to_dlpack()?;
//! let tensor = &exported.managed().dl_tensor;
//! assert_eq!(tensor.ndim, 4);
//! assert_ne!(exported.managed().flags & kvcache::dlpack::DLPACK_FLAG_BITMASK_READ_ONLY, 0);
//!
//! // A copy owns its data and outlives the cache.
//! let copy = kv.value.to_dlpack_copy()?;
//! drop(exported);
//! drop(cache);
//! // SAFETY: the copy owns its memory, which lives as long as `copy`.
//! let back = unsafe { TensorRef::from_dlpack(&copy.managed().dl_tensor) }?;
//! let mut other = Cache::new()?;
//! assert_eq!(other.update(0, &back, &back)?.key.to_vec::<f32>()?, data);
//! # Ok::<(), kvcache::Error>(())
//! ```

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use kvcache_sys as sys;

use crate::error::{Result, invalid_argument};
use crate::tensor::{TensorRef, TensorView};

/// The DLPack major version these declarations follow.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The DLPack minor version these declarations follow.
pub const DLPACK_MINOR_VERSION: u32 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write the data.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the data is a copy owned by the tensor.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// `DLDeviceType` (1 CPU, 2 CUDA, 3 CUDA host, 10 ROCm, 11 ROCm host, ...).
    pub device_type: i32,
    /// Device ordinal.
    pub device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    /// `DLDataTypeCode`.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes.
    pub lanes: u16,
}

/// `DLTensor`: the same layout as `kvc_tensor`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// Base pointer; the first element is at `data + byte_offset`.
    pub data: *mut c_void,
    /// The device.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` entries.
    pub shape: *mut i64,
    /// `ndim` entries in elements, or NULL for compact row-major.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensorVersioned`: a tensor plus the deleter that frees it.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The DLPack version the producer follows.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor; called once by the consumer.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*`.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

const _: () = {
    // DLTensor and kvc_tensor are the same layout.
    assert!(std::mem::size_of::<DLTensor>() == std::mem::size_of::<sys::kvc_tensor>());
    assert!(std::mem::align_of::<DLTensor>() == std::mem::align_of::<sys::kvc_tensor>());
    assert!(std::mem::offset_of!(DLTensor, shape) == std::mem::offset_of!(sys::kvc_tensor, shape));
    assert!(
        std::mem::offset_of!(DLTensor, byte_offset)
            == std::mem::offset_of!(sys::kvc_tensor, byte_offset)
    );
};

/// What the deleter frees: the managed tensor, its shape and strides, and a
/// copy of the data when there is one.
struct Context {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _data: Option<Vec<u8>>,
}

unsafe extern "C" fn delete_context(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the first field of a leaked Box<Context> (repr
    // Rust, so go through manager_ctx, which points at the Box itself).
    unsafe {
        let ctx = (*managed).manager_ctx.cast::<Context>();
        drop(Box::from_raw(ctx));
    }
}

/// An exported DLPack tensor. Dropping it calls its deleter, unless
/// [`into_raw`](DlpackTensor::into_raw) handed it to a consumer.
///
/// `'c` is the borrow of the cache for zero-copy exports
/// ([`TensorView::to_dlpack`]) and `'static` for copies
/// ([`TensorView::to_dlpack_copy`]).
pub struct DlpackTensor<'c> {
    raw: *mut DLManagedTensorVersioned,
    _view: PhantomData<&'c ()>,
}

// SAFETY: the tensor owns its context; zero-copy data is only read and is
// borrowed from the cache for 'c, like a TensorView (which holds no thread
// affinity either).
unsafe impl Send for DlpackTensor<'_> {}

impl<'c> DlpackTensor<'c> {
    /// Exports `view`'s metadata with `data` as a compact copy of its
    /// elements, or with the view's own memory (then `'c` must not outlive
    /// the view's borrow: the callers pick it).
    fn new(view: &TensorView<'_>, data: Option<Vec<u8>>, flags: u64) -> DlpackTensor<'c> {
        let mut raw = *view.as_raw();
        let shape = view.shape().to_vec();
        let mut strides = view.strides().into_owned();
        if let Some(bytes) = &data {
            raw.data = bytes.as_ptr() as *mut c_void;
            raw.byte_offset = 0;
            let mut expected = 1i64;
            for dim in (0..shape.len()).rev() {
                strides[dim] = expected;
                expected *= shape[dim];
            }
        }
        let ctx = Box::new(Context {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion {
                    major: DLPACK_MAJOR_VERSION,
                    minor: DLPACK_MINOR_VERSION,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_context),
                flags,
                dl_tensor: DLTensor {
                    data: raw.data,
                    device: DLDevice {
                        device_type: raw.device.device_type,
                        device_id: raw.device.device_id,
                    },
                    ndim: raw.ndim,
                    dtype: DLDataType {
                        code: raw.dtype.code,
                        bits: raw.dtype.bits,
                        lanes: raw.dtype.lanes,
                    },
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: raw.byte_offset,
                },
            },
            shape,
            strides,
            _data: data,
        });
        let ctx = Box::into_raw(ctx);
        // SAFETY: `ctx` is a live allocation we own; the vectors' buffers do
        // not move while the Box lives.
        unsafe {
            (*ctx).managed.manager_ctx = ctx.cast();
            (*ctx).managed.dl_tensor.shape = (*ctx).shape.as_mut_ptr();
            (*ctx).managed.dl_tensor.strides = (*ctx).strides.as_mut_ptr();
            DlpackTensor {
                raw: &mut (*ctx).managed,
                _view: PhantomData,
            }
        }
    }

    /// The managed tensor.
    pub fn managed(&self) -> &DLManagedTensorVersioned {
        // SAFETY: live until drop or into_raw.
        unsafe { &*self.raw }
    }

    /// This tensor as an input of another update (borrowing it).
    pub fn as_input(&self) -> TensorRef<'_> {
        // SAFETY: DLTensor and kvc_tensor have one layout (checked above); the
        // data, shape and strides live as long as `self`.
        let raw =
            unsafe { &*(&self.managed().dl_tensor as *const DLTensor).cast::<sys::kvc_tensor>() };
        *TensorRef::from_raw_ref(raw)
    }

    /// Hands the tensor to a DLPack consumer, which must call its deleter.
    ///
    /// For a zero-copy export the data stays valid only as long as the view
    /// it came from (until the next mutating call on the cache); the consumer
    /// must be done with it by then.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl Drop for DlpackTensor<'_> {
    fn drop(&mut self) {
        // SAFETY: we still own the tensor; its deleter frees it once.
        unsafe {
            if let Some(deleter) = (*self.raw).deleter {
                deleter(self.raw);
            }
        }
    }
}

impl fmt::Debug for DlpackTensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DlpackTensor")
            .field("managed", self.managed())
            .finish()
    }
}

impl<'c> TensorView<'c> {
    /// Exports the view as a DLPack tensor without copying: read-only, and
    /// borrowed from the cache like the view itself.
    pub fn to_dlpack(&self) -> Result<DlpackTensor<'c>> {
        Ok(DlpackTensor::new(self, None, DLPACK_FLAG_BITMASK_READ_ONLY))
    }

    /// Exports a compact copy of the view (host memory only): owned by the
    /// DLPack tensor, independent of the cache.
    pub fn to_dlpack_copy(&self) -> Result<DlpackTensor<'static>> {
        let bytes = self.copy_bytes()?;
        Ok(DlpackTensor::new(
            self,
            Some(bytes),
            DLPACK_FLAG_BITMASK_IS_COPIED,
        ))
    }

    /// The elements as compact row-major bytes (host memory only).
    fn copy_bytes(&self) -> Result<Vec<u8>> {
        use crate::dtype::DType;
        let bytes: Vec<u8> = match self.dtype() {
            Some(DType::F32) => self
                .to_vec::<f32>()?
                .iter()
                .flat_map(|x| x.to_ne_bytes())
                .collect(),
            Some(DType::F16) => self
                .to_vec::<half::f16>()?
                .iter()
                .flat_map(|x| x.to_ne_bytes())
                .collect(),
            Some(DType::BF16) => self
                .to_vec::<half::bf16>()?
                .iter()
                .flat_map(|x| x.to_ne_bytes())
                .collect(),
            None => {
                return Err(invalid_argument(format!(
                    "TensorView::to_dlpack_copy: cannot copy elements of {}",
                    self.data_type()
                )));
            }
        };
        Ok(bytes)
    }
}

impl<'a> TensorRef<'a> {
    /// An input tensor over a DLPack `DLTensor` (zero-copy).
    ///
    /// # Safety
    /// For `'a`, the tensor's data (on its device), shape and strides must
    /// stay valid and unchanged, as [`TensorRef::from_raw_parts`] requires.
    pub unsafe fn from_dlpack(tensor: &'a DLTensor) -> Result<TensorRef<'a>> {
        if tensor.ndim < 0 || tensor.ndim > 6 || (tensor.ndim > 0 && tensor.shape.is_null()) {
            return Err(invalid_argument(format!(
                "TensorRef::from_dlpack: ndim is {} with shape {:p}; kvcache takes 0 to 6 \
                 dimensions with a shape",
                tensor.ndim, tensor.shape
            )));
        }
        // SAFETY: same layout (checked at compile time); validity is the
        // caller's promise.
        let raw = unsafe { &*(tensor as *const DLTensor).cast::<sys::kvc_tensor>() };
        Ok(*TensorRef::from_raw_ref(raw))
    }

    /// An input tensor over a DLPack `DLManagedTensorVersioned` (zero-copy),
    /// after checking its major version.
    ///
    /// # Safety
    /// As [`from_dlpack`](Self::from_dlpack); the managed tensor is only
    /// borrowed (its deleter is not called).
    pub unsafe fn from_dlpack_versioned(
        managed: &'a DLManagedTensorVersioned,
    ) -> Result<TensorRef<'a>> {
        if managed.version.major != DLPACK_MAJOR_VERSION {
            return Err(invalid_argument(format!(
                "TensorRef::from_dlpack_versioned: DLPack major version {} is not {}",
                managed.version.major, DLPACK_MAJOR_VERSION
            )));
        }
        // SAFETY: forwarded.
        unsafe { TensorRef::from_dlpack(&managed.dl_tensor) }
    }
}
