//! A pool that lives in a scheduler: the scheduler struct owns the `Pool`
//! and its `Sequence`s, moves to another thread whole, lends `&Pool` to
//! scoped threads that step their own sequences at the same time, and hands
//! sequences to threads that outlive the pool handle they came from. Every
//! step writes K/V whose values say which request, layer, position, head and
//! element they are, and reads them back through `gather`.

use std::sync::Barrier;

use kvcache::{DType, ErrorCode, Pool, PoolGroup, PoolLayer, Sequence, SlotMapping, TensorRef};

const BLOCK: u32 = 4;
const HEADS: usize = 2;
const DIM: usize = 4;
const LAYERS: usize = 3;

// The compile-time half of the test: these fail to build, not to run.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    fn task<T: Send + 'static>() {}
    send_sync::<Pool>();
    send_sync::<Sequence>();
    task::<Sequence>(); // what tokio::spawn asks of what it moves
    task::<Pool>();
};

/// The key of one element; its value is the negative.
fn key(request: usize, layer: usize, position: usize, head: usize, d: usize) -> f32 {
    (request * 1_000_000 + layer * 100_000 + position * 100 + head * 10 + d) as f32
}

struct Request {
    id: usize,
    seq: Sequence,
}

impl Request {
    /// Reserves `n` more tokens and returns their slots.
    fn reserve(&mut self, n: usize) -> SlotMapping {
        let start = self.seq.len();
        let tokens: Vec<i32> = (start..start + n)
            .map(|p| (self.id * 1000 + p) as i32)
            .collect();
        self.seq.reserve(&tokens).unwrap()
    }

    /// K and V of positions `start..start + n`, `[n, HEADS, DIM]` per layer.
    fn kv(&self, start: usize, n: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
        (0..LAYERS)
            .map(|l| {
                let k: Vec<f32> = (start..start + n)
                    .flat_map(|p| (0..HEADS).flat_map(move |h| (0..DIM).map(move |d| (p, h, d))))
                    .map(|(p, h, d)| key(self.id, l, p, h, d))
                    .collect();
                let v = k.iter().map(|x| -x).collect();
                (k, v)
            })
            .collect()
    }

    /// One step alone: reserve `n` tokens, write them, commit.
    fn step(&mut self, pool: &Pool, n: usize) {
        let start = self.seq.len();
        let slots = self.reserve(n);
        write(pool, &[self.kv(start, n)], n, &slots);
        self.seq.commit().unwrap();
    }

    /// Every layer gathers back exactly what the steps wrote.
    fn check(&self) {
        let len = self.seq.len();
        for l in 0..LAYERS {
            let (k, v) = self.seq.gather::<f32>(l as u32).unwrap();
            assert_eq!(k.len(), HEADS * len * DIM);
            for h in 0..HEADS {
                for p in 0..len {
                    for d in 0..DIM {
                        let i = (h * len + p) * DIM + d;
                        let want = key(self.id, l, p, h, d);
                        assert_eq!(
                            (k[i], v[i]),
                            (want, -want),
                            "request {} layer {l} position {p} head {h} element {d}",
                            self.id
                        );
                    }
                }
            }
        }
    }
}

/// One write of several requests' tokens (`n` each, in batch order).
fn write(pool: &Pool, kvs: &[Vec<(Vec<f32>, Vec<f32>)>], n: usize, slots: &SlotMapping) {
    let shape = [(n * kvs.len()) as i64, HEADS as i64, DIM as i64];
    let layers: Vec<(Vec<f32>, Vec<f32>)> = (0..LAYERS)
        .map(|l| {
            let k = kvs.iter().flat_map(|r| r[l].0.iter().copied()).collect();
            let v = kvs.iter().flat_map(|r| r[l].1.iter().copied()).collect();
            (k, v)
        })
        .collect();
    let keys: Vec<TensorRef<'_>> = layers
        .iter()
        .map(|(k, _)| TensorRef::new(k, &shape).unwrap())
        .collect();
    let values: Vec<TensorRef<'_>> = layers
        .iter()
        .map(|(_, v)| TensorRef::new(v, &shape).unwrap())
        .collect();
    pool.write(&keys, &values, slots).unwrap();
}

/// The struct a serving loop keeps: the pool and its running requests.
struct Scheduler {
    pool: Pool,
    running: Vec<Request>,
}

impl Scheduler {
    fn new(requests: usize) -> Scheduler {
        let pool = Pool::builder(DType::F32)
            .group(PoolGroup::full(BLOCK, 2048))
            .layers(std::iter::repeat_n(
                PoolLayer::attention(0, HEADS as u32, DIM as u32),
                LAYERS,
            ))
            .build()
            .unwrap();
        let running = (0..requests)
            .map(|id| Request {
                id,
                seq: pool.sequence().unwrap(),
            })
            .collect();
        Scheduler { pool, running }
    }

