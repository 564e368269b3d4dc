//! The bindings against the header as the C compiler sees it on this target:
//! the size, alignment and every field offset of every struct, the value of
//! every constant, and the `Default` impls against the library's `_init`
//! functions (which are the `_INIT` macros).
//!
//! The C side is a small program compiled with `$CC` (default `cc`) against the
//! same header directory the build script used, so the check holds for
//! pre-generated and freshly generated bindings, and for the bundled and the
//! installed library alike.

use std::collections::BTreeMap;
use std::io::Write;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use kvcache_sys::*;

/// Printed past the test harness's output capture, so that a skip is seen.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `structs!` lists every struct with all its fields. The destructuring
/// pattern it generates has no `..`, so a field added to the bindings but not
/// to this list fails to compile; a field added to the header but not to the
/// bindings changes the C size.
macro_rules! structs {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {
        fn struct_c_lines() -> Vec<String> {
            let mut lines = Vec::new();
            $(
                lines.push(format!(
                    "printf(\"size {0} %zu\\n\", sizeof({0})); printf(\"align {0} %zu\\n\", _Alignof({0}));",
                    stringify!($ty)
                ));
                $(lines.push(format!(
                    "printf(\"offset {0}.{1} %zu\\n\", offsetof({0}, {1}));",
                    stringify!($ty), stringify!($field)
                ));)*
            )*
            lines
        }
        fn struct_rust_values() -> BTreeMap<String, i128> {
            let mut values = BTreeMap::new();
            $(
                let _exhaustive = |v: $ty| {
                    let $ty { $($field: _),* } = v;
                };
                values.insert(format!("size {}", stringify!($ty)), size_of::<$ty>() as i128);
                values.insert(format!("align {}", stringify!($ty)), align_of::<$ty>() as i128);
                $(values.insert(
                    format!("offset {}.{}", stringify!($ty), stringify!($field)),
                    offset_of!($ty, $field) as i128,
                );)*
            )*
            values
        }
    };
}

structs! {
    kvc_device { device_type, device_id }
    kvc_data_type { code, bits, lanes }
    kvc_tensor { data, device, ndim, dtype, shape, strides, byte_offset }
    kvc_kv { key, value }
    kvc_quant_options {
        struct_size, quantizer, mode, nbits, axis_key, axis_value, q_group_size, residual_length
    }
    kvc_layer_options {
        struct_size, kind, window, max_cache_len, quant, num_sink_tokens, num_states,
        conv_kernel_size
    }
    kvc_model_config {
        struct_size, num_hidden_layers, layer_types, sliding_window, attention_chunk_size,
        num_kv_shared_layers, sliding_window_pattern, number_of_conv_states, conv_kernel
    }
    kvc_cache_options {
        struct_size, preset, config, max_cache_len, num_layers, layers, device, quant, offload,
        window_length, num_sink_tokens, transformers_release, query_offset_rule, allocator
    }
    kvc_allocator { struct_size, ctx, alloc, free, release }
    kvc_init_options {
        struct_size, batch_size, num_kv_heads, k_head_dim, v_head_dim, dtype,
        num_kv_heads_per_layer, head_dim_per_layer
    }
    kvc_layer_info {
        struct_size, kind, window, max_cache_len, capacity, is_initialized, is_sliding,
        is_chunked, is_compileable, records_past, dtype, batch_size, num_kv_heads, k_head_dim,
        v_head_dim, seq_length, stored_length, is_linear, is_offloaded, has_previous_state,
        reserved0, num_states, conv_kernel_size, num_sink_tokens, quantized_length
    }
    kvc_memory_info {
        struct_size, bytes_reserved, bytes_used, bytes_device, bytes_host, bytes_quantized,
        bytes_state
    }
    kvc_update_options {
        struct_size, cache_position, cache_position_length, rope_cos, rope_sin,
        partial_rotation_size
    }
    kvc_conv_update_options {
        struct_size, state_index, conv_kernel_size, cache_position, cache_position_length
    }
    kvc_pool_group_options { struct_size, kind, block_size, num_blocks, window, reserved }
    kvc_pool_layer_options {
        struct_size, group, num_kv_heads, key_head_dim, value_head_dim, conv_dim, conv_kernel,
        ssm_state_size, reserved, storage, k_scale, v_scale
    }
    kvc_pool_options {
        struct_size, dtype, device, num_groups, groups, num_layers, layers, layout, hash_seed,
        hash_seed_len, enable_prefix_caching, event_capacity, allocator, shared_budget_bytes,
        hash_mode
    }
    kvc_pool_stats {
        struct_size, group, num_blocks, free_blocks, cached_blocks, used_blocks, pinned_blocks,
        prefix_queries, prefix_hits, evictions
    }
    kvc_pool_sequence_options {
        struct_size, salt, salt_len, mm_items, num_mm_items, adapter_key, adapter_key_len,
        adapter_path, adapter_path_len, adapter_id
    }
    kvc_pool_vllm_batch_options { struct_size, int_hashes, ts, data_parallel_rank, reserved }
    kvc_pool_mm_item { hash, hash_len, offset, length }
    kvc_pool_table { table, indptr, last_page_len }
    kvc_pool_event {
        id, kind, group, block_hash, parent_hash, num_tokens, block_id, reserved
    }
    kvc_redis_tier_options {
        struct_size, cluster, seeds, key_prefix, username, password, connect_timeout_ms,
        command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline, reserved,
        call_timeout_ms, auth_key, auth_key_len
    }
    kvc_save_options { struct_size, reserved, staging_bytes }
    kvc_load_options { struct_size, device, stream, allocator, max_bytes }
    kvc_tier_key { fingerprint, block_hash, group, reserved }
    kvc_tier_ops { struct_size, put_many, get_many, destroy, exists_many }
    kvc_disk_tier_options { struct_size, directory, max_bytes, reserved, auth_key, auth_key_len }
    kvc_tier_stats {
        struct_size, reserved, puts, put_failures, gets, hits, corrupt, bytes_written, bytes_read,
        queued, dropped
    }
    kvc_tier_worker_options { struct_size, max_jobs, max_bytes, drain_timeout_ms, events }
    kvc_tier_worker_stats {
        struct_size, running, pending_jobs, pending_bytes, blocks_queued, blocks_dropped,
        blocks_abandoned, prefetches, prefetches_late, prefetches_abandoned, events_lost
    }
}

