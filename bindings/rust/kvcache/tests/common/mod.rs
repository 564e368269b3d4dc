//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write;

use kvcache::{
    BlockHash, Cache, CacheRef, DType, Element, LayerInfo, LayerKind, LayerOptions, MemoryInfo,
    ModelConfig, MultimodalItem, Pool, Preset, Sequence, TensorRef, TensorView, bf16, f16,
};

/// A vector file's hex field as bytes (`-`: none).
pub fn bytes(field: &str) -> Vec<u8> {
    if field == "-" {
        return Vec::new();
    }
    assert!(field.len() % 2 == 0, "odd hex field {field}");
    (0..field.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&field[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A vector file's comma-separated field (`-`: none).
pub fn list(field: &str) -> Vec<&str> {
    if field == "-" {
        Vec::new()
    } else {
        field.split(',').collect()
    }
}

/// The rows tagged `tag` (their first field) of a vector file, split into
/// fields (blank lines and comments left out); asserts that there are
/// `count`, each of `fields` fields.
#[track_caller]
pub fn rows<'a>(text: &'a str, tag: &str, fields: usize, count: usize) -> Vec<Vec<&'a str>> {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f[0] == tag)
        .collect();
    assert_eq!(rows.len(), count, "{tag} rows");
    for f in &rows {
        assert_eq!(f.len(), fields, "{tag} {}", f[1]);
    }
    rows
}

/// A vector file's comma-separated token ids (`-`: none).
pub fn token_list(field: &str) -> Vec<i32> {
    list(field)
        .iter()
        .map(|t| t.parse().expect("token id"))
        .collect()
}

/// A vector file's block hash field.
pub fn hash(field: &str) -> BlockHash {
    bytes(field).try_into().expect("32 bytes")
}

/// A vector file's comma-separated block hashes (`-`: none).
pub fn hash_list(field: &str) -> Vec<BlockHash> {
    list(field).into_iter().map(hash).collect()
}

/// The content hashes of a vector file's multimodal items (`offset:length:hash`,
/// comma-separated; `-`: none), which `items` borrows.
pub fn item_hashes(field: &str) -> Vec<Vec<u8>> {
    list(field)
        .iter()
        .map(|i| bytes(i.split(':').nth(2).unwrap()))
        .collect()
}

/// A vector file's multimodal items, over their `item_hashes`.
pub fn items<'a>(field: &str, hashes: &'a [Vec<u8>]) -> Vec<MultimodalItem<'a>> {
    list(field)
        .iter()
        .zip(hashes)
        .map(|(i, hash)| {
            let mut parts = i.split(':');
            MultimodalItem {
                hash,
                offset: parts.next().unwrap().parse().unwrap(),
                length: parts.next().unwrap().parse().unwrap(),
            }
        })
        .collect()
}

/// Printed past the test harness's output capture.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The value every test tensor holds at `[b, h, t, d]`: a token identity that
/// survives f32 exactly (t is the absolute position of the token).
pub fn val(b: i64, h: i64, t: i64, d: i64) -> f32 {
    (b * 1_000_000 + h * 10_000 + t * 10 + d % 10) as f32
}

/// float32 -> float8 e4m3fn -> float32, rounding to nearest even, for
/// |x| <= 464 (448 is the largest finite e4m3fn value; up to 464 rounds to
/// it): 3 mantissa bits, normal numbers from 2^-6, subnormals in steps of
/// 2^-9.
pub fn e4m3fn(x: f32) -> f32 {
    let a = f64::from(x.abs());
    assert!(
        a <= 464.0,
        "{x} is beyond the e4m3fn range of this reference"
    );
    let step = if a < 2f64.powi(-6) {
        2f64.powi(-9)
    } else {
        let exponent = ((a as f32).to_bits() >> 23) as i32 - 127;
        2f64.powi(exponent - 3)
    };
    ((a / step).round_ties_even() * step).copysign(f64::from(x)) as f32
}

/// Asserts that `kind` is `raw` in the C enum, both ways.
#[track_caller]
pub fn assert_kind_raw(kind: LayerKind, raw: i32) {
    assert_eq!(kind.raw(), raw);
    assert_eq!(LayerKind::from_raw(raw), kind);
}

/// Updates `layer` with `x` as both keys and values; the keys and values
/// the update returns, copied.
pub fn update_copied(cache: &mut CacheRef, layer: u32, x: &Host) -> (Vec<f32>, Vec<f32>) {
    let kv = cache.update(layer, &x.t(), &x.t()).expect("update");
    (kv.key.to_vec().unwrap(), kv.value.to_vec().unwrap())
}

/// A `Preset::Custom` cache of `layers`.
pub fn custom(layers: impl IntoIterator<Item = LayerOptions>) -> Cache {
    Cache::builder(Preset::Custom)
        .layers(layers)
        .build()
        .expect("a custom cache")
}

/// `layers` vectors of `len` values, `value(layer, index)`.
pub fn per_layer(layers: usize, len: usize, value: impl Fn(usize, usize) -> f32) -> Vec<Vec<f32>> {
    (0..layers)
        .map(|l| (0..len).map(|i| value(l, i)).collect())
        .collect()
}

/// A `preset` cache of `config`'s layers, `max_cache_len` slots per layer
/// (0: the builder's default, for presets that take none).
pub fn from_config(preset: Preset, config: ModelConfig, max_cache_len: i64) -> Cache {
    Cache::builder(preset)
        .config(config)
        .max_cache_len(max_cache_len)
        .build()
        .expect("a cache from a model config")
}

