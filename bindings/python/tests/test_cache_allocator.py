"""Caches whose K/V stores come from a Python allocator (kvcache.Cache(..., allocator=...), docs/allocator.md):
views are slices of the allocator's buffers, writes go both ways without a copy, every cache operation keeps
working, a refusing allocator leaves the cache unchanged and nothing allocated, the library keeps the
allocator until the last cache sharing it is gone, and callbacks from threads that released the GIL work."""
from __future__ import annotations

import copy
import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: TorchAllocator needs torch (scripts/setup.sh installs it)")


class Counting(kvcache.TorchAllocator):
    """A TorchAllocator that counts its calls (in `calls`, which outlives it) and can refuse after a budget."""

    def __init__(self, calls=None, budget=None, refuse=None):
        super().__init__()
        self.calls = calls if calls is not None else {"alloc": 0, "free": 0, "threads": set()}
        self.budget = budget  # allocations left before `refuse` happens (None: never)
        self.refuse = refuse or (lambda: (_ for _ in ()).throw(RuntimeError("arena full")))

    def alloc(self, nbytes, align, device):
        assert align == 256 and device == "cpu" and nbytes > 0
        if self.budget is not None:
            if self.budget == 0:
                return self.refuse()
            self.budget -= 1
        self.calls["alloc"] += 1
        self.calls["threads"].add(threading.get_ident())
        return super().alloc(nbytes, align, device)

    def free(self, address, nbytes, device):
        self.calls["free"] += 1
        super().free(address, nbytes, device)


def kv(shape, start=0.0):
    n = int(np.prod(shape))
    return (torch.arange(n, dtype=torch.float32) + start).reshape(shape)


def inside(view, arena):
    """Whether the view's whole extent lies in one live (uint8) buffer of `arena`."""
    found = arena.find(view.data_ptr)
    if found is None:
        return False
    buf, offset = found
    span = (sum((n - 1) * st for n, st in zip(view.shape, view.strides)) + 1) * view.itemsize
    return offset + span <= len(buf)


def all_views_inside(cache, arena):
    return all(inside(k, arena) and inside(v, arena) for k, v in cache if k is not None)


def same_contents(a, b):
    assert len(a) == len(b)
    for (ka, va), (kb, vb) in zip(a, b):
        assert torch.equal(torch.from_dlpack(ka), torch.from_dlpack(kb))
        assert torch.equal(torch.from_dlpack(va), torch.from_dlpack(vb))


@pytest.mark.parametrize("make_arena", [kvcache.TorchAllocator, kvcache.NumpyAllocator], ids=["torch", "numpy"])
@pytest.mark.parametrize("make_cache", [
    lambda a: kvcache.DynamicCache(allocator=a),
    lambda a: kvcache.StaticCache(num_hidden_layers=2, max_cache_len=16, allocator=a),
    lambda a: kvcache.CustomCache([kvcache.LayerSpec(kvcache.LayerKind.DYNAMIC_SLIDING, window=4),
                                   kvcache.LayerSpec(kvcache.LayerKind.STATIC_SLIDING, window=4, max_cache_len=8)], allocator=a),
], ids=["dynamic", "static", "sliding"])
def test_views_are_slices_of_the_allocator_buffers(make_arena, make_cache):
    arena = make_arena()
    cache = make_cache(arena)
    for layer in range(2):
        keys, values = cache.update(kv((1, 2, 3, 8)), kv((1, 2, 3, 8), 100), layer)
        assert inside(keys, arena) and inside(values, arena)
        assert torch.equal(torch.from_dlpack(keys)[:, :, :3], kv((1, 2, 3, 8)))
    assert len(arena.buffers) == 4  # one K and one V store per layer
    assert arena.find(1) is None
    del keys, values
    cache.close()
    del cache
    gc.collect()
    assert arena.buffers == []  # every store was given back


def test_from_tensors_allocates_at_create():
    arena = kvcache.TorchAllocator()
    cache = kvcache.DynamicCache([(kv((1, 2, 3, 4)), kv((1, 2, 3, 4), 1))] * 2, allocator=arena)
    assert len(arena.buffers) == 4 and all_views_inside(cache, arena)
    assert torch.equal(torch.from_dlpack(cache.layer_view(1).values), kv((1, 2, 3, 4), 1))


