//! Caller-provided storage (`kvcache/allocator.h`): a pool's blocks and a
//! cache's K/V stores from memory the Rust side owns.
//!
//! By default the C library allocates K/V storage itself. With
//! [`PoolBuilder::allocator`](crate::PoolBuilder::allocator) the storage of
//! every pool layer (one K and one V buffer, all blocks) comes from an
//! [`Allocator`] once, when the pool is built; with
//! [`CacheBuilder::allocator`](crate::CacheBuilder::allocator) every store of
//! a cache's layers does, as they are first used and grow. The views
//! ([`Pool::layer_storage`](crate::Pool::layer_storage),
//! [`CacheRef::layer_view`](crate::CacheRef::layer_view) and the views
//! updates return) are then slices of that memory (a `Vec<u8>`, an arena, a
//! framework's tensor).
//!
//! The library zeroes what it takes, asks for [`ALLOCATOR_ALIGNMENT`]-byte
//! alignment, and gives every allocation back exactly once with the bytes it
//! asked for. The allocator is kept alive until the last object using it is
//! dropped: the pool, or the cache and every clone, split and stack made from
//! it (the library tells when, through `kvc_allocator.release`).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use kvcache_sys as sys;

use crate::device::Device;
use crate::error::Result;

/// The alignment the library asks of every allocation, in bytes (`KVC_ALLOCATOR_ALIGNMENT`).
pub const ALLOCATOR_ALIGNMENT: usize = sys::KVC_ALLOCATOR_ALIGNMENT;

/// Where a pool's or a cache's K/V storage comes from (`kvc_allocator`).
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

/// Runs `create` (a `kvc_*_create` or load) with `allocator` as a `kvc_allocator` (NULL for `None`).
///
/// The context is a boxed `Arc` of the allocator. When `create` succeeds the library owns it and gives it
/// back through `release` once the last object sharing it (the created one, its clones, splits, stacks and
/// pairs, which the safe API cannot see) is destroyed; when `create` fails the library never saw it succeed
/// and it is dropped here. So the allocator lives exactly as long as the C side uses it.
pub(crate) fn create_with<R>(
    allocator: Option<&Arc<dyn Allocator>>,
    create: impl FnOnce(*const sys::kvc_allocator) -> Result<R>,
) -> Result<R> {
    let Some(allocator) = allocator else {
        return create(std::ptr::null());
    };
    let ctx = Box::into_raw(Box::new(Arc::clone(allocator)));
    let raw = sys::kvc_allocator {
        ctx: ctx.cast(),
        alloc: Some(alloc_trampoline),
        free: Some(free_trampoline),
        release: Some(release_trampoline),
        ..Default::default()
    };
    let result = create(&raw);
    if result.is_err() {
        // SAFETY: a failed create never calls release: `ctx` is still ours, from Box::into_raw above.
        drop(unsafe { Box::from_raw(ctx) });
    }
    result
}

/// # Safety
///
/// `ctx` is the address of a live `Arc<dyn Allocator>` (create_with).
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
    // SAFETY: the library passes back the ctx of create_with, alive until release_trampoline.
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

unsafe extern "C" fn release_trampoline(ctx: *mut c_void) {
    // SAFETY: called once, after the last use of `ctx`, which create_with made with Box::into_raw. The
    // allocator's own drop may panic: it must not unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
        drop(Box::from_raw(ctx.cast::<Arc<dyn Allocator>>()))
    }));
}
