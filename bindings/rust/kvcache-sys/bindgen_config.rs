// The one bindgen configuration of kvcache-sys, shared by build.rs (feature
// `bindgen`) and by tests/bindings.rs, which checks that the pre-generated
// src/bindings.rs is exactly what it produces.
//
// C enumerations cross the ABI as fixed-width integer typedefs plus #define
// constants; they stay that way here: each constant gets the typedef it is
// documented with (`pub const KVC_ERROR_OUT_OF_RANGE: kvc_code = 2;`), never a
// Rust enum, so a value added by a newer library cannot be undefined behaviour.

use bindgen::callbacks::{IntKind, ParseCallbacks};

#[derive(Debug)]
struct KvcMacroTypes;

/// The C typedef (or integer type) each family of constants belongs to.
fn macro_type(name: &str) -> Option<IntKind> {
    let custom = |ty: &'static str| {
        Some(IntKind::Custom {
            name: ty,
            is_signed: true,
        })
    };
    // One arm per family of constants: a table, alike on purpose.
    match name {
        "KVC_OK" => custom("kvc_code"),
        "KVC_ALL_LAYERS" => Some(IntKind::I32),
        _ if name.starts_with("KVC_ERROR_") => custom("kvc_code"),
        _ if name.starts_with("KVC_DEVICE_") => custom("kvc_device_type"),
        _ if name.starts_with("KVC_TYPE_CODE_") => Some(IntKind::U8),
        _ if name.starts_with("KVC_DTYPE_") => custom("kvc_dtype"),
        _ if name.starts_with("KVC_LAYER_TYPE_") => custom("kvc_layer_type"),
        _ if name.starts_with("KVC_LAYER_") => custom("kvc_layer_kind"),
        _ if name.starts_with("KVC_PRESET_") => custom("kvc_preset"),
        _ if name.starts_with("KVC_OFFLOAD_") => custom("kvc_offload"),
        _ if name.starts_with("KVC_QUANTIZER_") => custom("kvc_quantizer"),
        _ if name.starts_with("KVC_QUANT_MODE_") => custom("kvc_quant_mode"),
        _ if name.starts_with("KVC_POOL_GROUP_") => custom("kvc_pool_group_kind"),
        _ if name.starts_with("KVC_POOL_LAYOUT_") => custom("kvc_pool_layout"),
        _ if name.starts_with("KVC_POOL_STORAGE_") => custom("kvc_pool_storage"),
        _ if name.starts_with("KVC_POOL_TABLE_") => custom("kvc_pool_table_format"),
        _ if name.starts_with("KVC_POOL_EVENT_") => custom("kvc_pool_event_kind"),
        _ if name.starts_with("KVC_POOL_HASH_") => custom("kvc_pool_hash_mode"),
        _ if name.starts_with("KVC_FEATURE_") => Some(IntKind::U64),
        _ if name.starts_with("KVC_VERSION_") => Some(IntKind::U32),
        // A byte count and a version number: the sizes of Rust arrays and slices.
        "KVC_BLOCK_HASH_SIZE"
        | "KVC_BLOCK_HASH_VERSION"
        | "KVC_POOL_BLOCK_HASH_VERSION"
        | "KVC_POOL_EXTRA_KEY_MAX"
        | "KVC_POOL_MM_ITEMS_MAX"
        | "KVC_ALLOCATOR_ALIGNMENT" => Some(IntKind::Custom {
            name: "usize",
            is_signed: false,
        }),
        _ => None,
    }
}

impl ParseCallbacks for KvcMacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        macro_type(name)
    }

    /// Header comments become rustdoc: the Doxygen trailing marker `///<` loses
    /// its `<`, and indentation is dropped so that no indented line turns into
    /// a code block (which rustdoc would run as a doctest).
    fn process_comment(&self, comment: &str) -> Option<String> {
        let text = comment.trim_start().strip_prefix('<').unwrap_or(comment);
        let lines: Vec<String> = text
            .trim()
            .lines()
            .map(|line| match line.trim() {
                "" => String::new(),
                line => format!(" {line}"),
            })
            .collect();
        Some(lines.join("\n"))
    }
}

/// A bindgen builder for `<include_dir>/kvcache.h`.
pub fn kvcache_bindings(include_dir: &std::path::Path) -> bindgen::Builder {
    let header = include_dir.join("kvcache.h");
    bindgen::Builder::default()
        .header(header.to_string_lossy().into_owned())
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("kvc_.*")
        .allowlist_type("kvc_.*")
        .allowlist_var("KVC_.*")
        // The _INIT macros are brace initializers, not constants: they are the
        // Default impls in src/lib.rs.
        .blocklist_item("KVC_.*_INIT")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .parse_callbacks(Box::new(KvcMacroTypes))
        // UINT64_C(1) << n and the expressions over other macros.
        .clang_macro_fallback()
        .size_t_is_usize(true)
        .use_core()
        // The layouts are checked against the real header on the real target by
        // tests/layout.rs, so the generated file stays valid on every target.
        .layout_tests(false)
        .derive_debug(true)
        .derive_copy(true)
        .derive_default(true)
        // Option structs get hand-written Default impls equal to their _INIT macros.
        .no_default("kvc_(layer|cache|init|update|quant|conv_update)_options")
        .no_default("kvc_model_config|kvc_layer_info|kvc_memory_info|kvc_allocator")
        .no_default("kvc_pool_(options|group_options|layer_options|sequence_options|stats|vllm_batch_options)")
        .generate_comments(true)
        .formatter(bindgen::Formatter::Prettyplease)
}
