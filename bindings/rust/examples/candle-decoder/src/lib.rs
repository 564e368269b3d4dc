//! A tiny candle decoder on kvcache, with zero copies between them (README.md).

pub mod candle_stores;
pub mod model;
pub mod stores;