/// Every constant the headers define, with its value in the bindings.
macro_rules! constants {
    ($($name:ident),* $(,)?) => {
        fn constant_c_lines() -> Vec<String> {
            vec![$(format!(
                "printf(\"const {0} %lld\\n\", (long long)({0}));",
                stringify!($name)
            )),*]
        }
        fn constant_rust_values() -> BTreeMap<String, i128> {
            let mut values = BTreeMap::new();
            $(values.insert(format!("const {}", stringify!($name)), $name as i128);)*
            values
        }
    };
}

constants! {
    KVC_VERSION_MAJOR, KVC_VERSION_MINOR, KVC_VERSION_PATCH, KVC_VERSION_NUMBER,
    KVC_FEATURE_CPU, KVC_FEATURE_CUDA, KVC_FEATURE_HIP, KVC_FEATURE_BACKEND_DL,
    KVC_OK, KVC_ERROR_INVALID_ARGUMENT, KVC_ERROR_OUT_OF_RANGE, KVC_ERROR_DTYPE_MISMATCH,
    KVC_ERROR_SHAPE_MISMATCH, KVC_ERROR_DEVICE_MISMATCH, KVC_ERROR_UNSUPPORTED,
    KVC_ERROR_INVALID_STATE, KVC_ERROR_OUT_OF_MEMORY, KVC_ERROR_NO_DEVICE,
    KVC_ERROR_VERSION_MISMATCH, KVC_ERROR_INTERNAL, KVC_ERROR_IO, KVC_ERROR_BUSY,
    KVC_FILE_FORMAT_VERSION,
    KVC_DEVICE_CPU, KVC_DEVICE_CUDA, KVC_DEVICE_CUDA_HOST, KVC_DEVICE_ROCM, KVC_DEVICE_ROCM_HOST,
    KVC_TYPE_CODE_INT, KVC_TYPE_CODE_UINT, KVC_TYPE_CODE_FLOAT, KVC_TYPE_CODE_BFLOAT,
    KVC_DTYPE_UNSET, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16,
    KVC_QUANTIZER_QUANTO, KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL,
    KVC_QUANT_MODE_TRANSFORMERS, KVC_QUANT_MODE_COMPACT,
    KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DYNAMIC_CHUNKED, KVC_LAYER_STATIC,
    KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED, KVC_LAYER_QUANTIZED, KVC_LAYER_SINK,
    KVC_LAYER_LINEAR, KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR_DYNAMIC_SLIDING,
    KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_STATIC_SLIDING, KVC_LAYER_QUANTIZED_FP8,
    KVC_LAYER_DUMMY, KVC_LAYER_DYNAMIC_INDEXED, KVC_LAYER_STATIC_INDEXED,
    KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
    KVC_LAYER_TYPE_CHUNKED_ATTENTION, KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_HYBRID,
    KVC_LAYER_TYPE_HYBRID_SLIDING, KVC_LAYER_TYPE_DUMMY, KVC_LAYER_TYPE_INDEXED_ATTENTION,
    KVC_PRESET_CUSTOM, KVC_PRESET_DYNAMIC, KVC_PRESET_STATIC, KVC_PRESET_SLIDING_WINDOW,
    KVC_PRESET_HYBRID, KVC_PRESET_HYBRID_CHUNKED, KVC_PRESET_QUANTIZED, KVC_PRESET_OFFLOADED,
    KVC_PRESET_OFFLOADED_STATIC, KVC_PRESET_OFFLOADED_HYBRID, KVC_PRESET_SINK, KVC_PRESET_MAMBA,
    KVC_PRESET_HYBRID_MAMBA,
    KVC_OFFLOAD_DEFAULT, KVC_OFFLOAD_NONE, KVC_OFFLOAD_ALL, KVC_OFFLOAD_NON_SLIDING,
    KVC_QUERY_OFFSET_PLAIN, KVC_QUERY_OFFSET_MTP, KVC_QUERY_OFFSET_DFLASH,
    KVC_ALL_LAYERS, KVC_BLOCK_HASH_SIZE, KVC_BLOCK_HASH_VERSION,
    KVC_POOL_GROUP_FULL, KVC_POOL_GROUP_SLIDING, KVC_POOL_GROUP_CHUNKED, KVC_POOL_GROUP_RECURRENT,
    KVC_POOL_GROUP_LATENT, KVC_POOL_STORAGE_DTYPE, KVC_POOL_STORAGE_FP8_E4M3,
    KVC_POOL_LAYOUT_NHD, KVC_POOL_LAYOUT_HND, KVC_POOL_TABLE_PADDED, KVC_POOL_TABLE_CSR,
    KVC_POOL_EVENT_BLOCK_STORED, KVC_POOL_EVENT_BLOCK_REMOVED, KVC_POOL_EVENT_ALL_CLEARED,
    KVC_POOL_EVENT_TIER_STORED, KVC_POOL_EVENT_TIER_FAILED, KVC_POOL_EVENT_TIER_DROPPED,
    KVC_POOL_HASH_KVCACHE, KVC_POOL_HASH_VLLM_SHA256_CBOR,
    KVC_POOL_BLOCK_HASH_VERSION, KVC_POOL_EXTRA_KEY_MAX, KVC_POOL_MM_ITEMS_MAX, KVC_ALLOCATOR_ALIGNMENT,
    KVC_TIER_WRITE_ON_COMMIT, KVC_TIER_WRITE_ON_EVICT, KVC_TIER_AUTH_KEY_MIN, KVC_TIER_AUTH_KEY_MAX,
    KVC_TIER_PAYLOAD_MAX,
    KVC_REDIS_CLUSTER_AUTO, KVC_REDIS_CLUSTER_OFF, KVC_REDIS_CLUSTER_ON,
}

