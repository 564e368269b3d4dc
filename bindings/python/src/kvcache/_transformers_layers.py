"""transformers' cache layer classes over kvcache's C layers (kvcache.transformers imports this at its end).

Each class subclasses kvcache's layer (KvcacheLayer and kin, which come first in its MRO and implement every
method) and transformers' own class of the same name, so ``isinstance(layer, transformers.cache_utils.StaticLayer)``
holds for the layers of every drop-in cache and for layers made on their own. A class exists only where the
installed transformers has its namesake; asking for a missing one raises ImportError naming what it needs.

Made on its own (``StaticLayer(16)``), a layer takes transformers' constructor arguments of the installed release
(bound against transformers' own signature, so a wrong call fails as it does in transformers) and owns a one-layer
C cache; ``Cache(layers=[...])`` builds one C cache from such layers and rebinds them to it. transformers' own
``__init__`` never runs: it would allocate torch state (StaticLayer's ``cumulative_length`` tensor) that kvcache
keeps in C, and set attributes that are read-only views of the C layer here.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, List, Optional

from transformers import cache_utils as _tcu

from ._types import LayerKind, LayerSpec, QuantOptions
from .transformers import (_DummyLayer, _HAS_LINEAR_LAYERS, _LAYER_CLASSES, _LINEAR_SINCE, _UNAVAILABLE,
                           KvcacheDummyLayer, KvcacheIndexedLayer, KvcacheLayer, KvcacheLinearLayer, _LayerCache)

__all__: List[str] = []

# The arguments of a group-wise quantized layer (transformers' QuantizedLayer), in its constructor's order
_QUANT_ARGS = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")


def _made_alone(self: Any, *args: Any, **kwargs: Any) -> None:
    """The constructor of every class below: transformers' arguments, a one-layer C cache of the layer's own."""
    try:
        bound = self._signature.bind(*args, **kwargs)  # refuses what transformers' own __init__ refuses
    except TypeError as e:
        raise TypeError(f"{type(self).__name__}(): {e}") from None
    bound.apply_defaults()
    _LayerCache(self, self._spec_of(bound.arguments))


def _define(name: str, generic: Optional[type], transformers_name: str, kind: LayerKind,
            spec: Optional[Callable[[dict], LayerSpec]], doc: str, *, parent: Optional[type] = None,
            needs: str = "", since: str = "transformers 5.0", maps_kind: bool = True) -> Optional[type]:
    """Defines kvcache.transformers.<name>: ``parent`` (or ``generic``, the kvcache layer) and transformers'
    ``transformers_name`` as bases. Where transformers lacks that class (or ``generic`` is None: what the kind needs
    is missing) it records why, and ``since`` (a release that has it), in _UNAVAILABLE and returns None."""
    transformers_class = getattr(_tcu, transformers_name, None)
    if transformers_class is None or generic is None:
        _UNAVAILABLE[name] = (needs or f"transformers.cache_utils.{transformers_name}", since)
        return None
    signature = inspect.signature(transformers_class.__init__)
    own_signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    namespace = {
        "__doc__": doc, "__module__": "kvcache.transformers", "__qualname__": name,
        "__init__": _made_alone, "__signature__": own_signature, "_signature": own_signature,
        "_spec_of": staticmethod(spec or _abstract(name)), "_layer_type": None,
    }
    cls = type(name, (parent or generic, transformers_class), namespace)
    if maps_kind:
        _LAYER_CLASSES.setdefault(kind, cls)
    __all__.append(name)
    return cls


def _abstract(name: str) -> Callable[[dict], LayerSpec]:
    def refuse(arguments: dict) -> LayerSpec:
        raise TypeError(f"kvcache.transformers.{name} is abstract, as transformers' is: make a QuantoQuantizedLayer "
                        "or an HQQQuantizedLayer")
    return refuse


def _group_wise(quantizer: str) -> Callable[[dict], LayerSpec]:
    def spec(a: dict) -> LayerSpec:
        # mode "transformers": the quantization timeline of transformers' own layer (QuantizedCache's default here)
        quant = QuantOptions(quantizer=quantizer, mode="transformers", **{k: a[k] for k in _QUANT_ARGS})
        return LayerSpec(LayerKind.QUANTIZED, quant=quant)
    return spec


def _not_in_python(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("kvcache quantizes in C (kvcache/quantized.h); the layer has no Python quantizer")


class _QuantizedOptions:
    """The group-wise options of a quantized layer, read from the spec its C layer was made from (transformers'
    QuantizedLayer keeps them as attributes); ``_quantize``/``_dequantize`` (abstract in transformers) are C's."""

    def _quant(self) -> QuantOptions:
        specs = self._cache._specs
        quant = specs[self._index].quant if self._index < len(specs) else None
        return quant or QuantOptions()

    nbits = property(lambda self: self._quant().nbits)
    axis_key = property(lambda self: self._quant().axis_key)
    axis_value = property(lambda self: self._quant().axis_value)
    q_group_size = property(lambda self: self._quant().q_group_size)
    residual_length = property(lambda self: self._quant().residual_length)
    _quantize = _not_in_python
    _dequantize = _not_in_python
    _apply_pending_reorder = _not_in_python


