"""Indexed layers (transformers' DynamicIndexedLayer / StaticIndexedLayer, LayerKind.DYNAMIC_INDEXED /
STATIC_INDEXED) and Cache.update_indexer, checked step by step against the installed transformers' own classes."""
from __future__ import annotations

import numpy as np
import pytest

import kvcache
from kvcache import LayerKind, LayerSpec, LayerType

torch = pytest.importorskip("torch")
tcu = pytest.importorskip("transformers.cache_utils")
if not hasattr(tcu, "DynamicIndexedLayer"):
    pytest.skip("transformers < 5.11 has no DynamicIndexedLayer", allow_module_level=True)
import transformers  # noqa: E402

RELEASE = tuple(int(x) for x in transformers.__version__.split(".")[:2])
B, H, DK, W = 2, 2, 4, 3


def kv(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, n, DK, generator=g), torch.randn(B, H, n, DK, generator=g)


def ix(n, seed, batch=B):
    return torch.randn(batch, n, W, generator=torch.Generator().manual_seed(1000 + seed))


def same(ours, theirs):
    assert ours is not None and theirs is not None
    assert torch.equal(torch.from_dlpack(ours), theirs)


def pair(static):
    spec = LayerSpec(LayerKind.STATIC_INDEXED, max_cache_len=8) if static else LayerSpec(LayerKind.DYNAMIC_INDEXED)
    ours = kvcache.CustomCache([spec])
    theirs = tcu.StaticIndexedLayer(max_cache_len=8) if static else tcu.DynamicIndexedLayer()
    return ours, theirs


def filled(static, n, seed, n_index):
    """pair(static) after the same update of n tokens and update_indexer of n_index keys on both."""
    ours, theirs = pair(static)
    k, v = kv(n, seed)
    ours.update(k, v, 0)
    theirs.update(k, v)
    ours.update_indexer(ix(n_index, seed), 0)
    theirs.update_indexer(ix(n_index, seed))
    return ours, theirs


def both(ours, theirs, method, *args):
    """The same call on both, then the same indexer keys."""
    getattr(ours, method)(*args)
    getattr(theirs, method)(*args)
    same(ours.get_indexer_keys(0), theirs.indexer_keys)


@pytest.mark.parametrize("static", [False, True])
def test_update_indexer_matches_transformers(static):
    ours, theirs = pair(static)
    assert ours.get_indexer_keys(0) is None and theirs.indexer_keys is None
    for step, n in enumerate([3, 1, 2]):
        k, v = kv(n, step)
        x = ix(n, step)
        same(ours.update_indexer(x, 0), theirs.update_indexer(x))
        ours.update(k, v, 0)
        theirs.update(k, v)
        same(ours.get_indexer_keys(0), theirs.indexer_keys)
    # The indexer counts in no length.
    assert ours.get_seq_length(0) == theirs.get_seq_length() == 6


@pytest.mark.parametrize("static", [False, True])
def test_reorder_reset_match_transformers(static):
    ours, theirs = filled(static, 2, 0, 3)
    both(ours, theirs, "reorder_cache", torch.tensor([1, 0]))
    ours.reset()
    theirs.reset()
    if static:  # zeroed in place, counter 0: the next update writes at 0
        same(ours.get_indexer_keys(0), theirs.indexer_keys)
        same(ours.update_indexer(ix(1, 5), 0), theirs.update_indexer(ix(1, 5)))
    else:  # dropped: a new dtype and width may come (the batch stays the K/V's)
        if theirs.indexer_keys is not None:
            pytest.skip(f"SKIPPED: transformers {transformers.__version__}'s DynamicIndexedLayer.reset zeroes the "
                        "indexer keys in place, and the next update_indexer appends after the zeros; kvcache drops "
                        "them, as 5.24 does (docs/indexed-layers.md)")
        assert ours.get_indexer_keys(0) is None and theirs.indexer_keys is None
        wide = torch.randn(B, 2, W + 1, dtype=torch.float16)
        same(ours.update_indexer(wide, 0), theirs.update_indexer(wide))


