"""What the installed transformers release offers, for the drop-in's tests: they skip (with the reason) only what
that release lacks. bindings/python/check.sh runs the transformers tests once per release installed beside .venv's
(scripts/transformers-releases.txt), so every check here is a feature test, never a version switch."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

transformers = pytest.importorskip("transformers")
from transformers import cache_utils  # noqa: E402
from transformers.generation import GenerateDecoderOnlyOutput  # noqa: E402

VERSION = transformers.__version__

# Linear-attention (recurrent state) layers with states by index, which kvcache's linear kinds follow: from 5.14.
# Before 5.5 Mamba and Jamba kept caches of their own; 5.5 to 5.13 had one state per layer, of other semantics.
# From 5.25 linear layers count their tokens (increase_count) and keep recurrent-state history for crop, which
# kvcache's linear kinds do not yet: the drop-in refuses them there as before 5.14.
_MIXIN = getattr(cache_utils, "LinearAttentionCacheLayerMixin", None)
LINEAR_COUNTS_TOKENS = _MIXIN is not None and hasattr(_MIXIN, "increase_count")
HAS_LINEAR_LAYERS = (_MIXIN is not None and not LINEAR_COUNTS_TOKENS
                     and "state_idx" in inspect.signature(_MIXIN.update_conv_state).parameters)
LINEAR_SKIP_REASON = (
    f"SKIPPED: transformers {VERSION}'s linear-attention layers count tokens and keep recurrent-state history for "
    "crop, which kvcache's linear layers (transformers 5.14 to 5.24) do not yet; the drop-in refuses them "
    "(test_linear_layer_class_is_there_or_says_which_release_has_it)" if LINEAR_COUNTS_TOKENS else
    f"SKIPPED: transformers {VERSION} has no linear-attention cache layers with states by index (5.14 on; "
    "kvcache's drop-in caches Mamba and Jamba from there)")
needs_linear_layers = pytest.mark.skipif(not HAS_LINEAR_LAYERS, reason=LINEAR_SKIP_REASON)

# generate(cache=...) and outputs' .cache: 5.24 renamed past_key_values so (the old name is deprecated).
HAS_GENERATE_CACHE_KWARG = "cache" in {f.name for f in dataclasses.fields(GenerateDecoderOnlyOutput)}


def generate_cache_kwarg(model) -> str:
    """The name under which this release's ``generate`` takes a cache for ``model``."""
    if HAS_GENERATE_CACHE_KWARG:
        return "cache"
    params = inspect.signature(model.forward).parameters
    return "past_key_values" if "past_key_values" in params else "cache_params"


def returned_cache(out):
    """The cache a ``generate(..., return_dict_in_generate=True)`` output holds, under this release's name."""
    return out.cache if HAS_GENERATE_CACHE_KWARG else out.past_key_values


def max_length(cache) -> int:
    """transformers' ``cache.get_max_length()`` (5.14 on: the longest layer's); before it, the same from the
    per-layer ``get_max_cache_shape(layer_idx)``."""
    if hasattr(cache, "get_max_length"):
        return cache.get_max_length()
    return max(cache.get_max_cache_shape(i) for i in range(len(cache.layers)))

# transformers' DummyLayer (the layers of "dummy", "moe", "mlp" blocks and KV-sharing consumers): from 5.23.
HAS_DUMMY_LAYER = hasattr(cache_utils, "DummyLayer")


def _dummy_layer_has_no_length() -> bool:
    """Whether Cache.get_seq_length(i) asks layer i itself, so that a DummyLayer's index raises AttributeError
    (5.25 on; 5.23 and 5.24 answered for the first attention layer)."""
    if not HAS_DUMMY_LAYER:
        return False
    try:
        cache_utils.Cache(layers=[cache_utils.DummyLayer(), cache_utils.DynamicLayer()]).get_seq_length(0)
    except AttributeError:
        return True
    return False


DUMMY_LAYER_HAS_NO_LENGTH = _dummy_layer_has_no_length()
