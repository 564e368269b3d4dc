//! The block pool of serving stacks (`kvcache/pool.h`): paged KV with prefix
//! reuse, copy-on-write and events.
//!
//! A [`Pool`] is a fixed set of blocks on one device for one model, shared by
//! many [`Sequence`]s (requests) that join and leave every step: continuous
//! batching as vLLM, SGLang and TensorRT-LLM do it. The model is described
//! once, with [`PoolGroup`]s (one per attention kind, each with its block size
//! and count) and one [`PoolLayer`] per layer.
//!
//! ```
//! use kvcache::{DType, Pool, PoolGroup, PoolLayer, TensorRef};
//!
//! let pool = Pool::builder(DType::F32)
//!     .group(PoolGroup::full(4, 16)) // 4-token blocks, 16 of them (block 0 is the null block)
//!     .layers(std::iter::repeat_n(PoolLayer::attention(0, 2, 8), 2))
//!     .hash_seed(b"tiny-model")
//!     .events(64)
//!     .build()?;
//!
//! let prompt: Vec<i32> = (0..10).collect();
//! let mut seq = pool.sequence()?;
//! let slots = seq.reserve(&prompt)?; // a slot per token and group
//! let kv = vec![1.0f32; 10 * 2 * 8]; // [tokens, kv_heads, head_dim] per layer
//! let shape = [10, 2, 8];
//! let t = TensorRef::new(&kv, &shape)?;
//! pool.write(&[t, t], &[t, t], &slots)?; // every layer in one call
//! seq.commit()?; // full blocks are hashed and cached
//! drop(seq); // the request is done: its blocks stay cached
//!
//! let mut again = pool.sequence()?;
//! assert_eq!(again.match_prefix(&prompt)?, 8); // two full blocks hit
//! assert_eq!(pool.events()?.len(), 2); // BlockStored twice
//! # Ok::<(), kvcache::Error>(())
//! ```
//!
//! # Ownership, views and threads
//!
//! A [`Pool`] is a shared handle (cloning it is `Arc::clone`), and every
//! [`Sequence`] holds one: a scheduler keeps the pool and its sequences in
//! one struct, or hands sequences to other threads and async tasks, and the
//! C pool is freed after the last of them (its sequences are destroyed
//! first, as `kvc_pool_destroy` requires). Dropping a sequence releases its
//! blocks.
//!
//! The C contract makes views (block tables, layer storage, recurrent states)
//! valid until the next call that changes the pool's blocks or tables, and
//! those calls go through any of its sequences, so the borrow checker alone
//! cannot see them. The pool counts its live views instead, as a `RefCell`
//! counts its borrows: while a view is alive, a call that would invalidate it
//! returns [`ErrorCode::InvalidState`] and changes nothing. [`Pool::write`]
//! only writes K/V, so it runs while block tables and recurrent states are
//! alive (the serving step: tables, then the write, then attention) but not
//! while a layer-storage view is. A block table is rewritten only by the next
//! table of the same group and format, so the tables of several groups (a
//! hybrid model's forward) are alive together. A view's raw pointers
//! ([`TensorView::data_ptr`]) of the storage, which never moves, stay valid
//! until the pool is dropped, for device kernels. Views borrow the handle
//! they came from and stay on the thread that made them.
//!
//! A pool and its sequences are one object for the C library (one call at a
//! time). Here every call takes a lock inside the pool first, so `Pool` and
//! `Sequence` are [`Send`] and [`Sync`]: threads sharing `&Pool` (or clones
//! of it) take turns and never see [`ErrorCode::Busy`]. Views are counted
//! across threads too: while one thread holds a block table, another
//! thread's `reserve` on the same pool is refused with `InvalidState`, as on
//! one thread, so a multi-threaded scheduler drops a step's views before the
//! next step's scheduling calls. Methods that change one sequence take
//! `&mut Sequence`, so two threads never change the same sequence at once.
//!
//! ```
//! use kvcache::{DType, Pool, PoolGroup, PoolLayer, Sequence};
//!
//! // A scheduler owns its pool and its running requests together.
//! struct Scheduler {
//!     pool: Pool,
//!     running: Vec<Sequence>,
//! }
//!
//! let pool = Pool::builder(DType::F32)
//!     .group(PoolGroup::full(4, 16))
//!     .layer(PoolLayer::attention(0, 1, 4))
//!     .build()?;
//! let running = vec![pool.sequence()?, pool.sequence()?];
//! let mut scheduler = Scheduler { pool, running };
//! // ... and moves between threads whole, or lends `&Pool` to several.
//! let scheduler = std::thread::spawn(move || {
//!     for seq in &mut scheduler.running {
//!         seq.reserve(&[1, 2, 3]).unwrap();
//!     }
//!     scheduler
//! })
//! .join()
//! .unwrap();
//! assert_eq!(scheduler.running[1].len(), 3);
//! assert_eq!(scheduler.pool.stats(0)?.used_blocks, 2);
//! # Ok::<(), kvcache::Error>(())
//! ```
//!
//! A view cannot outlive the handle it borrows:
//!
//! ```compile_fail
//! # use kvcache::{DType, Pool, PoolGroup, PoolLayer};
//! let table = {
//!     let pool = Pool::builder(DType::F32)
//!         .group(PoolGroup::full(4, 8))
//!         .layer(PoolLayer::attention(0, 1, 4))
//!         .build()
//!         .unwrap();
//!     let seq = pool.sequence().unwrap();
//!     pool.block_table(&[&seq], 0).unwrap() // error: `pool` does not live long enough
//! };
//! ```
//!
//! ```compile_fail
//! fn send<T: Send>() {}
//! send::<kvcache::BlockTable<'static>>(); // nor move to another thread
//! ```

use std::ffi::c_void;
use std::fmt;
use std::ops::Deref;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kvcache_sys as sys;

use crate::allocator::{Allocator, create_with};
use crate::block_hash::BlockHash;
use crate::device::Device;
use crate::dtype::{DType, DataType, Element};
use crate::error::{Error, ErrorCode, Result, check, invalid_argument};
use crate::persist::c_path;
use crate::tensor::{KvView, TensorRef, TensorView};
use crate::version::check_version;

/// `tensor` as the C API takes an optional tensor: NULL for
/// [`TensorRef::empty`] (a latent layer's V).
fn optional(tensor: &TensorRef<'_>) -> *const sys::kvc_tensor {
    if tensor.as_raw().data.is_null() && tensor.as_raw().ndim == 0 {
        std::ptr::null()
    } else {
        tensor.as_raw()
    }
}

/// The attention kind of a group (`kvc_pool_group_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// Every block of a sequence is kept.
    Full,
    /// A sliding window: blocks holding only tokens no query attends to any
    /// more go back to the pool (the table keeps block 0 there).
    Sliding,
    /// Attention within chunks: blocks wholly before the current chunk go back.
    Chunked,
    /// Recurrent (Mamba/SSM) layers: one live state per sequence and a
    /// checkpoint at every block boundary a commit reaches.
    Recurrent,
    /// Multi-head latent attention (MLA: DeepSeek V2/V3): one row per token
    /// (the compressed latent and the rope key) and no V; every block kept,
    /// as in a full group. Since 0.7.
    Latent,
}

impl GroupKind {
    fn raw(self) -> sys::kvc_pool_group_kind {
        match self {
            GroupKind::Full => sys::KVC_POOL_GROUP_FULL,
            GroupKind::Sliding => sys::KVC_POOL_GROUP_SLIDING,
            GroupKind::Chunked => sys::KVC_POOL_GROUP_CHUNKED,
            GroupKind::Recurrent => sys::KVC_POOL_GROUP_RECURRENT,
            GroupKind::Latent => sys::KVC_POOL_GROUP_LATENT,
        }
    }
}

/// How a layer's blocks hold its K/V (`kvc_pool_storage`). Since 0.7.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Storage {
    /// The pool's dtype.
    #[default]
    Dtype,
    /// float8 e4m3fn codes with vLLM's fp8 KV cache convention: a write
    /// stores `e4m3fn(x / scale)` (saturating at 448), a gather returns
    /// `code * scale` in the pool's dtype; storage views are `u8` codes.
    /// CPU pools only in 0.7 (GPU backends refuse it).
    Fp8E4m3,
}

impl Storage {
    fn raw(self) -> sys::kvc_pool_storage {
        match self {
            Storage::Dtype => sys::KVC_POOL_STORAGE_DTYPE,
            Storage::Fp8E4m3 => sys::KVC_POOL_STORAGE_FP8_E4M3,
        }
    }
}

/// One group of layers (`kvc_pool_group_options`): an attention kind with its
/// own block size and block count. Block 0 of every group is the null block,
/// so `num_blocks - 1` are usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGroup {
    /// The attention kind.
    pub kind: GroupKind,
    /// Tokens per block (recurrent groups: tokens between checkpoints).
    pub block_size: u32,
    /// Blocks of the group, null block included (recurrent: state slots).
    pub num_blocks: u32,
    /// Sliding: the window in tokens; chunked: the chunk size; else 0.
    pub window: i64,
}

impl PoolGroup {
    /// Full attention.
    pub const fn full(block_size: u32, num_blocks: u32) -> PoolGroup {
        PoolGroup {
            kind: GroupKind::Full,
            block_size,
            num_blocks,
            window: 0,
        }
    }

