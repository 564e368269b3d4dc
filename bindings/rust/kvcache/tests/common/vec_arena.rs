//! `VecArena`: an allocator (`kvcache::Allocator`) over one `Vec<u8>` the test owns, for the tests of
//! caller-provided storage (pools and caches).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use kvcache::{Allocator, Device};

/// Bump allocation over one `Vec<u8>`; counts what is live and refuses once `budget` is spent.
pub struct VecArena {
    pub memory: Mutex<Vec<u8>>,
    pub state: Mutex<ArenaState>,
}

#[derive(Default)]
pub struct ArenaState {
    pub used: usize,
    pub live: Vec<(usize, usize)>, // (address, bytes)
    pub allocs: usize,
    pub bad_frees: usize,
    pub budget: Option<usize>,
}

impl VecArena {
    pub fn new(bytes: usize) -> Arc<VecArena> {
        Arc::new(VecArena {
            memory: Mutex::new(vec![0xA5; bytes]),
            state: Mutex::new(ArenaState::default()),
        })
    }

    pub fn range(&self) -> (usize, usize) {
        let memory = self.memory.lock().unwrap();
        (memory.as_ptr() as usize, memory.len())
    }

    /// Asserts that everything handed out was given back, each allocation
    /// once and as it was handed out.
    #[track_caller]
    pub fn assert_all_given_back(&self, context: &str) {
        let state = self.state.lock().unwrap();
        assert!(
            state.live.is_empty(),
            "{context}: {:?} still live",
            state.live
        );
        assert_eq!(state.bad_frees, 0, "{context}");
    }

    pub fn holds(&self, ptr: *const c_void, bytes: usize) -> bool {
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
