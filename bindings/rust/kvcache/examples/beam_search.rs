//! Beam search with a KV cache: prefill the prompt once, clone it per
//! request (prefix reuse), expand it to the beams with
//! `batch_repeat_interleave`, and after each step keep the best beams with
//! `reorder` (which copies only the rows that change).
//!
//! `cargo run --example beam_search`

use kvcache::{Cache, ModelConfig, Preset, TensorRef, ViewBuffer};

const LAYERS: usize = 2;
const HEADS: i64 = 2;
const HEAD_DIM: i64 = 8;
const BEAMS: usize = 3;
const VOCAB: usize = 5;

/// Keys and values for `tokens` new tokens of `rows` beams: each beam's
/// token id is written into its K/V so that the cache shows the sequence.
fn kv_for(token_ids: &[usize], tokens: usize) -> (Vec<f32>, [i64; 4]) {
    let rows = token_ids.len() / tokens;
    let mut data = Vec::new();
    for b in 0..rows {
        for _h in 0..HEADS {
            for t in 0..tokens {
                data.extend(std::iter::repeat_n(
                    token_ids[b * tokens + t] as f32,
                    HEAD_DIM as usize,
                ));
            }
        }
    }
    (data, [rows as i64, HEADS, tokens as i64, HEAD_DIM])
}

/// A toy language model: log-probabilities of the next token given the
/// beam's sequence as the cache holds it.
fn next_token_scores(sequence: &[usize]) -> [f32; VOCAB] {
    let last = *sequence.last().unwrap_or(&0);
    let mut scores = [0.0f32; VOCAB];
    for (token, score) in scores.iter_mut().enumerate() {
        let affinity = ((last * 7 + token * 3 + sequence.len()) % 11) as f32;
        *score = -(affinity / 4.0);
    }
    scores
}

/// The token ids of every beam, read back from layer 0's keys.
fn sequences(cache: &Cache) -> Result<Vec<Vec<usize>>, kvcache::Error> {
    let kv = cache.layer_view(0)?;
    (0..kv.key.shape()[0])
        .map(|b| {
            (0..kv.key.shape()[2])
                .map(|t| Ok(kv.key.get::<f32>(&[b, 0, t, 0])? as usize))
                .collect()
        })
        .collect()
}

fn append(
    cache: &mut Cache,
    ids: &[usize],
    tokens: usize,
    views: &mut ViewBuffer,
) -> Result<(), kvcache::Error> {
    let (data, shape) = kv_for(ids, tokens);
    let t = TensorRef::new(&data, &shape)?;
    let keys = [t; LAYERS];
    cache.update_all(&keys, &keys, views)?;
    Ok(())
}

fn main() -> Result<(), kvcache::Error> {
    let mut views = ViewBuffer::new();
    // The shared prompt, prefilled once.
    let mut prompt = Cache::builder(Preset::Dynamic)
        .config(ModelConfig::new(LAYERS as u32))
        .build()?;
    let prompt_ids = [1, 4, 2];
    append(&mut prompt, &prompt_ids, prompt_ids.len(), &mut views)?;

    for request in 0..2 {
        // Prefix reuse: each request starts from a copy of the prompt.
        let mut cache = prompt.try_clone()?;
        cache.batch_repeat_interleave(BEAMS as i64)?;
        let mut scores = vec![0.0f32; BEAMS];
        for step in 0..4 {
            let seqs = sequences(&cache)?;
            // Every (beam, token) candidate; the first step has one distinct beam.
            let mut candidates: Vec<(f32, usize, usize)> = Vec::new();
            let live = if step == 0 { 1 } else { BEAMS };
            for (beam, seq) in seqs.iter().enumerate().take(live) {
                let offset = request; // requests differ only in how they score
                for (token, s) in next_token_scores(seq).iter().enumerate() {
                    candidates.push((
                        scores[beam] + s - offset as f32 * token as f32 * 0.1,
                        beam,
                        token,
                    ));
                }
            }
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
            candidates.truncate(BEAMS);
            // Keep the best beams: row b becomes former row beam_idx[b].
            let beam_idx: Vec<i64> = candidates.iter().map(|c| c.1 as i64).collect();
            cache.reorder(&beam_idx)?;
            let next: Vec<usize> = candidates.iter().map(|c| c.2).collect();
            append(&mut cache, &next, 1, &mut views)?;
            scores = candidates.iter().map(|c| c.0).collect();
        }
        println!("request {request}:");
        for (seq, score) in sequences(&cache)?.iter().zip(&scores) {
            println!("  {seq:?}  score {score:.2}");
        }
    }
    println!(
        "the prompt cache is untouched: {} tokens",
        prompt.seq_length(0)?
    );
    Ok(())
}
