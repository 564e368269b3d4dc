"""The pool's tier worker from Python (Pool.start_tier_worker, Sequence.prefetch, Prefetch.collect): stores are
queued and counted, a prefetch started early is collected with the original bytes, an uncollected one is closed
without harm, and bad options are refused with the pool unchanged."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the tier tests use torch tensors (scripts/setup.sh installs torch)")

BLOCK, HEADS, DIM = 4, 2, 8
PROMPT = list(range(100, 117))  # 4 full blocks and one token


def make_pool():
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * 2,
                        hash_seed=b"tier-worker-test", events=64)


def compute(pool, seq, tokens):
    slots = seq.reserve(tokens)
    keys = [torch.arange(len(tokens) * HEADS * DIM, dtype=torch.float32).reshape(len(tokens), HEADS, DIM) + 1000 * l
            for l in range(2)]
    pool.write(keys, [-k for k in keys], slots)
    seq.commit()
    return keys


def test_stores_go_through_the_worker_and_prefetch_collects(tmp_path):
    pool = make_pool()
    pool.add_tier(kvcache.DiskTier(tmp_path))
    pool.start_tier_worker(events=True)
    assert pool.tier_worker_stats().running
    with pool.sequence() as seq:
        keys = compute(pool, seq, PROMPT)
    pool.stop_tier_worker(drain_timeout_ms=10_000)
    st = pool.tier_stats(0)
    assert (st.queued, st.puts, st.dropped) == (4, 4, 0)
    kinds = [e.kind for e in pool.events()]
    assert kinds.count(kvcache.EventKind.TIER_STORED) == 4
    pool.close()

    again = make_pool()
    again.add_tier(kvcache.DiskTier(tmp_path))
    again.start_tier_worker()
    with again.sequence() as seq:
        with seq.prefetch(PROMPT) as pf:
            assert pf.collect(timeout_ms=10_000) == 16
            with pytest.raises(kvcache.InvalidStateError):
                pf.collect(timeout_ms=0)
        k, _ = seq.gather(0)
        assert torch.equal(k[0].permute(1, 0, 2), keys[0][:16])
    ws = again.tier_worker_stats()
    assert (ws.prefetches, ws.prefetches_late) == (1, 0)
    # Started and never collected: closed, then the pool closes with the worker running.
    with again.sequence() as seq:
        pf = seq.prefetch(PROMPT)
        pf.close()
        pf.close()
    again.close()


def test_bad_options_are_refused():
    pool = make_pool()
    with pytest.raises(kvcache.InvalidArgumentError, match="max_jobs"):
        pool.start_tier_worker(max_jobs=-1)
    assert not pool.tier_worker_stats().running
    pool.start_tier_worker()
    with pytest.raises(kvcache.InvalidStateError, match="runs already"):
        pool.start_tier_worker()
    pool.close()
