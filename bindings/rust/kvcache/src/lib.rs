#![doc = include_str!("../README.md")]
//!
//! # The API at a glance
//!
//! | C | Rust |
//! |---|---|
//! | `kvc_cache*` | [`Cache`] (owned, `Drop` frees it), [`CacheRef`] (borrowed) |
//! | `kvc_encoder_decoder_cache*` | [`EncoderDecoderCache`] |
//! | `kvc_error*` | [`Error`] (code + message), [`ErrorCode`] |
//! | `kvc_tensor` input | [`TensorRef`] (borrows your data, shape and strides) |
//! | `kvc_tensor` / `kvc_kv` output | [`TensorView`], [`KvView`]: borrow the cache |
//! | `kvc_cache_options` | [`CacheBuilder`] with [`ModelConfig`], [`LayerOptions`], [`QuantOptions`] |
//! | `kvc_update_options`, `kvc_init_options`, `kvc_conv_update_options` | [`UpdateOptions`], [`InitOptions`], [`ConvUpdateOptions`] |
//! | `kvc_layer_info`, `kvc_memory_info` | [`LayerInfo`], [`MemoryInfo`] |
//! | `kvc_version`, `kvc_features` | [`version()`], [`features()`], [`check_version()`] |
//! | `kvc_pool*`, `kvc_pool_sequence*` (`kvcache/pool.h`) | [`Pool`] (built by [`PoolBuilder`] from [`PoolGroup`]s and [`PoolLayer`]s), [`Sequence`] (holds a handle of its pool; `Drop` releases its blocks); both `Send + Sync` |
//! | pool views, events, stats | [`BlockTable`], [`CsrBlockTable`], [`LayerStorage`], [`RecurrentState`], [`PoolEvent`], [`PoolStats`], [`SlotMapping`]; see the [`pool`] module |
//! | `kvc_dtype`, `kvc_data_type`, `kvc_device` | [`DType`], [`DataType`], [`Device`] |
//! | `kvc_block_hash_root`, `kvc_block_hash`, `kvc_block_hash_chain` | [`block_hash_root()`], [`block_hash()`], [`block_hash_chain()`] ([`BlockHash`]) |
//! | `kvc_host_memory_set_retention`, `kvc_host_memory_release`, `kvc_host_memory_retained` | [`host_memory::set_retention()`], [`host_memory::release()`], [`host_memory::retained()`] (process-wide) |
//!
//! Every `kvc_*` function of the header is reachable from a method here; the
//! raw bindings are re-exported as [`sys`].
//!
//! # Views and the borrow checker
//!
//! The C library returns views into cache-owned memory that are valid until
//! the next call that mutates the cache. Here every view borrows the cache:
//! views from `&self` methods ([`CacheRef::layer_view`]) borrow it shared,
//! views from `&mut self` methods ([`CacheRef::update`]) borrow it
//! exclusively. Either way no mutating call compiles while a view is alive,
//! so a view can never dangle. Read what you need from a view (or copy it
//! with [`TensorView::to_vec`]) before the next step.
//!
//! # Integer types
//!
//! One type per kind of number, chosen by what the number is compared with:
//!
//! | what | type | examples |
//! |---|---|---|
//! | tensor extents, strides, element and batch indices, positions, and a [`Cache`]'s token lengths (they are the sequence extent of its views, and keep transformers' signed conventions: `crop(-n)`, `max_length` -1 for unbounded) | `i64` (DLPack's, and the C ABI's `int64_t`) | [`TensorView::shape`], [`TensorView::get`], [`CacheRef::seq_length`], [`CacheRef::crop`], [`KvView::seq_len`], [`UpdateOptions::cache_position`], [`CacheRef::reorder`] |
//! | indices of layers, groups, tiers and states, and the counts that bound them | `u32` (the C ABI's `uint32_t`) | [`CacheRef::layer_view`], [`CacheRef::num_layers`], [`Pool::stats`], [`SlotMapping::group`], [`SlotMapping::num_groups`], [`ViewBuffer::with_layers`], [`Pool::tier_stats`] |
//! | token counts of a pool sequence, counted against Rust slices of token ids | `usize` | [`Sequence::len`], [`Sequence::committed`], [`Sequence::match_prefix`], [`Sequence::truncate`], [`Pool::blocks_needed`], [`SlotMapping::num_tokens`] |
//! | sizes set in option structs | the C field's type (`u32` block sizes and head counts of a [`PoolLayer`], `i64` windows everywhere) | [`PoolGroup`], [`PoolLayer`], [`LayerOptions`] |
//! | counters the library reports (blocks, bytes, hits) | `u64` | [`PoolStats`], [`MemoryInfo`], [`TierStats`] |
//!
//! Token ids are `i32` (the C ABI's `int32_t`). Conversions to the C types
//! are checked where a value could not fit (a refused value is an
//! [`ErrorCode::InvalidArgument`] or [`ErrorCode::OutOfRange`] naming it).
//!
//! # Features
//!
//! The links below resolve in documentation built with the feature (as on
//! docs.rs); without it they name what the feature adds.
#![cfg_attr(
    feature = "dlpack",
    doc = "- `dlpack`: [`TensorView::to_dlpack`] exports views as DLPack \
           `DLManagedTensorVersioned` (zero-copy or copied), and \
           [`TensorRef::from_dlpack`] accepts DLPack tensors as inputs; see the \
           [`dlpack`] module."
)]
#![cfg_attr(
    not(feature = "dlpack"),
    doc = "- `dlpack`: `TensorView::to_dlpack` exports views as DLPack \
           `DLManagedTensorVersioned` (zero-copy or copied), and \
           `TensorRef::from_dlpack` accepts DLPack tensors as inputs; see the \
           `dlpack` module."
)]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
mod setters;