/// Every `#define KVC_<NAME> <value>` of the headers must be in `constants!`
/// (the _INIT macros are the Default impls, KVC_API is not a value).
#[test]
fn every_header_constant_is_checked() {
    let include_dir = Path::new(env!("KVCACHE_SYS_INCLUDE_DIR"));
    let checked = constant_rust_values();
    let mut missing = Vec::new();
    let mut headers = vec![include_dir.join("kvcache.h")];
    for entry in std::fs::read_dir(include_dir.join("kvcache")).expect("kvcache/") {
        headers.push(entry.expect("header").path());
    }
    for header in headers {
        let text = std::fs::read_to_string(&header).expect("header text");
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#define ") else {
                continue;
            };
            let rest = rest.trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.starts_with("KVC_") || name == "KVC_API" || name.ends_with("_INIT") {
                continue;
            }
            if !checked.contains_key(&format!("const {name}")) {
                missing.push(format!("{name} ({})", header.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "constants of the headers not checked: {missing:?}"
    );
}

fn c_program() -> String {
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <kvcache.h>\nint main(void) {\n",
    );
    for line in struct_c_lines().into_iter().chain(constant_c_lines()) {
        src.push_str("  ");
        src.push_str(&line);
        src.push('\n');
    }
    src.push_str("  return 0;\n}\n");
    src
}

#[test]
fn struct_layouts_and_constants_match_the_header() {
    let include_dir = Path::new(env!("KVCACHE_SYS_INCLUDE_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kvcache-sys-layout");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program()).expect("write layout.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let compiled = Command::new(&cc)
        .arg("-std=c11")
        .arg(format!("-I{}", include_dir.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    let compiled = match compiled {
        Ok(output) => output,
        Err(e) => {
            say(&format!(
                "SKIPPED: struct_layouts_and_constants_match_the_header: no C compiler ({cc}: {e}); \
                 set CC to one"
            ));
            return;
        }
    };
    assert!(
        compiled.status.success(),
        "{cc} failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success());
    let mut from_c = BTreeMap::new();
    for line in String::from_utf8(run.stdout).expect("utf-8").lines() {
        let (key, value) = line.rsplit_once(' ').expect("`key value` lines");
        from_c.insert(key.to_string(), value.parse::<i128>().expect("a number"));
    }
    let mut from_rust = struct_rust_values();
    from_rust.extend(constant_rust_values());
    assert_eq!(from_c.len(), from_rust.len());
    let differences: Vec<String> = from_rust
        .iter()
        .filter(|(key, value)| from_c.get(*key) != Some(value))
        .map(|(key, value)| format!("{key}: Rust {value}, C {:?}", from_c.get(key)))
        .collect();
    assert!(
        differences.is_empty(),
        "bindings disagree with the header:\n{}",
        differences.join("\n")
    );
}

/// `T::default()` must equal what the library's `_init` function writes.
fn same_as_init<T: Default + std::fmt::Debug>(init: unsafe extern "C" fn(*mut T)) {
    let ours = T::default();
    // SAFETY: T is a plain C struct of integers and pointers; zeroed is valid.
    let mut theirs: T = unsafe { std::mem::zeroed() };
    // SAFETY: `theirs` is a valid, writable T.
    unsafe { init(&mut theirs) };
    assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
}

#[test]
fn defaults_are_the_init_macros() {
    same_as_init(kvc_layer_options_init);
    same_as_init(kvc_model_config_init);
    same_as_init(kvc_cache_options_init);
    same_as_init(kvc_init_options_init);
    same_as_init(kvc_update_options_init);
    same_as_init(kvc_quant_options_init);
    same_as_init(kvc_conv_update_options_init);
    same_as_init(kvc_pool_options_init);
    same_as_init(kvc_pool_sequence_options_init);
    same_as_init(kvc_pool_vllm_batch_options_init);
    same_as_init(kvc_allocator_init);
    // The init functions accept NULL.
    // SAFETY: documented: "NULL is ignored".
    unsafe {
        kvc_layer_options_init(std::ptr::null_mut());
        kvc_model_config_init(std::ptr::null_mut());
        kvc_cache_options_init(std::ptr::null_mut());
        kvc_init_options_init(std::ptr::null_mut());
        kvc_update_options_init(std::ptr::null_mut());
        kvc_quant_options_init(std::ptr::null_mut());
        kvc_conv_update_options_init(std::ptr::null_mut());
        kvc_pool_options_init(std::ptr::null_mut());
    }
}

/// The raw ABI end to end: create, update, query, error, destroy.
#[test]
fn raw_round_trip() {
    // SAFETY: every pointer passed lives for the duration of the calls below.
    unsafe {
        assert_eq!(kvc_version() / 10000, KVC_VERSION_MAJOR);
        assert!(kvc_version() >= KVC_VERSION_NUMBER);
        let version = std::ffi::CStr::from_ptr(kvc_version_string());
        assert_eq!(
            version.to_str().unwrap(),
            format!(
                "{}.{}.{}",
                kvc_version() / 10000,
                kvc_version() / 100 % 100,
                kvc_version() % 100
            )
        );
        assert_ne!(kvc_features() & KVC_FEATURE_CPU, 0);

        let mut cache: *mut kvc_cache = std::ptr::null_mut();
        assert!(kvc_cache_create(std::ptr::null(), &mut cache).is_null());
        let mut shape = [1i64, 2, 3, 4];
        let data = [1.5f32; 24];
        let key = kvc_tensor {
            data: data.as_ptr() as *mut _,
            device: kvc_device {
                device_type: KVC_DEVICE_CPU,
                device_id: 0,
            },
            ndim: 4,
            dtype: kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32),
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let mut out = kvc_kv::default();
        assert!(kvc_cache_update(cache, 0, &key, &key, std::ptr::null(), &mut out).is_null());
        assert_eq!(*out.key.shape.add(2), 3);
        let mut n = 0i64;
        assert!(kvc_cache_seq_length(cache, 0, &mut n).is_null());
        assert_eq!(n, 3);

        let err = kvc_cache_update(cache, 0, &key, std::ptr::null(), std::ptr::null(), &mut out);
        assert!(!err.is_null());
        assert_eq!(kvc_error_code(err), KVC_ERROR_INVALID_ARGUMENT);
        let name = std::ffi::CStr::from_ptr(kvc_code_name(kvc_error_code(err)));
        assert_eq!(name.to_str().unwrap(), "KVC_ERROR_INVALID_ARGUMENT");
        assert!(!std::ffi::CStr::from_ptr(kvc_error_message(err)).is_empty());
        kvc_error_destroy(err);
        assert_eq!(kvc_error_code(std::ptr::null()), KVC_OK);
        kvc_cache_destroy(cache);
        kvc_cache_destroy(std::ptr::null_mut());
    }
}
