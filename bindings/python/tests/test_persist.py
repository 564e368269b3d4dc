"""Cache files from Python: save/load/restore round trips, errors as the package's exceptions."""
import os

import numpy as np
import pytest

import kvcache


def _fill(cache, layers, tokens, seed):
    rng = np.random.default_rng(seed)
    for layer in range(layers):
        k = rng.standard_normal((2, 2, tokens, 8)).astype(np.float32)
        v = rng.standard_normal((2, 2, tokens, 8)).astype(np.float32)
        cache.update(k, v, layer)


def _same(a, b, layers):
    assert a.get_seq_length() == b.get_seq_length()
    for layer in range(layers):
        for name in ("keys", "values"):
            x = np.asarray(getattr(a.layers[layer], name))
            y = np.asarray(getattr(b.layers[layer], name))
            assert x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("make", [
    lambda: kvcache.DynamicCache(),
    lambda: kvcache.StaticCache(num_hidden_layers=2, max_cache_len=16),
    lambda: kvcache.SlidingWindowCache(num_hidden_layers=2, max_cache_len=16, sliding_window=4),
    lambda: kvcache.QuantizedCache(num_hidden_layers=2, q_group_size=8, residual_length=2),
])
def test_round_trip_then_same_updates(tmp_path, make):
    cache = make()
    _fill(cache, 2, 5, 1)
    path = tmp_path / "c.kvc"
    cache.save(path)
    loaded = kvcache.load(path)
    restored = make()
    restored.restore(str(path))
    for copy in (loaded, restored):
        _same(cache, copy, 2)
    for step in range(3):
        for c in (cache, loaded, restored):
            _fill(c, 2, 1, 10 + step)
        _same(cache, loaded, 2)
        _same(cache, restored, 2)


def test_errors(tmp_path):
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8)
    _fill(cache, 1, 3, 2)
    path = tmp_path / "c.kvc"
    cache.save(path)
    other = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=9)
    _fill(other, 1, 2, 3)
    before = np.asarray(other.layers[0].keys).copy()
    with pytest.raises(kvcache.InvalidArgumentError, match=r"layer 0: max_cache_len 8 \(file\) vs 9 \(cache\)"):
        other.restore(path)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    bad = tmp_path / "bad.kvc"
    bad.write_bytes(bytes(data))
    with pytest.raises(kvcache.IoError, match="corrupted") as info:
        other.restore(bad)
    assert isinstance(info.value, OSError) and info.value.code == kvcache.IoError.code
    bad.write_bytes(bytes(data[:100]))
    with pytest.raises(OSError):
        kvcache.load(bad)
    data = bytearray(path.read_bytes())
    data[8] = 2
    bad.write_bytes(bytes(data))
    with pytest.raises(kvcache.VersionMismatchError, match=r"format version 2 \(file\) vs 1 \(reader\)"):
        kvcache.load(bad)
    with pytest.raises(kvcache.IoError, match="cannot open"):
        kvcache.load(tmp_path / "missing.kvc")
    assert (np.asarray(other.layers[0].keys) == before).all()
    assert other.get_seq_length() == 2


def test_encoder_decoder(tmp_path):
    ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    _fill(ed.self_attention_cache, 2, 3, 4)
    _fill(ed.cross_attention_cache, 2, 5, 5)
    path = tmp_path / "ed.kvc"
    ed.save(path)
    back = kvcache.load_encoder_decoder(path)
    _same(ed.self_attention_cache, back.self_attention_cache, 2)
    _same(ed.cross_attention_cache, back.cross_attention_cache, 2)
    fresh = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    fresh.restore(path)
    _same(ed.cross_attention_cache, fresh.cross_attention_cache, 2)


def test_max_bytes_bounds_what_a_file_may_make_a_load_allocate(tmp_path):
    # Two static layers of 16 slots, 2 x 2 x 16 x (8 + 8) float32: 4 KiB each as the file declares them.
    cache = kvcache.StaticCache(num_hidden_layers=2, max_cache_len=16)
    _fill(cache, 2, 3, 6)
    path = tmp_path / "c.kvc"
    cache.save(path)
    layer = 2 * 2 * 16 * 16 * 4
    _same(cache, kvcache.load(path, max_bytes=2 * layer), 2)
    _same(cache, kvcache.load(path, max_bytes=0), 2)  # no limit
    with pytest.raises(kvcache.OutOfMemoryError,
                       match=rf"layer 1 declares {layer} bytes of key/value stores.*options->max_bytes \({2 * layer - 1}\)"):
        kvcache.load(path, max_bytes=2 * layer - 1)
    for bad in (-1, 2**64):
        with pytest.raises(kvcache.InvalidArgumentError, match=rf"max_bytes is {bad}"):
            kvcache.load(path, max_bytes=bad)
    with pytest.raises(TypeError):
        kvcache.load(path, max_bytes="1")

    ed = kvcache.EncoderDecoderCache(kvcache.load(path), kvcache.load(path))
    ed_path = tmp_path / "ed.kvc"
    ed.save(ed_path)
    with pytest.raises(kvcache.OutOfMemoryError, match="cross-attention layer 1 declares"):
        kvcache.load_encoder_decoder(ed_path, max_bytes=3 * layer)
    back = kvcache.load_encoder_decoder(ed_path, max_bytes=4 * layer)
    _same(ed.cross_attention_cache, back.cross_attention_cache, 2)