_K = LayerKind

DynamicLayer = _define(
    "DynamicLayer", KvcacheLayer, "DynamicLayer", _K.DYNAMIC, lambda a: LayerSpec(_K.DYNAMIC),
    """transformers' DynamicLayer (``DynamicLayer()``): full attention, growing with every token.""")
DynamicSlidingWindowLayer = _define(
    "DynamicSlidingWindowLayer", KvcacheLayer, "DynamicSlidingWindowLayer", _K.DYNAMIC_SLIDING,
    lambda a: LayerSpec(_K.DYNAMIC_SLIDING, window=a["sliding_window"]),
    """transformers' DynamicSlidingWindowLayer (``DynamicSlidingWindowLayer(sliding_window)``): keeps the last
    ``sliding_window - 1`` tokens.""")
DynamicChunkedLayer = _define(
    "DynamicChunkedLayer", KvcacheLayer, "DynamicSlidingWindowLayer", _K.DYNAMIC_CHUNKED,
    lambda a: LayerSpec(_K.DYNAMIC_CHUNKED, window=a["sliding_window"]),
    """A chunked-attention layer (``DynamicChunkedLayer(sliding_window)``, the chunk size): kvcache's name for what
    transformers builds as a DynamicSlidingWindowLayer for "chunked_attention" layers, of which it is a subclass
    (the same storage; the model's mask differs).""", parent=DynamicSlidingWindowLayer)
StaticLayer = _define(
    "StaticLayer", KvcacheLayer, "StaticLayer", _K.STATIC, lambda a: LayerSpec(_K.STATIC, max_cache_len=a["max_cache_len"]),
    """transformers' StaticLayer (``StaticLayer(max_cache_len)``): ``max_cache_len`` slots, allocated at the first
    update, returned whole (the same tensors) at every step. ``cumulative_length`` is an int here (a 0-d tensor in
    transformers).""")
StaticSlidingWindowLayer = _define(
    "StaticSlidingWindowLayer", KvcacheLayer, "StaticSlidingWindowLayer", _K.STATIC_SLIDING,
    lambda a: LayerSpec(_K.STATIC_SLIDING, window=a["sliding_window"], max_cache_len=a["max_cache_len"]),
    """transformers' StaticSlidingWindowLayer (``StaticSlidingWindowLayer(max_cache_len, sliding_window)``):
    ``min(sliding_window, max_cache_len)`` slots, shifted once full.""")
StaticChunkedLayer = _define(
    "StaticChunkedLayer", KvcacheLayer, "StaticSlidingWindowLayer", _K.STATIC_CHUNKED,
    lambda a: LayerSpec(_K.STATIC_CHUNKED, window=a["sliding_window"], max_cache_len=a["max_cache_len"]),
    """A static chunked-attention layer (``StaticChunkedLayer(max_cache_len, sliding_window)``, the chunk size):
    kvcache's name for what transformers builds as a StaticSlidingWindowLayer for "chunked_attention" layers, of
    which it is a subclass.""", parent=StaticSlidingWindowLayer)
