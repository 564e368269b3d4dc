//! The exactness check: the same model and prompt on kvcache, on candle's `ConcatKvCache` and on candle's
//! preallocated caches. kvcache must give the same tokens as `ConcatKvCache` and bitwise the same logits
//! at every step (exit status 1 otherwise); the preallocated caches are reported, not required (their
//! sliding layer returns the window in ring order, so sums run in another order).

use candle_core::{Result, Storage};
use candle_decoder::model::{Config, Model, generate};
use candle_decoder::stores::{Concat, Kvcache, preallocated};

const PROMPT: [u32; 12] = [1, 17, 99, 256, 3, 411, 42, 8, 77, 130, 500, 5];
const NEW_TOKENS: usize = 100; // past the sliding window (32) several times

fn differing_steps(a: &[Vec<f32>], b: &[Vec<f32>]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| {
            x.iter()
                .zip(y.iter())
                .any(|(p, q)| p.to_bits() != q.to_bits())
        })
        .count()
}

fn main() -> Result<()> {
    let config = Config::TINY;
    let total = PROMPT.len() + NEW_TOKENS;
    let model = Model::new(config, 2024, total)?;

    let mut ours = Kvcache::new(&config, total)?;
    let (tokens, logits) = generate(&model, &PROMPT, NEW_TOKENS, &mut ours)?;
    // Room for one token only: the dynamic layers grow into new stores again and again, so the candle
    // tensors of a layer move from store to store (StoreViews resolves each move through the allocator).
    let mut growing = Kvcache::new(&config, 1)?;
    let (growing_tokens, growing_logits) = generate(&model, &PROMPT, NEW_TOKENS, &mut growing)?;
    let (concat_tokens, concat_logits) =
        generate(&model, &PROMPT, NEW_TOKENS, &mut Concat::new(&config))?;
    let (pre_tokens, pre_logits) = generate(
        &model,
        &PROMPT,
        NEW_TOKENS,
        &mut preallocated(&config, total),
    )?;

    // Zero copy: the candle tensors the model attended to are kvcache's stores themselves.
    let mut shared = 0;
    for layer in 0..config.layers as u32 {
        let view = ours
            .cache
            .layer_view(layer)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let tensor = ours.stores().tensor(&view.key)?;
        let (storage, layout) = tensor.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else {
            unreachable!("CPU only")
        };
        let first = cpu.as_slice::<f32>()?[layout.start_offset()..].as_ptr();
        let element = view.key.data_ptr() as usize + view.key.byte_offset() as usize;
        shared += usize::from(first as usize == element);
    }

    let diff = differing_steps(&logits, &concat_logits);
    let growing_diff = differing_steps(&growing_logits, &concat_logits);
    let pre_diff = differing_steps(&logits, &pre_logits);
    println!(
        "generated {} tokens after a {}-token prompt (window {}, layer {} sliding)",
        tokens.len(),
        PROMPT.len(),
        config.window,
        config.sliding_layer
    );
    println!("first tokens: {:?}", &tokens[..12]);
    println!(
        "kvcache vs ConcatKvCache: tokens {}, logits differ at {} of {} steps",
        if tokens == concat_tokens {
            "identical"
        } else {
            "DIFFER"
        },
        diff,
        logits.len()
    );
    println!(
        "kvcache grown from room for 1 token vs ConcatKvCache: tokens {}, logits differ at {} of {} steps",
        if growing_tokens == concat_tokens {
            "identical"
        } else {
            "DIFFER"
        },
        growing_diff,
        growing_logits.len()
    );
    println!(
        "kvcache vs KvCache + RotatingKvCache: tokens {}, logits differ at {} of {} steps (not required)",
        if tokens == pre_tokens {
            "identical"
        } else {
            "differ"
        },
        pre_diff,
        logits.len()
    );
    println!(
        "layers whose candle tensor is kvcache's store (same first element): {shared} of {}",
        config.layers
    );
    if tokens != concat_tokens
        || diff != 0
        || growing_tokens != concat_tokens
        || growing_diff != 0
        || shared != config.layers
    {
        eprintln!("check FAILED");
        std::process::exit(1);
    }
    println!("check passed");
    Ok(())
}