    /// A sliding window of `window` tokens (a query attends to itself and
    /// `window - 1` tokens before it).
    pub const fn sliding(block_size: u32, num_blocks: u32, window: i64) -> PoolGroup {
        PoolGroup {
            kind: GroupKind::Sliding,
            block_size,
            num_blocks,
            window,
        }
    }

    /// Chunked attention in chunks of `chunk` tokens.
    pub const fn chunked(block_size: u32, num_blocks: u32, chunk: i64) -> PoolGroup {
        PoolGroup {
            kind: GroupKind::Chunked,
            block_size,
            num_blocks,
            window: chunk,
        }
    }

    /// Latent (MLA) layers: one row per token, no V. Since 0.7.
    pub const fn latent(block_size: u32, num_blocks: u32) -> PoolGroup {
        PoolGroup {
            kind: GroupKind::Latent,
            block_size,
            num_blocks,
            window: 0,
        }
    }

    /// Recurrent layers: a checkpoint every `block_size` committed tokens,
    /// `num_slots` state slots (live states and checkpoints together).
    pub const fn recurrent(block_size: u32, num_slots: u32) -> PoolGroup {
        PoolGroup {
            kind: GroupKind::Recurrent,
            block_size,
            num_blocks: num_slots,
            window: 0,
        }
    }

    fn raw(&self) -> sys::kvc_pool_group_options {
        sys::kvc_pool_group_options {
            kind: self.kind.raw(),
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            window: self.window,
            ..Default::default()
        }
    }
}

/// One layer of the model (`kvc_pool_layer_options`). Since 0.7 it holds
/// the layer's storage and fp8 scales (floats: `PartialEq` only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolLayer {
    /// Index of its group.
    pub group: u32,
    /// Attention: K/V heads. Recurrent: the SSM state's heads.
    pub num_kv_heads: u32,
    /// Attention: K's head_dim. Recurrent: the SSM state's head_dim.
    pub key_head_dim: u32,
    /// Attention: V's head_dim (0: `key_head_dim`). Recurrent: 0.
    pub value_head_dim: u32,
    /// Recurrent: channels of the conv state.
    pub conv_dim: u32,
    /// Recurrent: the conv kernel size.
    pub conv_kernel: u32,
    /// Recurrent: `d_state`.
    pub ssm_state_size: u32,
    /// How the blocks hold K/V (not in a recurrent group). Since 0.7.
    pub storage: Storage,
    /// Fp8: K's (a latent row's) scale, vLLM's `k_scale`; else 1.0. Since 0.7.
    pub k_scale: f32,
    /// Fp8 attention layers: V's scale, vLLM's `v_scale`; else 1.0. Since 0.7.
    pub v_scale: f32,
}

impl PoolLayer {
    /// An attention layer of `group`: K and V are `[num_kv_heads, head_dim]`
    /// per token.
    pub const fn attention(group: u32, num_kv_heads: u32, head_dim: u32) -> PoolLayer {
        PoolLayer {
            group,
            num_kv_heads,
            key_head_dim: head_dim,
            value_head_dim: 0,
            conv_dim: 0,
            conv_kernel: 0,
            ssm_state_size: 0,
            storage: Storage::Dtype,
            k_scale: 1.0,
            v_scale: 1.0,
        }
    }

    /// A latent (MLA) layer of a [`GroupKind::Latent`] group: one row of
    /// `row_width` per token (DeepSeek V3: `kv_lora_rank + qk_rope_head_dim`
    /// = 576), no V. Since 0.7.
    pub const fn latent(group: u32, row_width: u32) -> PoolLayer {
        PoolLayer::attention(group, 1, row_width)
    }

    /// The same layer stored as fp8 e4m3 codes with these scales (a latent
    /// layer: `v_scale` 1.0). Since 0.7.
    pub const fn fp8(mut self, k_scale: f32, v_scale: f32) -> PoolLayer {
        self.storage = Storage::Fp8E4m3;
        self.k_scale = k_scale;
        self.v_scale = v_scale;
        self
    }

    /// The same layer with V of another head_dim than K.
    pub const fn value_head_dim(mut self, value_head_dim: u32) -> PoolLayer {
        self.value_head_dim = value_head_dim;
        self
    }

    /// A recurrent layer of `group`: a conv state `[conv_dim, conv_kernel]`
    /// and an SSM state `[num_heads, head_dim, ssm_state_size]` per sequence.
    pub const fn recurrent(
        group: u32,
        conv_dim: u32,
        conv_kernel: u32,
        num_heads: u32,
        head_dim: u32,
        ssm_state_size: u32,
    ) -> PoolLayer {
        PoolLayer {
            group,
            num_kv_heads: num_heads,
            key_head_dim: head_dim,
            value_head_dim: 0,
            conv_dim,
            conv_kernel,
            ssm_state_size,
            storage: Storage::Dtype,
            k_scale: 1.0,
            v_scale: 1.0,
        }
    }

    fn v_dim(&self) -> u32 {
        if self.value_head_dim == 0 {
            self.key_head_dim
        } else {
            self.value_head_dim
        }
    }

    fn raw(&self) -> sys::kvc_pool_layer_options {
        sys::kvc_pool_layer_options {
            group: self.group,
            num_kv_heads: self.num_kv_heads,
            key_head_dim: self.key_head_dim,
            value_head_dim: self.value_head_dim,
            conv_dim: self.conv_dim,
            conv_kernel: self.conv_kernel,
            ssm_state_size: self.ssm_state_size,
            storage: self.storage.raw(),
            k_scale: self.k_scale,
            v_scale: self.v_scale,
            ..Default::default()
        }
    }
}

/// The physical layout of a layer's K/V storage (`kvc_pool_layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `[num_blocks, block_size, heads, head_dim]` (vLLM, FlashInfer NHD).
    #[default]
    Nhd,
    /// `[num_blocks, heads, block_size, head_dim]` (FlashInfer HND).
    Hnd,
}

impl Layout {
    fn raw(self) -> sys::kvc_pool_layout {
        match self {
            Layout::Nhd => sys::KVC_POOL_LAYOUT_NHD,
            Layout::Hnd => sys::KVC_POOL_LAYOUT_HND,
        }
    }
}

/// How a pool computes its block hashes (`kvc_pool_hash_mode`,
/// docs/block-hash.md). Since 0.7.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HashMode {
    /// kvcache's own chain (docs/block-hash.md, version 2).
    #[default]
    Kvcache,
    /// vLLM's prefix-caching hash with `sha256_cbor`: equal to a vLLM
    /// server's for the same tokens, LoRA (name and path), items and cache
    /// salt, which must then be UTF-8 text, as the hash seed (vLLM's
    /// `PYTHONHASHSEED`; empty: its default).
    Vllm,
}

impl HashMode {
    fn raw(self) -> sys::kvc_pool_hash_mode {
        match self {
            HashMode::Kvcache => sys::KVC_POOL_HASH_KVCACHE,
            HashMode::Vllm => sys::KVC_POOL_HASH_VLLM_SHA256_CBOR,
        }
    }
}

/// Options of [`Pool::builder`] (`kvc_pool_options`).
#[derive(Clone, Debug)]
pub struct PoolBuilder {
    dtype: DType,
    device: Device,
    groups: Vec<PoolGroup>,
    layers: Vec<PoolLayer>,
    layout: Layout,
    hash_seed: Vec<u8>,
    prefix_caching: bool,
    events: u32,
    allocator: Option<Arc<dyn Allocator>>,
    shared_budget_bytes: u64,
    hash_mode: HashMode,
}

impl PoolBuilder {
    setters! {
        /// How blocks are hashed (default [`HashMode::Kvcache`]). Since 0.7.
        hash_mode(mode: HashMode) => hash_mode;

        /// Where the blocks live (default the CPU).
        device(device: Device) => device;
    }

    /// Appends a group; layers name groups by their index.
    pub fn group(mut self, group: PoolGroup) -> Self {
        self.groups.push(group);
        self
    }

    /// Appends a layer.
    pub fn layer(mut self, layer: PoolLayer) -> Self {
        self.layers.push(layer);
        self
    }

    /// Appends layers (`std::iter::repeat_n(layer, 32)` for a uniform model).
    pub fn layers(mut self, layers: impl IntoIterator<Item = PoolLayer>) -> Self {
        self.layers.extend(layers);
        self
    }

    setters! {
        /// The physical layout of the K/V storage (default [`Layout::Nhd`]).
        layout(layout: Layout) => layout;

        /// The pool's hash namespace: name the model and its weights with it.
        /// Blocks are reused only within one seed (docs/block-hash.md).
        hash_seed(seed: &[u8]) => hash_seed = seed.to_vec();

        /// Whether full committed blocks are hashed and reused (default true);
        /// without, released blocks are freed at once.
        prefix_caching(enable: bool) => prefix_caching;

        /// Events kept until [`Pool::events`] pulls them (default 0: none); when
        /// the queue is full the oldest are dropped.
        events(capacity: u32) => events;

        /// Takes every layer's K/V storage from `allocator` (`kvc_pool_options.allocator`,
        /// [`crate::allocator`](Allocator)): once, at [`PoolBuilder::build`]; it is
        /// given back when the last handle of the pool is dropped, and the pool
        /// keeps `allocator` alive until then. Default: the library's own memory.
        allocator(allocator: Arc<dyn Allocator>) => allocator = Some(allocator);

        /// One block budget of `bytes` shared by every group instead of each
        /// group's own `num_blocks`, which must then be 0
        /// (`kvc_pool_options.shared_budget_bytes`; docs/pool.md, "One budget
        /// for all groups"): every block is a page of the largest group's block
        /// size, block ids are pool-wide, eviction takes any group's least
        /// recently used cached block, and [`Pool::stats`] gives the budget's
        /// `num_blocks` and `free_blocks`. Default 0: per-group budgets. Since 0.7.
        shared_budget_bytes(bytes: u64) => shared_budget_bytes;
    }

