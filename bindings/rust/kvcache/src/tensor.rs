//! Tensors crossing the ABI: borrowed inputs ([`TensorRef`]) and views into
//! cache-owned memory ([`TensorView`], [`KvView`]).
//!
//! Both are laid out exactly as the C `kvc_tensor` (and so as DLPack's
//! `DLTensor`): passing one to the library costs nothing, and
//! [`Cache::update_all`](crate::CacheRef::update_all) hands the caller's slice
//! of inputs to C as it is.

use std::borrow::Cow;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use kvcache_sys as sys;

use crate::device::Device;
use crate::dtype::{DType, DataType, Element};
use crate::error::{Error, ErrorCode, Result, invalid_argument};

/// The most dimensions kvcache accepts anywhere (recurrent states go up to 6).
const MAX_NDIM: usize = 6;

fn product(shape: &[i64]) -> Option<i64> {
    shape.iter().try_fold(
        1i64,
        |acc, &n| if n < 0 { None } else { acc.checked_mul(n) },
    )
}

/// A borrowed input tensor: a pointer, a shape, optional strides (in
/// elements), a dtype and a device, laid out as `kvc_tensor`.
///
/// The data and the shape (and strides) are borrowed for `'a`; the library
/// only reads them during the call they are passed to and copies what it
/// keeps. Key/value inputs are 4-D `[batch, num_kv_heads, seq, head_dim]`.
///
/// ```
/// use kvcache::TensorRef;
///
/// let data = vec![0.5f32; 2 * 8 * 3 * 64];
/// let shape = [2, 8, 3, 64];
/// let key = TensorRef::new(&data, &shape)?;
/// assert_eq!(key.shape(), &[2, 8, 3, 64]);
/// assert_eq!(key.dtype(), Some(kvcache::DType::F32));
///
/// // The length must match the shape.
/// let err = TensorRef::new(&data[1..], &shape).unwrap_err();
/// assert_eq!(err.code(), kvcache::ErrorCode::InvalidArgument);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    raw: sys::kvc_tensor,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a TensorRef is a shared borrow of its data, shape and strides (like
// `&'a [T]`, which is Send and Sync); the library only reads through it.
unsafe impl Send for TensorRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for TensorRef<'_> {}

