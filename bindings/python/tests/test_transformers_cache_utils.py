"""transformers' own cache unit tests (tests/utils/test_cache_utils.py at 5.23; docs/semantics.md, 'Synthetic
and cropping tests of transformers') ported to run against kvcache's drop-in classes: SyntheticCacheTest,
CacheCroppingTests and the model-free CacheTest cases."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache.transformers as kvt  # noqa: E402
from transformers_release import needs_linear_layers  # noqa: E402


def t(values, batch=1):
    """[batch, 1 head, len, head_dim 1] from a list of numbers (or a list of lists per batch row)."""
    rows = values if isinstance(values[0], list) else [values]
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 1, -1, 1)


def flat(x):
    return x[0, 0, :, 0].tolist()


def config(layer_types, **extra):
    cfg = transformers.PretrainedConfig(num_hidden_layers=len(layer_types), layer_types=layer_types,
                                        num_attention_heads=1, num_key_value_heads=1, head_dim=1, hidden_size=1,
                                        **extra)
    return cfg


def gemma(n_layers=1, **kw):
    return transformers.Gemma2Config(num_hidden_layers=n_layers, num_key_value_heads=1, num_attention_heads=1,
                                     head_dim=1, hidden_size=1, sliding_window=4, **kw)


# ------------------------------------------------------------ SyntheticCacheTest

def test_static_cache_out_of_bounds():
    cache = kvt.StaticCache(config(["full_attention"]), max_cache_len=4)
    cache.update(t([1, 2, 3, 4]), t([1, 2, 3, 4]), 0)
    with pytest.raises(IndexError):
        cache.update(t([5]), t([5]), 0)


def test_static_cache():
    cache = kvt.StaticCache(config(["full_attention"]), max_cache_len=4)
    cache.update(t([1, 2]), t([1, 2]), 0)
    k, _ = cache.update(t([3]), t([3]), 0)
    assert flat(k) == [1, 2, 3, 0]
    k, _ = cache.update(t([4]), t([4]), 0)
    assert flat(k) == [1, 2, 3, 4]


def test_sliding_window_cache():
    cfg = gemma(layer_types=["sliding_attention"])
    cache = kvt.StaticCache(cfg, max_cache_len=4)
    cache.update(t([1, 2]), t([1, 2]), 0)
    k, _ = cache.update(t([3]), t([3]), 0)
    assert flat(k) == [1, 2, 3, 0]
    cache = kvt.StaticCache(cfg, max_cache_len=4)
    cache.update(t([1, 2, 3, 4]), t([1, 2, 3, 4]), 0)
    k, _ = cache.update(t([5]), t([5]), 0)
    assert flat(k) == [2, 3, 4, 5]
    cache = kvt.StaticCache(cfg, max_cache_len=4)
    cache.update(t([1, 2, 3, 4, 5, 6]), t([1, 2, 3, 4, 5, 6]), 0)
    assert flat(cache.layers[0].keys) == [3, 4, 5, 6]


def test_dynamic_cache():
    cache = kvt.DynamicCache()
    for step in range(4):
        cache.update(t([step + 1]), t([step + 1]), 0)
        cache.update(t([10 * (step + 1)]), t([10 * (step + 1)]), 1)
    assert flat(cache.layers[0].keys) == [1, 2, 3, 4]
    assert flat(cache.layers[1].keys) == [10, 20, 30, 40]


def test_dynamic_cache_batch_select_indices():
    cache = kvt.DynamicCache()
    rows = [[1, 2], [10, 20], [100, 200]]
    cache.update(t(rows), t(rows), 0)
    cache.batch_select_indices(torch.tensor([0, 2]))
    assert cache.layers[0].keys[:, 0, :, 0].tolist() == [[1, 2], [100, 200]]


def test_hybrid_cache():
    cfg = gemma(2, layer_types=["full_attention", "sliding_attention"])
    cfg.sliding_window = 2
    cache = kvt.StaticCache(cfg, max_cache_len=4)
    k0, _ = cache.update(t([1, 2, 3]), t([1, 2, 3]), 0)
    k1, _ = cache.update(t([10, 20, 30]), t([10, 20, 30]), 1)
    assert flat(k0) == [1, 2, 3, 0] and flat(cache.layers[0].keys) == [1, 2, 3, 0]
    assert flat(k1) == [10, 20, 30] and flat(cache.layers[1].keys) == [20, 30]
    k0, _ = cache.update(t([5]), t([5]), 0)
    k1, _ = cache.update(t([50]), t([50]), 1)
    assert flat(k0) == [1, 2, 3, 5]
    assert flat(k1) == [30, 50]


def test_hybrid_chunked_cache():
    cfg = config(["full_attention", "chunked_attention"], attention_chunk_size=2)
    cache = kvt.StaticCache(cfg, max_cache_len=4)
    k0, _ = cache.update(t([1, 2, 3]), t([1, 2, 3]), 0)
    k1, _ = cache.update(t([10, 20, 30]), t([10, 20, 30]), 1)
    assert flat(k0) == [1, 2, 3, 0]
    assert flat(k1) == [10, 20, 30] and flat(cache.layers[1].keys) == [20, 30]
    k0, _ = cache.update(t([5]), t([5]), 0)
    k1, _ = cache.update(t([50]), t([50]), 1)
    assert flat(k0) == [1, 2, 3, 5] and flat(k1) == [30, 50]
    k1, _ = cache.update(t([60, 70]), t([60, 70]), 1)
    assert flat(k1) == [50, 60, 70] and flat(cache.layers[1].keys) == [60, 70]


def test_hybrid_chunked_cache_extra_cases():
    cfg = config(["chunked_attention"], attention_chunk_size=3)
    cache = kvt.StaticCache(cfg, max_cache_len=3)
    k, _ = cache.update(t([10, 20]), t([10, 20]), 0)
    assert flat(k) == [10, 20, 0] and flat(cache.layers[0].keys) == [10, 20, 0]
    k, _ = cache.update(t([30, 40]), t([30, 40]), 0)
    assert flat(cache.layers[0].keys) == [20, 30, 40]
    assert flat(k) == [10, 20, 30, 40]


# ------------------------------------------------------------ CacheCroppingTests

W, K, T = 12, 4, 45


def cropping_cache():
    cfg = config(["full_attention", "sliding_attention", "linear_attention", "hybrid", "hybrid_sliding"],
                 sliding_window=W, conv_kernel=K)
    cache = kvt.DynamicCache(config=cfg)
    cache.activate_past_recording()
    torch.manual_seed(0)
    keys = torch.randn(2, 32, T, 32)
    conv = torch.randn(2, 32, T)
    for i in (0, 1, 3, 4):
        cache.update(keys, keys, i)
    for i in (2, 3, 4):
        cache.update_conv_state(conv, i, conv_kernel_size=K)
    return cache, keys, conv


def conv_state(cache, i):
    return cache.layers[i].conv_states[0]


@needs_linear_layers
def test_crop_with_past():
    cache, keys, conv = cropping_cache()
    for i in (0, 1, 3, 4):
        assert cache.layers[i].keys.shape[-2] == T
    for i in (2, 3, 4):
        assert conv_state(cache, i).shape[-1] == T
    cache.crop(-3)
    for i in (1, 4):
        assert torch.equal(cache.layers[i].keys, keys[..., -W + 1 - 3:-3, :])
    for i in (0, 3):
        assert torch.equal(cache.layers[i].keys, keys[..., :T - 3, :])
    for i in (2, 3, 4):
        assert torch.equal(conv_state(cache, i), conv[..., -K - 3:-3])


@needs_linear_layers
def test_crop_with_zero_still_shrink_states():
    cache, keys, conv = cropping_cache()
    cache.crop(0)
    for i in (1, 4):
        assert torch.equal(cache.layers[i].keys, keys[..., -W + 1:, :])
    for i in (0, 3):
        assert torch.equal(cache.layers[i].keys, keys)
    for i in (2, 3, 4):
        assert torch.equal(conv_state(cache, i), conv[..., -K:])


@needs_linear_layers
def test_crop_outside_range():
    cache, _, _ = cropping_cache()
    cache.crop(-(T + 1))
    for i in (0, 1, 3, 4):
        assert cache.layers[i].keys.numel() == 0
    for i in (2, 3, 4):
        assert conv_state(cache, i).numel() == 0


def test_bc_crop_with_positive_value():
    cache = kvt.DynamicCache(config=config(["full_attention"]))
    keys = torch.randn(2, 32, T, 32)
    cache.update(keys, keys, 0)
    cache.crop(42)  # the legacy absolute length: kvcache keeps it working (differences #14)
    assert torch.equal(cache.layers[0].keys, keys[..., :42, :])


# ------------------------------------------------------------------ CacheTest

@pytest.mark.parametrize("heads", [32, 4, 1], ids=["mha", "gqa", "mqa"])
def test_static_cache_mha_mqa_gqa(heads):
    cfg = transformers.LlamaConfig(num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=heads,
                                   hidden_size=32 * 128)
    cache = kvt.StaticCache(cfg, max_cache_len=10)
    x = torch.randn(1, heads, 1, 128)
    k, v = cache.update(x, x, 0)
    assert k.shape == v.shape == (1, heads, 10, 128)


def hybrid_static():
    cfg = config(["full_attention", "linear_attention"])
    return kvt.StaticCache(cfg, max_cache_len=8)


@needs_linear_layers
def test_early_initialization_does_not_corrupt_linear_attention_layers():
    cache = hybrid_static()
    assert [layer.supports_early_init for layer in cache.layers] == [True, False]
    cache.early_initialization(batch_size=1, num_heads=1, head_dim=4, dtype=torch.float32, device="cpu")
    assert cache.layers[0].is_initialized
    conv = torch.randn(1, 8, 4)
    assert cache.update_conv_state(conv, 1).shape == conv.shape
    assert cache.is_initialized


@needs_linear_layers
def test_max_cache_len_ignores_linear_attention_layers():
    assert hybrid_static().get_max_length() == 8