mod allocator;
mod block_hash;
mod cache;
mod device;
mod dtype;
mod encoder_decoder;
mod error;
pub mod host_memory;
mod options;
mod persist;
pub mod pool;
pub mod redis_tier;
mod tensor;
pub mod tier;
pub mod tier_worker;
mod version;

#[cfg(feature = "dlpack")]
pub mod dlpack;

pub use allocator::{ALLOCATOR_ALIGNMENT, Allocator};
pub use block_hash::{
    BLOCK_HASH_SIZE, BLOCK_HASH_VERSION, BlockHash, block_hash, block_hash_chain, block_hash_root,
};
pub use cache::{
    Cache, CacheBuilder, CacheRef, LayerInfo, MaskSizes, MemoryInfo, QueryOffsetRule, StateViews,
};
pub use device::{Device, DeviceType};
pub use dtype::{DType, DataType, Element};
pub use encoder_decoder::EncoderDecoderCache;
pub use error::{Error, ErrorCode, Result};
pub use options::{
    ConvUpdateOptions, InitOptions, LayerKind, LayerOptions, LayerType, ModelConfig, Offload,
    Preset, QuantMode, QuantOptions, Quantizer, UpdateOptions,
};
pub use persist::{FILE_FORMAT_VERSION, LoadOptions};
pub use pool::{
    BlockTable, CsrBlockTable, GroupKind, HashMode, LayerStorage, Layout, MultimodalItem,
    POOL_BLOCK_HASH_VERSION, Pool, PoolBuilder, PoolEvent, PoolGroup, PoolLayer, PoolStats,
    RecurrentState, Sequence, SequenceKeys, SlotMapping, Storage, TierOutcome, VllmBatchOptions,
};
pub use redis_tier::{RedisCluster, RedisTier, RedisTierOptions};
pub use tensor::{KvView, TensorRef, TensorView, ViewBuffer};
pub use tier::{DiskTier, Tier, TierKey, TierStats, TierWrite};
pub use tier_worker::{Prefetch, TierWorkerOptions, TierWorkerStats};
pub use version::{
    Features, HEADER_VERSION, Version, check_version, features, version, version_string,
};

/// The half-precision element types (re-exported from the `half` crate).
pub use half::{bf16, f16};
/// The raw C ABI (`kvcache-sys`), for what the safe API does not cover.
pub use kvcache_sys as sys;