def test_writes_go_both_ways_without_a_copy():
    arena = kvcache.TorchAllocator()
    cache = kvcache.DynamicCache(allocator=arena)
    keys, _ = cache.update(kv((1, 1, 2, 4)), kv((1, 1, 2, 4)), 0)
    buf, offset = arena.find(keys.data_ptr)
    floats = buf[offset:offset + 8 * 4].view(torch.float32)
    floats[:3] = torch.tensor([-1.0, -2.0, -3.0])  # through the allocator's tensor ...
    assert torch.from_dlpack(cache.layer_view(0).keys)[0, 0, 0, :3].tolist() == [-1.0, -2.0, -3.0]
    torch.from_dlpack(cache.layer_view(0).keys)[0, 0, 1, 0] = 9.0  # ... and through the view
    assert floats[4].item() == 9.0


def test_update_crop_reorder_clone_split_match_a_cache_without_allocator():
    arena = Counting()
    cache, plain = kvcache.DynamicCache(allocator=arena), kvcache.DynamicCache()
    for c in (cache, plain):
        for step in range(3):  # 3 x 40 tokens: grows past the first store
            for layer in range(2):
                c.update(kv((3, 2, 40, 8), step * 1000 + layer), kv((3, 2, 40, 8), -step), layer)
    same_contents(cache, plain)
    assert all_views_inside(cache, arena)
    assert arena.calls["alloc"] > 4 and arena.calls["alloc"] - arena.calls["free"] == 4  # grown stores were freed
    for c in (cache, plain):
        c.crop(-7)
        c.reorder_cache([2, 0, 1])
    same_contents(cache, plain)
    assert all_views_inside(cache, arena)
    clone = cache.clone()
    same_contents(clone, plain)
    assert all_views_inside(clone, arena) and len(arena.buffers) == 8
    assert clone.layer_view(0).keys.data_ptr != cache.layer_view(0).keys.data_ptr
    splits = cache.batch_split(3, 1)
    assert all(all_views_inside(s, arena) for s in splits)
    merged = kvcache.DynamicCache.from_batch_splits(splits)
    same_contents(merged, plain)
    assert all_views_inside(merged, arena)
    cache.reset()
    cache.reserve(300)
    assert all_views_inside(clone, arena)


@pytest.mark.parametrize("refuse,cause", [
    (lambda: (_ for _ in ()).throw(RuntimeError("arena full")), RuntimeError),
    (lambda: 0, None),                       # 0: no memory, without an exception
    (lambda: "not an address", TypeError),   # a result that is not an int
], ids=["raises", "zero", "not-int"])
def test_a_refusing_allocator_fails_cleanly(refuse, cause):
    calls = {"alloc": 0, "free": 0, "threads": set()}
    arena = Counting(calls, budget=1, refuse=refuse)  # the first store's K, then nothing
    cache = kvcache.DynamicCache(allocator=arena)
    with pytest.raises(kvcache.OutOfMemoryError) as e:
        cache.update(kv((1, 2, 3, 4)), kv((1, 2, 3, 4)), 0)
    assert "allocator" in str(e.value)
    if cause is None:
        assert e.value.__cause__ is None
    else:
        assert isinstance(e.value.__cause__, cause)
        assert cause.__name__ in str(e.value)
    assert len(cache) in (0, 1) and not (len(cache) and cache.layer_info(0).is_initialized)
    assert cache.get_seq_length() == 0
    assert calls["alloc"] == calls["free"] == 1 and arena.buffers == []  # the K store was given back

    arena.budget = 2  # room for one layer: the growth of layer 0 is refused
    cache.update(kv((1, 2, 60, 4)), kv((1, 2, 60, 4)), 0)
    before = [(torch.from_dlpack(k).clone(), torch.from_dlpack(v).clone()) for k, v in cache]
    held = list(arena.buffers)
    with pytest.raises(kvcache.OutOfMemoryError):
        cache.update(kv((1, 2, 10, 4), 7), kv((1, 2, 10, 4), 7), 0)
    assert cache.get_seq_length() == 60 and [b.data_ptr() for b in arena.buffers] == [b.data_ptr() for b in held]
    for (k0, v0), (k, v) in zip(before, cache):
        assert torch.equal(k0, torch.from_dlpack(k)) and torch.equal(v0, torch.from_dlpack(v))
    with pytest.raises(kvcache.OutOfMemoryError):
        cache.clone()
    assert len(arena.buffers) == 2 and cache.get_seq_length() == 60
    arena.budget = None
    cache.update(kv((1, 2, 10, 4), 7), kv((1, 2, 10, 4), 7), 0)  # the same call works once memory comes
    assert cache.get_seq_length() == 70 and all_views_inside(cache, arena)