    /// Creates the pool (`kvc_pool_create`), allocating every group's blocks.
    /// Bad options are [`ErrorCode::InvalidArgument`] naming the field.
    pub fn build(self) -> Result<Pool> {
        check_version()?;
        let mut raw = std::ptr::null_mut();
        self.with_options("kvc_pool_create", |options| {
            create_with(self.allocator.as_ref(), |allocator| {
                let options = sys::kvc_pool_options {
                    allocator,
                    ..*options
                };
                // SAFETY: every pointer in `options` is valid for the call; the allocator's context is the
                // library's from now on (create_with).
                check(unsafe { sys::kvc_pool_create(&options, &mut raw) })
            })
        })??;
        self.finish(raw)
    }

    /// The model fingerprint a pool built from this builder would have
    /// ([`Pool::fingerprint`]: the first part of every tier key), without
    /// building one: no memory, no device (`kvc_pool_options_fingerprint`).
    /// Since 0.7. Errors: InvalidArgument, as [`build`](Self::build).
    pub fn fingerprint(&self) -> Result<[u8; crate::BLOCK_HASH_SIZE]> {
        check_version()?;
        let mut out = [0u8; crate::BLOCK_HASH_SIZE];
        self.with_options("kvc_pool_options_fingerprint", |options| {
            // SAFETY: valid options and a 32-byte buffer.
            check(unsafe { sys::kvc_pool_options_fingerprint(options, out.as_mut_ptr()) })
        })??;
        Ok(out)
    }

    /// `(payload_size, num_layers)` of a block of `group` in a pool built
    /// from this builder: what [`Tier::get_blocks`](crate::Tier::get_blocks)
    /// and [`Tier::put_blocks`](crate::Tier::put_blocks) take to share blocks
    /// with such pools (`kvc_pool_options_block_payload`). Since 0.7.
    pub fn block_payload(&self, group: u32) -> Result<(usize, u32)> {
        check_version()?;
        let (mut size, mut layers) = (0usize, 0u32);
        self.with_options("kvc_pool_options_block_payload", |options| {
            // SAFETY: valid options and two out-values.
            check(unsafe {
                sys::kvc_pool_options_block_payload(options, group, &mut size, &mut layers)
            })
        })??;
        Ok((size, layers))
    }

    /// Calls `f` with the builder's options as `kvc_pool_options` (valid for the call only).
    fn with_options<T>(
        &self,
        fn_name: &str,
        f: impl FnOnce(&sys::kvc_pool_options) -> T,
    ) -> Result<T> {
        let num_groups = u32::try_from(self.groups.len())
            .map_err(|_| invalid_argument(format!("{fn_name}: too many groups")))?;
        let num_layers = u32::try_from(self.layers.len())
            .map_err(|_| invalid_argument(format!("{fn_name}: too many layers")))?;
        let groups: Vec<sys::kvc_pool_group_options> =
            self.groups.iter().map(PoolGroup::raw).collect();
        let layers: Vec<sys::kvc_pool_layer_options> =
            self.layers.iter().map(PoolLayer::raw).collect();
        let options = sys::kvc_pool_options {
            dtype: self.dtype.raw(),
            device: self.device.raw(),
            num_groups,
            groups: if groups.is_empty() {
                std::ptr::null()
            } else {
                groups.as_ptr()
            },
            num_layers,
            layers: if layers.is_empty() {
                std::ptr::null()
            } else {
                layers.as_ptr()
            },
            layout: self.layout.raw(),
            hash_seed: self.hash_seed.as_ptr().cast(),
            hash_seed_len: self.hash_seed.len(),
            enable_prefix_caching: i32::from(self.prefix_caching),
            event_capacity: self.events,
            shared_budget_bytes: self.shared_budget_bytes,
            hash_mode: self.hash_mode.raw(),
            ..Default::default()
        };
        Ok(f(&options))
    }

    fn finish(self, raw: *mut sys::kvc_pool) -> Result<Pool> {
        Ok(Pool {
            shared: Arc::new(Shared {
                raw: NonNull::new(raw).expect("kvcache: kvc_pool_create returned NULL"),
                dtype: self.dtype,
                device: self.device,
                layout: self.layout,
                state: Mutex::new(State {
                    views: 0,
                    storage_views: 0,
                    tables: vec![0; 2 * self.groups.len()],
                    dropped: Vec::new(),
                }),
                groups: self.groups,
                layers: self.layers,
            }),
        })
    }
}

/// The version of `docs/block-hash.md` a pool's hashes follow: 2, version 1
/// plus the extra keys of [`SequenceKeys`] (a sequence without them has
/// version 1's hashes).
pub const POOL_BLOCK_HASH_VERSION: usize = sys::KVC_POOL_BLOCK_HASH_VERSION;

/// One image or audio clip of a sequence (`kvc_pool_mm_item`): its content
/// `hash` (1 to 1024 bytes) and the tokens its placeholders occupy,
/// `[offset, offset + length)`. Every block overlapping that range hashes
/// with `hash` (`docs/block-hash.md`, version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultimodalItem<'a> {
    /// The content hash (any bytes: a digest of the pixels, an id).
    pub hash: &'a [u8],
    /// The item's first token in the sequence.
    pub offset: u64,
    /// Tokens it occupies, at least 1.
    pub length: u64,
}

/// What a sequence's block hashes depend on besides the pool's seed and the
/// tokens ([`Pool::sequence_with_keys`]): the cache `salt` (per tenant; in
/// the chain's root), the `adapter_key` (a LoRA adapter's name, up to 1024
/// bytes; in every block) and the `mm_items` (sorted by offset, not
/// overlapping; each in the blocks its range overlaps). Empty = none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequenceKeys<'a> {
    /// The cache salt: blocks are reused only between equal salts.
    pub salt: &'a [u8],
    /// The adapter or tenant key, in every block's extra keys.
    pub adapter_key: &'a [u8],
    /// The multimodal items, in the extra keys of the blocks they overlap.
    pub mm_items: &'a [MultimodalItem<'a>],
    /// A [`HashMode::Vllm`] pool's LoRA path (part of vLLM's LoRA key; needs
    /// an adapter key); empty otherwise. Since 0.7.
    pub adapter_path: &'a [u8],
    /// The adapter's number in events (vLLM's `lora_id`), not hashed; 0 =
    /// none. Since 0.7.
    pub adapter_id: i64,
}

/// The batch of [`Pool::events_vllm`] (`kvc_pool_vllm_batch_options`). Since 0.7.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VllmBatchOptions {
    /// The batch's timestamp, seconds since the epoch (vLLM's `time.time()`).
    pub ts: f64,
    /// Hashes in vLLM's 64-bit form (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`)
    /// instead of 32 bytes.
    pub int_hashes: bool,
    /// The data-parallel rank, or none.
    pub data_parallel_rank: Option<u32>,
}

/// A block pool for one model on one device (`kvc_pool*`): a shared handle.
///
/// Cloning a `Pool` gives another handle to the same pool (as `Arc::clone`
/// does); every [`Sequence`] holds one too, so the C pool is freed when the
/// last handle and the last sequence are gone, never before them. `Pool` is
/// [`Send`] and [`Sync`]: its calls, and its sequences' calls, take turns on
/// one lock inside, which is the C rule (one call at a time per pool) kept
/// for you. See the [module documentation](self) for the rules of its
/// sequences and views.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

/// What every handle of one pool shares.
struct Shared {
    raw: NonNull<sys::kvc_pool>,
    dtype: DType,
    device: Device,
    layout: Layout,
    groups: Vec<PoolGroup>,
    layers: Vec<PoolLayer>,
    /// Held for every call into C on the pool or one of its sequences.
    state: Mutex<State>,
}

// SAFETY: the C rule is one call at a time per pool (its sequences
// included); every call through `raw` or a sequence's handle holds `state`.
// The other fields are immutable after creation.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// The view bookkeeping, changed only under the lock.
pub(crate) struct State {
    /// Live views (tables, storage, recurrent states): they block the calls
    /// that would invalidate them.
    views: usize,
    /// Of which layer-storage views: they block writes.
    storage_views: usize,
    /// Live block tables per group and format (`2 * group + format`): they
    /// block the next table of the same group and format.
    tables: Vec<usize>,
    /// Sequences dropped while views were alive, destroyed once none is.
    dropped: Vec<NonNull<sys::kvc_pool_sequence>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the last handle: no sequence or view of the pool is left
        // (each holds a handle). kvc_pool_destroy frees the dropped
        // sequences not destroyed yet.
        unsafe { sys::kvc_pool_destroy(self.raw.as_ptr()) }
    }
}

impl Pool {
    /// A builder for a pool of `dtype` (the K/V and state dtype).
    pub fn builder(dtype: DType) -> PoolBuilder {
        PoolBuilder {
            dtype,
            device: Device::CPU,
            groups: Vec::new(),
            layers: Vec::new(),
            layout: Layout::Nhd,
            hash_seed: Vec::new(),
            prefix_caching: true,
            events: 0,
            allocator: None,
            shared_budget_bytes: 0,
            hash_mode: HashMode::Kvcache,
        }
    }

