//! decode_append through the Rust API: the cost of appending one decode
//! step's keys and values to a DynamicCache shaped like Llama-3-8B (32
//! layers, 8 KV heads, head_dim 128, bfloat16, batch 1) at 1k, 8k and 32k
//! cached tokens, measured exactly as `bench/bench_decode.c` measures it, for
//! the safe API and for the raw ABI called from Rust, in the same process,
//! interleaved repetition by repetition.
//!
//! Rows go to the same results.json as the C benchmark (one object per line;
//! rows of the same (bench, impl) written earlier are replaced):
//! `impl` `kvcache-rust` (safe API) and `kvcache-rust-sys` (raw ABI), metrics
//! `append_ns_per_token_<len>` (one update_all per step) and
//! `append_loop_ns_per_token_<len>` (32 update calls per step) with their
//! `_min_`/`_max_`, and the overheads `append_overhead_vs_sys_<len>` and,
//! when results.json already holds the C benchmark's rows,
//! `append_overhead_vs_c_<len>` (safe median / C median). Those ratios of two
//! end-to-end timings carry the noise of the machine; the binding's own cost
//! is measured apart, with tensors so small that copying costs next to
//! nothing: `call_update_all_overhead_ns` and `call_update_overhead_ns` (safe
//! minus raw, per call), and `append_binding_share_of_c_<len>` /
//! `append_loop_binding_share_of_c_<len>`: that cost per token as a share of
//! the C benchmark's append time.
//!
//! `cargo bench -p kvcache-rs --bench decode -- [--json PATH] [--reps N] [--steps N] [--context TOKENS]`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use kvcache::{Cache, ModelConfig, Preset, TensorRef, ViewBuffer, bf16, sys};

const LAYERS: usize = 32;
const KV_HEADS: usize = 8;
const HEAD_DIM: usize = 128;
const TOKEN_ELEMS: usize = KV_HEADS * HEAD_DIM;
const STEP_BYTES: usize = TOKEN_ELEMS * 2 * 2 * LAYERS;
const BENCH: &str = "decode_append";

struct Args {
    json: String,
    reps: usize,
    steps: usize,
    context: Option<i64>,
}

fn parse_args() -> Args {
    let default_json = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../build/bench/results.json"
    );
    let mut args = Args {
        json: default_json.to_string(),
        reps: 101,
        steps: 32,
        context: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| panic!("bench_decode: {name} needs a value"))
        };
        match arg.as_str() {
            "--json" => args.json = value("--json"),
            "--reps" => args.reps = value("--reps").parse().expect("--reps N"),
            "--steps" => args.steps = value("--steps").parse().expect("--steps N"),
            "--context" => {
                args.context = Some(value("--context").parse().expect("--context TOKENS"))
            }
            "--bench" => {} // passed by `cargo bench`
            other => {
                eprintln!(
                    "usage: decode [--json PATH] [--reps N] [--steps N] [--context TOKENS] (got {other})"
                );
                std::process::exit(2);
            }
        }
    }
    assert!(args.reps >= 1 && args.steps >= 1);
    args
}

/// bench_common.h's xorshift64* and bfloat16 fill, so both benchmarks move the same bytes.
fn fill_bf16(count: usize, seed: u64) -> Vec<bf16> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut x = state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state = x;
        let r = x.wrapping_mul(2_685_821_657_736_338_717);
        for k in 0..4 {
            if out.len() == count {
                break;
            }
            let bits = (r >> (16 * k)) as u16;
            out.push(bf16::from_bits((bits & 0x807F) | 0x3F00));
        }
    }
    out
}

