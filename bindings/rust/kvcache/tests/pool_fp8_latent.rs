//! FP8 pool storage (`Storage::Fp8E4m3`, vLLM's fp8 KV cache with per-layer
//! k_scale / v_scale) and latent (MLA) groups from Rust: an fp8 layer
//! gathers `e4m3fn(x / scale) * scale` (a reference written here) and its
//! storage views are `u8` codes; a latent layer writes and gathers rows with
//! no V and shares prefixes; bad scales are refused naming the field.

use kvcache::{DType, ErrorCode, Layout, Pool, PoolGroup, PoolLayer, Storage, TensorRef};

mod common;
use common::{e4m3fn, expect_err};

fn inputs(n: usize, width: usize, salt: f32) -> Vec<f32> {
    (0..n * width)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1.7 + salt)
        .collect()
}

#[test]
fn fp8_layer_gathers_code_times_scale() {
    let (k_scale, v_scale) = (0.5f32, 2.0f32);
    let pool = Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 8))
        .layer(
            PoolLayer::attention(0, 2, 4)
                .value_head_dim(3)
                .fp8(k_scale, v_scale),
        )
        .build()
        .unwrap();
    assert_eq!(pool.layers()[0].storage, Storage::Fp8E4m3);
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2, 3, 4, 5, 6]).unwrap();
    let (k, v) = (inputs(6, 8, 0.25), inputs(6, 6, -0.75));
    let (ks, vs) = ([6i64, 2, 4], [6i64, 2, 3]);
    pool.write_layer(
        0,
        &TensorRef::new(&k, &ks).unwrap(),
        &TensorRef::new(&v, &vs).unwrap(),
        &slots,
    )
    .unwrap();
    seq.commit().unwrap();
    let (gk, gv) = seq.gather::<f32>(0).unwrap();
    // gather is [1, heads, tokens, dim]; the inputs [tokens, heads, dim]
    for t in 0..6 {
        for h in 0..2 {
            for d in 0..4 {
                let x = k[(t * 2 + h) * 4 + d];
                assert_eq!(gk[(h * 6 + t) * 4 + d], e4m3fn(x / k_scale) * k_scale);
            }
            for d in 0..3 {
                let x = v[(t * 2 + h) * 3 + d];
                assert_eq!(gv[(h * 6 + t) * 3 + d], e4m3fn(x / v_scale) * v_scale);
            }
        }
    }
    let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
    assert_eq!(storage.keys().data_type().bits, 8);
}

#[test]
fn latent_rows_have_no_values_and_share_prefixes() {
    let pool = Pool::builder(DType::F32)
        .group(PoolGroup::latent(4, 10))
        .layer(PoolLayer::latent(0, 9))
        .build()
        .unwrap();
    let mut seq = pool.sequence().unwrap();
    let tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5];
    let slots = seq.reserve(&tokens).unwrap();
    let rows = inputs(9, 9, 0.5);
    let shape = [9i64, 1, 9];
    pool.write_layer(
        0,
        &TensorRef::new(&rows, &shape).unwrap(),
        &TensorRef::empty(),
        &slots,
    )
    .unwrap();
    seq.commit().unwrap();
    let (keys, values) = seq.gather::<f32>(0).unwrap();
    assert_eq!(keys, rows); // one head: [1, 1, tokens, width] is the input's order
    assert!(values.is_empty());
    let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
    assert_eq!(storage.keys().shape(), &[10, 4, 1, 9]);
    drop(storage);
    let mut other = pool.sequence().unwrap();
    assert_eq!(other.match_prefix(&tokens).unwrap(), 8);
    expect_err(
        pool.write_layer(
            0,
            &TensorRef::new(&rows, &shape).unwrap(),
            &TensorRef::new(&rows, &shape).unwrap(),
            &slots,
        ),
        ErrorCode::InvalidArgument,
        "latent group",
    );
}

#[test]
fn a_zero_scale_is_refused_naming_the_field() {
    expect_err(
        Pool::builder(DType::F32)
            .group(PoolGroup::full(4, 8))
            .layer(PoolLayer::attention(0, 1, 4).fp8(0.0, 1.0))
            .build(),
        ErrorCode::InvalidArgument,
        "layers[0].k_scale is 0",
    );
}
