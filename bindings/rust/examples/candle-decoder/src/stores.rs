//! The three places the model can keep its K/V: kvcache (on candle-owned stores), candle's preallocated
//! `KvCache` (with `RotatingKvCache` for the sliding layer), and candle's `ConcatKvCache`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{Result, Tensor};
use candle_nn::kv_cache::{ConcatKvCache, KvCache, RotatingKvCache};
use kvcache::{Cache, LayerOptions, Preset};

use crate::candle_stores::{CandleStores, StoreViews, with_tensor_ref};
use crate::model::{Config, KvStore};

fn kv_err(e: kvcache::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// kvcache: dynamic layers and one dynamic sliding layer, every store a candle tensor. Each step reads
/// the new K/V from candle's memory and returns candle tensors over kvcache's stores: no copy either way.
pub struct Kvcache {
    pub cache: Cache,
    stores: Arc<CandleStores>,
    views: StoreViews,
    /// When set, every append adds the time of its parts here (the bench's split; off by default, so
    /// that the timed cache part has no timers inside).
    pub split: Option<AppendSplit>,
}

/// Where kvcache's appends spent their time.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppendSplit {
    /// Reading candle's K and V as kvcache inputs (`with_tensor_ref`: candle's storage lock, the shape).
    pub inputs: Duration,
    /// `Cache::update`: the library's checks and the copy of the new token into the stores.
    pub update: Duration,
    /// The candle tensors over the returned views (`StoreViews::tensor`: a comparison and a `narrow` each).
    pub tensors: Duration,
}

/// A running split: each lap adds the time since the last one to a part.
struct Laps<'a>(Option<(&'a mut AppendSplit, Instant)>);

impl<'a> Laps<'a> {
    fn start(split: Option<&'a mut AppendSplit>) -> Laps<'a> {
        Laps(split.map(|s| (s, Instant::now())))
    }

    fn lap(&mut self, part: fn(&mut AppendSplit) -> &mut Duration) {
        if let Some((split, since)) = &mut self.0 {
            let now = Instant::now();
            *part(split) += now - *since;
            *since = now;
        }
    }
}

impl Kvcache {
    /// Room for `tokens` in every full layer up front (`reserve`), as `KvCache::new(.., tokens)` has.
    pub fn new(config: &Config, tokens: usize) -> Result<Kvcache> {
        let stores = Arc::new(CandleStores::default());
        let layers = (0..config.layers).map(|l| {
            if config.is_sliding(l) {
                LayerOptions::dynamic_sliding(config.window as i64)
            } else {
                LayerOptions::dynamic()
            }
        });
        let mut cache = Cache::builder(Preset::Custom)
            .layers(layers)
            .allocator(stores.clone())
            .build()
            .map_err(kv_err)?;
        cache.reserve(tokens as i64).map_err(kv_err)?;
        Ok(Kvcache {
            cache,
            stores,
            views: StoreViews::default(),
            split: None,
        })
    }

    /// The allocator that serves the stores (and turns views into candle tensors).
    pub fn stores(&self) -> &CandleStores {
        &self.stores
    }
}

impl KvStore for Kvcache {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (cache, stores, views) = (&mut self.cache, &*self.stores, &mut self.views);
        let mut laps = Laps::start(self.split.as_mut());
        with_tensor_ref(k, |k| {
            with_tensor_ref(v, |v| {
                laps.lap(|s| &mut s.inputs);
                let kv = cache.update(layer as u32, k, v).map_err(kv_err)?;
                laps.lap(|s| &mut s.update);
                let tensors = (
                    views.tensor(stores, 2 * layer, &kv.key)?,
                    views.tensor(stores, 2 * layer + 1, &kv.value)?,
                );
                laps.lap(|s| &mut s.tensors);
                Ok(tensors)
            })?
        })?
    }
}

/// candle's preallocated caches: `KvCache` for full layers, `RotatingKvCache` (a ring of `window` slots)
/// for the sliding one. The ring returns the window in ring order, not in token order.
pub enum Preallocated {
    Full(KvCache),
    Ring(RotatingKvCache),
}

pub fn preallocated(config: &Config, tokens: usize) -> Vec<Preallocated> {
    (0..config.layers)
        .map(|l| {
            if config.is_sliding(l) {
                Preallocated::Ring(RotatingKvCache::new(2, config.window))
            } else {
                Preallocated::Full(KvCache::new(2, tokens))
            }
        })
        .collect()
}

impl KvStore for Vec<Preallocated> {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        match &mut self[layer] {
            Preallocated::Full(c) => c.append(k, v),
            Preallocated::Ring(c) => c.append(k, v),
        }
    }
}

/// candle's `ConcatKvCache` for every layer; the sliding layer attends to the last `window` tokens.
pub struct Concat {
    caches: Vec<ConcatKvCache>,
    config: Config,
}

impl Concat {
    pub fn new(config: &Config) -> Concat {
        Concat {
            caches: (0..config.layers).map(|_| ConcatKvCache::new(2)).collect(),
            config: *config,
        }
    }
}

impl KvStore for Concat {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (k, v) = self.caches[layer].append(k, v)?;
        let n = k.dim(2)?;
        if self.config.is_sliding(layer) && n > self.config.window {
            let w = self.config.window;
            return Ok((k.narrow(2, n - w, w)?, v.narrow(2, n - w, w)?));
        }
        Ok((k, v))
    }
}
