//! A decode loop: a tiny attention decoder over a hybrid cache (sliding and
//! full-attention layers, as Gemma's), attending over the views `update`
//! returns without copying them.
//!
//! `cargo run --example decode`

use kvcache::{Cache, LayerType, ModelConfig, Preset, TensorRef, bf16};

const LAYERS: u32 = 4;
const HEADS: usize = 4;
const HEAD_DIM: usize = 16;
const WINDOW: i64 = 8;

/// A deterministic stand-in for a projection: values in [-1, 1).
fn project(seed: u64, n: usize) -> Vec<bf16> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bf16::from_f32((x >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// Softmax attention of one query head over a `[seq, head_dim]` block of keys
/// and values, read straight from the cache's memory.
fn attend(query: &[bf16], keys: &[bf16], values: &[bf16]) -> Vec<f32> {
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let scores: Vec<f32> = keys
        .chunks(HEAD_DIM)
        .map(|k| {
            query
                .iter()
                .zip(k)
                .map(|(q, k)| q.to_f32() * k.to_f32())
                .sum::<f32>()
                * scale
        })
        .collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    let mut out = vec![0.0; HEAD_DIM];
    for (w, v) in weights.iter().zip(values.chunks(HEAD_DIM)) {
        for (o, v) in out.iter_mut().zip(v) {
            *o += w / total * v.to_f32();
        }
    }
    out
}

fn main() -> Result<(), kvcache::Error> {
    let config = ModelConfig::new(LAYERS)
        .layer_types((0..LAYERS).map(|i| {
            if i % 2 == 0 {
                LayerType::SlidingAttention
            } else {
                LayerType::FullAttention
            }
        }))
        .sliding_window(WINDOW);
    let mut cache = Cache::builder(Preset::Dynamic).config(config).build()?;
    println!("kvcache {} ({:?})", kvcache::version(), kvcache::features());

    // Prefill a 12-token prompt, then decode 10 tokens one at a time.
    let prompt = 12;
    let mut position = 0i64;
    for step in 0..11 {
        let tokens = if step == 0 { prompt } else { 1 };
        let shape = [1, HEADS as i64, tokens as i64, HEAD_DIM as i64];
        let n = HEADS * tokens * HEAD_DIM;
        let mut checksum = 0.0f32;
        let mut attended = Vec::new();
        for layer in 0..LAYERS {
            let seed = (position as u64) << 8 | layer as u64;
            let (k, v, q) = (project(seed, n), project(seed + 1, n), project(seed + 2, n));
            let (key, value) = (TensorRef::new(&k, &shape)?, TensorRef::new(&v, &shape)?);
            // The mask can be built before the update.
            let mask = cache.mask_sizes(tokens as i64, layer)?;
            let kv = cache.update(layer, &key, &value)?;
            assert_eq!(kv.key.shape()[2], mask.kv_length);
            attended.push(kv.key.shape()[2]);
            // Attention of the newest query token over the returned keys.
            let last = tokens - 1;
            for head in 0..HEADS {
                let query = &q[(head * tokens + last) * HEAD_DIM..][..HEAD_DIM];
                let keys = kv.key.head::<bf16>(0, head as i64)?;
                let values = kv.value.head::<bf16>(0, head as i64)?;
                checksum += attend(query, keys, values).iter().sum::<f32>();
            }
        }
        position += tokens as i64;
        println!(
            "step {step:2}: position {position:3}, keys attended per layer {attended:?}, checksum {checksum:+.4}"
        );
    }
    let memory = cache.memory()?;
    println!(
        "sequence length {} (full layer) / {} seen by sliding layers, storing {} bytes in {} reserved",
        cache.seq_length(1)?,
        cache.seq_length(0)?,
        memory.bytes_used,
        memory.bytes_reserved
    );
    Ok(())
}
