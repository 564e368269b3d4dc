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
    /// one store): `reshape` + `narrow` of the store's tensor, no copy.
    pub fn tensor(&self, view: &TensorView<'_>) -> Result<Tensor> {
        let addr = view.data_ptr() as usize + view.byte_offset() as usize;
        let mut stores = self.stores.lock().unwrap();
        let (&base, store) = stores.range_mut(..=addr).next_back().ok_or_else(|| {
            candle_core::Error::Msg("kvcache view outside every candle store".into())
        })?;
        let &[b, h, s, d] = view.shape() else {
            candle_core::bail!("kvcache view of rank {}", view.shape().len())
        };
        let (b, h, s, d) = (b as usize, h as usize, s as usize, d as usize);
        let strides: Vec<usize> = view.strides().iter().map(|&x| x as usize).collect();
        let token = strides[2];
        let capacity = strides[1] / token.max(1);
        let offset = (addr - base) / F32;
        // The stores are [batch, heads, capacity, dim]; a view is a run of tokens [t0, t0 + s).
        let token_runs = token == d
            && strides[3] == 1
            && strides[1] == capacity * d
            && strides[0] == h * strides[1];
        let t0 = offset / token.max(1);
        if !token_runs
            || !offset.is_multiple_of(token.max(1))
            || t0 + s > capacity
            || b * strides[0] > store.elems
        {
            candle_core::bail!(
                "kvcache view {:?}/{:?} is not a run of tokens of its store",
                view.shape(),
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
        store.shaped.as_ref().expect("set above").narrow(2, t0, s)
    }
}

/// `t` (f32, CPU, contiguous) as the input of a kvcache update, read in place.
pub fn with_tensor_ref<R>(t: &Tensor, f: impl FnOnce(&TensorRef<'_>) -> R) -> Result<R> {
    if t.dtype() != DType::F32 {
        candle_core::bail!("kvcache input must be f32, not {:?}", t.dtype());
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("kvcache input must be on the CPU")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("kvcache input must be contiguous")
    };
    let data = &cpu.as_slice::<f32>()?[start..end];
    let shape: Vec<i64> = t.dims().iter().map(|&x| x as i64).collect();
    let r = TensorRef::new(data, &shape).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    Ok(f(&r))
}
