"""Bad input for every entry point: the documented exception, the C code and message, and no change."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kvcache
from kvcache import LayerKind, LayerSpec
from conftest import assert_unchanged, snapshot


def f32(*shape, value=1.0):
    return np.full(shape, value, np.float32)


@pytest.fixture
def dyn():
    cache = kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"],
                                 sliding_window=3)
    x = f32(2, 2, 4, 4)
    cache.update_all([x, x], [x, x])
    return cache


@pytest.fixture
def static():
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4)
    cache.update(f32(1, 2, 2, 4), f32(1, 2, 2, 4), 0)
    return cache


def check(cache, fn, exc, code=None, match=None):
    before = snapshot(cache)
    with pytest.raises(exc, match=match) as info:
        fn()
    if code is not None:
        assert isinstance(info.value, kvcache.KvcacheError)
        assert info.value.code == code
        assert info.value.code_name == kvcache._lib.kvc_code_name(code)
        assert str(info.value) == info.value.message and info.value.message
    assert_unchanged(before, cache)
    return info.value


E = kvcache._lib


def test_update_errors(dyn):
    e = check(dyn, lambda: dyn.update(f32(2, 3, 1, 4), f32(2, 3, 1, 4), 0), ValueError, E.KVC_ERROR_SHAPE_MISMATCH,
              "num_kv_heads")
    assert isinstance(e, kvcache.ShapeMismatchError)
    check(dyn, lambda: dyn.update(f32(2, 2, 1, 4).astype(np.float16), f32(2, 2, 1, 4).astype(np.float16), 0),
          TypeError, E.KVC_ERROR_DTYPE_MISMATCH)
    check(dyn, lambda: dyn.update(np.ones((2, 2, 1, 4)), np.ones((2, 2, 1, 4)), 0), TypeError)
    check(dyn, lambda: dyn.update(f32(2, 2, 4), f32(2, 2, 4), 0), ValueError, E.KVC_ERROR_SHAPE_MISMATCH)
    check(dyn, lambda: dyn.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), -1), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), 2), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.update(f32(2, 2, 1, 4), "x", 0), TypeError)
    check(dyn, lambda: dyn.update(f32(2, 2, 1, 4), f32(2, 2, 2, 4), 0), kvcache.KvcacheError)


def test_update_all_is_all_or_nothing(dyn):
    good, bad = f32(2, 2, 1, 4), f32(2, 5, 1, 4)
    check(dyn, lambda: dyn.update_all([good, bad], [good, bad]), ValueError, E.KVC_ERROR_SHAPE_MISMATCH)
    check(dyn, lambda: dyn.update_all([good], [good, good]), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.update_all(3, [good]), TypeError)


def test_static_overflow_and_positions(static):
    e = check(static, lambda: static.update(f32(1, 2, 3, 4), f32(1, 2, 3, 4), 0), IndexError,
              E.KVC_ERROR_OUT_OF_RANGE, "overflow")
    assert isinstance(e, kvcache.OutOfRangeError)
    check(static, lambda: static.update(f32(1, 2, 1, 4), f32(1, 2, 1, 4), 0, {"cache_position": [9]}), IndexError,
          E.KVC_ERROR_OUT_OF_RANGE)
    check(static, lambda: static.update(f32(1, 2, 1, 4), f32(1, 2, 1, 4), 0, {"cache_position": [1, 2]}),
          kvcache.KvcacheError)
    check(static, lambda: static.update(f32(1, 2, 1, 4), f32(1, 2, 1, 4), 0, {"cache_position": ["a"]}), TypeError)


def test_crop_errors(dyn, static):
    # transformers 5.23's static layers had no crop; a cache following that release keeps the refusal
    old = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4, transformers_release=52300)
    old.update(f32(1, 2, 1, 4), f32(1, 2, 1, 4), 0)
    e = check(old, lambda: old.crop(-1), AttributeError, E.KVC_ERROR_UNSUPPORTED)
    assert isinstance(e, kvcache.UnsupportedError)
    check(dyn, lambda: dyn.crop(-1), RuntimeError, E.KVC_ERROR_INVALID_STATE)  # window reached, no recording
    check(dyn, lambda: dyn.crop("1"), TypeError)


def test_batch_operation_errors(dyn, static):
    check(dyn, lambda: dyn.reorder_cache([0, 2]), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.reorder_cache([-1, 0]), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.reorder_cache(np.array([0.5, 1.0])), TypeError)
    check(dyn, lambda: dyn.reorder_cache(np.zeros((2, 2), np.int64)), ValueError)
    check(dyn, lambda: dyn.reorder_cache(["x"]), TypeError)
    check(dyn, lambda: dyn.batch_select_indices([5]), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.batch_repeat_interleave(0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(static, lambda: static.batch_repeat_interleave(2), AttributeError, E.KVC_ERROR_UNSUPPORTED)
    check(static, lambda: static.batch_select_indices([0]), AttributeError, E.KVC_ERROR_UNSUPPORTED)
    check(dyn, lambda: dyn.batch_split(3, 1), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.batch_split(2, 0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    other = kvcache.DynamicCache(num_hidden_layers=2)
    other.update_all([f32(1, 2, 1, 4)] * 2, [f32(1, 2, 1, 4)] * 2)
    check(dyn, lambda: kvcache.DynamicCache.from_batch_splits([dyn, other]), ValueError,
          E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: kvcache.DynamicCache.from_batch_splits([dyn, "x"]), TypeError)
    empty = kvcache.DynamicCache()
    check(empty, lambda: empty.batch_split(1, 1), RuntimeError, E.KVC_ERROR_INVALID_STATE)


def test_query_errors(dyn):
    check(dyn, lambda: dyn.layer_info(7), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.layer_view(7), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.get_mask_sizes(-1, 0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.get_usable_length(-1, 0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    lazy = kvcache.DynamicCache()
    lazy.update(f32(1, 1, 1, 2), f32(1, 1, 1, 2), 1)
    check(lazy, lambda: lazy.layer_view(0), RuntimeError, E.KVC_ERROR_INVALID_STATE)


def test_reserve_and_early_initialization_errors(dyn):
    check(dyn, lambda: dyn.reserve(-1), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    fresh = kvcache.StaticCache(num_hidden_layers=2, max_cache_len=4)
    check(fresh, lambda: fresh.early_initialization(0, 2, 4, "float32"), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(fresh, lambda: fresh.early_initialization(1, 2, 4, "int8"), TypeError)
    check(fresh, lambda: fresh.early_initialization(1, [2], 4, "float32"), ValueError)


def test_creation_errors():
    with pytest.raises(ValueError) as info:
        kvcache.StaticCache(num_hidden_layers=1, max_cache_len=0)
    assert info.value.code == E.KVC_ERROR_INVALID_ARGUMENT and "max_cache_len" in str(info.value)
    with pytest.raises(TypeError):
        kvcache.StaticCache(num_hidden_layers=1)
    with pytest.raises(ValueError, match="sliding_window"):
        kvcache.SlidingWindowCache(num_hidden_layers=1, max_cache_len=4)
    with pytest.raises(ValueError):
        kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention", "weird"])
    with pytest.raises(ValueError):
        kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention"])
    with pytest.raises(ValueError):
        kvcache.CustomCache([LayerSpec(LayerKind.DYNAMIC_SLIDING, window=0)])
    with pytest.raises(kvcache.NoDeviceError) as info:
        kvcache.DynamicCache(device="cuda:0")
    assert isinstance(info.value, RuntimeError) and info.value.code == E.KVC_ERROR_NO_DEVICE
    with pytest.raises(ValueError):
        kvcache.DynamicCache(device="tpu")
    with pytest.raises(ValueError):
        kvcache.QuantizedCache("bogus", num_hidden_layers=1)
    with pytest.raises(ValueError):
        kvcache.DynamicCache.from_legacy_cache([(f32(1, 1, 1, 2), f32(1, 2, 1, 2))])


def test_encoder_decoder_errors():
    static_pair = kvcache.EncoderDecoderCache(kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4),
                                              kvcache.DynamicCache())
    with pytest.raises(AttributeError) as info:
        static_pair.batch_repeat_interleave(2)
    assert info.value.code == E.KVC_ERROR_UNSUPPORTED
    ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    with pytest.raises(kvcache.KvcacheError):
        ed.update_cross(None, None, 0)  # not updated yet: key and value are required
    assert ed.is_updated == {}
    ed.update_cross(f32(1, 1, 2, 2), f32(1, 1, 2, 2), 0)
    with pytest.raises(IndexError):
        ed.reorder_cache([3])
    assert ed.cross_attention_cache.layer_info(0).batch_size == 1
    with pytest.raises(TypeError):
        kvcache.EncoderDecoderCache(kvcache.DynamicCache(), "x")


def test_offload_and_state_errors(dyn):
    check(dyn, lambda: dyn.offload(9), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.prefetch(9), IndexError, E.KVC_ERROR_OUT_OF_RANGE)
    check(dyn, lambda: dyn.update_conv_state(f32(2, 4, 3), 0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.update_recurrent_state(f32(2, 4, 3), 0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.get_conv_state(0), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)
    check(dyn, lambda: dyn.has_previous_state(), ValueError, E.KVC_ERROR_INVALID_ARGUMENT)


def test_closed_cache_raises_value_error(dyn):
    dyn.close()
    for fn in (lambda: dyn.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), 0), lambda: dyn.get_seq_length(),
               lambda: dyn.crop(-1), lambda: dyn.clone(), lambda: len(dyn)):
        with pytest.raises(ValueError, match="closed"):
            fn()


def test_a_cache_is_used_by_one_thread_at_a_time():
    """The GIL is released inside C calls; a second thread entering the same cache is refused, not raced."""
    cache = kvcache.DynamicCache()
    big = np.ones((1, 8, 1 << 16, 64), np.float32)  # a long copy keeps the first thread inside C
    errors, done = [], threading.Event()

    def writer():
        try:
            for _ in range(20):
                cache.update(big, big, 0)
                cache.crop(-(1 << 16))
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    refused = 0
    while not done.is_set():
        try:
            cache.get_seq_length(0)
        except kvcache.BusyError as e:
            assert "one thread at a time" in str(e) and e.code == kvcache.BusyError.code
            refused += 1
    t.join()
    assert not errors
    assert refused > 0
    # distinct caches are independent: two threads, two caches, no refusal
    results = []

    def own():
        c = kvcache.DynamicCache()
        for _ in range(50):
            c.update(big[:, :, :1024], big[:, :, :1024], 0)
        results.append(c.get_seq_length())

    threads = [threading.Thread(target=own) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [50 * 1024, 50 * 1024]


def test_busy_is_its_own_code_and_still_an_invalid_state():
    """KVC_ERROR_BUSY (13, since 0.7): a second thread on one handle. Code that caught InvalidStateError still does."""
    assert kvcache.BusyError.code == 13 == kvcache._lib.KVC_ERROR_BUSY
    assert issubclass(kvcache.BusyError, kvcache.InvalidStateError)
    assert issubclass(kvcache.BusyError, RuntimeError) and issubclass(kvcache.BusyError, kvcache.KvcacheError)
    assert kvcache._lib.kvc_code_name(13) == "KVC_ERROR_BUSY"