/// Computes `tokens` in `seq`: reserves them, writes `layers[l]` (f32
/// `[tokens, heads, dim]`) as both K and V of pool layer `l`, and commits.
pub fn commit_tokens(
    pool: &Pool,
    seq: &mut Sequence,
    tokens: &[i32],
    layers: &[impl AsRef<[f32]>],
    heads: u32,
    dim: u32,
) {
    let slots = seq.reserve(tokens).expect("reserve");
    let shape = [tokens.len() as i64, i64::from(heads), i64::from(dim)];
    let kv: Vec<TensorRef<'_>> = layers
        .iter()
        .map(|d| TensorRef::new(d.as_ref(), &shape).expect("a [tokens, heads, dim] tensor"))
        .collect();
    pool.write(&kv, &kv, &slots).expect("write");
    seq.commit().expect("commit");
}

/// A host tensor of f32 owning its data and shape.
#[derive(Clone, Debug)]
pub struct Host {
    pub data: Vec<f32>,
    pub shape: Vec<i64>,
}

impl Host {
    /// `[batch, heads, tokens, dim]` holding tokens `first..first + tokens` (see `val`).
    pub fn tokens(batch: i64, heads: i64, first: i64, tokens: i64, dim: i64) -> Host {
        let mut data = Vec::new();
        for b in 0..batch {
            for h in 0..heads {
                for t in first..first + tokens {
                    for d in 0..dim {
                        data.push(val(b, h, t, d));
                    }
                }
            }
        }
        Host {
            data,
            shape: vec![batch, heads, tokens, dim],
        }
    }

    /// Any shape filled by `f(flat index)`.
    pub fn from_fn(shape: &[i64], f: impl Fn(usize) -> f32) -> Host {
        let n: i64 = shape.iter().product();
        Host {
            data: (0..n as usize).map(f).collect(),
            shape: shape.to_vec(),
        }
    }

    pub fn t(&self) -> TensorRef<'_> {
        TensorRef::new(&self.data, &self.shape).expect("a valid host tensor")
    }
}

/// Same as `Host` in another element type.
#[derive(Clone, Debug)]
pub struct HostOf<T> {
    pub data: Vec<T>,
    pub shape: Vec<i64>,
}

impl<T: kvcache::Element> HostOf<T> {
    pub fn convert(host: &Host, f: impl Fn(f32) -> T) -> HostOf<T> {
        HostOf {
            data: host.data.iter().map(|&x| f(x)).collect(),
            shape: host.shape.clone(),
        }
    }

    pub fn t(&self) -> TensorRef<'_> {
        TensorRef::new(&self.data, &self.shape).expect("a valid host tensor")
    }
}

/// The token positions a 4-D f32 view holds for row `b`, head `h`.
pub fn positions(view: &TensorView<'_>, b: i64, h: i64) -> Vec<i64> {
    let len = view.shape()[2];
    (0..len)
        .map(|s| {
            let v = view.get::<f32>(&[b, h, s, 0]).expect("readable f32 view") as i64;
            (v - b * 1_000_000 - h * 10_000) / 10
        })
        .collect()
}

/// The elements of a view as bit patterns (any dtype), row-major.
pub fn bits(view: &TensorView<'_>) -> Vec<u32> {
    fn of<T: Element>(view: &TensorView<'_>, to_bits: fn(T) -> u32) -> Vec<u32> {
        view.to_vec::<T>()
            .unwrap()
            .into_iter()
            .map(to_bits)
            .collect()
    }
    match view.dtype() {
        Some(DType::F32) => of(view, f32::to_bits),
        Some(DType::F16) => of(view, |x: f16| u32::from(x.to_bits())),
        Some(DType::BF16) => of(view, |x: bf16| u32::from(x.to_bits())),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// A layer's view shape and the bits of its keys and values.
pub type LayerContents = (Vec<i64>, Vec<u32>, Vec<u32>);

/// Everything observable about a cache, to check that a failed call changed nothing.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub num_layers: u32,
    pub infos: Vec<LayerInfo>,
    pub contents: Vec<Option<LayerContents>>,
    pub memory: MemoryInfo,
    pub max_length_all: i64,
}

pub fn snapshot(cache: &CacheRef) -> Snapshot {
    let num_layers = cache.num_layers();
    let mut infos = Vec::new();
    let mut contents = Vec::new();
    for layer in 0..num_layers {
        let info = cache.layer_info(layer).expect("layer_info");
        let content = if info.is_initialized && !info.is_linear {
            let kv = cache.layer_view(layer).expect("layer_view");
            Some((kv.key.shape().to_vec(), bits(&kv.key), bits(&kv.value)))
        } else {
            None
        };
        infos.push(info);
        contents.push(content);
    }
    Snapshot {
        num_layers,
        infos,
        contents,
        memory: cache.memory().expect("memory"),
        max_length_all: cache.max_length_all().expect("max_length_all"),
    }
}

/// Asserts that `result` is an error of `code` whose message contains
/// `text` (the function that refused, or the rule), and returns the message.
#[track_caller]
pub fn expect_err<T: std::fmt::Debug>(
    result: kvcache::Result<T>,
    code: kvcache::ErrorCode,
    text: &str,
) -> String {
    let err = result.expect_err("the call must fail");
    assert_eq!(err.code(), code, "{err}");
    assert!(
        err.message().contains(text),
        "message does not contain {text}: {err}"
    );
    assert_eq!(err.raw_code(), code.raw());
    assert!(err.to_string().contains(code.name()));
    err.message().to_string()
}