    /// The raw handle, for calling `kvcache_sys` directly. Calls through it
    /// bypass the pool's lock: make them while no other thread uses the pool
    /// (the library refuses an overlapping call with [`ErrorCode::Busy`]).
    pub fn as_ptr(&self) -> *mut sys::kvc_pool {
        self.shared.raw.as_ptr()
    }

    /// The groups, as built.
    pub fn groups(&self) -> &[PoolGroup] {
        &self.shared.groups
    }

    /// The layers, as built.
    pub fn layers(&self) -> &[PoolLayer] {
        &self.shared.layers
    }

    /// The K/V and state dtype.
    pub fn dtype(&self) -> DType {
        self.shared.dtype
    }

    /// Where the blocks live.
    pub fn device(&self) -> Device {
        self.shared.device
    }

    /// Whether `self` and `other` are handles of the same pool.
    pub fn same_pool(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// A new, empty sequence (a request) without a cache salt.
    pub fn sequence(&self) -> Result<Sequence> {
        self.sequence_with_salt(&[])
    }

    /// A new, empty sequence whose blocks are reused only by sequences with
    /// the same `salt` (a tenant's cache salt).
    pub fn sequence_with_salt(&self, salt: &[u8]) -> Result<Sequence> {
        self.sequence_with_keys(&SequenceKeys {
            salt,
            ..Default::default()
        })
    }

    /// A new, empty sequence whose blocks hash with `keys`: sequences with
    /// equal tokens but another salt, adapter key or image hash share no
    /// block from the first block the difference touches. Bad keys (items
    /// unsorted, overlapping, empty or beyond 2^40 tokens, a key over 1024
    /// bytes) are [`ErrorCode::InvalidArgument`] naming the field and value;
    /// the pool is then unchanged.
    pub fn sequence_with_keys(&self, keys: &SequenceKeys<'_>) -> Result<Sequence> {
        let _held = self.begin("kvc_pool_sequence_create")?;
        let items: Vec<sys::kvc_pool_mm_item> = keys
            .mm_items
            .iter()
            .map(|item| sys::kvc_pool_mm_item {
                hash: item.hash.as_ptr().cast(),
                hash_len: item.hash.len(),
                offset: item.offset,
                length: item.length,
            })
            .collect();
        let options = sys::kvc_pool_sequence_options {
            salt: keys.salt.as_ptr().cast(),
            salt_len: keys.salt.len(),
            mm_items: items.as_ptr(),
            num_mm_items: items.len(),
            adapter_key: keys.adapter_key.as_ptr().cast(),
            adapter_key_len: keys.adapter_key.len(),
            adapter_path: keys.adapter_path.as_ptr().cast(),
            adapter_path_len: keys.adapter_path.len(),
            adapter_id: keys.adapter_id,
            ..Default::default()
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live pool; the options, the items and the bytes they point to are valid for the call.
        check(unsafe { sys::kvc_pool_sequence_create(self.as_ptr(), &options, &mut raw) })?;
        Ok(Sequence {
            raw: NonNull::new(raw).expect("kvcache: kvc_pool_sequence_create returned NULL"),
            pool: self.clone(),
        })
    }

    /// A new sequence from the file [`Sequence::save`] wrote (`docs/file-format.md`).
    ///
    /// The pool must have the saved one's layout (dtype, storage layout, hash
    /// seed, groups' kinds, block sizes and windows, layers' shapes; block
    /// counts may differ): another is refused with
    /// [`ErrorCode::InvalidArgument`] naming the first difference (`group 0:
    /// block_size 4 (file) vs 8 (pool)`). The sequence takes the blocks it
    /// needs (evicting cached ones as [`Sequence::reserve`] does;
    /// [`ErrorCode::OutOfMemory`] when they are not there) and its committed
    /// full blocks are cached for prefix reuse. A missing, truncated or
    /// corrupted file is [`ErrorCode::Io`]. On any error the pool is unchanged.
    pub fn load_sequence(&self, path: impl AsRef<Path>) -> Result<Sequence> {
        let path = c_path(path.as_ref())?;
        let _held = self.begin("kvc_pool_sequence_load")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live pool, a path borrowed for the call, a valid out-pointer.
        check(unsafe { sys::kvc_pool_sequence_load(self.as_ptr(), path.as_ptr(), &mut raw) })?;
        Ok(Sequence {
            raw: NonNull::new(raw).expect("kvcache: kvc_pool_sequence_load returned NULL"),
            pool: self.clone(),
        })
    }

    /// The counters of `group`.
    pub fn stats(&self, group: u32) -> Result<PoolStats> {
        let mut raw = sys::kvc_pool_stats::default();
        let _held = self.lock();
        // SAFETY: a live pool and a zeroed out-struct with struct_size set.
        check(unsafe { sys::kvc_pool_stats_get(self.as_ptr(), group, &mut raw) })?;
        Ok(PoolStats {
            group: raw.group,
            num_blocks: raw.num_blocks,
            free_blocks: raw.free_blocks,
            cached_blocks: raw.cached_blocks,
            used_blocks: raw.used_blocks,
            pinned_blocks: raw.pinned_blocks,
            prefix_queries: raw.prefix_queries,
            prefix_hits: raw.prefix_hits,
            evictions: raw.evictions,
        })
    }

    /// Admission control: per group, the blocks that reserving
    /// `new_tokens[i]` more tokens for each of `sequences[i]` would take
    /// (copy-on-write copies and recurrent slots included, minus what sliding
    /// groups give back). Compare with [`PoolStats::available_blocks`].
    pub fn blocks_needed(&self, sequences: &[&Sequence], new_tokens: &[usize]) -> Result<Vec<u64>> {
        const FN: &str = "kvc_pool_blocks_needed";
        if sequences.len() != new_tokens.len() {
            return Err(invalid_argument(format!(
                "{FN}: new_tokens has {} entries but sequences has {}",
                new_tokens.len(),
                sequences.len()
            )));
        }
        let raw = self.handles(FN, sequences)?;
        let new_tokens: Vec<u64> = new_tokens.iter().map(|&n| n as u64).collect();
        let mut out = vec![0u64; self.shared.groups.len()];
        let _held = self.lock();
        // SAFETY: live handles of this pool, `num_groups` out-entries.
        check(unsafe {
            sys::kvc_pool_blocks_needed(
                self.as_ptr(),
                raw.as_ptr(),
                new_tokens.as_ptr(),
                raw.len(),
                out.as_mut_ptr(),
            )
        })?;
        Ok(out)
    }

    /// Evicts every cached, unreferenced, unpinned block (a weights update
    /// makes them stale) and queues an [`PoolEvent::AllCleared`].
    pub fn clear_cache(&self) -> Result<()> {
        let _held = self.begin("kvc_pool_clear_cache")?;
        // SAFETY: a live pool, no view alive.
        check(unsafe { sys::kvc_pool_clear_cache(self.as_ptr()) })
    }

    /// Unpins every block [`Sequence::pin`] pinned; they stay cached.
    pub fn unpin_all(&self) -> Result<()> {
        let _held = self.begin("kvc_pool_unpin_all")?;
        // SAFETY: a live pool, no view alive.
        check(unsafe { sys::kvc_pool_unpin_all(self.as_ptr()) })
    }

    /// Takes every queued event as one batch in vLLM's wire form
    /// (`kvc_pool_events_pull_vllm`): the msgpack bytes vLLM's KV event
    /// publisher sends for a `KVEventBatch`, which NVIDIA Dynamo and llm-d
    /// read (docs/pool.md, 'Events in vLLM's form'). Since 0.7.
    pub fn events_vllm(&self, options: &VllmBatchOptions) -> Result<Vec<u8>> {
        let _held = self.begin("kvc_pool_events_pull_vllm")?;
        let raw = sys::kvc_pool_vllm_batch_options {
            int_hashes: i32::from(options.int_hashes),
            ts: options.ts,
            data_parallel_rank: options.data_parallel_rank.map_or(-1, i64::from),
            ..Default::default()
        };
        let mut size = 0usize;
        // SAFETY: a live pool; a NULL buffer of capacity 0 asks for the size only.
        check(unsafe {
            sys::kvc_pool_events_pull_vllm(self.as_ptr(), &raw, std::ptr::null_mut(), 0, &mut size)
        })?;
        let mut out = vec![0u8; size];
        // SAFETY: a live pool; `out` holds `size` writable bytes; the lock keeps the queue as measured.
        check(unsafe {
            sys::kvc_pool_events_pull_vllm(
                self.as_ptr(),
                &raw,
                out.as_mut_ptr().cast(),
                size,
                &mut size,
            )
        })?;
        out.truncate(size);
        Ok(out)
    }

    /// Takes every queued event, oldest first.
    pub fn events(&self) -> Result<Vec<PoolEvent>> {
        let _held = self.begin("kvc_pool_events_pull")?;
        let mut out = Vec::new();
        let mut buf = vec![sys::kvc_pool_event::default(); 256];
        loop {
            let mut count = 0usize;
            // SAFETY: a live pool; `buf` holds `len` writable events.
            check(unsafe {
                sys::kvc_pool_events_pull(self.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut count)
            })?;
            out.extend(buf[..count].iter().map(PoolEvent::from_raw));
            if count < buf.len() {
                return Ok(out);
            }
        }
    }

    /// Writes one step's K/V through a slot mapping, every layer in one call
    /// (one kernel launch on a GPU): `keys[l]` and `values[l]` are
    /// `[num_tokens, num_kv_heads, head_dim]` on the pool's device
    /// ([`TensorRef::empty`] for recurrent layers), and `slot_mapping` holds
    /// `num_groups * num_tokens` slots in [`Sequence::reserve`]'s group-major
    /// form (concatenate the sequences of a batch with
    /// [`SlotMapping::concat`]); a slot of -1 is skipped. Refused while a
    /// layer-storage view is alive; block tables stay valid.
    pub fn write(
        &self,
        keys: &[TensorRef<'_>],
        values: &[TensorRef<'_>],
        slot_mapping: &[i64],
    ) -> Result<()> {
        const FN: &str = "kvc_pool_write";
        let (_held, num_tokens) = self.begin_write(FN, slot_mapping)?;
        let layers = self.shared.layers.len();
        if keys.len() != layers || values.len() != layers {
            return Err(invalid_argument(format!(
                "{FN}: keys has {} and values {} entries but the pool has {} layers (one per layer, \
                 TensorRef::empty() for recurrent layers)",
                keys.len(),
                values.len(),
                layers
            )));
        }
        // SAFETY: `len` layers of tensors (repr(transparent) kvc_tensor) and a
        // host slot mapping, all borrowed for the call.
        check(unsafe {
            sys::kvc_pool_write(
                self.as_ptr(),
                keys.as_ptr().cast(),
                values.as_ptr().cast(),
                keys.len() as u32,
                slot_mapping.as_ptr(),
                num_tokens,
            )
        })
    }

    /// Writes one layer's K/V of a step through the step's slot mapping: the
    /// call a model's forward pass makes per layer, once the layer computed
    /// them (one kernel launch on a GPU). `key` and `value` are
    /// `[num_tokens, num_kv_heads, head_dim]` on the pool's device;
    /// `slot_mapping` is the whole step's mapping, as [`write`](Self::write)
    /// takes it: pass the same slice to every layer of the step (its row for
    /// the layer's group is checked on the first layer; later layers compare
    /// it with that row). A latent layer takes [`TensorRef::empty`] as
    /// `value` (it has no V). Refused while a layer-storage view is alive;
    /// block tables stay valid.
    pub fn write_layer(
        &self,
        layer: u32,
        key: &TensorRef<'_>,
        value: &TensorRef<'_>,
        slot_mapping: &[i64],
    ) -> Result<()> {
        const FN: &str = "Pool::write_layer";
        let (_held, num_tokens) = self.begin_write(FN, slot_mapping)?;
        // SAFETY: tensors (repr(transparent) kvc_tensor) and a host slot
        // mapping, all borrowed for the call.
        check(unsafe {
            sys::kvc_pool_write_layer(
                self.as_ptr(),
                layer,
                (key as *const TensorRef<'_>).cast(),
                optional(value),
                slot_mapping.as_ptr(),
                num_tokens,
            )
        })
    }

    /// The pool's lock for a write: no layer-storage view alive, and a mapping
    /// of whole rows (returns its tokens).
    fn begin_write(
        &self,
        function: &str,
        slot_mapping: &[i64],
    ) -> Result<(MutexGuard<'_, State>, usize)> {
        let held = self.lock();
        if held.storage_views > 0 {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "{function}: {} layer-storage view(s) of this pool are alive; drop them before writing",
                    held.storage_views
                ),
            ));
        }
        let groups = self.shared.groups.len().max(1);
        if slot_mapping.len() % groups != 0 {
            return Err(invalid_argument(format!(
                "{function}: slot_mapping has {} entries, not a multiple of the pool's {groups} groups \
                 (num_groups * num_tokens, group-major)",
                slot_mapping.len()
            )));
        }
        Ok((held, slot_mapping.len() / groups))
    }

    /// A scheduler's step in one call: [`Sequence::reserve`] of
    /// `num_tokens[i]` tokens for each `sequences[i]`, in order, `tokens`
    /// holding their tokens one after another. Returns how many sequences
    /// were reserved (a prefix of the list) and the batch's slot mapping (the
    /// form [`write`](Self::write) and [`write_layer`](Self::write_layer)
    /// take). When the pool runs out of blocks the batch stops at the first
    /// sequence that does not fit: it and the later ones are unchanged and
    /// their slots are -1 (a write skips them); that is `Ok`, not an error.
    /// Bad arguments (a sequence of another pool or listed twice, a negative
    /// token, counts that do not add up to `tokens.len()`) reserve nothing.
    pub fn reserve_batch(
        &self,
        sequences: &mut [&mut Sequence],
        tokens: &[i32],
        num_tokens: &[usize],
    ) -> Result<(usize, SlotMapping)> {
        const FN: &str = "Pool::reserve_batch";
        let _held = self.begin(FN)?;
        if num_tokens.len() != sequences.len() {
            return Err(invalid_argument(format!(
                "{FN}: num_tokens has {} entries but sequences has {}",
                num_tokens.len(),
                sequences.len()
            )));
        }
        let total = num_tokens.iter().try_fold(0usize, |a, &n| a.checked_add(n));
        if total != Some(tokens.len()) {
            return Err(invalid_argument(format!(
                "{FN}: tokens has {} entries but num_tokens adds up to {} (the sequences' tokens one \
                 after another)",
                tokens.len(),
                total.map_or_else(|| "more than usize".to_string(), |t| t.to_string())
            )));
        }
        let raw = self.batch_handles(FN, sequences)?;
        let counts: Vec<u64> = num_tokens.iter().map(|&n| n as u64).collect();
        let groups = self.shared.groups.len();
        let mut slots = vec![-1i64; groups * tokens.len()];
        let mut reserved = 0usize;
        // SAFETY: live handles of this pool (each borrowed mutably), host
        // arrays of the sizes the call reads and writes.
        check(unsafe {
            sys::kvc_pool_reserve_batch(
                self.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                tokens.as_ptr(),
                counts.as_ptr(),
                slots.as_mut_ptr(),
                &mut reserved,
            )
        })?;
        Ok((
            reserved,
            SlotMapping {
                slots,
                num_groups: groups,
            },
        ))
    }

    /// [`Sequence::commit`] of every sequence of `sequences`, in one call.
    pub fn commit_batch(&self, sequences: &mut [&mut Sequence]) -> Result<()> {
        const FN: &str = "Pool::commit_batch";
        let _held = self.begin(FN)?;
        let raw = self.batch_handles(FN, sequences)?;
        // SAFETY: live handles of this pool, each borrowed mutably.
        check(unsafe { sys::kvc_pool_commit_batch(self.as_ptr(), raw.as_ptr(), raw.len()) })
    }

    fn batch_handles(
        &self,
        function: &str,
        sequences: &[&mut Sequence],
    ) -> Result<Vec<*mut sys::kvc_pool_sequence>> {
        let shared: Vec<&Sequence> = sequences.iter().map(|s| &**s).collect();
        // The pointers come from `&mut` borrows the caller holds for the call.
        Ok(self
            .handles(function, &shared)?
            .into_iter()
            .map(<*const _>::cast_mut)
            .collect())
    }

    /// The K and V storage of `layer` over all its group's blocks, zero-copy:
    /// `[num_blocks, block_size, heads, head_dim]` ([`Layout::Nhd`]) or
    /// `[num_blocks, heads, block_size, head_dim]` ([`Layout::Hnd`]); the
    /// pool's own layout is compact, the other strided.
    pub fn layer_storage(&self, layer: u32, layout: Layout) -> Result<LayerStorage<'_>> {
        let mut raw = sys::kvc_kv::default();
        let mut held = self.lock();
        // SAFETY: a live pool and a writable out-struct.
        check(unsafe {
            sys::kvc_pool_layer_storage(self.as_ptr(), layer, layout.raw(), &mut raw)
        })?;
        Ok(LayerStorage {
            // SAFETY: the storage stays valid and unchanged while the guard
            // blocks writes and every mutation.
            kv: unsafe { KvView::from_raw(raw) },
            _guard: ViewGuard::new(self, &mut held, true, None),
        })
    }

    /// The block tables of `sequences` in `group` as an int32
    /// `[batch, max_blocks]` tensor on the pool's device, rows padded with 0
    /// (vLLM, FlashAttention). Refused while the previous padded table of the
    /// same group is alive (the pool rewrites that buffer); the tables of other
    /// groups and formats stay valid.
    pub fn block_table(&self, sequences: &[&Sequence], group: u32) -> Result<BlockTable<'_>> {
        let (raw, guard) = self.table(sequences, group, sys::KVC_POOL_TABLE_PADDED)?;
        Ok(BlockTable {
            // SAFETY: the table buffer stays valid while the guard blocks mutations
            // and the next table of this group and format.
            table: unsafe { TensorView::from_raw(raw.table) },
            _guard: guard,
        })
    }

