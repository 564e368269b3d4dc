"""Views: the DLPack producer protocol, zero-copy sharing, and what happens after the next mutating call."""
from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

import kvcache
from kvcache import _lib

torch = pytest.importorskip("torch")


def filled(cache, s=3, start=0.0):
    k = np.arange(2 * s * 4, dtype=np.float32).reshape(1, 2, s, 4) + start
    return cache.update(k, k + 1000, 0), k


def test_dlpack_device_and_legacy_capsule():
    cache = kvcache.DynamicCache()
    (keys, _), _ = filled(cache)
    assert keys.__dlpack_device__() == (1, 0)
    cap = keys.__dlpack__()
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)
    t = torch.utils.dlpack.from_dlpack(cap)
    assert t.data_ptr() == keys.data_ptr and t.shape == (1, 2, 3, 4)


def test_versioned_capsule_when_consumer_asks():
    cache = kvcache.DynamicCache()
    (keys, _), k = filled(cache)
    cap = keys.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(cap)
    # numpy >= 2 asks for versioned capsules itself
    a = np.from_dlpack(keys)
    assert a.__array_interface__["data"][0] == keys.data_ptr and np.array_equal(a, k)
    legacy = keys.__dlpack__(max_version=(0, 8))
    assert "versioned" not in repr(legacy)


def test_unconsumed_capsules_release_their_reference():
    cache = kvcache.DynamicCache()
    (keys, _), _ = filled(cache)
    handle = keys.owner
    before = _refcount(handle)
    for _ in range(100):
        keys.__dlpack__()
        keys.__dlpack__(max_version=(1, 1))
    gc.collect()
    assert _refcount(handle) == before


def _refcount(obj):
    return ctypes.c_ssize_t.from_address(id(obj)).value


def test_torch_and_numpy_share_memory_with_the_cache():
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4)
    (keys, values), k = filled(cache, s=2)
    t = torch.from_dlpack(keys)
    a = np.from_dlpack(keys)
    assert t.data_ptr() == a.__array_interface__["data"][0] == keys.data_ptr
    t[0, 0, 3, 0] = 42.0  # writes go into the cache
    assert np.from_dlpack(cache.layer_view(0).keys)[0, 0, 3, 0] == 42.0


def test_after_the_next_mutating_call():
    """What the documentation promises about views once their cache has been mutated."""
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4)
    (keys, _), _ = filled(cache, s=1)
    early = torch.from_dlpack(keys)  # exported before the next mutation
    assert keys.is_valid
    new = np.full((1, 2, 1, 4), 7.0, np.float32)
    cache.update(new, new, 0)
    # 1. the view object itself is stale: exporting it again raises
    assert not keys.is_valid and "stale" in repr(keys)
    with pytest.raises(kvcache.StaleViewError):
        torch.from_dlpack(keys)
    with pytest.raises(kvcache.StaleViewError):
        np.from_dlpack(keys)
    with pytest.raises(RuntimeError):  # StaleViewError is a RuntimeError (and a KvcacheError)
        keys.__dlpack__()
    with pytest.raises(kvcache.StaleViewError):
        cache.update(keys, keys, 0)  # stale views are refused as inputs too
    # 2. a tensor exported earlier aliases the live storage: for a static layer it shows the new token
    assert torch.equal(early[0, :, 1], torch.full((2, 4), 7.0))
    # 3. failed calls invalidate views as well (the header's rule for mutating calls)
    fresh = cache.layer_view(0).keys
    with pytest.raises(IndexError):
        big = np.zeros((1, 2, 5, 4), np.float32)
        cache.update(big, big, 0)
    assert not fresh.is_valid
    # 4. const queries do not invalidate
    again = cache.layer_view(0).keys
    cache.get_seq_length()
    cache.layer_info(0)
    assert again.is_valid


def test_exported_tensor_keeps_the_cache_memory_alive():
    cache = kvcache.DynamicCache()
    (keys, _), k = filled(cache)
    t = torch.from_dlpack(keys)
    ref = weakref.ref(cache)
    del cache, keys
    gc.collect()
    assert ref() is None  # the Python object is gone ...
    assert torch.equal(t, torch.from_numpy(k))  # ... the memory is not