def test_dynamic_batch_ops_and_crop_match_transformers():
    ours, theirs = filled(False, 5, 1, 5)
    both(ours, theirs, "batch_repeat_interleave", 2)
    both(ours, theirs, "batch_select_indices", torch.tensor([3, 0]))
    both(ours, theirs, "crop", -2)
    assert ours.get_seq_length(0) == theirs.get_seq_length() == 3


@pytest.mark.skipif(RELEASE < (5, 24), reason="StaticLayer.crop came with transformers 5.24")
def test_static_crop_matches_transformers():
    ours, theirs = filled(True, 4, 2, 5)
    ours.crop(-2)
    theirs.crop(-2)
    same(ours.update_indexer(ix(1, 3), 0), theirs.update_indexer(ix(1, 3)))  # written at the moved counter


def test_layer_types_and_errors():
    cache = kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention", "indexed_attention"])
    assert [cache.layer_info(i).kind for i in range(2)] == [LayerKind.DYNAMIC, LayerKind.DYNAMIC_INDEXED]
    static = kvcache.StaticCache(num_hidden_layers=1, layer_types=[LayerType.INDEXED_ATTENTION], max_cache_len=4)
    assert static.layer_info(0).kind == LayerKind.STATIC_INDEXED
    with pytest.raises(ValueError, match="layer 0 is a dynamic layer; cannot call update_indexer"):
        cache.update_indexer(ix(1, 0), 0)
    with pytest.raises(IndexError):
        cache.update_indexer(ix(1, 0), 2)
    cache.update_indexer(ix(2, 0), 1)
    with pytest.raises(ValueError, match="index_head_dim"):
        cache.update_indexer(torch.zeros(B, 1, W + 1), 1)
    same(cache.get_indexer_keys(1), ix(2, 0))  # unchanged by the refusal
    with pytest.raises(ValueError, match="x.ndim is 2"):
        cache.update_indexer(torch.zeros(B, W), 1)
    with pytest.raises(kvcache.OutOfRangeError):
        static.update_indexer(ix(5, 0), 0)


def test_clone_and_splits_keep_the_indexer():
    cache = kvcache.DynamicCache(num_hidden_layers=1, layer_types=["indexed_attention"])
    k, v = kv(2, 0)
    cache.update(k, v, 0)
    cache.update_indexer(ix(2, 0), 0)
    clone = cache.clone()
    same(clone.get_indexer_keys(0), ix(2, 0))
    parts = cache.batch_split(B, 1)
    same(parts[1].get_indexer_keys(0), ix(2, 0)[1:])
    back = kvcache.DynamicCache.from_batch_splits(parts)
    same(back.get_indexer_keys(0), ix(2, 0))
    clone.update_indexer(ix(1, 1), 0)
    same(cache.get_indexer_keys(0), ix(2, 0))


def test_drop_in_update_indexer():
    import kvcache.transformers as kt

    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                                   intermediate_size=32, vocab_size=32)
    cfg.layer_types = ["full_attention", "indexed_attention"]
    try:
        specs = kt.layer_specs_from_config(cfg)
    except (ValueError, KeyError) as e:  # a transformers whose config validation refuses the type
        pytest.skip(f"this transformers does not accept layer type 'indexed_attention' on Llama: {e}")
    assert [s.kind for s in specs] == [LayerKind.DYNAMIC, LayerKind.DYNAMIC_INDEXED]
    cache = kt.DynamicCache(config=cfg)
    theirs = tcu.DynamicIndexedLayer()
    x = ix(3, 0)
    out = cache.update_indexer(x, 1)
    assert isinstance(out, torch.Tensor) and torch.equal(out, theirs.update_indexer(x))
    assert torch.equal(cache.layers[1].indexer_keys, theirs.indexer_keys)
    with pytest.raises(ValueError):
        cache.update_indexer(x, 0)
