//! kvcache's K/V stores as candle tensors: an [`Allocator`] that serves every store from a tensor candle
//! owns, and the way back from a kvcache view to a candle tensor over the same memory.
//!
//! candle cannot wrap memory it does not own, but it can lend memory it owns: `Tensor::from_vec` keeps the
//! vector's heap buffer where it is, so a pointer taken before the hand-over stays valid for as long as the
//! tensor's storage lives. kvcache writes new tokens there; a view kvcache returns is then found by address
//! in the store it lies in and rebuilt as `reshape` + `narrow` of that tensor: no element is copied.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Mutex;

use candle_core::{DType, Device, Result, Storage, Tensor};
use kvcache::{Allocator, TensorRef, TensorView};

/// One store: the flat f32 tensor candle owns, where kvcache's bytes start in it, and (after the first
/// view) the store shaped [batch, heads, capacity, dim], so that a step costs one `narrow`.
struct Store {
    tensor: Tensor,
    first: usize, // elements before the aligned start
    elems: usize,
    shaped: Option<Tensor>,
}

/// The allocator: stores by address, so that a view can be traced back to its tensor.
#[derive(Default)]
pub struct CandleStores {
    stores: Mutex<BTreeMap<usize, Store>>,
}

const F32: usize = std::mem::size_of::<f32>();

// SAFETY: each store is a fresh vector handed to candle only as the tensor kept here; nothing in Rust writes
// it, and it stays alive (in the map, and in any tensor made from it) until `free`.
unsafe impl Allocator for CandleStores {
    fn alloc(
        &self,
        bytes: usize,
        align: usize,
        device: kvcache::Device,
        _: *mut c_void,
    ) -> Option<NonNull<u8>> {
        if device != kvcache::Device::CPU
            || !bytes.is_multiple_of(F32)
            || !align.is_multiple_of(F32)
        {
            return None;
        }
        let elems = bytes / F32;
        // The vector's own alignment is f32's: over-allocate and start at the first aligned element.
        let mut data = vec![0f32; elems + align / F32];
        let first = data.as_mut_ptr().align_offset(align);
        // SAFETY: first < align / F32, inside the vector; the pointer keeps the vector's (mutable) provenance.
        let ptr = unsafe { data.as_mut_ptr().add(first) };
        let len = data.len();
        let tensor = Tensor::from_vec(data, len, &Device::Cpu).ok()?;
        let store = Store {
            tensor,
            first,
            elems,
            shaped: None,
        };
        self.stores.lock().unwrap().insert(ptr as usize, store);
        NonNull::new(ptr.cast())
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _: usize, _: kvcache::Device, _: *mut c_void) {
        // Tensors made from the store keep its memory alive after this: candle counts the references.
        self.stores.lock().unwrap().remove(&(ptr.as_ptr() as usize));
    }
}

impl CandleStores {
    /// The candle tensor over the memory of `view` ([batch, heads, seq, dim], f32, a run of tokens of
    /// one store): `reshape` + `narrow` of the store's tensor, no copy. Looks the store up by address
    /// under the lock; a decode loop resolves each layer's store once with [`StoreViews`] instead.
    pub fn tensor(&self, view: &TensorView<'_>) -> Result<Tensor> {
        let view = ViewLayout::of(view)?;
        self.shaped(&view)?.narrow(&view)
    }

    /// The store `view` lies in, shaped [batch, heads, capacity, dim]; an error unless the view is a run
    /// of tokens of it.
    fn shaped(&self, view: &ViewLayout) -> Result<Shaped> {
        let mut stores = self.stores.lock().unwrap();
        let (&base, store) = stores.range_mut(..=view.addr).next_back().ok_or_else(|| {
            candle_core::Error::Msg("kvcache view outside every candle store".into())
        })?;
        let [b, h, s, d] = view.dims;
        let strides = view.strides;
        let token = strides[2].max(1);
        let capacity = strides[1] / token;
        let offset = (view.addr - base) / F32;
        // The stores are [batch, heads, capacity, dim]; a view is a run of tokens [t0, t0 + s).
        let token_runs = strides[2] == d
            && strides[3] == 1
            && strides[1] == capacity * d
            && strides[0] == h * strides[1];
        let t0 = offset / token;
        if !token_runs
            || !offset.is_multiple_of(token)
            || t0 + s > capacity
            || b * strides[0] > store.elems
        {
            candle_core::bail!(
                "kvcache view {:?}/{:?} is not a run of tokens of its store",
                view.dims,
                strides
            );
        }
        let dims = [b, h, capacity, d];
        if store.shaped.as_ref().is_none_or(|t| t.dims() != dims) {
            store.shaped = Some(
                store
                    .tensor
                    .narrow(0, store.first, b * strides[0])?
                    .reshape(dims.to_vec())?,
            );
        }
        Ok(Shaped {
            base,
            strides,
            tensor: store.shaped.clone().expect("set above"),
            dims,
        })
    }
}