SlidingWindowLayer = _define(
    "SlidingWindowLayer", KvcacheLayer, "StaticSlidingWindowLayer", _K.STATIC_SLIDING,
    lambda a: LayerSpec(_K.STATIC_SLIDING, window=a["sliding_window"], max_cache_len=a["max_cache_len"]),
    """``StaticSlidingWindowLayer(max_cache_len, sliding_window)`` under transformers 4.56's name: renamed
    StaticSlidingWindowLayer in 4.57 (where this name is a deprecated subclass), removed in transformers 5.0.""",
    parent=StaticSlidingWindowLayer, maps_kind=False)
ChunkedSlidingLayer = _define(
    "ChunkedSlidingLayer", KvcacheLayer, "StaticSlidingWindowLayer", _K.STATIC_CHUNKED,
    lambda a: LayerSpec(_K.STATIC_CHUNKED, window=a["sliding_window"], max_cache_len=a["max_cache_len"]),
    """``StaticChunkedLayer(max_cache_len, sliding_window)`` under transformers 4.56's name (a subclass of
    SlidingWindowLayer there): merged into StaticSlidingWindowLayer in 4.57 (where this name is a deprecated
    subclass of it), removed in transformers 5.0.""", parent=StaticChunkedLayer, maps_kind=False)

_QuantizedBase = (type("_KvcacheQuantizedLayer", (_QuantizedOptions, KvcacheLayer),
                       {"__module__": "kvcache.transformers", "_layer_type": None}))
QuantizedLayer = _define(
    "QuantizedLayer", _QuantizedBase, "QuantizedLayer", _K.QUANTIZED, None,
    """transformers' QuantizedLayer: a quantized store plus a full-precision residual, in C. Abstract, as in
    transformers: the layers of a QuantizedCache, and those made on their own, are QuantoQuantizedLayer or
    HQQQuantizedLayer.""")
QuantoQuantizedLayer = _define(
    "QuantoQuantizedLayer", _QuantizedBase, "QuantoQuantizedLayer", _K.QUANTIZED, _group_wise("quanto"),
    """transformers' QuantoQuantizedLayer (``QuantoQuantizedLayer(nbits=4, axis_key=0, axis_value=0,
    q_group_size=64, residual_length=128)``): optimum-quanto's group-wise quantization, done in C (no quanto
    needed), on transformers' timeline.""", parent=QuantizedLayer, maps_kind=False)
HQQQuantizedLayer = _define(
    "HQQQuantizedLayer", _QuantizedBase, "HQQQuantizedLayer", _K.QUANTIZED, _group_wise("hqq"),
    """transformers' HQQQuantizedLayer (``HQQQuantizedLayer(nbits=4, axis_key=0, axis_value=0, q_group_size=64,
    residual_length=128)``): HQQ's quantization, done in C (no hqq needed), on transformers' timeline.""",
    parent=QuantizedLayer, maps_kind=False)
Fp8QuantizedLayer = _define(
    "Fp8QuantizedLayer", type("_KvcacheFp8Layer", (KvcacheLayer,), {
        "__module__": "kvcache.transformers", "_layer_type": None,
        "_quantize": _not_in_python, "_dequantize": _not_in_python}),
    "Fp8QuantizedLayer", _K.QUANTIZED_FP8, lambda a: LayerSpec(_K.QUANTIZED_FP8),
    """transformers' Fp8QuantizedLayer (``Fp8QuantizedLayer()``): float8 e4m3fn with one scale per tensor, fixed
    by the first update.""", since="transformers 5.21")

DynamicIndexedLayer = _define(
    "DynamicIndexedLayer", KvcacheIndexedLayer, "DynamicIndexedLayer", _K.DYNAMIC_INDEXED,
    lambda a: LayerSpec(_K.DYNAMIC_INDEXED),
    """transformers' DynamicIndexedLayer (``DynamicIndexedLayer()``): a DynamicLayer plus a sparse-attention
    indexer's keys.""", since="transformers 5.11")
