//! A pool whose blocks are memory Rust owns (`PoolBuilder::allocator`): a
//! `Vec<u8>` arena hands out every layer's K and V, the storage views point
//! into it, writes land there, and dropping the pool gives every byte back.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use kvcache::{
    ALLOCATOR_ALIGNMENT, Allocator, DType, Device, ErrorCode, Layout, Pool, PoolGroup, PoolLayer,
    TensorRef,
};

/// Bump allocation over one `Vec<u8>`; counts what is live and refuses once `budget` is spent.
struct VecArena {
    memory: Mutex<Vec<u8>>,
    state: Mutex<ArenaState>,
}

#[derive(Default)]
struct ArenaState {
    used: usize,
    live: Vec<(usize, usize)>, // (address, bytes)
    allocs: usize,
    bad_frees: usize,
    budget: Option<usize>,
}

impl VecArena {
    fn new(bytes: usize) -> Arc<VecArena> {
        Arc::new(VecArena {
            memory: Mutex::new(vec![0xA5; bytes]),
            state: Mutex::new(ArenaState::default()),
        })
    }

    fn range(&self) -> (usize, usize) {
        let memory = self.memory.lock().unwrap();
        (memory.as_ptr() as usize, memory.len())
    }

    fn holds(&self, ptr: *const c_void, bytes: usize) -> bool {
        let (start, len) = self.range();
        let p = ptr as usize;
        p >= start && p + bytes <= start + len
    }
}

// SAFETY: every pointer handed out is inside the Vec (which never reallocates: its length is fixed), aligned as
// asked, and handed out once until freed (bump allocation never reuses bytes).
unsafe impl Allocator for VecArena {
    fn alloc(
        &self,
        bytes: usize,
        align: usize,
        device: Device,
        _stream: *mut c_void,
    ) -> Option<NonNull<u8>> {
        assert_eq!(device, Device::CPU);
        let mut state = self.state.lock().unwrap();
        if let Some(budget) = state.budget.as_mut() {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
        }
        let (start, len) = self.range();
        let at = (start + state.used).next_multiple_of(align);
        if at + bytes > start + len {
            return None;
        }
        state.used = at + bytes - start;
        state.allocs += 1;
        state.live.push((at, bytes));
        NonNull::new(at as *mut u8)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize, _device: Device, _stream: *mut c_void) {
        let mut state = self.state.lock().unwrap();
        match state
            .live
            .iter()
            .position(|&(p, b)| p == ptr.as_ptr() as usize && b == bytes)
        {
            Some(i) => {
                state.live.swap_remove(i);
            }
            None => state.bad_frees += 1,
        }
    }
}

fn builder(arena: &Arc<VecArena>) -> kvcache::PoolBuilder {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 8))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, 2, 8), 2))
        .allocator(arena.clone())
}

#[test]
fn pool_storage_is_the_vec() {
    let arena = VecArena::new(1 << 16);
    let pool = builder(&arena).build().unwrap();
    assert_eq!(arena.state.lock().unwrap().allocs, 4); // K and V of two layers
    {
        let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
        let keys = storage.keys();
        let bytes = 8 * 4 * 2 * 8 * 4;
        assert!(arena.holds(keys.data_ptr(), bytes));
        assert_eq!(keys.data_ptr() as usize % ALLOCATOR_ALIGNMENT, 0);
        // Zeroed by the library: the Vec started as 0xA5 bytes.
        let all = keys.to_vec::<f32>().unwrap();
        assert!(all.iter().all(|&x| x == 0.0));
    }
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2, 3]).unwrap();
    let kv: Vec<f32> = (0..3 * 2 * 8).map(|i| i as f32 + 0.5).collect();
    let shape = [3, 2, 8];
    let t = TensorRef::new(&kv, &shape).unwrap();
    pool.write(&[t, t], &[t, t], &slots).unwrap();
    seq.commit().unwrap();
    {
        let storage = pool.layer_storage(1, Layout::Nhd).unwrap();
        let keys = storage.keys().to_vec::<f32>().unwrap();
        assert!(keys.contains(&0.5)); // the write is in the Vec's memory
    }
    drop(seq);
    assert_eq!(arena.state.lock().unwrap().live.len(), 4); // still the pool's
    drop(pool);
    let state = arena.state.lock().unwrap();
    assert!(state.live.is_empty(), "every allocation given back");
    assert_eq!(state.bad_frees, 0);
}

#[test]
fn a_refusing_allocator_fails_build_and_keeps_nothing() {
    for budget in 0..4 {
        let arena = VecArena::new(1 << 16);
        arena.state.lock().unwrap().budget = Some(budget);
        let err = builder(&arena).build().unwrap_err();
        assert_eq!(err.code(), ErrorCode::OutOfMemory);
        assert!(
            err.message().contains("caller's allocator"),
            "{}",
            err.message()
        );
        let state = arena.state.lock().unwrap();
        assert!(state.live.is_empty());
        assert_eq!(state.bad_frees, 0);
    }
}

#[test]
fn the_pool_keeps_its_allocator_alive() {
    let arena = VecArena::new(1 << 16);
    let pool = builder(&arena).build().unwrap();
    let weak = Arc::downgrade(&arena);
    drop(arena);
    assert!(weak.upgrade().is_some());
    drop(pool);
    assert!(weak.upgrade().is_none());
}