impl<'a> TensorRef<'a> {
    /// A compact row-major tensor over `data` with `shape`: the length of
    /// `data` must be the product of `shape`.
    pub fn new<T: Element>(data: &'a [T], shape: &'a [i64]) -> Result<TensorRef<'a>> {
        check_ndim("TensorRef::new", shape)?;
        match product(shape) {
            Some(n) if n as u128 == data.len() as u128 => {}
            Some(n) => {
                return Err(invalid_argument(format!(
                    "TensorRef::new: shape {shape:?} holds {n} elements but data has {}; they \
                     must be equal",
                    data.len()
                )));
            }
            None => {
                return Err(invalid_argument(format!(
                    "TensorRef::new: shape {shape:?} has a negative or overflowing dimension"
                )));
            }
        }
        // SAFETY: data covers exactly the elements of a compact `shape`.
        Ok(unsafe {
            TensorRef::from_raw_parts(
                data.as_ptr().cast(),
                Device::CPU,
                T::DTYPE.data_type(),
                shape,
                None,
                0,
            )
        })
    }

    /// A strided tensor over `data`: element `i` is at
    /// `data[sum(i[d] * strides[d])]`. Strides are in elements and may be 0
    /// (broadcast); every reachable element must lie inside `data`.
    ///
    /// ```
    /// use kvcache::TensorRef;
    /// // One token of 4 heads that all share the same 2 values (stride 0).
    /// let data = [1.0f32, 2.0];
    /// let (shape, strides) = ([1, 4, 1, 2], [0, 0, 0, 1]);
    /// let key = TensorRef::with_strides(&data, &shape, &strides)?;
    /// assert_eq!(key.strides(), Some(&strides[..]));
    /// assert!(TensorRef::with_strides(&data, &shape, &[0, 1, 0, 1]).is_err());
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn with_strides<T: Element>(
        data: &'a [T],
        shape: &'a [i64],
        strides: &'a [i64],
    ) -> Result<TensorRef<'a>> {
        const FN: &str = "TensorRef::with_strides";
        check_ndim(FN, shape)?;
        if strides.len() != shape.len() {
            return Err(invalid_argument(format!(
                "{FN}: strides has {} entries but shape has {}; they must be equal",
                strides.len(),
                shape.len()
            )));
        }
        if product(shape).is_none() {
            return Err(invalid_argument(format!(
                "{FN}: shape {shape:?} has a negative or overflowing dimension"
            )));
        }
        if !shape.contains(&0) {
            let (mut low, mut high) = (0i128, 0i128);
            for (&n, &s) in shape.iter().zip(strides) {
                let reach = (n as i128 - 1) * s as i128;
                if reach < 0 {
                    low += reach;
                } else {
                    high += reach;
                }
            }
            if low < 0 || high >= data.len() as i128 {
                return Err(invalid_argument(format!(
                    "{FN}: shape {shape:?} with strides {strides:?} reaches elements {low} to \
                     {high} but data has {}; every element must lie inside data",
                    data.len()
                )));
            }
        }
        // SAFETY: every element reachable through shape and strides lies in data.
        Ok(unsafe {
            TensorRef::from_raw_parts(
                data.as_ptr().cast(),
                Device::CPU,
                T::DTYPE.data_type(),
                shape,
                Some(strides),
                0,
            )
        })
    }

    /// A compact row-major tensor of `dtype` over raw bytes (for callers that
    /// hold untyped buffers). `bytes` must be aligned for `dtype` and hold
    /// exactly the product of `shape` elements.
    ///
    /// ```
    /// use kvcache::{DType, TensorRef};
    /// let words = [0u16; 8]; // u16 storage: aligned for 2-byte elements
    /// let bytes: &[u8] = bytemuck_free_cast(&words);
    /// # fn bytemuck_free_cast(w: &[u16]) -> &[u8] {
    /// #     unsafe { std::slice::from_raw_parts(w.as_ptr().cast(), w.len() * 2) }
    /// # }
    /// let t = TensorRef::from_bytes(bytes, DType::BF16, &[1, 2, 1, 4])?;
    /// assert_eq!(t.dtype(), Some(DType::BF16));
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn from_bytes(bytes: &'a [u8], dtype: DType, shape: &'a [i64]) -> Result<TensorRef<'a>> {
        const FN: &str = "TensorRef::from_bytes";
        check_ndim(FN, shape)?;
        let size = dtype.size();
        let want = product(shape).and_then(|n| n.checked_mul(size as i64));
        if want.map(|n| n as u128) != Some(bytes.len() as u128) {
            return Err(invalid_argument(format!(
                "{FN}: shape {shape:?} of {dtype} needs {want:?} bytes but bytes has {}; they \
                 must be equal",
                bytes.len()
            )));
        }
        if (bytes.as_ptr() as usize) % size != 0 {
            return Err(invalid_argument(format!(
                "{FN}: bytes starts at {:p}, which is not aligned to {size} bytes for {dtype}",
                bytes.as_ptr()
            )));
        }
        // SAFETY: the bytes cover exactly the compact shape, aligned.
        Ok(unsafe {
            TensorRef::from_raw_parts(
                bytes.as_ptr().cast(),
                Device::CPU,
                dtype.data_type(),
                shape,
                None,
                0,
            )
        })
    }

    /// A tensor descriptor over memory the caller vouches for: device memory
    /// (CUDA, ROCm), or any layout the safe constructors refuse.
    ///
    /// # Safety
    /// For `'a`, every element reachable from `data + byte_offset` through
    /// `shape` and `strides` (compact row-major when `None`) must be readable
    /// memory of `data_type` on `device`, not written by anyone else during
    /// the calls it is passed to. `strides`, when given, has as many entries
    /// as `shape`.
    pub unsafe fn from_raw_parts(
        data: *const c_void,
        device: Device,
        data_type: DataType,
        shape: &'a [i64],
        strides: Option<&'a [i64]>,
        byte_offset: u64,
    ) -> TensorRef<'a> {
        TensorRef {
            raw: sys::kvc_tensor {
                data: data.cast_mut(),
                device: device.raw(),
                ndim: shape.len() as i32,
                dtype: data_type.raw(),
                // The library takes `const kvc_tensor*` and never writes through these.
                shape: shape.as_ptr().cast_mut(),
                strides: strides.map_or(std::ptr::null_mut(), |s| s.as_ptr().cast_mut()),
                byte_offset,
            },
            _borrow: PhantomData,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &'a [i64] {
        // SAFETY: `shape` borrows `ndim` entries for 'a (set by the constructors).
        unsafe { slice_or_empty(self.raw.shape, self.raw.ndim) }
    }

    /// The strides in elements, or `None` for compact row-major.
    pub fn strides(&self) -> Option<&'a [i64]> {
        if self.raw.strides.is_null() {
            None
        } else {
            // SAFETY: as for shape.
            Some(unsafe { slice_or_empty(self.raw.strides, self.raw.ndim) })
        }
    }

    /// The DLPack element type.
    pub fn data_type(&self) -> DataType {
        DataType::from_raw(self.raw.dtype)
    }

    /// The storage dtype, if kvcache can store the element type.
    pub fn dtype(&self) -> Option<DType> {
        self.data_type().dtype()
    }

    /// The device of the data.
    pub fn device(&self) -> Device {
        Device::from_raw(self.raw.device)
    }

    /// The raw descriptor, for calling `kvcache_sys` directly.
    pub fn as_raw(&self) -> &sys::kvc_tensor {
        &self.raw
    }

    /// View the raw descriptor as this type.
    #[cfg(feature = "dlpack")]
    pub(crate) fn from_raw_ref(raw: &sys::kvc_tensor) -> &TensorRef<'a> {
        // SAFETY: TensorRef is repr(transparent) over kvc_tensor.
        unsafe { &*(raw as *const sys::kvc_tensor).cast::<TensorRef<'a>>() }
    }
}