/// Where a 4-D f32 view's elements are: the first one's address, the shape and the strides (elements).
struct ViewLayout {
    addr: usize,
    dims: [usize; 4],
    strides: [usize; 4],
}

impl ViewLayout {
    fn of(view: &TensorView<'_>) -> Result<ViewLayout> {
        let &[b, h, s, d] = view.shape() else {
            candle_core::bail!("kvcache view of rank {}", view.shape().len())
        };
        if view.dtype() != Some(kvcache::DType::F32) {
            candle_core::bail!("kvcache view of {:?}, not f32", view.data_type());
        }
        Ok(ViewLayout {
            addr: view.data_ptr() as usize + view.byte_offset() as usize,
            dims: [b, h, s, d].map(|x| x as usize),
            strides: [0, 1, 2, 3].map(|dim| view.stride(dim) as usize),
        })
    }
}

/// A store shaped [batch, heads, capacity, dim] (`dims`), whose first element is at `base`.
#[derive(Clone)]
struct Shaped {
    base: usize,
    strides: [usize; 4],
    dims: [usize; 4],
    tensor: Tensor,
}

impl Shaped {
    /// Whether `view` is a run of tokens of this store. The tensor keeps the store's memory alive, so no
    /// other store can lie at these addresses: an address inside it is a view of it.
    fn covers(&self, view: &ViewLayout) -> bool {
        let [b, h, capacity, d] = self.dims;
        let token_bytes = self.strides[2].max(1) * F32;
        let Some(bytes) = view.addr.checked_sub(self.base) else {
            return false;
        };
        view.strides == self.strides
            && view.dims[0] == b
            && view.dims[1] == h
            && view.dims[3] == d
            && bytes.is_multiple_of(token_bytes)
            && bytes / token_bytes + view.dims[2] <= capacity
    }

    /// The tensor over `view`'s tokens (`covers(view)` holds): one `narrow`.
    fn narrow(&self, view: &ViewLayout) -> Result<Tensor> {
        let t0 = (view.addr - self.base) / F32 / self.strides[2].max(1);
        self.tensor.narrow(2, t0, view.dims[2])
    }
}

/// The candle tensors over a cache's views, one slot per (layer, K or V): each slot keeps the store its
/// last view lay in, so a step costs a comparison and a `narrow`; the allocator's map (and its lock) is
/// read only when a view lies elsewhere (the first step, a dynamic layer grown into a new store).
///
/// A slot keeps its store's memory alive until a view of that slot lies elsewhere, even after kvcache
/// has freed the store (a grown layer's next view replaces it in the same step).
#[derive(Default)]
pub struct StoreViews {
    slots: Vec<Option<Shaped>>,
}

impl StoreViews {
    /// The candle tensor over `view` (as [`CandleStores::tensor`]), through `slot`'s store when the
    /// view lies in it.
    pub fn tensor(
        &mut self,
        stores: &CandleStores,
        slot: usize,
        view: &TensorView<'_>,
    ) -> Result<Tensor> {
        let view = ViewLayout::of(view)?;
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, None);
        }
        let entry = &mut self.slots[slot];
        if let Some(store) = entry.as_ref().filter(|s| s.covers(&view)) {
            return store.narrow(&view);
        }
        let store = stores.shaped(&view)?;
        let tensor = store.narrow(&view);
        *entry = Some(store);
        tensor
    }
}

/// The most dimensions a kvcache input has.
const MAX_RANK: usize = 6;

/// `t` (f32, CPU, contiguous) as the input of a kvcache update, read in place.
pub fn with_tensor_ref<R>(t: &Tensor, f: impl FnOnce(&TensorRef<'_>) -> R) -> Result<R> {
    if t.dtype() != DType::F32 {
        candle_core::bail!("kvcache input must be f32, not {:?}", t.dtype());
    }
    let mut shape = [0i64; MAX_RANK];
    let Some(shape) = shape.get_mut(..t.rank()) else {
        candle_core::bail!("kvcache input of rank {}, above {MAX_RANK}", t.rank())
    };
    for (n, &dim) in shape.iter_mut().zip(t.dims()) {
        *n = dim as i64;
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("kvcache input must be on the CPU")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("kvcache input must be contiguous")
    };
    let data = &cpu.as_slice::<f32>()?[start..end];
    let r = TensorRef::new(data, shape).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    Ok(f(&r))
}