fn label(n: i64) -> String {
    if n % 1024 == 0 {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

fn make_cache() -> Cache {
    Cache::builder(Preset::Dynamic)
        .config(ModelConfig::new(LAYERS as u32))
        .build()
        .expect("kvc_cache_create")
}

fn prefill(cache: &mut Cache, length: i64) {
    let elems = length as usize * TOKEN_ELEMS;
    let (k, v) = (fill_bf16(elems, 11), fill_bf16(elems, 13));
    let shape = [1, KV_HEADS as i64, length, HEAD_DIM as i64];
    let key = TensorRef::new(&k, &shape).unwrap();
    let value = TensorRef::new(&v, &shape).unwrap();
    let mut views = ViewBuffer::new();
    cache
        .update_all(&[key; LAYERS], &[value; LAYERS], &mut views)
        .expect("prefill");
}

fn crop_back(cache: &mut Cache, steps: usize, context: i64) {
    cache.crop(-(steps as i64)).expect("kvc_cache_crop");
    assert_eq!(
        cache.seq_length(0).unwrap(),
        context,
        "crop left the wrong length"
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    SafeAll,
    SafeLoop,
    SysAll,
    SysLoop,
}

/// One repetition: `steps` single-token steps, in ns per token.
fn time_steps(
    cache: &mut Cache,
    keys: &[TensorRef<'_>],
    values: &[TensorRef<'_>],
    steps: usize,
    mode: Mode,
    views: &mut ViewBuffer,
    raw_out: &mut [sys::kvc_kv],
) -> f64 {
    let t0 = Instant::now();
    for s in 0..steps {
        let k = &keys[s * LAYERS..(s + 1) * LAYERS];
        let v = &values[s * LAYERS..(s + 1) * LAYERS];
        match mode {
            Mode::SafeAll => {
                let out = cache.update_all(k, v, views).expect("update_all");
                black_box(out);
            }
            Mode::SafeLoop => {
                for l in 0..LAYERS {
                    let out = cache.update(l as u32, &k[l], &v[l]).expect("update");
                    black_box(&out);
                }
            }
            Mode::SysAll => {
                sys_update_all(cache, k, v, raw_out);
            }
            Mode::SysLoop => {
                for l in 0..LAYERS {
                    sys_update(cache, l, &k[l], &v[l], &mut raw_out[l]);
                }
            }
        }
    }
    t0.elapsed().as_nanos() as f64 / steps as f64
}

/// `kvc_cache_update_all` of every layer, called directly (the raw ABI's cost).
#[inline(always)]
fn sys_update_all(
    cache: &mut Cache,
    keys: &[TensorRef<'_>],
    values: &[TensorRef<'_>],
    out: &mut [sys::kvc_kv],
) {
    debug_assert!(keys.len() == LAYERS && values.len() == LAYERS && out.len() >= LAYERS);
    // SAFETY: TensorRef is repr(transparent) over kvc_tensor; `keys`, `values` and `out`
    // have LAYERS entries.
    let err = unsafe {
        sys::kvc_cache_update_all(
            cache.as_mut_ptr(),
            LAYERS as u32,
            keys.as_ptr().cast(),
            values.as_ptr().cast(),
            std::ptr::null(),
            out.as_mut_ptr(),
        )
    };
    assert!(err.is_null(), "kvc_cache_update_all failed");
}

/// `kvc_cache_update` of one layer, called directly.
#[inline(always)]
fn sys_update(
    cache: &mut Cache,
    layer: usize,
    key: &TensorRef<'_>,
    value: &TensorRef<'_>,
    out: &mut sys::kvc_kv,
) {
    // SAFETY: live descriptors borrowed for the call; `out` is one writable slot.
    let err = unsafe {
        sys::kvc_cache_update(
            cache.as_mut_ptr(),
            layer as u32,
            key.as_raw(),
            value.as_raw(),
            std::ptr::null(),
            out,
        )
    };
    assert!(err.is_null(), "kvc_cache_update failed");
}

/// The memcpy roofline of bench_decode.c: the same bytes from the same 64
/// sources per token, to consecutive addresses.
fn time_memcpy(data: &[bf16], dst: &mut [bf16], steps: usize) -> f64 {
    let t0 = Instant::now();
    for s in 0..steps {
        for l in 0..LAYERS {
            for kv in 0..2 {
                let at = ((s * LAYERS + l) * 2 + kv) * TOKEN_ELEMS;
                dst[at..at + TOKEN_ELEMS].copy_from_slice(&data[at..at + TOKEN_ELEMS]);
            }
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / steps as f64;
    black_box(&dst);
    ns
}

/// The benchmark is worthless if the result is wrong: the length and the
/// newest token of the last layer must be what was appended.
fn verify(cache: &Cache, data: &[bf16], steps: usize, context: i64) {
    let want = context + steps as i64;
    assert_eq!(cache.seq_length(0).unwrap(), want);
    let kv = cache.layer_view(LAYERS as u32 - 1).unwrap();
    for (is_value, t) in [(0usize, kv.key), (1, kv.value)] {
        assert_eq!(t.shape()[2], want);
        for h in 0..KV_HEADS {
            let got = t.token::<bf16>(0, h as i64, want - 1).unwrap();
            let at =
                (((steps - 1) * LAYERS + LAYERS - 1) * 2 + is_value) * TOKEN_ELEMS + h * HEAD_DIM;
            assert_eq!(got, &data[at..at + HEAD_DIM], "newest token of head {h}");
        }
    }
}

struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

fn summarize(mut v: Vec<f64>) -> Stats {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    Stats {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

struct Row {
    imp: &'static str,
    metric: String,
    value: f64,
    unit: &'static str,
}

fn key_of(bench: &str, imp: &str) -> String {
    format!("{{\"bench\": \"{bench}\", \"impl\": \"{imp}\",")
}

/// C rows already in results.json (from bench_decode), by metric.
fn read_c_rows(path: &str) -> HashMap<String, f64> {
    let mut rows = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return rows;
    };
    let prefix = key_of(BENCH, "kvcache-c");
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let field = |name: &str| -> Option<&str> {
            let start = line.find(&format!("\"{name}\": "))? + name.len() + 4;
            let rest = &line[start..];
            let end = rest.find([',', '}'])?;
            Some(rest[..end].trim().trim_matches('"'))
        };
        if let (Some(metric), Some(value)) = (field("metric"), field("value")) {
            if let Ok(value) = value.parse() {
                rows.insert(metric.to_string(), value);
            }
        }
    }
    rows
}

/// bench_common.h's writer: keep earlier rows of other (bench, impl) pairs.
fn write_json(path: &str, rows: &[Row]) {
    let ours: Vec<String> = ["kvcache-rust", "kvcache-rust-sys"]
        .iter()
        .map(|i| key_of(BENCH, i))
        .collect();
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim_end_matches([',', ' ']).to_string())
        .filter(|l| l.starts_with('{') && !ours.iter().any(|k| l.starts_with(k.as_str())))
        .collect();
    for row in rows {
        let value = if row.value.is_finite() {
            format!("{}", row.value)
        } else {
            "null".into()
        };
        lines.push(format!(
            "{} \"metric\": \"{}\", \"value\": {}, \"unit\": \"{}\"}}",
            key_of(BENCH, row.imp),
            row.metric,
            value,
            row.unit
        ));
    }
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir).expect("results directory");
    }
    let body = lines.join(",\n");
    std::fs::write(path, format!("[\n{body}\n]\n")).expect("write results.json");
    println!("results: {} rows written to {path}", rows.len());
}

/// Median ns per call of (safe update_all, raw update_all, safe update, raw
/// update) on a 32-layer cache of 1 head x 8 f32 per token.
fn call_overhead(reps: usize) -> (f64, f64, f64, f64) {
    const CALLS: usize = 64;
    let data = [0.5f32; 8];
    let shape = [1, 1, 1, 8];
    let t = TensorRef::new(&data, &shape).unwrap();
    let keys = [t; LAYERS];
    let mut cache = make_cache();
    cache.reserve((CALLS * 2) as i64).unwrap();
    let mut views = ViewBuffer::with_layers(LAYERS as u32);
    let mut raw_out = vec![sys::kvc_kv::default(); LAYERS];
    let mut samples: Vec<Vec<f64>> = (0..4).map(|_| Vec::with_capacity(reps)).collect();
    for r in 0..reps + 1 {
        for k in 0..4 {
            let m = (r + k) % 4;
            let t0 = Instant::now();
            for _ in 0..CALLS {
                match m {
                    0 => {
                        black_box(cache.update_all(&keys, &keys, &mut views).unwrap());
                    }
                    1 => {
                        sys_update_all(&mut cache, &keys, &keys, &mut raw_out);
                        black_box(&raw_out);
                    }
                    2 => {
                        for l in 0..LAYERS as u32 {
                            black_box(cache.update(l, &t, &t).unwrap());
                        }
                    }
                    _ => {
                        for (l, out) in raw_out.iter_mut().enumerate() {
                            sys_update(&mut cache, l, &t, &t, out);
                        }
                        black_box(&raw_out);
                    }
                }
            }
            let per_call =
                t0.elapsed().as_nanos() as f64 / (CALLS * if m >= 2 { LAYERS } else { 1 }) as f64;
            cache.crop(-(CALLS as i64)).unwrap();
            if r > 0 {
                samples[m].push(per_call); // the first round is a warm-up
            }
        }
    }
    let mut medians = samples.into_iter().map(|v| summarize(v).median);
    (
        medians.next().unwrap(),
        medians.next().unwrap(),
        medians.next().unwrap(),
        medians.next().unwrap(),
    )
}

fn main() {
    let args = parse_args();
    let lengths = match args.context {
        Some(n) => vec![n],
        None => vec![1024, 8192, 32768],
    };
    let steps = args.steps;
    println!(
        "decode append through Rust: {LAYERS} layers x {KV_HEADS} KV heads x head_dim {HEAD_DIM}, \
         bfloat16, batch 1, DynamicCache; {} repetitions of {steps} steps; kvcache {}",
        args.reps,
        kvcache::version_string()
    );

    // [steps][LAYERS][2][TOKEN_ELEMS], as bench_decode.c lays them out.
    let data = fill_bf16(steps * LAYERS * 2 * TOKEN_ELEMS, 7);
    let shape = [1, KV_HEADS as i64, 1, HEAD_DIM as i64];
    let mut keys = Vec::with_capacity(steps * LAYERS);
    let mut values = Vec::with_capacity(steps * LAYERS);
    for s in 0..steps {
        for l in 0..LAYERS {
            let at = ((s * LAYERS + l) * 2) * TOKEN_ELEMS;
            keys.push(TensorRef::new(&data[at..at + TOKEN_ELEMS], &shape).unwrap());
            values.push(
                TensorRef::new(&data[at + TOKEN_ELEMS..at + 2 * TOKEN_ELEMS], &shape).unwrap(),
            );
        }
    }
    let mut views = ViewBuffer::with_layers(LAYERS as u32);
    let mut raw_out = vec![sys::kvc_kv::default(); LAYERS];
    let mut roof_dst = vec![bf16::ZERO; steps * LAYERS * 2 * TOKEN_ELEMS];
    let modes = [Mode::SafeAll, Mode::SafeLoop, Mode::SysAll, Mode::SysLoop];

    let mut caches: Vec<Cache> = Vec::new();
    for &length in &lengths {
        let mut cache = make_cache();
        prefill(&mut cache, length);
        // Warm-up: the first growth, page faults; and check the result.
        for mode in modes {
            time_steps(
                &mut cache,
                &keys,
                &values,
                steps,
                mode,
                &mut views,
                &mut raw_out,
            );
            verify(&cache, &data, steps, length);
            crop_back(&mut cache, steps, length);
        }
        caches.push(cache);
    }
    time_memcpy(&data, &mut roof_dst, steps);
    // samples[length][mode], plus the roofline.
    let mut samples = vec![vec![Vec::with_capacity(args.reps); modes.len() + 1]; lengths.len()];
    // Repetitions visit every length and every mode in turn, and each
    // repetition starts with another mode, so that the first measurement
    // after a switch (colder caches) falls on every mode alike.
    for r in 0..args.reps {
        for (i, cache) in caches.iter_mut().enumerate() {
            for k in 0..modes.len() {
                let m = (r + k) % modes.len();
                samples[i][m].push(time_steps(
                    cache,
                    &keys,
                    &values,
                    steps,
                    modes[m],
                    &mut views,
                    &mut raw_out,
                ));
                crop_back(cache, steps, lengths[i]);
            }
            samples[i][modes.len()].push(time_memcpy(&data, &mut roof_dst, steps));
        }
    }

    let c_rows = read_c_rows(&args.json);
    let mut rows = Vec::new();
    println!(
        "\n{:<8} {:<28} {:>14} {:>10} {:>10} {:>9} {:>9}",
        "context", "impl", "median ns/tok", "min", "max", "x memcpy", "x C"
    );
    for (i, &length) in lengths.iter().enumerate() {
        let lab = label(length);
        let stats: Vec<Stats> = samples[i].iter().cloned().map(summarize).collect();
        let roof = stats[modes.len()].median;
        let names = [
            ("kvcache-rust", "append", "safe update_all"),
            ("kvcache-rust", "append_loop", "safe 32 x update"),
            ("kvcache-rust-sys", "append", "raw kvc_cache_update_all"),
            (
                "kvcache-rust-sys",
                "append_loop",
                "raw 32 x kvc_cache_update",
            ),
        ];
        for (m, (imp, prefix, what)) in names.iter().enumerate() {
            let s = &stats[m];
            let c = c_rows.get(&format!("{prefix}_ns_per_token_{lab}"));
            let vs_c = c.map_or("-".to_string(), |c| format!("{:.3}", s.median / c));
            println!(
                "{lab:<8} {what:<28} {:>14.0} {:>10.0} {:>10.0} {:>9.2} {:>9}",
                s.median,
                s.min,
                s.max,
                s.median / roof,
                vs_c
            );
            for (metric, value) in [
                (format!("{prefix}_ns_per_token_{lab}"), s.median),
                (format!("{prefix}_min_ns_per_token_{lab}"), s.min),
                (format!("{prefix}_max_ns_per_token_{lab}"), s.max),
            ] {
                rows.push(Row {
                    imp,
                    metric,
                    value,
                    unit: "ns",
                });
            }
            rows.push(Row {
                imp,
                metric: format!("{prefix}_ratio_to_memcpy_{lab}"),
                value: s.median / roof,
                unit: "x",
            });
        }
        for (m, prefix) in [(0, "append"), (1, "append_loop")] {
            rows.push(Row {
                imp: "kvcache-rust",
                metric: format!("{prefix}_overhead_vs_sys_{lab}"),
                value: stats[m].median / stats[m + 2].median,
                unit: "x",
            });
            if let Some(c) = c_rows.get(&format!("{prefix}_ns_per_token_{lab}")) {
                rows.push(Row {
                    imp: "kvcache-rust",
                    metric: format!("{prefix}_overhead_vs_c_{lab}"),
                    value: stats[m].median / c,
                    unit: "x",
                });
            }
        }
        println!("{lab:<8} {:<28} {:>14.0}", "memcpy (roofline)", roof);
    }
    // The binding's own cost per call, where copying costs next to nothing:
    // 32 layers of one 8-element token, safe API against raw ABI.
    let (safe_all, sys_all, safe_one, sys_one) = call_overhead(args.reps);
    println!(
        "\ncall cost with tiny tensors (median ns per call): update_all of 32 layers safe {safe_all:.0} / \
         raw {sys_all:.0}, update safe {safe_one:.1} / raw {sys_one:.1}"
    );
    for (metric, value) in [
        ("call_update_all_ns_tiny", safe_all),
        ("call_update_ns_tiny", safe_one),
    ] {
        rows.push(Row {
            imp: "kvcache-rust",
            metric: metric.into(),
            value,
            unit: "ns",
        });
    }
    for (metric, value) in [
        ("call_update_all_ns_tiny", sys_all),
        ("call_update_ns_tiny", sys_one),
    ] {
        rows.push(Row {
            imp: "kvcache-rust-sys",
            metric: metric.into(),
            value,
            unit: "ns",
        });
    }
    // The binding's cost as a share of the C benchmark's append, per length.
    for &length in &lengths {
        let lab = label(length);
        for (prefix, extra) in [
            ("append", safe_all - sys_all),
            ("append_loop", LAYERS as f64 * (safe_one - sys_one)),
        ] {
            if let Some(c) = c_rows.get(&format!("{prefix}_ns_per_token_{lab}")) {
                let share = extra.max(0.0) / c;
                println!(
                    "binding cost of {prefix} at {lab}: {:.3}% of the C benchmark's time",
                    share * 100.0
                );
                rows.push(Row {
                    imp: "kvcache-rust",
                    metric: format!("{prefix}_binding_share_of_c_{lab}"),
                    value: share,
                    unit: "x",
                });
            }
        }
    }
    rows.push(Row {
        imp: "kvcache-rust",
        metric: "call_update_all_overhead_ns".into(),
        value: safe_all - sys_all,
        unit: "ns",
    });
    rows.push(Row {
        imp: "kvcache-rust",
        metric: "call_update_overhead_ns".into(),
        value: safe_one - sys_one,
        unit: "ns",
    });
    rows.push(Row {
        imp: "kvcache-rust",
        metric: "append_bytes_per_token".into(),
        value: STEP_BYTES as f64,
        unit: "bytes",
    });
    write_json(&args.json, &rows);
}
