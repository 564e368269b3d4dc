"""Dummy layers (transformers 5.23's DummyLayer, LayerKind.DUMMY) through the Python API."""
from __future__ import annotations

import numpy as np
import pytest

import kvcache
from kvcache import LayerKind, LayerSpec, LayerType, ModelConfig


def tokens(n, start=0, batch=2):
    return (np.arange(batch * n * 4, dtype=np.float32).reshape(batch, 1, n, 4) + start)


def test_layer_types_map_to_dummy():
    cache = kvcache.DynamicCache(num_hidden_layers=4, layer_types=["full_attention", "moe", "mlp", "dummy"])
    assert [cache.layer_info(i).kind for i in range(4)] == [LayerKind.DYNAMIC] + [LayerKind.DUMMY] * 3
    assert cache.is_dummy == [False, True, True, True]
    static = kvcache.StaticCache(num_hidden_layers=2, layer_types=["dummy", "sliding_attention"], sliding_window=4,
                                 max_cache_len=8)
    assert [static.layer_info(i).kind for i in range(2)] == [LayerKind.DUMMY, LayerKind.STATIC_SLIDING]
    # An explicit LayerType still picks the pre-5.23 meaning of a "moe" block.
    old = kvcache.DynamicCache(num_hidden_layers=1, layer_types=[LayerType.LINEAR_ATTENTION])
    assert old.layer_info(0).kind == LayerKind.LINEAR


def test_kv_sharing_modes_reuse_makes_dummy_layers():
    # Gemma 4 style: num_kv_shared_layers and the kv_sharing_modes derived from it; the modes win (5.23).
    cfg = ModelConfig(num_hidden_layers=4, sliding_window=3, num_kv_shared_layers=2,
                      kv_sharing_modes=[None, "store", "reuse", "reuse"])
    cache = kvcache.DynamicCache(config=cfg)
    assert len(cache) == 4
    kinds = [cache.layer_info(i).kind for i in range(4)]
    assert kinds == [LayerKind.DYNAMIC_SLIDING, LayerKind.DYNAMIC_SLIDING, LayerKind.DUMMY, LayerKind.DUMMY]
    with pytest.raises(ValueError, match="layer_types has 1 entries"):
        kvcache.DynamicCache(num_hidden_layers=2, kv_sharing_modes=["reuse"])
    # Without modes, num_kv_shared_layers keeps its 4.57-5.22 meaning (difference 18).
    assert len(kvcache.DynamicCache(num_hidden_layers=4, num_kv_shared_layers=2)) == 2


def test_dummy_behaviour():
    cache = kvcache.CustomCache([LayerSpec(LayerKind.DUMMY), LayerSpec(LayerKind.DYNAMIC)])
    assert cache.update(None, None, 0) == (None, None)  # DummyLayer tolerates (None, None)
    with pytest.raises(kvcache.UnsupportedError, match="layer 0 is a dummy layer"):
        cache.update(tokens(2), tokens(2), 0)
    assert not cache.is_initialized  # the dummy does not count, the dynamic layer is not initialized yet
    cache.update(tokens(3), tokens(3), 1)
    assert cache.is_initialized
    assert cache.get_seq_length() == 3  # layer 0 is "the cache": the first attention layer answers
    assert cache.get_mask_sizes(2, 0) == (5, 0)
    other = kvcache.CustomCache([LayerSpec(LayerKind.DYNAMIC), LayerSpec(LayerKind.DUMMY)])
    with pytest.raises(kvcache.InvalidArgumentError, match="layer 1 is a dummy layer"):
        other.get_seq_length(1)
    assert cache.layers[0].keys is None and list(cache)[0] == (None, None)
    assert cache.get_max_length(0) == -1
    assert cache.is_compileable is False  # the dynamic layer is not; the dummy alone would be
    assert kvcache.CustomCache([LayerSpec(LayerKind.DUMMY)]).is_compileable
    assert cache.layer_is_croppable(0) and cache.is_croppable
    cache.crop(-1)
    cache.reorder_cache([1, 0])
    cache.batch_repeat_interleave(2)
    cache.batch_select_indices([0, 3])
    assert cache.get_seq_length() == 2
    clone = cache.batch_split(2, 1)
    assert [c.layer_info(0).kind for c in clone] == [LayerKind.DUMMY] * 2
    cache.reset()
    assert cache.get_seq_length() == 0 and cache.is_dummy == [True, False]


def test_ddp_data_with_none_pairs():
    cache = kvcache.DynamicCache([(tokens(2), tokens(2)), (None, None)],
                                 num_hidden_layers=2, layer_types=["full_attention", "moe"])
    assert cache.get_seq_length() == 2
    assert cache.is_dummy == [False, True]