impl fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("data_type", &self.data_type())
            .field("device", &self.device())
            .field("byte_offset", &self.raw.byte_offset)
            .finish()
    }
}

fn check_ndim(function: &str, shape: &[i64]) -> Result<()> {
    if shape.len() > MAX_NDIM {
        return Err(invalid_argument(format!(
            "{function}: shape has {} dimensions; kvcache tensors have at most {MAX_NDIM}",
            shape.len()
        )));
    }
    Ok(())
}

/// # Safety
/// For `n > 0`, `ptr` points to `n` readable `i64` valid for `'x`.
unsafe fn slice_or_empty<'x>(ptr: *const i64, n: i32) -> &'x [i64] {
    if n <= 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(ptr, n as usize) }
    }
}

/// A view into cache-owned memory, borrowed from the cache for `'c`.
///
/// The C contract is "valid until the next call that mutates that cache";
/// here the view borrows the cache, so the borrow checker refuses any
/// mutating call while a view is alive:
///
/// ```compile_fail
/// # use kvcache::{Cache, TensorRef};
/// # let mut cache = Cache::new().unwrap();
/// # let data = [0f32; 4];
/// # let shape = [1, 1, 1, 4];
/// # let k = TensorRef::new(&data, &shape).unwrap();
/// let kv = cache.update(0, &k, &k).unwrap();
/// cache.crop(-1).unwrap(); // error: `cache` is still borrowed by `kv`
/// println!("{:?}", kv.key.shape());
/// ```
///
/// Reading elements needs host memory (CPU, or pinned host memory) and the
/// matching element type; views of K/V have `head_dim` contiguous.
///
/// ```
/// use kvcache::{Cache, TensorRef};
///
/// let mut cache = Cache::new()?;
/// let data: Vec<f32> = (0..2 * 3 * 4).map(|x| x as f32).collect();
/// let shape = [1, 2, 3, 4]; // batch 1, 2 heads, 3 tokens, head_dim 4
/// let k = TensorRef::new(&data, &shape)?;
/// let kv = cache.update(0, &k, &k)?;
/// assert_eq!(kv.key.shape(), &[1, 2, 3, 4]);
/// assert_eq!(kv.key.get::<f32>(&[0, 1, 2, 3])?, 23.0);
/// assert_eq!(kv.key.token::<f32>(0, 1, 0)?, &[12.0, 13.0, 14.0, 15.0]);
/// assert_eq!(kv.value.to_vec::<f32>()?, data);
/// # Ok::<(), kvcache::Error>(())
/// ```
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct TensorView<'c> {
    raw: sys::kvc_tensor,
    _cache: PhantomData<&'c ()>,
}

