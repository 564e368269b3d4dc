//! A tiny Llama-style decoder in candle: RMSNorm, grouped-query attention with RoPE, a SiLU-gated MLP, one
//! sliding-window layer. Random weights from a fixed seed; one token per step (the prompt too), so no mask
//! is needed: a full layer attends to every cached token, the sliding layer to the last `window`.
//!
//! The model never stores K/V itself: each layer hands its new key and value to a [`KvStore`] and attends
//! to what it returns, so the same weights run on kvcache and on candle's own caches.

use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm};

/// The shape of the model.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Which layer is the sliding one, and its window (the query and the window - 1 tokens before it).
    pub sliding_layer: usize,
    pub window: usize,
}

impl Config {
    pub const TINY: Config = Config {
        vocab: 512,
        hidden: 128,
        intermediate: 256,
        layers: 4,
        heads: 8,
        kv_heads: 2,
        head_dim: 16,
        sliding_layer: 2,
        window: 32,
    };

    pub fn is_sliding(&self, layer: usize) -> bool {
        layer == self.sliding_layer
    }
}

/// Where a model keeps its keys and values: `append` stores one step's K/V of `layer`
/// ([1, kv_heads, 1, head_dim]) and returns what the layer attends to ([1, kv_heads, n, head_dim]).
pub trait KvStore {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)>;
}

impl<S: KvStore + ?Sized> KvStore for Box<S> {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        (**self).append(layer, k, v)
    }
}

struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

pub struct Model {
    pub config: Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
}

/// Deterministic weights: a 64-bit LCG, uniform in [-scale, scale].
struct Weights(u64);

impl Weights {
    fn tensor(&mut self, rows: usize, cols: usize) -> Result<Tensor> {
        let scale = 1.0 / (cols as f32).sqrt();
        let data: Vec<f32> = (0..rows * cols)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect();
        Tensor::from_vec(data, (rows, cols), &Device::Cpu)
    }

    fn linear(&mut self, out: usize, inp: usize) -> Result<Linear> {
        Ok(Linear::new(self.tensor(out, inp)?, None))
    }
}

fn norm(dim: usize) -> Result<RmsNorm> {
    Ok(RmsNorm::new(
        Tensor::ones(dim, DType::F32, &Device::Cpu)?,
        1e-6,
    ))
}

impl Model {
    /// The model for `config` with weights from `seed`; RoPE tables for `max_positions`.
    pub fn new(config: Config, seed: u64, max_positions: usize) -> Result<Model> {
        let c = config;
        let mut w = Weights(seed);
        let embed = Embedding::new(w.tensor(c.vocab, c.hidden)?, c.hidden);
        let mut layers = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            layers.push(Layer {
                input_norm: norm(c.hidden)?,
                q: w.linear(c.heads * c.head_dim, c.hidden)?,
                k: w.linear(c.kv_heads * c.head_dim, c.hidden)?,
                v: w.linear(c.kv_heads * c.head_dim, c.hidden)?,
                o: w.linear(c.hidden, c.heads * c.head_dim)?,
                post_norm: norm(c.hidden)?,
                gate: w.linear(c.intermediate, c.hidden)?,
                up: w.linear(c.intermediate, c.hidden)?,
                down: w.linear(c.hidden, c.intermediate)?,
            });
        }
        let half = c.head_dim / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / c.head_dim as f32))
            .collect();
        let angles: Vec<f32> = (0..max_positions)
            .flat_map(|p| inv.iter().map(move |f| p as f32 * f))
            .collect();
        let angles = Tensor::from_vec(angles, (max_positions, half), &Device::Cpu)?;
        Ok(Model {
            config,
            embed,
            layers,
            norm: norm(c.hidden)?,
            lm_head: w.linear(c.vocab, c.hidden)?,
            cos: angles.cos()?,
            sin: angles.sin()?,
        })
    }

    /// One step: `token` at `position`; returns the logits [vocab].
    pub fn step(&self, token: u32, position: usize, kv: &mut impl KvStore) -> Result<Tensor> {
        let c = &self.config;
        let (cos, sin) = (
            self.cos.narrow(0, position, 1)?,
            self.sin.narrow(0, position, 1)?,
        );
        let mut x = self.embed.forward(&Tensor::new(&[token], &Device::Cpu)?)?; // [1, hidden]
        let group = c.heads / c.kv_heads;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.input_norm.forward(&x)?;
            // Queries grouped by the KV head they share: [1, kv_heads, group, head_dim], so attention reads
            // the cached K/V as they are (no repeat_kv copy).
            let q = layer.q.forward(&h)?.reshape((1, c.heads, 1, c.head_dim))?;
            let k = layer
                .k
                .forward(&h)?
                .reshape((1, c.kv_heads, 1, c.head_dim))?;
            let v = layer
                .v
                .forward(&h)?
                .reshape((1, c.kv_heads, 1, c.head_dim))?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?
                .reshape((1, c.kv_heads, group, c.head_dim))?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            let (keys, values) = kv.append(i, &k, &v)?;
            let scores = (q.matmul(&keys.t()?)? / (c.head_dim as f64).sqrt())?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let attn = probs.matmul(&values)?.reshape((1, c.heads * c.head_dim))?;
            x = (x + layer.o.forward(&attn)?)?;
            let h = layer.post_norm.forward(&x)?;
            let mlp = layer.down.forward(
                &(candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?,
            )?;
            x = (x + mlp)?;
        }
        self.lm_head.forward(&self.norm.forward(&x)?)?.squeeze(0)
    }
}

/// Greedy decoding: feeds `prompt` one token at a time, then generates `new_tokens`; returns the generated
/// tokens and every step's logits.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    new_tokens: usize,
    kv: &mut impl KvStore,
) -> Result<(Vec<u32>, Vec<Vec<f32>>)> {
    let mut logits = Vec::new();
    let mut out = Vec::new();
    let mut token = prompt[0];
    for position in 0..prompt.len() + new_tokens - 1 {
        let l = model.step(token, position, kv)?;
        let next = l.argmax(D::Minus1)?.to_scalar::<u32>()?;
        logits.push(l.to_vec1::<f32>()?);
        token = if position + 1 < prompt.len() {
            prompt[position + 1]
        } else {
            next
        };
        if position + 1 >= prompt.len() {
            out.push(next);
        }
    }
    Ok((out, logits))
}