def test_an_object_without_alloc_and_free_is_refused():
    with pytest.raises(TypeError, match="alloc"):
        kvcache.DynamicCache(allocator=object())
    with pytest.raises(TypeError):
        kvcache.Allocator()  # abstract


def test_the_library_keeps_the_allocator_until_the_last_sharer_is_gone():
    calls = {"alloc": 0, "free": 0, "threads": set()}
    arena = Counting(calls)
    alive = weakref.ref(arena)
    base = sys.getrefcount(arena)
    cache = kvcache.DynamicCache(allocator=arena)
    assert sys.getrefcount(arena) == base + 1  # one reference per create, not per clone
    cache.update(kv((2, 1, 3, 4)), kv((2, 1, 3, 4)), 0)
    clone = cache.clone()
    splits = cache.batch_split(2, 1)
    exported = torch.from_dlpack(splits[1].layer_view(0).keys)
    assert sys.getrefcount(arena) == base + 1
    with pytest.raises(kvcache.InvalidArgumentError):  # a create that fails keeps no reference
        kvcache.StaticCache(num_hidden_layers=1, max_cache_len=-1, allocator=arena)
    assert sys.getrefcount(arena) == base + 1
    del arena
    del cache
    gc.collect()
    assert alive() is not None  # the clone and the splits share it
    del clone, splits
    gc.collect()
    assert alive() is not None  # the exported tensor keeps its split, and so the allocator
    del exported
    gc.collect()
    assert alive() is None  # released once: a second release would have crashed, none would keep it alive
    assert calls["alloc"] == calls["free"] == 8  # cache, clone and two splits: one K and one V store each


