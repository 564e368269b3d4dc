//! Caller-provided storage (`kvcache/allocator.h`): a pool's blocks from
//! memory the Rust side owns.
//!
//! By default the C library allocates a pool's K/V storage itself. With
//! [`PoolBuilder::allocator`](crate::PoolBuilder::allocator) the storage of
//! every layer (one K and one V buffer, all blocks) comes from an
//! [`Allocator`] once, when the pool is built, and goes back to it when the
//! last handle of the pool is dropped: the storage views
//! ([`Pool::layer_storage`](crate::Pool::layer_storage)) are then slices of
//! that memory (a `Vec<u8>`, an arena, a framework's tensor).
//!
//! The library zeroes what it takes, asks for [`ALLOCATOR_ALIGNMENT`]-byte
//! alignment, and gives every allocation back exactly once with the bytes it
//! asked for. The allocator is kept alive by the pool until then.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use kvcache_sys as sys;

use crate::device::Device;

/// The alignment the library asks of every allocation, in bytes (`KVC_ALLOCATOR_ALIGNMENT`).
pub const ALLOCATOR_ALIGNMENT: usize = sys::KVC_ALLOCATOR_ALIGNMENT;

/// Where a pool's K/V storage comes from (`kvc_allocator`).
///
/// # Safety
///
/// `alloc` must return memory of at least `bytes` bytes, aligned to `align`,
/// that `device` can address (host memory for the CPU, device memory for
/// CUDA/ROCm), not used by anything else until `free` gets it back. The
/// library writes it from its own calls; handing out memory that Rust code
/// still reads or writes is a data race.
pub unsafe trait Allocator: Send + Sync {
    /// `bytes` (> 0) aligned to `align` on `device`, ordered on `stream`
    /// (a `cudaStream_t`/`hipStream_t`, null on the CPU); `None` when it cannot.
    fn alloc(
        &self,
        bytes: usize,
        align: usize,
        device: Device,
        stream: *mut c_void,
    ) -> Option<NonNull<u8>>;

    /// Takes back `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` came from [`Allocator::alloc`] on `self` with the same `bytes`
    /// and `device`, and is given back once; work issued on `stream` before
    /// may still read it (free stream-ordered, or synchronise first).
    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize, device: Device, stream: *mut c_void);
}

impl std::fmt::Debug for dyn Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Allocator")
    }
}

/// The C view of an allocator: the `kvc_allocator` and the context it points to, kept at a stable address
/// for as long as the C object that uses it lives.
pub(crate) struct RawAllocator {
    // A thin pointer to the trait object: `ctx` is its address.
    inner: Box<Arc<dyn Allocator>>,
}

impl RawAllocator {
    pub(crate) fn new(allocator: Arc<dyn Allocator>) -> RawAllocator {
        RawAllocator {
            inner: Box::new(allocator),
        }
    }

    /// The struct to pass in options; it points into `self`, which must outlive the C object.
    pub(crate) fn raw(&self) -> sys::kvc_allocator {
        sys::kvc_allocator {
            ctx: (&*self.inner as *const Arc<dyn Allocator>)
                .cast_mut()
                .cast(),
            alloc: Some(alloc_trampoline),
            free: Some(free_trampoline),
            ..Default::default()
        }
    }
}

/// # Safety
///
/// `ctx` is the address of a live `Arc<dyn Allocator>` (RawAllocator::raw).
unsafe fn allocator_of<'a>(ctx: *mut c_void) -> &'a dyn Allocator {
    // SAFETY: per the function's contract.
    unsafe { &**(ctx as *const Arc<dyn Allocator>) }
}

unsafe extern "C" fn alloc_trampoline(
    ctx: *mut c_void,
    bytes: usize,
    alignment: usize,
    device: sys::kvc_device,
    stream: *mut c_void,
) -> *mut c_void {
    // SAFETY: the library passes back the ctx of RawAllocator::raw, alive as long as the pool.
    let allocator = unsafe { allocator_of(ctx) };
    // A panic must not unwind into C: it is a refusal (out of memory) instead.
    catch_unwind(AssertUnwindSafe(|| {
        allocator.alloc(bytes, alignment, Device::from_raw(device), stream)
    }))
    .ok()
    .flatten()
    .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast())
}

unsafe extern "C" fn free_trampoline(
    ctx: *mut c_void,
    ptr: *mut c_void,
    bytes: usize,
    device: sys::kvc_device,
    stream: *mut c_void,
) {
    // SAFETY: as in alloc_trampoline.
    let allocator = unsafe { allocator_of(ctx) };
    if let Some(ptr) = NonNull::new(ptr.cast::<u8>()) {
        // SAFETY: the library gives back each pointer alloc returned, once, with its bytes and device.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
            allocator.free(ptr, bytes, Device::from_raw(device), stream)
        }));
    }
}