impl<'c> TensorView<'c> {
    /// # Safety
    /// `raw` describes memory (and shape/strides arrays) that stays valid
    /// and unchanged for `'c`.
    pub(crate) unsafe fn from_raw(raw: sys::kvc_tensor) -> TensorView<'c> {
        TensorView {
            raw,
            _cache: PhantomData,
        }
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.raw.ndim.max(0) as usize
    }

    /// The shape (owned by the cache, valid for `'c`).
    pub fn shape(&self) -> &'c [i64] {
        // SAFETY: the library keeps `ndim` shape entries alive with the view.
        unsafe { slice_or_empty(self.raw.shape, self.raw.ndim) }
    }

    /// The strides in elements: the library's when it gives them, else the
    /// compact row-major ones.
    pub fn strides(&self) -> Cow<'c, [i64]> {
        if self.raw.strides.is_null() {
            Cow::Owned(compact_strides(self.shape()))
        } else {
            // SAFETY: as for shape.
            Cow::Borrowed(unsafe { slice_or_empty(self.raw.strides, self.raw.ndim) })
        }
    }

    /// The stride of dimension `dim` in elements (panics if `dim >= ndim`).
    pub fn stride(&self, dim: usize) -> i64 {
        assert!(
            dim < self.ndim(),
            "dimension {dim} of a {}-D view",
            self.ndim()
        );
        if self.raw.strides.is_null() {
            self.shape()[dim + 1..].iter().product()
        } else {
            // SAFETY: dim < ndim.
            unsafe { *self.raw.strides.add(dim) }
        }
    }

    /// The number of elements.
    pub fn numel(&self) -> i64 {
        self.shape().iter().product()
    }

    /// The DLPack element type.
    pub fn data_type(&self) -> DataType {
        DataType::from_raw(self.raw.dtype)
    }

    /// The storage dtype.
    pub fn dtype(&self) -> Option<DType> {
        self.data_type().dtype()
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        Device::from_raw(self.raw.device)
    }

    /// The base pointer (`data`); the first element is at `byte_offset()`
    /// bytes from it. NULL for a state that has not been allocated yet.
    pub fn data_ptr(&self) -> *const c_void {
        self.raw.data
    }

    /// Bytes from `data_ptr()` to the first element.
    pub fn byte_offset(&self) -> u64 {
        self.raw.byte_offset
    }

    /// Whether the elements are compact row-major in memory.
    pub fn is_contiguous(&self) -> bool {
        let shape = self.shape();
        let mut expected = 1i64;
        for dim in (0..shape.len()).rev() {
            if shape[dim] != 1 && self.stride(dim) != expected {
                return false;
            }
            expected *= shape[dim];
        }
        true
    }

    /// The raw descriptor, for calling `kvcache_sys` directly.
    pub fn as_raw(&self) -> &sys::kvc_tensor {
        &self.raw
    }

    /// This view as an input tensor, e.g. to copy it into another cache.
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut a = Cache::new()?;
    /// let mut b = Cache::new()?;
    /// let data = [1.0f32; 8];
    /// let shape = [1, 2, 1, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let kv = a.update(0, &k, &k)?;
    /// let copied = b.update(0, &kv.key.as_input(), &kv.value.as_input())?;
    /// assert_eq!(copied.key.to_vec::<f32>()?, data);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn as_input(&self) -> TensorRef<'c> {
        let shape = self.shape();
        let strides = match self.strides() {
            Cow::Borrowed(strides) => Some(strides),
            // Compact: no strides needed.
            Cow::Owned(_) => None,
        };
        // SAFETY: the view's memory, shape and strides stay valid for 'c.
        unsafe {
            TensorRef::from_raw_parts(
                self.raw.data,
                self.device(),
                self.data_type(),
                shape,
                strides,
                self.raw.byte_offset,
            )
        }
    }

    /// Checks that `T` can read this view's elements on the host.
    fn readable<T: Element>(&self, function: &str) -> Result<()> {
        if !self.device().kind.is_host() {
            return Err(Error::new(
                ErrorCode::DeviceMismatch,
                format!(
                    "TensorView::{function}: the view lives on {}; only host memory can be read \
                     as a slice (copy it to the host with your device API)",
                    self.device()
                ),
            ));
        }
        if self.dtype() != Some(T::DTYPE) {
            return Err(Error::new(
                ErrorCode::DtypeMismatch,
                format!(
                    "TensorView::{function}: the view holds {} but {} was asked for",
                    self.data_type(),
                    T::DTYPE
                ),
            ));
        }
        if self.raw.data.is_null() && self.numel() > 0 {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("TensorView::{function}: the view has no data"),
            ));
        }
        Ok(())
    }

    /// A slice of `len` elements from `offset`, after checking alignment.
    ///
    /// # Safety
    /// The `len` elements from `offset` are readable host memory of `T`
    /// inside this view, valid for `'c`.
    unsafe fn slice_at<T: Element>(
        &self,
        function: &str,
        offset: i64,
        len: usize,
    ) -> Result<&'c [T]> {
        let ptr = self.element_ptr::<T>(offset);
        if (ptr as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "TensorView::{function}: the view's data at {ptr:p} is not aligned for {}",
                    T::DTYPE
                ),
            ));
        }
        // SAFETY: guaranteed by the caller; alignment checked above.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Pointer to the element at `offset` elements from the first one.
    fn element_ptr<T>(&self, offset: i64) -> *const T {
        // The library's views keep every element inside its allocation.
        (self.raw.data as *const u8)
            .wrapping_add(self.raw.byte_offset as usize)
            .cast::<T>()
            .wrapping_offset(offset as isize)
    }

    /// Element offset of `index`, or an error naming the bad index.
    fn offset_of(&self, function: &str, index: &[i64]) -> Result<i64> {
        let shape = self.shape();
        if index.len() != shape.len() {
            return Err(invalid_argument(format!(
                "TensorView::{function}: index {index:?} has {} entries but the view has {} \
                 dimensions",
                index.len(),
                shape.len()
            )));
        }
        let mut offset = 0i64;
        for (dim, (&i, &n)) in index.iter().zip(shape).enumerate() {
            if i < 0 || i >= n {
                return Err(Error::new(
                    ErrorCode::OutOfRange,
                    format!(
                        "TensorView::{function}: index {index:?} is outside shape {shape:?} (dimension {dim})"
                    ),
                ));
            }
            offset += i * self.stride(dim);
        }
        Ok(offset)
    }

    /// The element at `index` (one entry per dimension).
    pub fn get<T: Element>(&self, index: &[i64]) -> Result<T> {
        self.readable::<T>("get")?;
        let offset = self.offset_of("get", index)?;
        // SAFETY: host memory of T (checked), the index is inside the shape, and
        // the library keeps every element of a view readable for 'c.
        Ok(unsafe { self.element_ptr::<T>(offset).read_unaligned() })
    }

    /// All elements, copied in row-major order: one `memcpy` per run of
    /// consecutive elements (a dynamic layer's view is one run per head, a
    /// compact view one run in all), so a strided view copies at memory
    /// speed too.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.readable::<T>("to_vec")?;
        // SAFETY: host memory of T (checked), kept readable for 'c.
        Ok(unsafe { self.copy_elements::<T>() })
    }

    /// The elements in row-major order, copied a run at a time: the
    /// innermost dimensions that lie consecutively in memory (dimensions of
    /// size 1 whatever their stride) make one run.
    ///
    /// # Safety
    /// The view is host memory of `T` elements, readable for `'c`, with data
    /// when it has elements.
    pub(crate) unsafe fn copy_elements<T: Copy>(&self) -> Vec<T> {
        let shape = self.shape();
        let numel = self.numel().max(0) as usize;
        let mut out = Vec::<T>::with_capacity(numel);
        if numel == 0 {
            return out;
        }
        let strides = self.strides();
        let mut outer = shape.len();
        let mut run = 1i64;
        while outer > 0 && (shape[outer - 1] == 1 || strides[outer - 1] == run) {
            run *= shape[outer - 1];
            outer -= 1;
        }
        let run_bytes = run as usize * std::mem::size_of::<T>();
        // Bytes, not T: the library's views are aligned, but nothing here needs them to be.
        let mut dst = out.as_mut_ptr().cast::<u8>();
        let mut index = vec![0i64; outer];
        let mut offset = 0i64;
        loop {
            // SAFETY: `offset` is an index inside the shape (the caller
            // vouches for the memory), and `out` has room for `numel`
            // elements, of which the runs copied so far filled the front.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.element_ptr::<T>(offset).cast::<u8>(),
                    dst,
                    run_bytes,
                );
                dst = dst.add(run_bytes);
            }
            // The next run: an odometer over the outer dimensions.
            let mut dim = outer;
            loop {
                if dim == 0 {
                    // SAFETY: the runs wrote every one of the `numel` elements.
                    unsafe { out.set_len(numel) };
                    return out;
                }
                dim -= 1;
                index[dim] += 1;
                offset += strides[dim];
                if index[dim] < shape[dim] {
                    break;
                }
                offset -= strides[dim] * shape[dim];
                index[dim] = 0;
            }
        }
    }

    /// All elements as one slice, when the view is compact row-major (static
    /// layers' buffers, recurrent states; dynamic layers' views are strided
    /// along the sequence, use [`head`](Self::head) or
    /// [`token`](Self::token) there).
    pub fn as_slice<T: Element>(&self) -> Result<&'c [T]> {
        self.readable::<T>("as_slice")?;
        if !self.is_contiguous() {
            return Err(invalid_argument(format!(
                "TensorView::as_slice: the view (shape {:?}, strides {:?}) is not compact; use \
                 head(), token() or to_vec()",
                self.shape(),
                self.strides()
            )));
        }
        let numel = self.numel().max(0) as usize;
        if numel == 0 {
            return Ok(&[]);
        }
        // SAFETY: compact host memory of `numel` elements of T, valid for 'c.
        unsafe { self.slice_at("as_slice", 0, numel) }
    }

    /// The `[seq, head_dim]` block of batch row `batch` and head `head` of a
    /// 4-D K/V view, as one row-major slice (zero-copy: kvcache keeps each
    /// head's tokens consecutive with `head_dim` contiguous).
    ///
    /// ```
    /// # use kvcache::{Cache, TensorRef};
    /// let mut cache = Cache::new()?;
    /// let data: Vec<f32> = (0..16).map(|x| x as f32).collect();
    /// let shape = [1, 2, 2, 4];
    /// let k = TensorRef::new(&data, &shape)?;
    /// let kv = cache.update(0, &k, &k)?;
    /// assert_eq!(kv.key.head::<f32>(0, 1)?, &data[8..16]);
    /// # Ok::<(), kvcache::Error>(())
    /// ```
    pub fn head<T: Element>(&self, batch: i64, head: i64) -> Result<&'c [T]> {
        self.readable::<T>("head")?;
        let shape = self.shape();
        if shape.len() != 4 {
            return Err(invalid_argument(format!(
                "TensorView::head: the view has {} dimensions; K/V views have 4",
                shape.len()
            )));
        }
        if batch < 0 || batch >= shape[0] || head < 0 || head >= shape[1] {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!(
                    "TensorView::head: (batch {batch}, head {head}) is outside shape {shape:?}"
                ),
            ));
        }
        let (seq, dim) = (shape[2], shape[3]);
        if seq == 0 || dim == 0 {
            return Ok(&[]);
        }
        let offset = batch * self.stride(0) + head * self.stride(1);
        if self.stride(3) != 1 || (seq > 1 && self.stride(2) != dim) {
            return Err(invalid_argument(format!(
                "TensorView::head: the view's strides {:?} do not keep a head's tokens \
                 consecutive; use to_vec()",
                self.strides()
            )));
        }
        // SAFETY: `seq * dim` consecutive host elements of T from an index
        // inside the shape, valid for 'c.
        unsafe { self.slice_at("head", offset, (seq * dim) as usize) }
    }

    /// The `head_dim` values of one token of a 4-D K/V view (zero-copy).
    pub fn token<T: Element>(&self, batch: i64, head: i64, position: i64) -> Result<&'c [T]> {
        self.readable::<T>("token")?;
        let shape = self.shape();
        if shape.len() != 4 {
            return Err(invalid_argument(format!(
                "TensorView::token: the view has {} dimensions; K/V views have 4",
                shape.len()
            )));
        }
        if shape[3] == 0 {
            return Ok(&[]);
        }
        let offset = self.offset_of("token", &[batch, head, position, 0])?;
        if self.stride(3) != 1 {
            return Err(invalid_argument(
                "TensorView::token: head_dim is not contiguous in this view; use get()",
            ));
        }
        // SAFETY: head_dim consecutive host elements of T inside the view.
        unsafe { self.slice_at("token", offset, shape[3] as usize) }
    }
}

