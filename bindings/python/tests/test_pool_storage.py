"""A pool whose blocks live in the caller's buffer (kvcache.Pool(storage=...), docs/allocator.md): the storage
views are slices of it, the library zeroes it, writes land there, the pool keeps it alive, and a buffer too
small fails cleanly."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")

GROUPS = [kvcache.PoolGroup("full", block_size=4, num_blocks=8)]
LAYERS = [kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=8)] * 2


def inside(view, buf):
    start, end = buf.ctypes.data, buf.ctypes.data + buf.nbytes
    t = torch.from_dlpack(view)
    return start <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= end


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_storage_views_are_slices_of_the_buffer(kind):
    need = kvcache.Pool.storage_bytes(dtype="float32", groups=GROUPS, layers=LAYERS)
    buf = np.full(need, 0xA5, dtype=np.uint8)
    storage = torch.from_numpy(buf) if kind == "torch" else buf
    with kvcache.Pool(dtype="float32", groups=GROUPS, layers=LAYERS, storage=storage) as pool:
        for layer in range(2):
            keys, values = pool.layer_storage(layer)
            assert inside(keys, buf) and inside(values, buf)
            assert not torch.from_dlpack(keys).any() and not torch.from_dlpack(values).any()  # zeroed by the library
        with pool.sequence() as seq:
            slots = seq.reserve([1, 2, 3])
            k = torch.full((3, 2, 8), 7.5)
            pool.write([k, k], [k, k], slots)
            seq.commit()
        assert (torch.from_dlpack(pool.layer_storage(1).keys) == 7.5).any()
        assert (buf.view(np.float32) == 7.5).any()  # the caller's own memory holds the tokens


def test_the_pool_keeps_its_buffer():
    need = kvcache.Pool.storage_bytes(dtype="float32", groups=GROUPS, layers=LAYERS)
    pool = kvcache.Pool(dtype="float32", groups=GROUPS, layers=LAYERS, storage=bytearray(need))
    gc.collect()  # the bytearray has no other reference: the pool's handle holds it
    assert not torch.from_dlpack(pool.layer_storage(0).keys).any()
    pool.close()


def test_a_buffer_too_small_fails_cleanly():
    need = kvcache.Pool.storage_bytes(dtype="float32", groups=GROUPS, layers=LAYERS)
    buf = np.zeros(need // 2, dtype=np.uint8)
    with pytest.raises(kvcache.OutOfMemoryError) as e:
        kvcache.Pool(dtype="float32", groups=GROUPS, layers=LAYERS, storage=buf)
    assert "allocator" in str(e.value)
    with pytest.raises(BufferError):
        kvcache.Pool(dtype="float32", groups=GROUPS, layers=LAYERS, storage=bytes(need))  # read-only
