//! One block budget shared by a pool's groups (`PoolBuilder::shared_budget_bytes`,
//! `kvc_pool_options.shared_budget_bytes`): pool-wide counts, a full group
//! taking the pages a sliding group's window gave back, writes and gathers
//! through page-strided storage, and refusals naming the field.

use kvcache::{DType, ErrorCode, Layout, Pool, PoolGroup, PoolLayer, TensorRef};

/// One layer of a group: K and V of 4 tokens x 2 heads x 8 dims, f32.
const PAGE: u64 = 2 * 4 * 2 * 8 * 4;

fn builder(pages: u64) -> kvcache::PoolBuilder {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 0))
        .group(PoolGroup::sliding(4, 0, 4))
        .layer(PoolLayer::attention(0, 2, 8))
        .layer(PoolLayer::attention(1, 2, 8))
        .shared_budget_bytes(pages * PAGE)
}

#[test]
fn the_groups_share_one_budget() {
    let pool = builder(9).build().unwrap();
    for g in 0..2 {
        let st = pool.stats(g).unwrap();
        assert_eq!((st.num_blocks, st.free_blocks), (8, 8));
    }
    let mut seq = pool.sequence().unwrap();
    let tokens: Vec<i32> = (100..116).collect();
    let slots = seq.reserve(&tokens).unwrap();
    let kv: Vec<f32> = (0..16 * 2 * 8).map(|i| i as f32 + 0.5).collect();
    let shape = [16, 2, 8];
    let t = TensorRef::new(&kv, &shape).unwrap();
    pool.write(&[t, t], &[t, t], &slots).unwrap();
    seq.commit().unwrap();
    assert_eq!(pool.stats(0).unwrap().free_blocks, 0);
    for layer in 0..2 {
        let (k, v) = seq.gather::<f32>(layer).unwrap();
        // gather gives [1, heads, tokens, dim]: head h, token i, dim d was kv[(i * 2 + h) * 8 + d]
        for h in 0..2 {
            for i in 0..16 {
                for d in 0..8 {
                    assert_eq!(k[(h * 16 + i) * 8 + d], kv[(i * 2 + h) * 8 + d]);
                    assert_eq!(v[(h * 16 + i) * 8 + d], kv[(i * 2 + h) * 8 + d]);
                }
            }
        }
    }
    {
        let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
        assert_eq!(storage.keys().strides()[0], (PAGE / 4) as i64); // a page from one block to the next
    }
    // The sliding group's window gives back its old blocks; the full group takes one of them.
    seq.reserve(&[7]).unwrap();
    assert_eq!(pool.stats(0).unwrap().used_blocks, 5);
    assert_eq!(pool.stats(1).unwrap().used_blocks, 2);
}

#[test]
fn bad_budgets_are_refused_naming_the_field() {
    let err = builder(1).build().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.message().contains("options.shared_budget_bytes is 512"),
        "{}",
        err.message()
    );
    let err = Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 8))
        .layer(PoolLayer::attention(0, 2, 8))
        .shared_budget_bytes(9 * PAGE)
        .build()
        .unwrap_err();
    assert!(
        err.message().contains("groups[0].num_blocks is 8"),
        "{}",
        err.message()
    );
}
