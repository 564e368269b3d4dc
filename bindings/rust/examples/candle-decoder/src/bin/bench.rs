//! Decode-step cost at 1k and 4k tokens of context: kvcache (on candle-owned stores, zero copy) against
//! candle's preallocated `KvCache` (+ `RotatingKvCache` for the sliding layer) and `ConcatKvCache`.
//!
//! Each variant is filled to the context once, then rounds alternate between the variants: every round
//! runs STEPS decode steps of each, timing the whole step and the time spent in the cache (the append of
//! all layers, including making the candle tensors the layers attend to). Printed: medians over rounds of
//! the per-step medians, and each candle cache's ratio to kvcache (> 1: kvcache is faster). Then a run of
//! kvcache with timers inside each append splits its cache part: reading candle's K/V as inputs, the
//! update, making the candle tensors over the views.

use std::time::{Duration, Instant};

use candle_core::{Result, Tensor};
use candle_decoder::model::{Config, KvStore, Model};
use candle_decoder::stores::{AppendSplit, Concat, Kvcache, preallocated};

const STEPS: usize = 16;
const ROUNDS: usize = 7;

/// A store that counts the time spent in it.
struct Timed<S> {
    inner: S,
    spent: Duration,
}

impl<S: KvStore> KvStore for Timed<S> {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let start = Instant::now();
        let out = self.inner.append(layer, k, v);
        self.spent += start.elapsed();
        out
    }
}

/// One variant at a context: its timed store, where its sequence is, and its rounds' medians.
struct Run {
    name: &'static str,
    store: Timed<Box<dyn KvStore>>,
    position: usize,
    step_us: Vec<f64>,
    cache_us: Vec<f64>,
}

fn run(name: &'static str, store: impl KvStore + 'static) -> Run {
    let store = Timed {
        inner: Box::new(store) as Box<dyn KvStore>,
        spent: Duration::ZERO,
    };
    Run {
        name,
        store,
        position: 0,
        step_us: Vec::new(),
        cache_us: Vec::new(),
    }
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

/// The token fed at `position` (any will do: the weights are random).
fn token(model: &Model, position: usize) -> u32 {
    (position * 7 % model.config.vocab) as u32
}

/// `steps` steps of `r` from where it is; per-step medians of the whole step and of the cache's part.
fn steps(model: &Model, r: &mut Run, steps: usize) -> Result<(f64, f64)> {
    let (mut whole, mut cache) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let before = r.store.spent;
        let start = Instant::now();
        let logits = model.step(token(model, r.position), r.position, &mut r.store)?;
        std::hint::black_box(logits);
        whole.push(start.elapsed().as_secs_f64() * 1e6);
        cache.push((r.store.spent - before).as_secs_f64() * 1e6);
        r.position += 1;
    }
    Ok((median(whole), median(cache)))
}

/// kvcache's cache part split (us per step, per-step medians of inputs, update, tensors): a run of its
/// own with timers inside each append, filled to `context`, then ROUNDS * STEPS steps.
fn split(model: &Model, context: usize, capacity: usize) -> Result<[f64; 3]> {
    let mut kv = Kvcache::new(&model.config, capacity)?;
    for position in 0..context {
        model.step(token(model, position), position, &mut kv)?;
    }
    let mut parts: [Vec<f64>; 3] = Default::default();
    for position in context..context + ROUNDS * STEPS {
        kv.split = Some(AppendSplit::default());
        std::hint::black_box(model.step(token(model, position), position, &mut kv)?);
        let s = kv.split.expect("set above");
        for (part, time) in parts.iter_mut().zip([s.inputs, s.update, s.tensors]) {
            part.push(time.as_secs_f64() * 1e6);
        }
    }
    Ok(parts.map(median))
}

fn main() -> Result<()> {
    let config = Config::TINY;
    println!(
        "decode step of a {}-layer model (GQA {}/{} heads, head dim {}, layer {} sliding with window {}), CPU, f32",
        config.layers,
        config.heads,
        config.kv_heads,
        config.head_dim,
        config.sliding_layer,
        config.window
    );
    println!(
        "medians of {ROUNDS} alternated rounds of {STEPS} steps; cache = all layers' appends incl. the tensors they return\n"
    );
    println!(
        "{:>7}  {:<34} {:>12} {:>12} {:>13} {:>12}",
        "context", "cache", "cache us", "step us", "cache / ours", "step / ours"
    );
    for context in [1024usize, 4096] {
        let capacity = context + ROUNDS * STEPS + 1;
        let model = Model::new(config, 7, capacity)?;
        let mut runs = vec![
            run(
                "kvcache (candle-owned stores)",
                Kvcache::new(&config, capacity)?,
            ),
            run(
                "candle KvCache + RotatingKvCache",
                preallocated(&config, capacity),
            ),
            run("candle ConcatKvCache", Concat::new(&config)),
        ];
        for r in runs.iter_mut() {
            steps(&model, r, context)?;
        }
        for _ in 0..ROUNDS {
            for r in runs.iter_mut() {
                let (whole, cache) = steps(&model, r, STEPS)?;
                r.step_us.push(whole);
                r.cache_us.push(cache);
            }
        }
        let results: Vec<(&str, f64, f64)> = runs
            .into_iter()
            .map(|r| (r.name, median(r.cache_us), median(r.step_us)))
            .collect();
        let (_, our_cache, our_step) = results[0];
        for (name, cache, step) in results {
            println!(
                "{context:>7}  {name:<34} {cache:>12.2} {step:>12.2} {:>13.2} {:>12.2}",
                cache / our_cache,
                step / our_step
            );
        }
        let [inputs, update, tensors] = split(&model, context, capacity)?;
        println!(
            "{context:>7}  kvcache's cache part split (a run with timers inside): inputs {inputs:.2} us, \
             update {update:.2} us, tensors {tensors:.2} us"
        );
    }
    Ok(())
}
