//! Raw FFI bindings to [kvcache](../kvcache/index.html), the key/value caches of
//! transformer inference behind a C ABI (`abi/include/kvcache.h`).
//!
//! Everything the headers declare is here with its C name: the `kvc_*`
//! functions, the `kvc_*` types and every `KVC_*` constant. The header doc
//! comments are the contract (ownership, validity of views, thread safety) and
//! are carried over as rustdoc. Use the safe `kvcache` crate unless you need
//! the raw ABI.
//!
//! C enumerations are integer typedefs with constants
//! (`pub const KVC_ERROR_OUT_OF_RANGE: kvc_code = 2;`), never Rust enums: a
//! value that a newer library adds is just another integer.
//!
//! The `_INIT` macros of the option structs are the [`Default`]
//! implementations of those structs (`kvc_cache_options::default()` equals
//! `KVC_CACHE_OPTIONS_INIT`); output structs (`kvc_layer_info`,
//! `kvc_memory_info`) default to zero with `struct_size` set, ready to pass.
//!
//! # Linking
//!
//! By default (feature `bundled`) the build script compiles the C sources the
//! crate carries with the `cc` crate and links them statically. The `system`
//! feature (or `KVCACHE_SYS_USE_PKG_CONFIG=1`) links an installed kvcache
//! `>= 0.2, < 1` found through pkg-config instead. The bindings are
//! pre-generated (`src/bindings.rs`, checked against a fresh bindgen run by
//! `tests/bindings.rs`); the `bindgen` feature regenerates them at build time.
//! The pre-generated file has no target-specific layout assertions;
//! `tests/layout.rs` compares every struct's size and field offsets with what
//! the C compiler makes of the header.
#![no_std]
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(clippy::all)]
// The C header comments are not Markdown: `keys[i]` is not an intra-doc link.
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

#[cfg(kvcache_sys_generated)]
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
#[cfg(not(kvcache_sys_generated))]
include!("bindings.rs");

/// `size_of::<T>()` as the `uint32_t` that `struct_size` fields hold.
const fn struct_size<T>() -> u32 {
    core::mem::size_of::<T>() as u32
}

// The Default impls below spell out each header `*_INIT` field by field, alike
// on purpose: a field the header adds breaks the build here until its initial
// value is written down.

/// `KVC_LAYER_OPTIONS_INIT`.
impl Default for kvc_layer_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            kind: KVC_LAYER_DYNAMIC,
            window: 0,
            max_cache_len: 0,
            quant: core::ptr::null(),
            num_sink_tokens: 0,
            num_states: 0,
            conv_kernel_size: 0,
        }
    }
}

/// `KVC_MODEL_CONFIG_INIT`.
impl Default for kvc_model_config {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            num_hidden_layers: 0,
            layer_types: core::ptr::null(),
            sliding_window: 0,
            attention_chunk_size: 0,
            num_kv_shared_layers: 0,
            sliding_window_pattern: 0,
            number_of_conv_states: 0,
            conv_kernel: 0,
        }
    }
}

/// `KVC_CACHE_OPTIONS_INIT`.
impl Default for kvc_cache_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            preset: KVC_PRESET_DYNAMIC,
            config: core::ptr::null(),
            max_cache_len: 0,
            num_layers: 0,
            layers: core::ptr::null(),
            device: kvc_device {
                device_type: KVC_DEVICE_CPU,
                device_id: 0,
            },
            quant: core::ptr::null(),
            offload: KVC_OFFLOAD_DEFAULT,
            window_length: 0,
            num_sink_tokens: 0,
            transformers_release: 0,
            query_offset_rule: KVC_QUERY_OFFSET_PLAIN as _,
            allocator: core::ptr::null(),
        }
    }
}

/// `KVC_ALLOCATOR_INIT`: no context, no functions (not usable until both are set).
impl Default for kvc_allocator {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            ctx: core::ptr::null_mut(),
            alloc: None,
            free: None,
            release: None,
        }
    }
}

/// `KVC_INIT_OPTIONS_INIT`.
impl Default for kvc_init_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            batch_size: 0,
            num_kv_heads: 0,
            k_head_dim: 0,
            v_head_dim: 0,
            dtype: KVC_DTYPE_UNSET,
            num_kv_heads_per_layer: core::ptr::null(),
            head_dim_per_layer: core::ptr::null(),
        }
    }
}