    /// The block tables in FlashInfer's CSR form (indptr, indices,
    /// last_page_len); as [`block_table`](Self::block_table).
    pub fn block_table_csr(
        &self,
        sequences: &[&Sequence],
        group: u32,
    ) -> Result<CsrBlockTable<'_>> {
        let (raw, guard) = self.table(sequences, group, sys::KVC_POOL_TABLE_CSR)?;
        // SAFETY: as in block_table.
        unsafe {
            Ok(CsrBlockTable {
                indptr: TensorView::from_raw(raw.indptr),
                indices: TensorView::from_raw(raw.table),
                last_page_len: TensorView::from_raw(raw.last_page_len),
                _guard: guard,
            })
        }
    }

    fn table(
        &self,
        sequences: &[&Sequence],
        group: u32,
        format: sys::kvc_pool_table_format,
    ) -> Result<(sys::kvc_pool_table, ViewGuard<'_>)> {
        const FN: &str = "kvc_pool_block_table";
        let raw = self.handles(FN, sequences)?;
        let mut held = self.lock();
        // An out-of-range group has no slot: the library refuses it below.
        let slot = (group as usize)
            .checked_mul(2)
            .map(|i| i + usize::from(format == sys::KVC_POOL_TABLE_CSR))
            .filter(|&i| i < held.tables.len());
        if let Some(i) = slot {
            if held.tables[i] > 0 {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    format!(
                        "{FN}: the previous table of group {group} in this format is alive, and this call \
                         rewrites it; drop it first"
                    ),
                ));
            }
        }
        let mut out = sys::kvc_pool_table::default();
        // SAFETY: live handles of this pool, borrowed for the call.
        check(unsafe {
            sys::kvc_pool_block_table(
                self.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                group,
                format,
                &mut out,
            )
        })?;
        Ok((out, ViewGuard::new(self, &mut held, false, slot)))
    }

    /// Binds a device pool to a CUDA or HIP stream (`kvc_pool_set_stream`),
    /// with [`CacheRef::set_stream`](crate::CacheRef::set_stream)'s rules.
    ///
    /// # Safety
    /// `stream` must be null (the default stream) or a live stream of the
    /// pool's device that outlives its use by the pool.
    pub unsafe fn set_stream(&self, stream: *mut c_void) -> Result<()> {
        let _held = self.lock();
        // SAFETY: a live pool; the caller vouches for the stream.
        check(unsafe { sys::kvc_pool_set_stream(self.as_ptr(), stream) })
    }

    /// The raw handles of `sequences`, which must belong to this pool.
    fn handles(
        &self,
        function: &str,
        sequences: &[&Sequence],
    ) -> Result<Vec<*const sys::kvc_pool_sequence>> {
        sequences
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if s.pool.same_pool(self) {
                    Ok(s.raw.as_ptr().cast_const())
                } else {
                    Err(invalid_argument(format!(
                        "{function}: sequences[{i}] belongs to another pool"
                    )))
                }
            })
            .collect()
    }

    /// Takes the pool's lock for one call into C. A panic elsewhere while it
    /// was held leaves only counters behind, which stay right, so a poisoned
    /// lock is taken as it is.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lock for a call that would invalidate views: refused while
    /// one is alive; destroys the sequences dropped while views were.
    pub(crate) fn begin(&self, function: &str) -> Result<MutexGuard<'_, State>> {
        let mut held = self.lock();
        let views = held.views;
        if views > 0 {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "{function}: {views} view(s) of this pool (block tables, layer storage, recurrent \
                     states) are alive, and this call would invalidate them; drop them first"
                ),
            ));
        }
        held.destroy_dropped();
        Ok(held)
    }
}