def test_threads_that_released_the_gil_call_the_allocator():
    calls = {"alloc": 0, "free": 0, "threads": set()}
    arena = Counting(calls)
    first = kvcache.DynamicCache(allocator=arena)
    first.update(kv((1, 2, 1, 64)), kv((1, 2, 1, 64)), 0)
    caches = [first, first.clone()]  # distinct handles sharing the allocator, each used by one thread
    barrier = threading.Barrier(2)
    errors = []

    def run(cache, start):
        try:
            barrier.wait()
            for step in range(40):  # grows the store again and again: allocations inside updates without the GIL
                cache.update(kv((1, 2, 16, 64), start + step), kv((1, 2, 16, 64), start), 0)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c, 1000 * i)) for i, c in enumerate(caches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert {t.ident for t in threads} <= calls["threads"]
    for i, c in enumerate(caches):
        assert c.get_seq_length() == 1 + 40 * 16 and all_views_inside(c, arena)
        keys = torch.from_dlpack(c.layer_view(0).keys)
        assert torch.equal(keys[:, :, -16:], kv((1, 2, 16, 64), 1000 * i + 39))


def test_load_puts_the_stores_in_the_allocator(tmp_path):
    source = kvcache.DynamicCache()
    source.update(kv((1, 2, 5, 4)), kv((1, 2, 5, 4), 50), 0)
    path = tmp_path / "c.kvc"
    source.save(path)
    arena = kvcache.TorchAllocator()
    loaded = kvcache.load(path, allocator=arena)
    same_contents(loaded, source)
    assert all_views_inside(loaded, arena)
    refusing = Counting(budget=0)
    base = sys.getrefcount(refusing)
    with pytest.raises(kvcache.OutOfMemoryError, match="arena full"):
        kvcache.load(path, allocator=refusing)
    assert sys.getrefcount(refusing) == base and refusing.buffers == []


def test_the_drop_in_caches_return_slices_of_the_allocator_tensors():
    kvt = pytest.importorskip("kvcache.transformers", reason="SKIPPED: the drop-in caches need transformers")
    transformers = pytest.importorskip("transformers")
    arena = kvcache.TorchAllocator()
    dynamic = kvt.DynamicCache(allocator=arena)
    keys, values = dynamic.update(kv((1, 2, 3, 4)), kv((1, 2, 3, 4), 1), 0)
    assert arena.find(keys.data_ptr()) is not None and arena.find(values.data_ptr()) is not None
    assert torch.equal(keys, kv((1, 2, 3, 4)))
    clone = copy.deepcopy(dynamic)  # a clone: the same allocator
    assert arena.find(clone.layers[0].keys.data_ptr()) is not None and len(arena.buffers) == 4
    config = transformers.PretrainedConfig(num_hidden_layers=1, layer_types=["full_attention"], num_attention_heads=2,
                                           num_key_value_heads=2, head_dim=4, hidden_size=8)
    static = kvt.StaticCache(config, max_cache_len=8, allocator=arena)
    keys, _ = static.update(kv((1, 2, 3, 4)), kv((1, 2, 3, 4)), 0)
    buf, offset = arena.find(keys.data_ptr())
    assert offset + keys.numel() * keys.element_size() <= len(buf)
    assert torch.equal(keys[:, :, :3], kv((1, 2, 3, 4)))


def _tiny_config(transformers):
    return transformers.PretrainedConfig(num_hidden_layers=1, layer_types=["full_attention"], num_attention_heads=2,
                                         num_key_value_heads=2, head_dim=4, hidden_size=8)


# Each of the other drop-in classes, made with the given allocator (None: without); returns (cache, the cache whose
# layer 0 takes the updates). Quantized layers keep their records in the library: only the residual store is the
# allocator's.
_OTHER_DROP_INS = {
    "OffloadedCache": lambda kvt, cfg, a: kvt.OffloadedCache(allocator=a),
    "QuantizedCache": lambda kvt, cfg, a: kvt.QuantizedCache("quanto", cfg, q_group_size=8, allocator=a),
    "QuantoQuantizedCache": lambda kvt, cfg, a: kvt.QuantoQuantizedCache(cfg, q_group_size=8, allocator=a),
    "HQQQuantizedCache": lambda kvt, cfg, a: kvt.HQQQuantizedCache(cfg, q_group_size=8, allocator=a),
    "Cache": lambda kvt, cfg, a: kvt.Cache(layer_class_to_replicate=kvt.DynamicLayer, allocator=a),
    "EncoderDecoderCache": lambda kvt, cfg, a: kvt.EncoderDecoderCache(config=cfg, allocator=a),
}


@pytest.mark.parametrize("name", sorted(_OTHER_DROP_INS))
def test_the_other_drop_in_caches_take_an_allocator(name):
    kvt = pytest.importorskip("kvcache.transformers", reason="SKIPPED: the drop-in caches need transformers")
    transformers = pytest.importorskip("transformers")
    if not hasattr(kvt, name):
        pytest.skip(f"SKIPPED: this transformers release has no {name}")
    config = _tiny_config(transformers)
    arena = kvcache.TorchAllocator()
    outputs = []
    for allocator in (arena, None):
        cache = _OTHER_DROP_INS[name](kvt, config, allocator)
        target = cache.self_attention_cache if name == "EncoderDecoderCache" else cache
        steps = []
        for n, start in ((3, 0), (1, 30), (1, 40)):
            keys, values = target.update(kv((1, 2, n, 4), start), kv((1, 2, n, 4), start + 100), 0)
            steps.append((keys.clone(), values.clone()))  # views are valid until the next update
        outputs.append(steps)
        if allocator is not None:
            assert arena.buffers, f"{name} made no store in the allocator"
            if "Quant" not in name:  # the returned tensors are the stores themselves
                assert arena.find(keys.data_ptr()) is not None and arena.find(values.data_ptr()) is not None
        del cache, target, keys, values
        gc.collect()
    for (k, v), (k0, v0) in zip(*outputs):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert arena.buffers == []  # every store was given back


def test_an_encoder_decoder_cache_takes_an_allocator_only_with_config():
    kvt = pytest.importorskip("kvcache.transformers", reason="SKIPPED: the drop-in caches need transformers")
    with pytest.raises(ValueError, match="allocator= goes with config="):
        kvt.EncoderDecoderCache(kvt.DynamicCache(), kvt.DynamicCache(), allocator=kvcache.TorchAllocator())