impl fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorView")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("data_type", &self.data_type())
            .field("device", &self.device())
            .field("byte_offset", &self.raw.byte_offset)
            .finish()
    }
}

fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for dim in (0..shape.len().saturating_sub(1)).rev() {
        strides[dim] = strides[dim + 1] * shape[dim + 1];
    }
    strides
}

/// The keys and values attention must use now (`kvc_kv`): two views into
/// cache-owned memory, valid while the cache stays borrowed.
///
/// The borrow is what keeps them from dangling: neither a view nor a slice
/// read out of it outlives the cache, or a later mutating call (restore,
/// reset, another update, any `&mut` method), or a mutation of an
/// encoder-decoder pair through either half.
///
/// ```compile_fail
/// # use kvcache::{Cache, TensorRef};
/// # let data = [0f32; 4];
/// # let shape = [1, 1, 1, 4];
/// # let k = TensorRef::new(&data, &shape).unwrap();
/// let mut cache = Cache::new().unwrap();
/// let kv = cache.update(0, &k, &k).unwrap();
/// drop(cache); // error: `cache` is borrowed by `kv`
/// println!("{:?}", kv.key.shape());
/// ```
///
/// ```compile_fail
/// # use kvcache::{Cache, TensorRef};
/// # let data = [0f32; 4];
/// # let shape = [1, 1, 1, 4];
/// # let k = TensorRef::new(&data, &shape).unwrap();
/// let mut cache = Cache::new().unwrap();
/// cache.update(0, &k, &k).unwrap();
/// let keys: &[f32] = cache.layer_view(0).unwrap().key.as_slice().unwrap();
/// cache.reset().unwrap(); // error: the slice still borrows `cache`
/// println!("{}", keys[0]);
/// ```
///
/// ```compile_fail
/// # use kvcache::{Cache, EncoderDecoderCache, TensorRef};
/// # let data = [0f32; 4];
/// # let shape = [1, 1, 1, 4];
/// # let k = TensorRef::new(&data, &shape).unwrap();
/// let mut pair = EncoderDecoderCache::new(Cache::new().unwrap(), Cache::new().unwrap()).unwrap();
/// let kv = pair.self_attention_mut().update(0, &k, &k).unwrap();
/// pair.crop(0).unwrap(); // error: `pair` is borrowed by `kv`
/// println!("{:?}", kv.key.shape());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KvView<'c> {
    /// `[batch, num_kv_heads, seq, k_head_dim]`.
    pub key: TensorView<'c>,
    /// `[batch, num_kv_heads, seq, v_head_dim]`.
    pub value: TensorView<'c>,
}