impl State {
    fn destroy_dropped(&mut self) {
        for seq in self.dropped.drain(..) {
            // SAFETY: a live sequence of this pool, no longer referenced; the
            // caller holds the pool's lock.
            unsafe { sys::kvc_pool_sequence_destroy(seq.as_ptr()) }
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.shared;
        f.debug_struct("Pool")
            .field("dtype", &shared.dtype)
            .field("device", &shared.device)
            .field("layout", &shared.layout)
            .field("groups", &shared.groups)
            .field("layers", &shared.layers.len())
            .field("views", &self.lock().views)
            .finish()
    }
}

/// Counts a live view in its pool (a storage view, a block table of one
/// group and format, or a recurrent state).
struct ViewGuard<'p> {
    pool: &'p Pool,
    storage: bool,
    table: Option<usize>,
}

impl<'p> ViewGuard<'p> {
    /// Counts the view in `held`, the pool's state under its lock.
    fn new(pool: &'p Pool, held: &mut State, storage: bool, table: Option<usize>) -> ViewGuard<'p> {
        held.views += 1;
        if storage {
            held.storage_views += 1;
        }
        if let Some(i) = table {
            held.tables[i] += 1;
        }
        ViewGuard {
            pool,
            storage,
            table,
        }
    }
}

impl Drop for ViewGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.pool.lock();
        held.views -= 1;
        if self.storage {
            held.storage_views -= 1;
        }
        if let Some(i) = self.table {
            held.tables[i] -= 1;
        }
        if held.views == 0 {
            held.destroy_dropped();
        }
    }
}

/// A request in a [`Pool`] (`kvc_pool_sequence*`): its tokens and one block
/// table per group. It holds a handle of its pool, so it can be stored next
/// to the pool in a scheduler and moved to another thread or task; the pool
/// lives at least as long. Dropping it releases its blocks (the cached ones
/// stay reusable until evicted).
pub struct Sequence {
    raw: NonNull<sys::kvc_pool_sequence>,
    pool: Pool,
}

// SAFETY: every call on the sequence's handle holds its pool's lock (the C
// rule: a sequence is part of its pool); `&mut self` methods keep one
// caller at a time on the sequence itself.
unsafe impl Send for Sequence {}
// SAFETY: as above; `&self` methods only read or make new sequences.
unsafe impl Sync for Sequence {}

impl Sequence {
    /// The pool it belongs to.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The raw handle, for calling `kvcache_sys` directly (see
    /// [`Pool::as_ptr`] for the threading rule).
    pub fn as_ptr(&self) -> *mut sys::kvc_pool_sequence {
        self.raw.as_ptr()
    }

    /// Tokens the sequence holds (reserved, committed or not).
    pub fn len(&self) -> usize {
        let _held = self.pool.lock();
        // SAFETY: a live sequence, under the pool's lock.
        let n = unsafe { sys::kvc_pool_sequence_length(self.as_ptr()) };
        usize::try_from(n).expect("kvcache: a sequence longer than the address space")
    }

    /// Whether it holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens committed (written and declared by [`commit`](Self::commit), or matched).
    pub fn committed(&self) -> usize {
        let _held = self.pool.lock();
        // SAFETY: a live sequence, under the pool's lock.
        let n = unsafe { sys::kvc_pool_sequence_committed(self.as_ptr()) };
        usize::try_from(n).expect("kvcache: a sequence longer than the address space")
    }

    /// Attaches the longest cached prefix of `tokens` to this empty sequence
    /// and returns how many tokens matched (a whole number of blocks of every
    /// group, at most `tokens.len() - 1`: the last token is always computed).
    /// Reserve the rest.
    pub fn match_prefix(&mut self, tokens: &[i32]) -> Result<usize> {
        let _held = self.pool.begin("kvc_pool_match_prefix")?;
        let mut matched = 0u64;
        // SAFETY: a live sequence; `tokens` is borrowed for the call.
        check(unsafe {
            sys::kvc_pool_match_prefix(self.as_ptr(), tokens.as_ptr(), tokens.len(), &mut matched)
        })?;
        // At most tokens.len() - 1.
        Ok(matched as usize)
    }

    /// Appends `tokens` and gives each a slot in every attention group
    /// (copying a shared or cached last block first, evicting least recently
    /// used cached blocks when none is free). Out of blocks is
    /// [`ErrorCode::OutOfMemory`] naming the group and the numbers, and
    /// nothing changes.
    pub fn reserve(&mut self, tokens: &[i32]) -> Result<SlotMapping> {
        let mut out = SlotMapping::default();
        self.reserve_into(tokens, &mut out)?;
        Ok(out)
    }

    /// [`reserve`](Self::reserve) into a mapping whose memory is reused (a
    /// decode loop allocates nothing).
    pub fn reserve_into(&mut self, tokens: &[i32], out: &mut SlotMapping) -> Result<()> {
        let _held = self.pool.begin("kvc_pool_reserve")?;
        let groups = self.pool.shared.groups.len();
        let mut slots = std::mem::take(&mut out.slots);
        slots.clear();
        slots.resize(groups * tokens.len(), -1);
        // SAFETY: a live sequence; `slots` has num_groups * num_tokens entries.
        let result = check(unsafe {
            sys::kvc_pool_reserve(
                self.as_ptr(),
                tokens.as_ptr(),
                tokens.len(),
                slots.as_mut_ptr(),
            )
        });
        if result.is_err() {
            slots.clear();
        }
        *out = SlotMapping {
            slots,
            num_groups: groups,
        };
        result
    }

    /// Declares every reserved token written: blocks that became full are
    /// hashed and cached ([`PoolEvent::BlockStored`] each), recurrent groups
    /// checkpoint their state at block boundaries.
    pub fn commit(&mut self) -> Result<()> {
        let _held = self.pool.begin("kvc_pool_commit")?;
        // SAFETY: a live sequence.
        check(unsafe { sys::kvc_pool_commit(self.as_ptr()) })
    }

    /// A new sequence sharing every block of this one (`n > 1` sampling, beam
    /// search); nothing is copied until one of them writes into a shared
    /// partial block (copy-on-write).
    pub fn fork(&self) -> Result<Sequence> {
        let _held = self.pool.begin("kvc_pool_fork")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live sequence.
        check(unsafe { sys::kvc_pool_fork(self.as_ptr(), &mut raw) })?;
        Ok(Sequence {
            raw: NonNull::new(raw).expect("kvcache: kvc_pool_fork returned NULL"),
            pool: self.pool.clone(),
        })
    }