def test_close_makes_views_stale_but_memory_stays_valid():
    cache = kvcache.DynamicCache()
    (keys, _), k = filled(cache)
    t = torch.from_dlpack(keys)
    cache.close()
    with pytest.raises(kvcache.StaleViewError):
        torch.from_dlpack(keys)
    assert torch.equal(t, torch.from_numpy(k))


def test_copy_true_and_dl_device():
    cache = kvcache.DynamicCache()
    (keys, _), k = filled(cache)
    cap = keys.__dlpack__(max_version=(1, 1), copy=True)
    t = torch.utils.dlpack.from_dlpack(cap) if "versioned" not in repr(cap) else torch.from_dlpack(
        _CapsuleHolder(cap))
    assert t.data_ptr() != keys.data_ptr and torch.equal(t, torch.from_numpy(k))
    a = np.from_dlpack(keys, copy=True)
    assert a.__array_interface__["data"][0] != keys.data_ptr and np.array_equal(a, k)
    with pytest.raises(BufferError):
        keys.__dlpack__(dl_device=(2, 0))
    assert keys.__dlpack__(dl_device=(1, 0)) is not None
    with pytest.raises(BufferError):
        keys.__dlpack__(stream=1)


class _CapsuleHolder:
    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kwargs):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


def test_view_properties_and_array_protocol():
    cache = kvcache.DynamicCache()
    (keys, _), k = filled(cache)
    assert keys.ndim == 4 and keys.itemsize == 4 and keys.strides[-1] == 1
    assert keys.device == ("cpu", 0)
    assert isinstance(keys.owner, _lib.CacheHandle)
    assert np.array_equal(np.asarray(keys), k)
    assert np.asarray(keys, dtype=np.float64).dtype == np.float64
    assert repr(keys).startswith("View(shape=(1, 2, 3, 4), dtype=float32, device=cpu:0")


def test_inputs_from_every_producer():
    cache = kvcache.DynamicCache()
    k = np.ones((1, 1, 2, 2), np.float32)
    ro = k.copy()
    ro.flags.writeable = False  # numpy exports read-only arrays only as versioned capsules
    cache.update(ro, ro, 0)
    mv = memoryview(np.ones((1, 1, 1, 2), np.float32))  # no __dlpack__: the buffer protocol
    cache.update(mv, mv, 0)
    keys, values = cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), 0)
    cache2 = kvcache.DynamicCache()
    cache2.update(keys, values, 0)  # a kvcache View is an input too
    assert cache2.get_seq_length() == 4
    with pytest.raises(TypeError):
        cache.update("not a tensor", k, 0)
    with pytest.raises(TypeError):
        cache.update(None, k, 0)


def test_a_cache_can_be_updated_with_its_own_views():
    """View inputs are copied before the update, which may grow (move and free) the very memory they show."""
    cache = kvcache.DynamicCache()
    k = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    cache.update(k, k, 0)
    for _ in range(6):  # doubling each time forces store growth while the input points into the old store
        keys, values = cache.layer_view(0)
        cache.update(keys, values, 0)
    got = np.from_dlpack(cache.layer_view(0).keys)
    assert got.shape[2] == 3 * 2**6
    assert np.array_equal(got, np.concatenate([k] * 2**6, axis=2))


class ForeignProducer:
    """Any DLPack producer (cupy, jax, ...): only the protocol, no numpy or torch type."""

    def __init__(self, array, versioned_only=False):
        self.array, self.versioned_only, self.calls = array, versioned_only, []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(max_version)
        if self.versioned_only and max_version is None:
            raise BufferError("this producer only exports versioned capsules")
        return self.array.__dlpack__(max_version=max_version) if max_version else self.array.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("versioned_only", [False, True])
def test_any_dlpack_producer_is_an_input(versioned_only):
    k = np.arange(16, dtype=np.float32).reshape(1, 2, 2, 4)
    producer = ForeignProducer(k, versioned_only)
    cache = kvcache.DynamicCache()
    keys, values = cache.update(producer, producer, 0)
    assert np.array_equal(np.from_dlpack(keys), k) and np.array_equal(np.from_dlpack(values), k)
    assert producer.calls[-1] == ((1, 1) if versioned_only else None)