StaticIndexedLayer = _define(
    "StaticIndexedLayer", KvcacheIndexedLayer, "StaticIndexedLayer", _K.STATIC_INDEXED,
    lambda a: LayerSpec(_K.STATIC_INDEXED, max_cache_len=a["max_cache_len"]),
    """transformers' StaticIndexedLayer (``StaticIndexedLayer(max_cache_len)``): a StaticLayer plus an indexer
    buffer of ``max_cache_len`` rows.""", since="transformers 5.17")

# Linear-attention layers: kvcache's follow transformers' of 5.14 on (states by index); before that the names
# are missing here even where transformers has them (5.5 to 5.13, of other semantics).
_Linear = KvcacheLinearLayer if _HAS_LINEAR_LAYERS else None
_LINEAR_NEEDS = ("transformers.cache_utils.LinearAttentionCacheLayerMixin with states by index and no token "
                 "count")


def _states(a: dict) -> int:
    return a["number_of_states"]


LinearAttentionLayer = _define(
    "LinearAttentionLayer", _Linear, "LinearAttentionLayer", _K.LINEAR,
    lambda a: LayerSpec(_K.LINEAR, num_states=_states(a)),
    """transformers' LinearAttentionLayer (``LinearAttentionLayer(number_of_states=1)``): conv and recurrent
    states (Mamba, conv, linear attention), no K/V.""", needs=_LINEAR_NEEDS, since=_LINEAR_SINCE)
LinearAttentionAndFullAttentionLayer = _define(
    "LinearAttentionAndFullAttentionLayer", _Linear, "LinearAttentionAndFullAttentionLayer", _K.LINEAR_DYNAMIC,
    lambda a: LayerSpec(_K.LINEAR_DYNAMIC, num_states=_states(a)),
    """transformers' LinearAttentionAndFullAttentionLayer (``(number_of_states=1)``): states plus a DynamicLayer's
    K/V.""", needs=_LINEAR_NEEDS, since=_LINEAR_SINCE)
LinearAttentionAndSlidingWindowAttentionLayer = _define(
    "LinearAttentionAndSlidingWindowAttentionLayer", _Linear, "LinearAttentionAndSlidingWindowAttentionLayer",
    _K.LINEAR_DYNAMIC_SLIDING,
    lambda a: LayerSpec(_K.LINEAR_DYNAMIC_SLIDING, window=a["sliding_window"], num_states=_states(a)),
    """transformers' LinearAttentionAndSlidingWindowAttentionLayer (``(sliding_window, number_of_states=1)``).""",
    needs=_LINEAR_NEEDS, since=_LINEAR_SINCE)
LinearAttentionAndStaticFullAttentionLayer = _define(
    "LinearAttentionAndStaticFullAttentionLayer", _Linear, "LinearAttentionAndStaticFullAttentionLayer",
    _K.LINEAR_STATIC,
    lambda a: LayerSpec(_K.LINEAR_STATIC, max_cache_len=a["max_cache_len"], num_states=_states(a)),
    """transformers' LinearAttentionAndStaticFullAttentionLayer (``(max_cache_len, number_of_states=1)``).""",
    needs=_LINEAR_NEEDS, since=_LINEAR_SINCE)
LinearAttentionAndStaticSlidingWindowAttentionLayer = _define(
    "LinearAttentionAndStaticSlidingWindowAttentionLayer", _Linear,
    "LinearAttentionAndStaticSlidingWindowAttentionLayer", _K.LINEAR_STATIC_SLIDING,
    lambda a: LayerSpec(_K.LINEAR_STATIC_SLIDING, window=a["sliding_window"], max_cache_len=a["max_cache_len"],
                        num_states=_states(a)),
    """transformers' LinearAttentionAndStaticSlidingWindowAttentionLayer (``(max_cache_len, sliding_window,
    number_of_states=1)``).""", needs=_LINEAR_NEEDS, since=_LINEAR_SINCE)

DummyLayer = _define(
    "DummyLayer", KvcacheDummyLayer if _DummyLayer is not None else None, "DummyLayer", _K.DUMMY,
    lambda a: LayerSpec(_K.DUMMY),
    """transformers' DummyLayer (``DummyLayer()``): stores nothing (a block without attention, or a layer reading
    another layer's K/V).""", since="transformers 5.23")