    /// Keeps the first `num_tokens` tokens (speculative decoding's rollback).
    pub fn truncate(&mut self, num_tokens: usize) -> Result<()> {
        let _held = self.pool.begin("kvc_pool_truncate")?;
        // SAFETY: a live sequence.
        check(unsafe { sys::kvc_pool_truncate(self.as_ptr(), num_tokens as u64) })
    }

    /// Pins the sequence's cached blocks: never evicted, even after it is
    /// dropped, until [`Pool::unpin_all`].
    pub fn pin(&mut self) -> Result<()> {
        let _held = self.pool.begin("kvc_pool_sequence_pin")?;
        // SAFETY: a live sequence.
        check(unsafe { sys::kvc_pool_sequence_pin(self.as_ptr()) })
    }

    /// Writes the sequence to the file `path` (created or replaced; written
    /// beside it and renamed): its tokens, lengths, hash chain root and every
    /// layer's block bytes (recurrent layers: the live state), under a
    /// fingerprint of the pool's layout. [`Pool::load_sequence`] makes it
    /// again in a pool of the same layout. Nothing changes: views stay valid.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let _held = self.pool.lock();
        // SAFETY: a live sequence and a path borrowed for the call; NULL options are documented.
        check(unsafe {
            sys::kvc_pool_sequence_save(self.as_ptr(), path.as_ptr(), std::ptr::null())
        })
    }

    /// Copies the sequence's K and V of `layer` into new host vectors laid
    /// out `[1, num_kv_heads, len, head_dim]` (the transformers layout). `T`
    /// is the pool's element type; the pool must be in host memory.
    pub fn gather<T: Element>(&self, layer: u32) -> Result<(Vec<T>, Vec<T>)> {
        let (kn, vn) = self.gather_sizes(layer)?;
        // SAFETY: every bit pattern of an Element is a valid value (zero included).
        let zero: T = unsafe { std::mem::zeroed() };
        let (mut keys, mut values) = (vec![zero; kn], vec![zero; vn]);
        self.gather_into(layer, &mut keys, &mut values)?;
        Ok((keys, values))
    }

    /// [`gather`](Self::gather) into caller memory of exactly the right size.
    pub fn gather_into<T: Element>(
        &self,
        layer: u32,
        keys: &mut [T],
        values: &mut [T],
    ) -> Result<()> {
        const FN: &str = "kvc_pool_gather";
        let (kn, vn) = self.gather_sizes(layer)?;
        if keys.len() != kn || values.len() != vn {
            return Err(invalid_argument(format!(
                "{FN}: keys has {} and values {} elements but layer {layer} of {} tokens needs {kn} and {vn}",
                keys.len(),
                values.len(),
                self.len()
            )));
        }
        let l = &self.pool.shared.layers[layer as usize];
        let len = self.len() as i64;
        let kshape = [1, i64::from(l.num_kv_heads), len, i64::from(l.key_head_dim)];
        let vshape = [1, i64::from(l.num_kv_heads), len, i64::from(l.v_dim())];
        // SAFETY: each slice covers exactly its compact shape, and is
        // exclusively borrowed for the call, which writes it.
        unsafe {
            let dt = T::DTYPE.data_type();
            let k = TensorRef::from_raw_parts(
                keys.as_mut_ptr().cast_const().cast(),
                Device::CPU,
                dt,
                &kshape,
                None,
                0,
            );
            let v = if vn == 0 && kn != 0 {
                TensorRef::empty() // a latent layer: no V
            } else {
                TensorRef::from_raw_parts(
                    values.as_mut_ptr().cast_const().cast(),
                    Device::CPU,
                    dt,
                    &vshape,
                    None,
                    0,
                )
            };
            self.gather_raw(layer, &k, &v)
        }
    }

    /// `kvc_pool_gather` into any tensors (device memory, strided).
    ///
    /// # Safety
    /// `keys` and `values` must describe writable memory of the pool's device
    /// that nothing else reads or writes during the call.
    pub unsafe fn gather_raw(
        &self,
        layer: u32,
        keys: &TensorRef<'_>,
        values: &TensorRef<'_>,
    ) -> Result<()> {
        let _held = self.pool.lock();
        // SAFETY: a live sequence; the caller vouches for the outputs.
        check(unsafe {
            sys::kvc_pool_gather(self.as_ptr(), layer, keys.as_raw(), optional(values))
        })
    }

    fn gather_sizes(&self, layer: u32) -> Result<(usize, usize)> {
        let layers = &self.pool.shared.layers;
        let Some(l) = layers.get(layer as usize) else {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!(
                    "kvc_pool_gather: layer is {layer} but the pool has {} layers",
                    layers.len()
                ),
            ));
        };
        let len = self.len();
        let heads = l.num_kv_heads as usize;
        let latent = self.pool.shared.groups[l.group as usize].kind == GroupKind::Latent;
        Ok((
            heads * len * l.key_head_dim as usize,
            if latent {
                0
            } else {
                heads * len * l.v_dim() as usize
            },
        ))
    }

    /// The live state of recurrent `layer`: conv `[1, conv_dim, conv_kernel]`
    /// and SSM `[1, heads, head_dim, ssm_state_size]` views the model reads
    /// and writes in place.
    pub fn recurrent_state(&mut self, layer: u32) -> Result<RecurrentState<'_>> {
        let (mut conv, mut ssm) = (sys::kvc_tensor::default(), sys::kvc_tensor::default());
        let mut held = self.pool.lock();
        // SAFETY: a live sequence, writable out-tensors.
        check(unsafe { sys::kvc_pool_recurrent_state(self.as_ptr(), layer, &mut conv, &mut ssm) })?;
        // SAFETY: the state stays valid while the guard blocks mutations and
        // the sequence is exclusively borrowed.
        unsafe {
            Ok(RecurrentState {
                conv: TensorView::from_raw(conv),
                ssm: TensorView::from_raw(ssm),
                _guard: ViewGuard::new(&self.pool, &mut held, false, None),
            })
        }
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        let mut held = self.pool.lock();
        if held.views > 0 {
            // Destroying would invalidate the views: later, when none is alive.
            held.dropped.push(self.raw);
        } else {
            // SAFETY: we own the sequence; its pool is alive (we hold a
            // handle, dropped after this) and locked.
            unsafe { sys::kvc_pool_sequence_destroy(self.raw.as_ptr()) }
        }
    }
}

impl fmt::Debug for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sequence")
            .field("len", &self.len())
            .field("committed", &self.committed())
            .finish()
    }
}

/// The slots [`Sequence::reserve`] gave the step's tokens: `num_groups` rows
/// of `num_tokens` in one group-major slice (entry `g * num_tokens + i` is
/// token `i`'s slot in group `g`: `block * block_size + offset`, or -1 in a
/// recurrent group). It dereferences to that slice, the form
/// [`Pool::write`] takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotMapping {
    slots: Vec<i64>,
    num_groups: usize,
}

impl SlotMapping {
    /// Groups (rows).
    pub fn num_groups(&self) -> u32 {
        // Pool::build refused more groups than u32 holds.
        self.num_groups as u32
    }

    /// Tokens (columns).
    pub fn num_tokens(&self) -> usize {
        self.slots.len().checked_div(self.num_groups).unwrap_or(0)
    }

    /// The slots of `group`.
    ///
    /// # Panics
    /// If `group >= num_groups()`, as slice indexing does (naming both,
    /// rather than overflowing `group * num_tokens` first).
    pub fn group(&self, group: u32) -> &[i64] {
        let group = group as usize;
        assert!(
            group < self.num_groups,
            "SlotMapping::group: group {group} is out of range for {} groups",
            self.num_groups
        );
        let n = self.num_tokens();
        &self.slots[group * n..(group + 1) * n]
    }

    /// The mappings of several sequences as one, group by group: what one
    /// [`Pool::write`] of a whole batch takes.
    pub fn concat(mappings: &[&SlotMapping]) -> Result<SlotMapping> {
        let groups = mappings.first().map_or(0, |m| m.num_groups);
        if mappings.iter().any(|m| m.num_groups != groups) {
            return Err(invalid_argument(
                "SlotMapping::concat: the mappings have different numbers of groups",
            ));
        }
        let mut slots = Vec::with_capacity(mappings.iter().map(|m| m.slots.len()).sum());
        for g in 0..groups {
            for m in mappings {
                slots.extend_from_slice(m.group(g as u32));
            }
        }
        Ok(SlotMapping {
            slots,
            num_groups: groups,
        })
    }
}

impl Deref for SlotMapping {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.slots
    }
}

/// Counters of one group (`kvc_pool_stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// The group.
    pub group: u32,
    /// Usable blocks (`num_blocks - 1`).
    pub num_blocks: u64,
    /// Neither referenced nor cached.
    pub free_blocks: u64,
    /// Cached and unreferenced: evictable, reusable by match_prefix.
    pub cached_blocks: u64,
    /// Referenced by at least one sequence.
    pub used_blocks: u64,
    /// Cached blocks kept from eviction by [`Sequence::pin`].
    pub pinned_blocks: u64,
    /// Blocks looked up by match_prefix since creation.
    pub prefix_queries: u64,
    /// Of which were found.
    pub prefix_hits: u64,
    /// Cached blocks reclaimed for new data since creation.
    pub evictions: u64,
}

impl PoolStats {
    /// Blocks a reserve can take now: free plus evictable cached ones.
    pub fn available_blocks(&self) -> u64 {
        self.free_blocks + self.cached_blocks
    }
}