impl<'c> KvView<'c> {
    /// # Safety
    /// As [`TensorView::from_raw`], for both tensors.
    pub(crate) unsafe fn from_raw(raw: sys::kvc_kv) -> KvView<'c> {
        // SAFETY: forwarded to the caller.
        unsafe {
            KvView {
                key: TensorView::from_raw(raw.key),
                value: TensorView::from_raw(raw.value),
            }
        }
    }

    /// The number of tokens the views hold (dimension 2).
    pub fn seq_len(&self) -> i64 {
        self.key.shape().get(2).copied().unwrap_or(0)
    }
}

/// Reusable room for the per-layer views of
/// [`update_all`](crate::CacheRef::update_all), so that a decode step
/// allocates nothing.
#[derive(Default)]
pub struct ViewBuffer {
    raw: Vec<sys::kvc_kv>,
}

impl ViewBuffer {
    /// An empty buffer; it grows to the number of layers at its first use.
    pub fn new() -> ViewBuffer {
        ViewBuffer::default()
    }

    /// Room for `layers` views (as many as [`CacheRef::num_layers`](crate::CacheRef::num_layers)).
    pub fn with_layers(layers: u32) -> ViewBuffer {
        ViewBuffer {
            raw: vec![sys::kvc_kv::default(); layers as usize],
        }
    }

