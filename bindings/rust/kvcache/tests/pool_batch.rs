//! The per-layer write and the batched scheduling calls from Rust: writing
//! every layer with `Pool::write_layer` gathers back what was written, a
//! refused per-layer write changes nothing, and `reserve_batch` /
//! `commit_batch` do what the per-sequence calls do, stopping at the first
//! sequence that does not fit.

use kvcache::{DType, ErrorCode, Pool, PoolGroup, PoolLayer, TensorRef};

const BLOCK: u32 = 4;
const HEADS: u32 = 2;
const DIM: u32 = 4;
const LAYERS: u32 = 3;

fn pool(num_blocks: u32) -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, num_blocks))
        .layers((0..LAYERS).map(|_| PoolLayer::attention(0, HEADS, DIM)))
        .build()
        .expect("a pool")
}

/// `[n, heads, dim]` values unique to (layer, token, element).
fn layer_input(layer: u32, n: usize) -> Vec<f32> {
    (0..n * (HEADS * DIM) as usize)
        .map(|i| (layer * 10_000) as f32 + i as f32)
        .collect()
}

#[test]
fn per_layer_writes_gather_back_and_refusals_change_nothing() {
    let pool = pool(8);
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2, 3, 4, 5]).unwrap();
    let shape = [5i64, i64::from(HEADS), i64::from(DIM)];
    for layer in 0..LAYERS {
        let data = layer_input(layer, 5);
        let t = TensorRef::new(&data, &shape).unwrap();
        pool.write_layer(layer, &t, &t, &slots).unwrap();
    }
    let before: Vec<(Vec<f32>, Vec<f32>)> =
        (0..LAYERS).map(|l| seq.gather::<f32>(l).unwrap()).collect();
    for (layer, (k, _)) in before.iter().enumerate() {
        // gather is [1, heads, n, dim]; the input token-major [n, heads, dim]
        let want = layer_input(layer as u32, 5);
        for h in 0..HEADS as usize {
            for t in 0..5 {
                for d in 0..DIM as usize {
                    assert_eq!(
                        k[(h * 5 + t) * DIM as usize + d],
                        want[(t * HEADS as usize + h) * DIM as usize + d]
                    );
                }
            }
        }
    }
    let other = layer_input(9, 5);
    let t = TensorRef::new(&other, &shape).unwrap();
    let err = pool.write_layer(LAYERS, &t, &t, &slots).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfRange);
    let mut twice = slots.to_vec();
    twice[1] = twice[0];
    let err = pool.write_layer(0, &t, &t, &twice).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("appears twice"), "{}", err.message());
    // a mapping of 3 tokens for inputs of 5
    let err = pool.write_layer(0, &t, &t, &slots[..3]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ShapeMismatch);
    let after: Vec<(Vec<f32>, Vec<f32>)> =
        (0..LAYERS).map(|l| seq.gather::<f32>(l).unwrap()).collect();
    assert_eq!(before, after);
}

#[test]
fn reserve_batch_stops_at_the_first_sequence_that_does_not_fit() {
    let other = pool(4);
    let pool = pool(6); // 5 usable blocks
    let mut a = pool.sequence().unwrap();
    let mut b = pool.sequence().unwrap();
    let mut c = pool.sequence().unwrap();
    let tokens: Vec<i32> = (0..30).collect();
    // a: 8 tokens (2 blocks), b: 20 (5 blocks: too many), c: 2 (would fit, but comes after b)
    let (reserved, slots) = pool
        .reserve_batch(&mut [&mut a, &mut b, &mut c], &tokens, &[8usize, 20, 2])
        .unwrap();
    assert_eq!(reserved, 1);
    assert_eq!((a.len(), b.len(), c.len()), (8, 0, 0));
    assert_eq!(slots.num_tokens(), 30);
    assert!(slots.group(0)[8..].iter().all(|&s| s == -1));
    assert!(slots.group(0)[..8].iter().all(|&s| s >= i64::from(BLOCK)));
    pool.commit_batch(&mut [&mut a, &mut b, &mut c]).unwrap();
    assert_eq!(a.committed(), 8);
    let (reserved, _) = pool
        .reserve_batch(&mut [&mut a, &mut c], &tokens[..3], &[1, 2])
        .unwrap();
    assert_eq!((reserved, a.len(), c.len()), (2, 9, 2));
    let err = pool
        .reserve_batch(&mut [&mut a, &mut c], &tokens[..3], &[1, 1])
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("adds up to 2"), "{}", err.message());
    let mut stranger = other.sequence().unwrap();
    let err = pool.commit_batch(&mut [&mut a, &mut stranger]).unwrap_err();
    assert!(
        err.message()
            .contains("sequences[1] belongs to another pool"),
        "{}",
        err.message()
    );
    assert_eq!((a.len(), a.committed()), (9, 8));
}