/// One event of the pool's queue (`kvc_pool_event`), for a router that
/// tracks what each pool caches. Ids count 1, 2, 3, ... per pool; a gap means
/// the queue was full and events were dropped.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolEvent {
    /// A full block was hashed and cached.
    BlockStored {
        /// The event's id.
        id: u64,
        /// The block's group.
        group: u32,
        /// Its hash.
        block_hash: BlockHash,
        /// The previous block's hash, or the chain's root.
        parent_hash: BlockHash,
        /// Tokens in the block (the group's block size).
        num_tokens: u32,
        /// The block's index in its group.
        block_id: u32,
    },
    /// A cached block was evicted: its hash is no longer found.
    BlockRemoved {
        /// The event's id.
        id: u64,
        /// The block's group.
        group: u32,
        /// Its hash.
        block_hash: BlockHash,
        /// The block's index in its group.
        block_id: u32,
    },
    /// [`Pool::clear_cache`].
    AllCleared {
        /// The event's id.
        id: u64,
    },
    /// What the tier worker did with a block's store (since 0.7; with
    /// [`TierWorkerOptions::events`](crate::TierWorkerOptions::events)).
    Tier {
        /// The event's id.
        id: u64,
        /// Stored, failed or dropped.
        outcome: TierOutcome,
        /// The block's group.
        group: u32,
        /// Its hash.
        block_hash: BlockHash,
        /// The tier's index (order of [`Pool::add_tier`]).
        tier: u32,
    },
    /// A kind this crate does not know (from a newer library).
    Unknown {
        /// The event's id.
        id: u64,
        /// The raw `kvc_pool_event_kind`.
        kind: i32,
    },
}

/// What became of a store the tier worker was given ([`PoolEvent::Tier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierOutcome {
    /// The tier stored the block.
    Stored,
    /// The tier refused or failed the store.
    Failed,
    /// The store never reached the tier: the queue was full, or shutdown.
    Dropped,
}

impl PoolEvent {
    fn from_raw(e: &sys::kvc_pool_event) -> PoolEvent {
        match e.kind {
            sys::KVC_POOL_EVENT_BLOCK_STORED => PoolEvent::BlockStored {
                id: e.id,
                group: e.group,
                block_hash: e.block_hash,
                parent_hash: e.parent_hash,
                num_tokens: e.num_tokens,
                block_id: e.block_id,
            },
            sys::KVC_POOL_EVENT_BLOCK_REMOVED => PoolEvent::BlockRemoved {
                id: e.id,
                group: e.group,
                block_hash: e.block_hash,
                block_id: e.block_id,
            },
            sys::KVC_POOL_EVENT_ALL_CLEARED => PoolEvent::AllCleared { id: e.id },
            sys::KVC_POOL_EVENT_TIER_STORED
            | sys::KVC_POOL_EVENT_TIER_FAILED
            | sys::KVC_POOL_EVENT_TIER_DROPPED => PoolEvent::Tier {
                id: e.id,
                outcome: match e.kind {
                    sys::KVC_POOL_EVENT_TIER_STORED => TierOutcome::Stored,
                    sys::KVC_POOL_EVENT_TIER_FAILED => TierOutcome::Failed,
                    _ => TierOutcome::Dropped,
                },
                group: e.group,
                block_hash: e.block_hash,
                tier: e.block_id,
            },
            kind => PoolEvent::Unknown { id: e.id, kind },
        }
    }

    /// The event's id.
    pub fn id(&self) -> u64 {
        match *self {
            PoolEvent::BlockStored { id, .. }
            | PoolEvent::BlockRemoved { id, .. }
            | PoolEvent::AllCleared { id }
            | PoolEvent::Tier { id, .. }
            | PoolEvent::Unknown { id, .. } => id,
        }
    }
}

/// Reads a host int32 view (block tables) in row-major order.
fn read_i32(view: &TensorView<'_>, function: &str) -> Result<Vec<i32>> {
    if !view.device().kind.is_host() {
        return Err(Error::new(
            ErrorCode::DeviceMismatch,
            format!(
                "{function}: the table lives on {}; only host memory can be read",
                view.device()
            ),
        ));
    }
    if view.data_type()
        != (DataType {
            code: DataType::CODE_INT,
            bits: 32,
            lanes: 1,
        })
    {
        return Err(Error::new(
            ErrorCode::DtypeMismatch,
            format!("{function}: the view holds {}, not int32", view.data_type()),
        ));
    }
    // SAFETY: a host int32 view of the library (checked above); the guard
    // keeps its memory valid.
    Ok(unsafe { view.copy_elements::<i32>() })
}

/// Padded block tables (`[batch, max_blocks]` int32), borrowed from the pool.
pub struct BlockTable<'p> {
    table: TensorView<'p>,
    _guard: ViewGuard<'p>,
}

impl BlockTable<'_> {
    /// The table as a view (zero-copy; `data_ptr` for kernels, DLPack export).
    pub fn table(&self) -> TensorView<'_> {
        self.table
    }

    /// The rows, copied (host pools).
    pub fn rows(&self) -> Result<Vec<Vec<i32>>> {
        let flat = read_i32(&self.table, "BlockTable::rows")?;
        let width = self.table.shape().get(1).copied().unwrap_or(0).max(1) as usize;
        Ok(flat.chunks(width).map(<[i32]>::to_vec).collect())
    }
}

impl fmt::Debug for BlockTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockTable")
            .field("table", &self.table)
            .finish()
    }
}

/// Block tables in FlashInfer's CSR form, borrowed from the pool.
pub struct CsrBlockTable<'p> {
    indptr: TensorView<'p>,
    indices: TensorView<'p>,
    last_page_len: TensorView<'p>,
    _guard: ViewGuard<'p>,
}

impl CsrBlockTable<'_> {
    /// int32 `[batch + 1]`.
    pub fn indptr(&self) -> TensorView<'_> {
        self.indptr
    }

    /// int32 `[indptr[batch]]`: the blocks of every sequence, one after the other.
    pub fn indices(&self) -> TensorView<'_> {
        self.indices
    }

    /// int32 `[batch]`: tokens in each sequence's last block, 1..=block_size.
    pub fn last_page_len(&self) -> TensorView<'_> {
        self.last_page_len
    }

    /// The three arrays copied (host pools): (indptr, indices, last_page_len).
    pub fn to_vecs(&self) -> Result<(Vec<i32>, Vec<i32>, Vec<i32>)> {
        const FN: &str = "CsrBlockTable::to_vecs";
        Ok((
            read_i32(&self.indptr, FN)?,
            read_i32(&self.indices, FN)?,
            read_i32(&self.last_page_len, FN)?,
        ))
    }
}

impl fmt::Debug for CsrBlockTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CsrBlockTable")
            .field("indptr", &self.indptr)
            .field("indices", &self.indices)
            .field("last_page_len", &self.last_page_len)
            .finish()
    }
}

/// The K and V storage of one layer, borrowed from the pool.
pub struct LayerStorage<'p> {
    kv: KvView<'p>,
    _guard: ViewGuard<'p>,
}

impl LayerStorage<'_> {
    /// `[num_blocks, block_size, heads, head_dim]` or its HND permutation.
    pub fn keys(&self) -> TensorView<'_> {
        self.kv.key
    }

    /// As [`keys`](Self::keys), with V's head_dim.
    pub fn values(&self) -> TensorView<'_> {
        self.kv.value
    }
}

impl fmt::Debug for LayerStorage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerStorage")
            .field("kv", &self.kv)
            .finish()
    }
}

/// A sequence's live state of one recurrent layer, borrowed mutably.
pub struct RecurrentState<'s> {
    conv: TensorView<'s>,
    ssm: TensorView<'s>,
    _guard: ViewGuard<'s>,
}

impl RecurrentState<'_> {
    /// The conv state `[1, conv_dim, conv_kernel]`.
    pub fn conv(&self) -> TensorView<'_> {
        self.conv
    }

    /// The SSM state `[1, heads, head_dim, ssm_state_size]`.
    pub fn ssm(&self) -> TensorView<'_> {
        self.ssm
    }

    /// The conv state's elements to write in place (host pools).
    pub fn conv_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let slice = self.conv.as_slice::<T>()?;
        // SAFETY: the state is exclusively borrowed through `&mut self` (the
        // sequence is borrowed mutably, no other view of it exists).
        Ok(unsafe { std::slice::from_raw_parts_mut(slice.as_ptr().cast_mut(), slice.len()) })
    }

    /// The SSM state's elements to write in place (host pools).
    pub fn ssm_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let slice = self.ssm.as_slice::<T>()?;
        // SAFETY: as in conv_mut.
        Ok(unsafe { std::slice::from_raw_parts_mut(slice.as_ptr().cast_mut(), slice.len()) })
    }
}

impl fmt::Debug for RecurrentState<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecurrentState")
            .field("conv", &self.conv)
            .field("ssm", &self.ssm)
            .finish()
    }
}

impl TensorRef<'static> {
    /// An empty descriptor (no data, no dimensions): the entry of a recurrent
    /// layer in [`Pool::write`], which ignores it, and a latent layer's V
    /// (since 0.7).
    pub fn empty() -> TensorRef<'static> {
        // SAFETY: no element is addressed (no dimensions, never read).
        unsafe {
            TensorRef::from_raw_parts(
                std::ptr::null(),
                Device::CPU,
                DataType {
                    code: 0,
                    bits: 0,
                    lanes: 0,
                },
                &[],
                None,
                0,
            )
        }
    }
}
