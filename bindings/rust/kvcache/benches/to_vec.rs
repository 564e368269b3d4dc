//! `TensorView::to_vec` against a plain memcpy of the same bytes: the key
//! view of one DynamicCache layer (batch 1, 8 KV heads, head_dim 128,
//! bfloat16) at 1k and 4k tokens, a strided view (the layer's capacity runs
//! ahead of its length, so each head's tokens are one run and the heads lie
//! apart). Three copies into a new `Vec`, timed alternately, median of
//! `--reps` each:
//!
//! - `to_vec`: the view, a run (one head) per memcpy;
//! - `memcpy`: `<[bf16]>::to_vec` of a compact buffer of as many elements;
//! - `per_element`: the view read one element at a time, as `to_vec` did
//!   before 0.7 (kept here as the reference the speed-up is measured from).
//!
//! `cargo bench -p kvcache-rs --bench to_vec -- [--reps N]`

use std::hint::black_box;
use std::time::Instant;

use kvcache::{Cache, TensorRef, TensorView, bf16};

const KV_HEADS: i64 = 8;
const HEAD_DIM: i64 = 128;

fn parse_reps() -> usize {
    let mut reps = 201;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--reps" => {
                reps = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--reps N (a positive number)")
            }
            "--bench" => {} // passed by `cargo bench`
            other => {
                eprintln!("usage: to_vec [--reps N] (got {other})");
                std::process::exit(2);
            }
        }
    }
    assert!(reps >= 1, "--reps is at least 1");
    reps
}

/// The element-at-a-time copy `to_vec` made before it copied runs (its
/// loop as it was: a row's base offset, then one read per element).
fn per_element(view: &TensorView<'_>) -> Vec<bf16> {
    let shape = view.shape();
    let strides = view.strides();
    let base = (view.data_ptr() as *const u8)
        .wrapping_add(view.byte_offset() as usize)
        .cast::<bf16>();
    let mut out = Vec::with_capacity(view.numel() as usize);
    let last = shape.len() - 1;
    let mut index = vec![0i64; shape.len()];
    loop {
        let row: i64 = index.iter().zip(strides.iter()).map(|(i, s)| i * s).sum();
        for i in 0..shape[last] {
            // SAFETY: a host bf16 view of a live cache; the index is inside the shape.
            out.push(unsafe {
                base.wrapping_offset((row + i * strides[last]) as isize)
                    .read_unaligned()
            });
        }
        let mut dim = last;
        loop {
            if dim == 0 {
                return out;
            }
            dim -= 1;
            index[dim] += 1;
            if index[dim] < shape[dim] {
                break;
            }
            index[dim] = 0;
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn nanos(f: impl FnOnce() -> Vec<bf16>) -> f64 {
    let start = Instant::now();
    let out = black_box(f());
    let ns = start.elapsed().as_nanos() as f64;
    drop(out);
    ns
}

fn main() {
    let reps = parse_reps();
    for tokens in [1024i64, 4096] {
        let numel = (KV_HEADS * tokens * HEAD_DIM) as usize;
        let data: Vec<bf16> = (0..numel).map(|i| bf16::from_f32(i as f32)).collect();
        let mut cache = Cache::new().expect("a cache");
        // Prefill minus one token, then one decode step: the layer's
        // capacity is then past its length, as in a decode loop.
        let shape = [1, KV_HEADS, tokens - 1, HEAD_DIM];
        let prefill = TensorRef::new(&data[..numel - (KV_HEADS * HEAD_DIM) as usize], &shape)
            .expect("prefill");
        cache.update(0, &prefill, &prefill).expect("prefill");
        let last = &data[..(KV_HEADS * HEAD_DIM) as usize];
        let step_shape = [1, KV_HEADS, 1, HEAD_DIM];
        let step = TensorRef::new(last, &step_shape).expect("step");
        cache.update(0, &step, &step).expect("step");
        let view = cache.layer_view(0).expect("view").key;
        assert_eq!(view.numel() as usize, numel);
        let copied = view.to_vec::<bf16>().expect("to_vec");
        assert_eq!(
            copied,
            per_element(&view),
            "to_vec and the element copy differ"
        );

        let (mut run, mut flat, mut element) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            run.push(nanos(|| view.to_vec::<bf16>().unwrap()));
            flat.push(nanos(|| data.to_vec()));
            element.push(nanos(|| per_element(&view)));
        }
        let (run, flat, element) = (median(run), median(flat), median(element));
        println!(
            "to_vec {tokens} tokens ({} KiB, strides {:?}, contiguous {}): to_vec {:.1} us, \
             memcpy {:.1} us, per_element {:.1} us; to_vec / memcpy {:.2}, per_element / to_vec {:.1} \
             (medians of {reps})",
            numel * 2 / 1024,
            view.strides(),
            view.is_contiguous(),
            run / 1e3,
            flat / 1e3,
            element / 1e3,
            run / flat,
            element / run,
        );
    }
}
