"""Every cache class and method over numpy arrays and torch CPU tensors."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import kvcache
from kvcache import LayerKind, LayerSpec


def kv(xp, b=1, h=2, s=3, d=4, start=0.0, dtype="float32"):
    return xp.tensor((b, h, s, d), start, dtype), xp.tensor((b, h, s, d), 1000.0 + start, dtype)


def test_version_and_features():
    assert kvcache.__version__ == kvcache.version() == kvcache._lib.kvc_version_string()
    assert kvcache.__version__.count(".") == 2
    assert kvcache._lib.kvc_version() // 10000 == kvcache._lib.KVC_VERSION_MAJOR
    assert "cpu" in kvcache.features()


def test_dynamic_update_returns_all_tokens_zero_copy(xp):
    cache = kvcache.DynamicCache()
    k, v = kv(xp, s=3)
    keys, values = cache.update(k, v, 0)
    assert keys.shape == (1, 2, 3, 4) and values.shape == (1, 2, 3, 4)
    assert keys.dtype == "float32" and keys.device == ("cpu", 0)
    tk = xp.from_view(keys)
    assert xp.equal(tk, k)
    assert xp.ptr(tk) == keys.data_ptr  # the consumer's tensor is the cache's memory
    # the stored layer view is the same memory as the returned view
    assert cache.layer_view(0).keys.data_ptr == xp.ptr(xp.from_view(cache.layer_view(0).keys))
    k2, v2 = kv(xp, s=1, start=500.0)
    keys2, values2 = cache.update(k2, v2, 0)
    assert keys2.shape == (1, 2, 4, 4)
    got = np.asarray(xp.from_view(keys2))
    assert np.array_equal(got[:, :, :3], np.asarray(k)) and np.array_equal(got[:, :, 3:], np.asarray(k2))
    assert cache.get_seq_length() == 4 and len(cache) == 1
    assert cache.get_mask_sizes(1, 0) == (5, 0)
    assert cache.get_max_length() == -1 and cache.get_max_cache_shape(0) == -1


def test_lazy_dynamic_cache_grows_layers(xp):
    cache = kvcache.DynamicCache()
    assert len(cache) == 0 and cache.get_seq_length(5) == 0 and cache.get_mask_sizes(3, 7) == (3, 0)
    k, v = kv(xp)
    cache.update(k, v, 2)
    assert len(cache) == 3
    assert not cache.layer_info(0).is_initialized and cache.layer_info(2).is_initialized
    assert cache.layers[0].keys is None
    assert cache.layers[2].keys.shape == (1, 2, 3, 4)


def test_dynamic_with_config_sliding_and_chunked(xp):
    cache = kvcache.DynamicCache(num_hidden_layers=3, layer_types=["full_attention", "sliding_attention",
                                                                   "chunked_attention"],
                                 sliding_window=4, attention_chunk_size=3)
    kinds = [layer.kind for layer in cache.layers]
    assert kinds == [LayerKind.DYNAMIC, LayerKind.DYNAMIC_SLIDING, LayerKind.DYNAMIC_CHUNKED]
    k, v = kv(xp, s=6)
    outs = [cache.update(k, v, i) for i in range(3)]
    assert [o.keys.shape[2] for o in outs] == [6, 6, 6]
    assert [cache.layer_view(i).keys.shape[2] for i in range(3)] == [6, 3, 2]
    assert cache.is_sliding == [False, True, True]
    assert cache.layer_info(2).is_chunked
    assert cache.get_max_length(1) == 4 and cache.get_max_length() == 4
    assert cache.get_mask_sizes(1, 1) == (4, 3)
    assert cache.get_seq_length(1) == 6


def test_transformers_config_object_is_accepted():
    transformers = pytest.importorskip("transformers")
    config = transformers.Gemma2Config(num_hidden_layers=4, sliding_window=8, head_dim=4, hidden_size=16,
                                       num_attention_heads=2, num_key_value_heads=1)
    cache = kvcache.DynamicCache(config=config)
    assert [layer.kind for layer in cache.layers] == [LayerKind.DYNAMIC_SLIDING, LayerKind.DYNAMIC] * 2
    static = kvcache.StaticCache(config, max_cache_len=16)
    assert [layer.kind for layer in static.layers] == [LayerKind.STATIC_SLIDING, LayerKind.STATIC] * 2
    assert static.get_max_length(0) == 8 and static.get_max_length(1) == 16


def test_static_cache(xp):
    cache = kvcache.StaticCache(num_hidden_layers=2, max_cache_len=8)
    assert cache.batch_size == -1 and not cache.is_initialized
    k, v = kv(xp, s=3)
    keys, _ = cache.update(k, v, 0)
    assert keys.shape == (1, 2, 8, 4)  # the whole buffer
    t = np.asarray(xp.from_view(keys))
    assert np.array_equal(t[:, :, :3], np.asarray(k)) and not t[:, :, 3:].any()
    assert cache.get_seq_length(0) == 3 and cache.get_seq_length(1) == 0
    assert cache.get_mask_sizes(1, 0) == (8, 0)
    assert cache.batch_size == 1
    assert cache.is_compileable
    # explicit cache_position (transformers 4.57 static API)
    k1, v1 = kv(xp, s=1, start=77.0)
    cache.update(k1, v1, 0, {"cache_position": [6]})
    got = np.asarray(xp.from_view(cache.layer_view(0).keys))
    assert np.array_equal(got[:, :, 6:7], np.asarray(k1))
    assert cache.get_seq_length(0) == 7


def test_static_sliding_and_hybrid_presets(xp):
    sw = kvcache.SlidingWindowCache(num_hidden_layers=2, sliding_window=4, max_cache_len=16)
    assert [layer.kind for layer in sw.layers] == [LayerKind.STATIC_SLIDING] * 2
    hy = kvcache.HybridCache(num_hidden_layers=4, sliding_window=4, max_cache_len=16, sliding_window_pattern=2)
    assert [layer.kind for layer in hy.layers] == [LayerKind.STATIC_SLIDING, LayerKind.STATIC] * 2
    hc = kvcache.HybridChunkedCache(num_hidden_layers=2, attention_chunk_size=4, max_cache_len=16)
    assert [layer.kind for layer in hc.layers] == [LayerKind.STATIC_CHUNKED, LayerKind.STATIC]
    k, v = kv(xp, s=6)
    assert sw.update(k, v, 0).keys.shape[2] == 6  # a long prefill returns the whole prompt
    assert sw.layer_view(0).keys.shape[2] == 4
    assert np.array_equal(np.asarray(xp.from_view(sw.layer_view(0).keys)), np.asarray(k)[:, :, 2:])


def test_custom_cache_every_lossless_kind(xp):
    specs = [LayerSpec(LayerKind.DYNAMIC), LayerSpec(LayerKind.DYNAMIC_SLIDING, window=3),
             LayerSpec(LayerKind.DYNAMIC_CHUNKED, window=3), LayerSpec(LayerKind.STATIC, max_cache_len=6),
             LayerSpec(LayerKind.STATIC_SLIDING, window=3, max_cache_len=6),
             LayerSpec(LayerKind.STATIC_CHUNKED, window=3, max_cache_len=6)]
    cache = kvcache.CustomCache(specs)
    assert [layer.kind for layer in cache.layers] == [s.kind for s in specs]
    k, v = kv(xp, s=2)
    outs = cache.update_all([k] * 6, [v] * 6)
    assert [o.keys.shape[2] for o in outs] == [2, 2, 2, 6, 3, 3]
    assert [cache.get_seq_length(i) for i in range(6)] == [2] * 6
    assert "CustomCache(layers=6" in repr(cache)


def test_crop_reorder_repeat_select(xp):
    cache = kvcache.DynamicCache()
    k, v = kv(xp, b=3, s=5)
    cache.update(k, v, 0)
    cache.crop(-2)
    assert cache.get_seq_length() == 3
    cache.crop(2)  # legacy absolute length
    assert cache.get_seq_length() == 2
    base = np.asarray(k)[:, :, :2]
    cache.reorder_cache(xp.index([2, 0, 0]))
    got = np.asarray(xp.from_view(cache.layer_view(0).keys))
    assert np.array_equal(got, base[[2, 0, 0]])
    cache.batch_select_indices([0, 2])
    got = np.asarray(xp.from_view(cache.layer_view(0).keys))
    assert np.array_equal(got, base[[2, 0]])
    cache.batch_repeat_interleave(2)
    got = np.asarray(xp.from_view(cache.layer_view(0).keys))
    assert np.array_equal(got, base[[2, 2, 0, 0]])
    assert cache.layer_info(0).batch_size == 4


def test_past_recording_and_crop_on_sliding(xp):
    cache = kvcache.DynamicCache(num_hidden_layers=1, sliding_window=3)
    k, v = kv(xp, s=4)
    cache.update(k, v, 0)
    with pytest.raises(RuntimeError):
        cache.crop(-1)  # the window was reached without past recording
    cache.activate_past_recording()
    assert cache.layer_info(0).records_past
    k1, v1 = kv(xp, s=2, start=100.0)
    cache.update(k1, v1, 0)
    cache.crop(-1)
    assert cache.get_seq_length(0) == 5


def test_batch_split_and_from_batch_splits(xp):
    cache = kvcache.DynamicCache(num_hidden_layers=2)
    k, v = kv(xp, b=4, s=2)
    cache.update_all([k, k], [v, v])
    splits = cache.batch_split(4, 3)
    assert [s.layer_info(0).batch_size for s in splits] == [3, 1]
    assert all(type(s) is kvcache.DynamicCache for s in splits)
    merged = kvcache.DynamicCache.from_batch_splits(splits)
    assert np.array_equal(np.asarray(xp.from_view(merged.layer_view(1).values)), np.asarray(v))
    with pytest.raises(ValueError):
        cache.batch_split(5, 2)  # full_batch_size must be the batch size


def test_reset_reserve_memory_early_init(xp):
    cache = kvcache.DynamicCache(num_hidden_layers=2)
    cache.early_initialization(batch_size=1, num_heads=2, head_dim=4, dtype="float32")
    assert cache.is_initialized and cache.get_seq_length() == 0
    cache.reserve(64)
    before = cache.memory()
    k, v = kv(xp, s=3)
    cache.update(k, v, 0)
    after = cache.memory()
    assert after.bytes_reserved == before.bytes_reserved  # reserved: no growth
    assert after.bytes_used == 2 * 3 * 2 * 4 * 4
    cache.reset()
    assert cache.get_seq_length() == 0
    static = kvcache.StaticCache(num_hidden_layers=2, max_cache_len=4)
    static.early_initialization(2, [2, 1], [4, 8], dtype="bfloat16")
    assert static.layer_info(1).num_kv_heads == 1 and static.layer_info(1).k_head_dim == 8
    assert static.layer_info(0).dtype == kvcache.Dtype.BFLOAT16


def test_deepcopy_clone_are_independent(xp):
    cache = kvcache.DynamicCache()
    k, v = kv(xp, s=2)
    cache.update(k, v, 0)
    dup = copy.deepcopy(cache)
    assert type(dup) is kvcache.DynamicCache and dup._handle is not cache._handle
    k1, v1 = kv(xp, s=1, start=9.0)
    dup.update(k1, v1, 0)
    assert cache.get_seq_length() == 2 and dup.get_seq_length() == 3
    assert copy.copy(cache).get_seq_length() == 2
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(cache)


def test_legacy_format_round_trip(xp):
    k, v = kv(xp, s=2)
    cache = kvcache.DynamicCache.from_legacy_cache([(k, v), (k, v)])
    assert len(cache) == 2 and cache.get_seq_length(1) == 2
    legacy = cache.to_legacy_cache()
    assert len(legacy) == 2 and xp.equal(xp.from_view(legacy[1].values), v)
    assert [pair.keys.shape for pair in cache] == [(1, 2, 2, 4)] * 2


def test_dtypes_float16_bfloat16(xp):
    cache = kvcache.DynamicCache()
    k, v = kv(xp, dtype="float16")
    assert cache.update(k, v, 0).keys.dtype == "float16"
    assert cache.layer_info(0).dtype == kvcache.Dtype.FLOAT16
    torch = pytest.importorskip("torch")
    c2 = kvcache.DynamicCache()
    kb = torch.randn(1, 2, 3, 4).to(torch.bfloat16)
    out = c2.update(kb, kb, 0)
    assert out.keys.dtype == "bfloat16" and torch.equal(torch.from_dlpack(out.keys), kb)


def test_non_contiguous_and_broadcast_inputs():
    torch = pytest.importorskip("torch")
    cache = kvcache.DynamicCache()
    base = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).reshape(1, 2, 3, 8)
    k = base[..., ::2]  # strided view
    v = torch.ones(1, 1, 3, 4).expand(1, 2, 3, 4)  # zero strides
    keys, values = cache.update(k, v, 0)
    assert torch.equal(torch.from_dlpack(keys), k) and torch.equal(torch.from_dlpack(values), v)
    kn = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    c2 = kvcache.DynamicCache()
    assert np.array_equal(np.from_dlpack(c2.update(kn, kn, 0).keys), kn)


def test_layer_objects_and_repr(xp):
    cache = kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"],
                                 sliding_window=4)
    k, v = kv(xp)
    layer = cache.layers[1]
    assert layer.keys is None and not layer.is_initialized
    layer.update(k, v)
    assert layer.get_seq_length() == 3 and layer.get_max_length() == 4 and layer.get_mask_sizes(1) == (4, 0)
    assert layer.is_sliding and not layer.is_compileable and layer.index == 1
    assert "dynamic_sliding" in repr(layer)
    r = repr(cache)
    assert r.startswith("DynamicCache(layers=2 [dynamic, dynamic_sliding(4)]") and "kv_heads=2" in r
    assert repr(kvcache.DynamicCache()) == "DynamicCache(layers=0)"


def test_usable_length_and_info_fields():
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=6)
    x = np.zeros((1, 1, 4, 2), np.float32)
    cache.update(x, x, 0)
    assert cache.get_usable_length(3, 0) == 3  # bounded layer: 6 - 3
    assert cache.get_usable_length(1, 0) == 4
    info = cache.layer_info(0)
    assert (info.kind, info.max_cache_len, info.capacity, info.stored_length) == (LayerKind.STATIC, 6, 6, 6)


def test_context_manager_close():
    with kvcache.DynamicCache() as cache:
        x = np.zeros((1, 1, 1, 2), np.float32)
        view = cache.update(x, x, 0).keys
    assert cache.closed and "closed" in repr(cache)
    with pytest.raises(ValueError):
        cache.get_seq_length()
    with pytest.raises(kvcache.StaleViewError):
        np.from_dlpack(view)


def test_encoder_decoder_cache(xp):
    self_c, cross_c = kvcache.DynamicCache(), kvcache.DynamicCache()
    ed = kvcache.EncoderDecoderCache(self_c, cross_c)
    enc_k, enc_v = kv(xp, b=2, s=5)
    out = ed.update_cross(enc_k, enc_v, 0)
    assert out.keys.shape == (2, 2, 5, 4) and ed.is_updated == {0: True}
    again = ed.update_cross(None, None, 0)
    assert again.keys.data_ptr == ed.cross_attention_cache.layer_view(0).keys.data_ptr
    k, v = kv(xp, b=2, s=3)
    ed.update(k, v, 0)
    assert ed.get_seq_length() == 3 and len(ed) == 1 and ed.get_mask_sizes(1, 0) == (4, 0)
    assert ed.self_attention_cache is self_c and self_c.get_seq_length() == 3
    ed.crop(-1)
    assert ed.get_seq_length() == 2 and ed.cross_attention_cache.get_seq_length() == 5
    ed.reorder_cache([1, 0])
    ed.batch_repeat_interleave(2)
    ed.batch_select_indices([0, 3])
    assert ed.cross_attention_cache.layer_info(0).batch_size == 2
    splits = ed.batch_split(2, 1)
    assert len(splits) == 2 and splits[0].cross_attention_cache.layer_info(0).batch_size == 1
    merged = kvcache.EncoderDecoderCache.from_batch_splits(splits)
    assert merged.cross_attention_cache.layer_info(0).batch_size == 2
    dup = copy.deepcopy(ed)
    ed.reset()
    assert ed.is_updated == {0: False} and ed.get_seq_length() == 0
    assert dup.get_seq_length() == 2 and dup.is_updated == {0: True}
    assert "EncoderDecoderCache(self_attention_cache=" in repr(dup)
    with pytest.raises(ValueError):
        kvcache.EncoderDecoderCache(self_c, kvcache.DynamicCache())  # self_c already belongs to a pair
    dup.close()
    assert dup.closed


def test_encoder_decoder_keeps_memory_alive_after_python_objects_die(xp):
    ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    k, v = kv(xp, s=2)
    t = xp.from_view(ed.update_cross(k, v, 0).keys)
    del ed
    import gc
    gc.collect()
    assert xp.equal(t, k)  # the exported tensor still owns a reference to the cache's memory