    /// `layers` slots to write into.
    pub(crate) fn slots(&mut self, layers: usize) -> *mut sys::kvc_kv {
        if self.raw.len() != layers {
            self.raw.resize(layers, sys::kvc_kv::default());
        }
        self.raw.as_mut_ptr()
    }

    /// The views written by the library.
    ///
    /// # Safety
    /// The slots hold views valid for `'c`.
    pub(crate) unsafe fn views<'c>(&'c self) -> &'c [KvView<'c>] {
        // SAFETY: KvView is repr(C) of two repr(transparent) kvc_tensor, the
        // layout of kvc_kv; validity is the caller's promise.
        unsafe {
            std::slice::from_raw_parts(self.raw.as_ptr().cast::<KvView<'c>>(), self.raw.len())
        }
    }
}

impl fmt::Debug for ViewBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewBuffer")
            .field("layers", &self.raw.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host f32 view of `data` from byte `byte_offset`, with `strides`.
    fn view<'d>(
        data: &'d [u8],
        byte_offset: u64,
        shape: &'d [i64],
        strides: &'d [i64],
    ) -> TensorView<'d> {
        let raw = sys::kvc_tensor {
            data: data.as_ptr().cast_mut().cast(),
            device: Device::CPU.raw(),
            ndim: shape.len() as i32,
            dtype: DType::F32.data_type().raw(),
            shape: shape.as_ptr().cast_mut(),
            strides: strides.as_ptr().cast_mut(),
            byte_offset,
        };
        // SAFETY: every case below keeps its elements inside `data`.
        unsafe { TensorView::from_raw(raw) }
    }

    /// `to_vec` against `get`, which addresses one element at a time.
    fn check(v: &TensorView<'_>) {
        let shape = v.shape();
        let mut want = Vec::new();
        let mut index = vec![0i64; shape.len()];
        for _ in 0..v.numel() {
            want.push(v.get::<f32>(&index).unwrap());
            for d in (0..shape.len()).rev() {
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        assert_eq!(
            v.to_vec::<f32>().unwrap(),
            want,
            "shape {shape:?} strides {:?}",
            v.strides()
        );
    }

    #[test]
    fn to_vec_copies_every_layout_in_row_major_order() {
        let words: Vec<f32> = (0..4096).map(|x| x as f32 + 0.5).collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let cases: [(&[i64], &[i64]); 8] = [
            (&[2, 3, 4, 5], &[60, 20, 5, 1]),   // compact: one run
            (&[1, 3, 7, 8], &[480, 160, 8, 1]), // dynamic layer: capacity 20, 7 tokens
            (&[2, 2, 3, 4], &[64, 16, 4, 1]),   // rows of two heads, gaps between
            (&[3, 4, 5], &[1, 3, 12]),          // transposed: no run longer than 1
            (&[2, 1, 3, 1], &[9, 999, 3, 777]), // size-1 dimensions, any stride
            (&[4, 2, 8], &[0, 8, 1]),           // broadcast rows
            (&[3, 4], &[-4, 1]),                // rows backwards
            (&[0, 4], &[4, 1]),                 // empty
        ];
        for (shape, strides) in cases {
            let start = if strides[0] < 0 { 4 * 8 } else { 0 };
            check(&view(&bytes, start, shape, strides));
            // Unaligned: the same layout two bytes further in.
            check(&view(&bytes, start + 2, shape, strides));
        }
    }
}