    /// One batched decode step: every request reserves `n` tokens, one write
    /// of the whole batch through the concatenated slot mapping, the block
    /// table of the batch, then every request commits.
    fn step(&mut self, n: usize) {
        let starts: Vec<usize> = self.running.iter().map(|r| r.seq.len()).collect();
        let slots: Vec<SlotMapping> = self.running.iter_mut().map(|r| r.reserve(n)).collect();
        let kvs: Vec<_> = self
            .running
            .iter()
            .zip(&starts)
            .map(|(r, &s)| r.kv(s, n))
            .collect();
        let batch = SlotMapping::concat(&slots.iter().collect::<Vec<_>>()).unwrap();
        write(&self.pool, &kvs, n, &batch);
        {
            let seqs: Vec<&Sequence> = self.running.iter().map(|r| &r.seq).collect();
            let table = self.pool.block_table(&seqs, 0).unwrap();
            let rows = table.rows().unwrap();
            for (row, r) in rows.iter().zip(&self.running) {
                let blocks = r.seq.len().div_ceil(BLOCK as usize);
                assert!(row[..blocks].iter().all(|&b| b > 0), "{row:?}");
            }
        }
        for r in &mut self.running {
            r.seq.commit().unwrap();
        }
    }
}

#[test]
fn a_scheduler_holding_its_pool_and_sequences_moves_to_another_thread() {
    let mut scheduler = Scheduler::new(4);
    scheduler.step(5); // prefill on this thread
    let mut scheduler = std::thread::spawn(move || {
        for _ in 0..6 {
            scheduler.step(1); // decode on another
        }
        scheduler
    })
    .join()
    .unwrap();
    scheduler.step(2);
    for r in &scheduler.running {
        assert_eq!((r.seq.len(), r.seq.committed()), (13, 13));
        r.check();
    }
    // 13 tokens in 4-token blocks: 4 blocks per request, none shared.
    assert_eq!(scheduler.pool.stats(0).unwrap().used_blocks, 16);
}

/// Enough rounds that unserialised calls would overlap (and be refused
/// with `Busy`) in practice.
const ROUNDS: usize = 200;

#[test]
fn scoped_threads_step_their_own_sequences_through_one_shared_pool_at_once() {
    let mut scheduler = Scheduler::new(8);
    let pool = &scheduler.pool;
    let free = pool.stats(0).unwrap().free_blocks;
    std::thread::scope(|scope| {
        for pair in scheduler.running.chunks_mut(2) {
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    for r in pair.iter_mut() {
                        r.step(pool, 1 + round % 3);
                    }
                    if round % 50 == 49 {
                        pair[0].check();
                    }
                }
            });
        }
    });
    // ROUNDS rounds of 1, 2, 3, 1, ... tokens.
    let len: usize = (0..ROUNDS).map(|round| 1 + round % 3).sum();
    for r in &scheduler.running {
        assert_eq!((r.seq.len(), r.seq.committed()), (len, len));
        r.check();
    }
    let stats = pool.stats(0).unwrap();
    assert_eq!(stats.used_blocks, 8 * len.div_ceil(BLOCK as usize) as u64);
    assert_eq!(stats.free_blocks + stats.used_blocks, free);
    scheduler.running.clear(); // dropping the sequences releases their blocks (cached)
    let stats = scheduler.pool.stats(0).unwrap();
    assert_eq!(stats.used_blocks, 0);
    assert_eq!(stats.free_blocks + stats.cached_blocks, free);
}

#[test]
fn sequences_keep_their_pool_alive_after_its_last_handle_is_dropped() {
    let Scheduler { pool, running } = Scheduler::new(3);
    let workers: Vec<_> = running
        .into_iter()
        .map(|mut r| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                r.step(&pool, 6);
                r
            })
        })
        .collect();
    drop(pool); // the workers' clones and the sequences still hold it
    let mut requests: Vec<Request> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let pool = requests[0].seq.pool().clone();
    for r in &mut requests {
        assert!(r.seq.pool().same_pool(&pool));
        r.step(&pool, 1);
        r.check();
    }
    drop(pool);
    // The last handles are the sequences: the pool goes after the last one.
    let last = requests.pop().unwrap();
    drop(requests);
    assert_eq!(last.seq.pool().stats(0).unwrap().used_blocks, 2);
    last.check();
}

/// Views are counted across threads: a block table alive on one thread
/// refuses another thread's reserve (it would invalidate the table), and the
/// reserve works once the table is dropped.
#[test]
fn a_view_on_one_thread_refuses_another_threads_reserve_until_dropped() {
    let mut scheduler = Scheduler::new(2);
    let (first, second) = scheduler.running.split_at_mut(1);
    let pool = &scheduler.pool;
    first[0].step(pool, 3);
    let table_alive = Barrier::new(2);
    let refused = Barrier::new(2);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let table = pool.block_table(&[&first[0].seq], 0).unwrap();
            table_alive.wait();
            refused.wait();
            assert!(table.rows().unwrap()[0][0] > 0);
        });
        scope.spawn(|| {
            let r = &mut second[0];
            table_alive.wait();
            let err = r.seq.reserve(&[1, 2]).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidState, "{err}");
            assert!(err.message().contains("view"), "{err}");
            assert_eq!(r.seq.len(), 0);
            refused.wait();
        });
    });
    second[0].step(pool, 2);
    second[0].check();
    first[0].check();
}
