"""The per-layer pool write (Pool.write_layer) and the batched scheduling calls (Pool.reserve_batch,
Pool.commit_batch) from Python: per-layer writes equal one all-layers write byte for byte, a refusal changes
nothing, and a batch does what the per-sequence calls do, stopping at the first sequence that does not fit."""
from __future__ import annotations

import numpy as np
import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")

BLOCK = 4
HEADS = 2
DIM = 8


def make_pool(num_blocks=16, layers=3, layout="NHD"):
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=num_blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * layers,
                        hash_seed=b"m", layout=layout)


def step_kv(n, layers, start):
    return [torch.arange(n * HEADS * DIM, dtype=torch.float32).reshape(n, HEADS, DIM) + 1000 * l + start
            for l in range(layers)]


def storage(pool):
    out = []
    for layer in range(pool.num_layers):
        k, v = pool.layer_storage(layer)
        out.append((torch.from_dlpack(k).clone(), torch.from_dlpack(v).clone()))
    return out


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_per_layer_writes_equal_one_write(layout):
    with make_pool(layout=layout) as whole, make_pool(layout=layout) as layered:
        a, b = [whole.sequence(), whole.sequence()], [layered.sequence(), layered.sequence()]
        for step in range(4):
            counts = [5, 3] if step == 0 else [1, 1]
            tokens = list(range(sum(counts)))
            ra = whole.reserve_batch(a, tokens, counts)
            rb = layered.reserve_batch(b, np.array(tokens, dtype=np.int32), counts)
            assert ra.num_reserved == rb.num_reserved == 2 and ra.slot_mapping == rb.slot_mapping
            kv = step_kv(len(tokens), 3, 10.0 * step)
            whole.write(kv, kv, ra.slot_mapping)
            for layer in range(3):
                layered.write_layer(layer, kv[layer], kv[layer], rb.slot_mapping)
            whole.commit_batch(a)
            layered.commit_batch(b)
            for (k1, v1), (k2, v2) in zip(storage(whole), storage(layered)):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)
        assert [s.committed for s in b] == [8, 6]


def test_write_layer_refusals_change_nothing():
    with make_pool() as pool, pool.sequence() as seq:
        m = seq.reserve([1, 2, 3])
        kv = step_kv(3, 1, 0.0)[0]
        pool.write_layer(0, kv, kv, m)
        before = storage(pool)
        twice = np.frombuffer(m.data, dtype=np.int64).copy()
        twice[1] = twice[0]
        with pytest.raises(kvcache.InvalidArgumentError, match="appears twice"):
            pool.write_layer(1, kv, kv, twice)
        with pytest.raises(kvcache.OutOfRangeError, match="layer"):
            pool.write_layer(3, kv, kv, m)
        with pytest.raises(kvcache.ShapeMismatchError, match="key has shape"):
            pool.write_layer(1, kv[:2], kv, m)
        for (k1, v1), (k2, v2) in zip(before, storage(pool)):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)


def test_reserve_batch_stops_at_the_first_sequence_that_does_not_fit():
    with make_pool(num_blocks=6) as pool:  # 5 usable blocks
        a, b, c = pool.sequence(), pool.sequence(), pool.sequence()
        r = pool.reserve_batch([a, b, c], list(range(30)), [8, 20, 2])
        assert r.num_reserved == 1 and (len(a), len(b), len(c)) == (8, 0, 0)
        row = r.slot_mapping.group(0).tolist()
        assert all(s >= BLOCK for s in row[:8]) and row[8:] == [-1] * 22
        pool.commit_batch([a, b, c])
        assert a.committed == 8
        r = pool.reserve_batch([a, c], [7, 8], 1)  # one token each
        assert r.num_reserved == 2 and (len(a), len(c)) == (9, 1)
        with pytest.raises(kvcache.InvalidArgumentError, match="adds up to 2"):
            pool.reserve_batch([a, c], [7, 8, 9], 1)
        with pytest.raises(kvcache.InvalidArgumentError, match=r"sequences\[1\] is sequences\[0\] again"):
            pool.reserve_batch([a, a], [7, 8], 1)
        with pytest.raises(kvcache.InvalidArgumentError, match=r"num_tokens\[0\] is -1"):
            pool.reserve_batch([a], [], [-1])
        with pytest.raises(TypeError, match=r"sequences\[1\]"):
            pool.commit_batch([a, "b"])
        assert (len(a), len(c)) == (9, 1)
