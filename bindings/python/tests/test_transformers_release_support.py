"""The drop-in on the installed transformers release: caches built from a config have the layers transformers'
own caches have (the layer-type parsing changed in 5.14 and 5.19), and a class that a release cannot support is
the only thing missing there, with an ImportError that names the release that has what it needs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache.transformers as kvt  # noqa: E402
import tiny_models  # noqa: E402
from transformers_release import HAS_LINEAR_LAYERS, VERSION, needs_linear_layers  # noqa: E402

ATTENTION = ["llama", "mistral", "gemma2", "qwen2", "gpt2"]


def _shape(cache, static):
    """Which layers slide and, for dynamic caches, their windows (static sliding layers of some releases keep
    theirs as max_cache_len only)."""
    return [(bool(layer.is_sliding), None if static or not layer.is_sliding else layer.sliding_window)
            for layer in cache.layers]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("name", ATTENTION)
def test_config_caches_have_transformers_layers(name, static):
    config = tiny_models.BUILDERS[name]().config
    if static:
        ref, got = (cls(config=config, max_cache_len=16) for cls in (transformers.StaticCache, kvt.StaticCache))
    else:
        ref, got = (cls(config=config) for cls in (transformers.DynamicCache, kvt.DynamicCache))
    assert len(got.layers) == len(ref.layers) == config.get_text_config(decoder=True).num_hidden_layers
    assert _shape(got, static) == _shape(ref, static)
    if static:
        assert got.max_cache_len == 16


@needs_linear_layers
@pytest.mark.parametrize("name", ["mamba", "jamba"])
def test_recurrent_config_caches_have_transformers_layers(name):
    config = tiny_models.BUILDERS[name]().config
    ref, got = transformers.DynamicCache(config=config), kvt.DynamicCache(config=config)
    assert len(got.layers) == len(ref.layers)
    linear = transformers.cache_utils.LinearAttentionCacheLayerMixin
    assert [isinstance(layer, linear) for layer in got.layers] == [isinstance(layer, linear) for layer in ref.layers]


def test_linear_layer_class_is_there_or_says_which_release_has_it():
    if HAS_LINEAR_LAYERS:
        from kvcache.transformers import KvcacheLinearLayer
        assert issubclass(KvcacheLinearLayer, transformers.cache_utils.LinearAttentionCacheLayerMixin)
        assert "KvcacheLinearLayer" in kvt.__all__
        return
    with pytest.raises(ImportError, match=rf"KvcacheLinearLayer needs .*transformers {VERSION} lacks.*5\.14"):
        from kvcache.transformers import KvcacheLinearLayer  # noqa: F401
    assert "KvcacheLinearLayer" not in kvt.__all__
    star = {}
    exec("from kvcache.transformers import *", star)  # the rest of the module imports as a whole
    assert "DynamicCache" in star and "KvcacheLinearLayer" not in star
    config = tiny_models.BUILDERS["llama"]().config
    config.layer_types = ["full_attention", "linear_attention"]
    with pytest.raises(NotImplementedError, match=r"layer 1 has layer type 'linear_attention'.*5\.14"):
        kvt.DynamicCache(config=config)


def test_every_listed_class_imports():
    for name in kvt.__all__:
        assert getattr(kvt, name) is not None