/// `KVC_UPDATE_OPTIONS_INIT`.
impl Default for kvc_update_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            cache_position: core::ptr::null(),
            cache_position_length: 0,
            rope_cos: core::ptr::null(),
            rope_sin: core::ptr::null(),
            partial_rotation_size: 0,
        }
    }
}

/// `KVC_QUANT_OPTIONS_INIT`: transformers' defaults (nbits 4, axes 0,
/// q_group_size 64, residual_length 128), quanto, incremental.
impl Default for kvc_quant_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            quantizer: KVC_QUANTIZER_QUANTO,
            mode: KVC_QUANT_MODE_INCREMENTAL,
            nbits: 4,
            axis_key: 0,
            axis_value: 0,
            q_group_size: 64,
            residual_length: 128,
        }
    }
}

/// `KVC_CONV_UPDATE_OPTIONS_INIT`.
impl Default for kvc_conv_update_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            state_index: 0,
            conv_kernel_size: 0,
            cache_position: core::ptr::null(),
            cache_position_length: 0,
        }
    }
}

/// All zero with `struct_size` set, ready for `kvc_cache_layer_info`.
impl Default for kvc_layer_info {
    fn default() -> Self {
        // SAFETY: every field is an integer (zero is a valid value of each).
        let mut info: Self = unsafe { core::mem::zeroed() };
        info.struct_size = struct_size::<Self>();
        info
    }
}

/// All zero with `struct_size` set, ready for `kvc_cache_memory`.
impl Default for kvc_memory_info {
    fn default() -> Self {
        // SAFETY: every field is an integer (zero is a valid value of each).
        let mut info: Self = unsafe { core::mem::zeroed() };
        info.struct_size = struct_size::<Self>();
        info
    }
}

/// `KVC_POOL_GROUP_OPTIONS_INIT`: a full-attention group of 16-token blocks
/// (`num_blocks` must still be set).
impl Default for kvc_pool_group_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            kind: KVC_POOL_GROUP_FULL,
            block_size: 16,
            num_blocks: 0,
            window: 0,
            reserved: 0,
        }
    }
}

/// `KVC_POOL_LAYER_OPTIONS_INIT`.
impl Default for kvc_pool_layer_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            group: 0,
            num_kv_heads: 0,
            key_head_dim: 0,
            value_head_dim: 0,
            conv_dim: 0,
            conv_kernel: 0,
            ssm_state_size: 0,
            reserved: 0,
            storage: KVC_POOL_STORAGE_DTYPE,
            k_scale: 1.0,
            v_scale: 1.0,
        }
    }
}

/// `KVC_POOL_OPTIONS_INIT`.
impl Default for kvc_pool_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            dtype: KVC_DTYPE_UNSET,
            device: kvc_device {
                device_type: KVC_DEVICE_CPU,
                device_id: 0,
            },
            num_groups: 0,
            groups: core::ptr::null(),
            num_layers: 0,
            layers: core::ptr::null(),
            layout: KVC_POOL_LAYOUT_NHD,
            hash_seed: core::ptr::null(),
            hash_seed_len: 0,
            enable_prefix_caching: 1,
            event_capacity: 0,
            allocator: core::ptr::null(),
            shared_budget_bytes: 0,
            hash_mode: KVC_POOL_HASH_KVCACHE,
        }
    }
}

/// `KVC_POOL_SEQUENCE_OPTIONS_INIT`: no salt, no extra keys.
impl Default for kvc_pool_sequence_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            salt: core::ptr::null(),
            salt_len: 0,
            mm_items: core::ptr::null(),
            num_mm_items: 0,
            adapter_key: core::ptr::null(),
            adapter_key_len: 0,
            adapter_path: core::ptr::null(),
            adapter_path_len: 0,
            adapter_id: 0,
        }
    }
}

/// `KVC_POOL_VLLM_BATCH_OPTIONS_INIT`: 32-byte hashes, no data-parallel rank, ts 0.
impl Default for kvc_pool_vllm_batch_options {
    fn default() -> Self {
        Self {
            struct_size: struct_size::<Self>(),
            int_hashes: 0,
            ts: 0.0,
            data_parallel_rank: -1,
            reserved: 0,
        }
    }
}

/// All zero with `struct_size` set, ready for `kvc_pool_stats_get`.
impl Default for kvc_pool_stats {
    fn default() -> Self {
        // SAFETY: every field is an integer (zero is a valid value of each).
        let mut stats: Self = unsafe { core::mem::zeroed() };
        stats.struct_size = struct_size::<Self>();
        stats
    }
}
