"""Drop-in replacements for transformers' cache classes, backed by kvcache's C layers.

Needs torch and transformers 5.0 to 5.24 (``pip install kvcache[transformers]``); where a release lacks what a
class needs, only that class is missing (``KvcacheLinearLayer`` before 5.14, ``KvcacheDummyLayer`` before 5.23:
an ImportError names the release). The classes subclass transformers' own
(``isinstance(cache, transformers.DynamicCache)`` holds), their ``layers``
implement transformers' layer interface over the layers of one C cache, and
every operation ``generate`` uses (update, masks, beam reorder, crop for
assisted decoding, batch repeat/select, reset, deepcopy) runs in C::

    >>> import torch, transformers, kvcache.transformers as kvt
    >>> config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
    ...                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    >>> model = transformers.LlamaForCausalLM(config).eval()
    >>> ids = torch.tensor([[1, 2, 3]])
    >>> out = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False,
    ...                      past_key_values=kvt.DynamicCache(config=model.config))
    >>> out.shape
    torch.Size([1, 7])

The layers are instances of transformers' own layer classes (kvcache/_transformers_layers.py), and those
classes, made as in transformers, compose caches (docs/transformers-drop-in.md lists every class)::

    >>> cache = kvt.Cache(layers=[kvt.StaticLayer(8), kvt.DynamicSlidingWindowLayer(4)])
    >>> isinstance(cache.layers[0], transformers.cache_utils.StaticLayer), isinstance(cache, transformers.Cache)
    (True, True)
    >>> cache.update(torch.ones(1, 2, 3, 16), torch.ones(1, 2, 3, 16), 0)[0].shape
    torch.Size([1, 2, 8, 16])

Tensors returned by ``update`` are zero-copy views of the cache's memory, valid
until the next update of that cache (transformers' attention consumes them
before that).

Devices: like transformers' lazy layers, a cache lives where the first tensors
it is given live (CPU, or a CUDA/ROCm device: ``update``, ``early_initialization``,
``ddp_cache_data``), with their dtype; ``device=`` places it at construction
instead. Until placed, a CPU cache without storage answers queries (an empty
cache). A device cache follows torch's current stream: its work is ordered on
the stream the model runs on, and its tensors are read there without copies
through the host.

torch.compile (docs/torch-compile.md): a StaticCache's full-attention layers
compile without graph breaks (``fullgraph=True``; ``generate`` with a compiled
forward gives transformers' tokens): their update is the custom op
``kvcache::update_static`` over the layer's stable tensors. Other layers, and a
static layer before its first update, make their C calls at graph breaks.
CUDA graphs (``mode="reduce-overhead"``): the cache ops run outside them, on
the host, where the C counters live; a CUDA graph captured by hand around
``update`` replays one step's slots and is not supported.
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import torch
import transformers
from transformers import cache_utils as _tcu

from . import _cache, _lib, _torch_compile
from ._errors import KvcacheError
from ._torch_device import CPU, DevicePair, default_device, device_pair, torch_views
from ._types import LayerKind, LayerSpec, Offload, Preset, QuantOptions

__all__ = [
    "DynamicCache",
    "StaticCache",
    "SlidingWindowCache",
    "HybridCache",
    "HybridChunkedCache",
    "OffloadedCache",
    "OffloadedStaticCache",
    "QuantizedCache",
    "QuantoQuantizedCache",
    "HQQQuantizedCache",
    "OffloadedHybridCache",
    "EncoderDecoderCache",
    "Cache",
    "KvcacheLayer",
    "KvcacheLinearLayer",
    "KvcacheDummyLayer",
    "layer_specs_from_config",
]

_TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def _installed_release() -> int:
    """The installed transformers as MAJOR*10000 + MINOR*100: the C caches follow its semantics where releases
    differ (kvc_cache_options.transformers_release), e.g. StaticCache.crop exists from 5.24 on."""
    parts = (transformers.__version__.split(".") + ["0"])[:2]
    try:
        return int(parts[0]) * 10000 + int("".join(ch for ch in parts[1] if ch.isdigit()) or 0) * 100
    except ValueError:
        return 0
if _TRANSFORMERS_MAJOR < 5:
    raise ImportError(f"kvcache.transformers needs transformers >= 5 (found {transformers.__version__})")

_from_dlpack = torch.utils.dlpack.from_dlpack
_update_torch = _lib._update_torch
_torch_layer_view = _lib._torch_layer_view
_torch_follow_stream = _lib._torch_follow_stream
_is_compiling = _torch_compile.is_compiling

_SLIDING = {LayerKind.DYNAMIC_SLIDING, LayerKind.DYNAMIC_CHUNKED, LayerKind.STATIC_SLIDING,
            LayerKind.STATIC_CHUNKED, LayerKind.LINEAR_DYNAMIC_SLIDING, LayerKind.LINEAR_STATIC_SLIDING}
_STATIC = {LayerKind.STATIC, LayerKind.STATIC_SLIDING, LayerKind.STATIC_CHUNKED, LayerKind.LINEAR_STATIC,
           LayerKind.LINEAR_STATIC_SLIDING, LayerKind.STATIC_INDEXED}
_INDEXED = {LayerKind.DYNAMIC_INDEXED, LayerKind.STATIC_INDEXED}
_LINEAR = {LayerKind.LINEAR, LayerKind.LINEAR_DYNAMIC, LayerKind.LINEAR_DYNAMIC_SLIDING, LayerKind.LINEAR_STATIC,
           LayerKind.LINEAR_STATIC_SLIDING}


def _torch(view: Any) -> Optional[torch.Tensor]:
    return None if view is None else _from_dlpack(view._capsule())


def _host_indices(indices: Any) -> Any:
    """Index tensors as the C API reads them: in host memory (a device tensor is read back, a small sync)."""
    if isinstance(indices, torch.Tensor) and indices.device.type != "cpu":
        return indices.cpu()
    return indices


def _query_length(query_length: Any) -> int:
    """transformers 5.0 to 5.4 ask for mask sizes with the step's ``cache_position`` tensor, later ones with its
    length."""
    return query_length.shape[0] if isinstance(query_length, torch.Tensor) else query_length


def _layer_types_and_kwargs(text_config: Any) -> Tuple[List[str], List[dict]]:
    """transformers' layer types of ``text_config`` and one dict of layer kwargs per layer, on every 5.x release.

    Releases with ``get_layer_types_and_kwargs`` (5.14 on) answer themselves; until 5.18 it returns one kwargs
    dict shared by all layers, from 5.19 one per layer. Older releases inferred the types inside
    ``DynamicCache``/``StaticCache.__init__``, which this follows: the config's ``layer_types``, else all sliding,
    chunked or full from ``sliding_window`` / ``attention_chunk_size``, less the trailing KV-shared layers.
    """
    get = getattr(_tcu, "get_layer_types_and_kwargs", None)
    if get is not None:
        layer_types, kwargs = get(text_config)
        layer_types = list(layer_types)
        if isinstance(kwargs, dict):
            kwargs = [kwargs] * len(layer_types)
        return layer_types, list(kwargs)
    layer_types = getattr(text_config, "layer_types", None)
    if layer_types is None:
        if getattr(text_config, "sliding_window", None) is not None:
            layer_type = "sliding_attention"
        elif getattr(text_config, "attention_chunk_size", None) is not None:
            layer_type = "chunked_attention"
        else:
            layer_type = "full_attention"
        layer_types = [layer_type] * text_config.num_hidden_layers
    shared = getattr(text_config, "num_kv_shared_layers", None) or 0
    layer_types = list(layer_types[:-shared] if shared > 0 else layer_types)
    states = getattr(text_config, "number_of_conv_states", 1)
    kwargs = []
    for layer_type in layer_types:
        kw: dict = {}
        if layer_type == "chunked_attention":
            kw["sliding_window"] = text_config.attention_chunk_size
        elif layer_type in ("sliding_attention", "hybrid_sliding"):
            kw["sliding_window"] = text_config.sliding_window
        if layer_type in _LINEAR_LAYER_TYPES + ("hybrid", "hybrid_sliding"):
            kw["number_of_states"] = states
        kwargs.append(kw)
    return layer_types, kwargs


# Layer types whose transformers layer keeps recurrent states only ("mamba", and "moe" / "mlp" for the blocks of
# hybrid models without attention, which 5.5 to 5.22 give a LinearAttentionLayer that stays empty; from 5.23
# get_layer_types_and_kwargs names those "dummy").
_LINEAR_LAYER_TYPES = ("conv", "linear_attention", "mamba", "moe", "mlp")
_LINEAR_MIXIN = getattr(_tcu, "LinearAttentionCacheLayerMixin", None)
# transformers 5.25 made linear layers count their tokens (increase_count, get_seq_length, a count that crop
# lowers) and keep a history of recurrent states that crop rolls back to: the C linear kinds follow 5.14 to 5.24,
# so such a release gets the refusal a release without linear layers gets (docs/differences-from-transformers.md).
_LINEAR_COUNTS_TOKENS = _LINEAR_MIXIN is not None and hasattr(_LINEAR_MIXIN, "increase_count")
_HAS_LINEAR_LAYERS = (_LINEAR_MIXIN is not None and not _LINEAR_COUNTS_TOKENS
                      and "state_idx" in inspect.signature(_LINEAR_MIXIN.update_conv_state).parameters)
_LINEAR_SINCE = "transformers 5.14"
_LINEAR_RELEASES = _LINEAR_SINCE + (" to 5.24 (from 5.25 linear layers count tokens and keep recurrent-state history "
                                    "for crop, which kvcache's do not yet)" if _LINEAR_COUNTS_TOKENS else " on")
# transformers' DummyLayer (5.23): the layer of a block without attention or of a KV-sharing consumer.
_DummyLayer = getattr(_tcu, "DummyLayer", None)
_DUMMY_SINCE = "transformers 5.23"


def _dummy_layer_has_no_length() -> bool:
    """Whether the installed Cache.get_seq_length(i) asks layer i itself, so that a DummyLayer's index raises
    AttributeError (5.25 on; 5.23 and 5.24 answer for the first attention layer, as the C cache does)."""
    if _DummyLayer is None:
        return False
    try:
        _tcu.Cache(layers=[_DummyLayer(), _tcu.DynamicLayer()]).get_seq_length(0)
    except AttributeError:
        return True
    except Exception:  # noqa: BLE001 - a release whose Cache cannot be built so answers as 5.23
        return False
    return False


_DUMMY_HAS_NO_LENGTH = _dummy_layer_has_no_length()

# Classes of this module that the installed transformers release cannot support: name -> (what they need, the
# first release that has it). They are absent from the module; asking for one raises ImportError (__getattr__).
_UNAVAILABLE = {}
if not _HAS_LINEAR_LAYERS:
    _UNAVAILABLE["KvcacheLinearLayer"] = ("transformers.cache_utils.LinearAttentionCacheLayerMixin with states by "
                                          "index (update_conv_state(..., state_idx)) and no token count",
                                          _LINEAR_SINCE)
if _DummyLayer is None:
    _UNAVAILABLE["KvcacheDummyLayer"] = ("transformers.cache_utils.DummyLayer", _DUMMY_SINCE)


def _unavailable(name: str) -> ImportError:
    needs, since = _UNAVAILABLE[name]
    where = f"{since} and later have it"
    if since == _LINEAR_SINCE and _LINEAR_COUNTS_TOKENS:
        where = f"kvcache's linear layers follow {_LINEAR_RELEASES}"
    return ImportError(f"kvcache.transformers.{name} needs {needs}, which transformers {transformers.__version__} "
                       f"lacks; {where}")


def __getattr__(name: str) -> Any:
    if name in _UNAVAILABLE:
        raise _unavailable(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _layer_class(kind: LayerKind) -> type:
    """The drop-in layer class of a C layer of ``kind``: the subclass of transformers' own layer class
    (kvcache/_transformers_layers.py) where the installed release has one, else the generic kvcache layer
    (ImportError where the installed transformers lacks what the kind needs)."""
    cls = _LAYER_CLASSES.get(kind)
    if cls is not None:
        return cls
    name = ("KvcacheLinearLayer" if kind in _LINEAR else "KvcacheDummyLayer" if kind == LayerKind.DUMMY
            else "KvcacheIndexedLayer" if kind in _INDEXED else "KvcacheLayer")
    if name in _UNAVAILABLE:
        raise _unavailable(name)
    return globals()[name]


# LayerKind -> the public layer class (kvcache/_transformers_layers.py fills it at import)
_LAYER_CLASSES: dict = {}


def _bind_layer(cls: type, cache: "_KvcacheCache", index: int, kind: LayerKind):
    """A layer object of ``cls`` over C layer ``index`` of ``cache``, made without the class's constructor (which
    takes transformers' arguments and makes a layer of its own)."""
    layer = cls.__new__(cls)
    layer._attach_layer(cache, index, kind)
    return layer


def layer_specs_from_config(config: Any, *, static: bool = False, max_cache_len: int = 0) -> List[LayerSpec]:
    """The kvcache layers transformers builds for ``config`` (``DynamicCache(config)``/``StaticCache(config, n)``).

    Follows transformers' own choice of layer types (``get_layer_types_and_kwargs`` where the installed release
    has it), so windows, chunk sizes and state counts are exactly what transformers would use.
    """
    text_config = config.get_text_config(decoder=True)
    layer_types, per_layer_kwargs = _layer_types_and_kwargs(text_config)
    conv_kernel = int(getattr(text_config, "conv_kernel", 0) or 0)
    specs: List[LayerSpec] = []
    for i, (layer_type, kw) in enumerate(zip(layer_types, per_layer_kwargs)):
        window = int(kw.get("sliding_window") or 0)
        states = int(kw.get("number_of_states") or 0)
        if layer_type in _LINEAR_LAYER_TYPES + ("hybrid", "hybrid_sliding") and not _HAS_LINEAR_LAYERS:
            raise NotImplementedError(
                f"kvcache.transformers: layer {i} has layer type {layer_type!r}; the linear-attention layers of "
                f"transformers {transformers.__version__} (none before 5.5, one state of other update semantics "
                f"until 5.13, a token count and recurrent-state history from 5.25) are not kvcache's: the drop-in "
                f"caches such models under {_LINEAR_RELEASES}")
        if layer_type == "full_attention":
            specs.append(LayerSpec(LayerKind.STATIC, max_cache_len=max_cache_len) if static
                         else LayerSpec(LayerKind.DYNAMIC))
        elif layer_type in ("sliding_attention", "chunked_attention"):
            chunked = layer_type == "chunked_attention"
            if static:
                kind = LayerKind.STATIC_CHUNKED if chunked else LayerKind.STATIC_SLIDING
                specs.append(LayerSpec(kind, window=window, max_cache_len=max_cache_len))
            else:
                kind = LayerKind.DYNAMIC_CHUNKED if chunked else LayerKind.DYNAMIC_SLIDING
                specs.append(LayerSpec(kind, window=window))
        elif layer_type in _LINEAR_LAYER_TYPES:
            specs.append(LayerSpec(LayerKind.LINEAR, num_states=states, conv_kernel_size=conv_kernel))
        elif layer_type == "hybrid":
            kind = LayerKind.LINEAR_STATIC if static else LayerKind.LINEAR_DYNAMIC
            specs.append(LayerSpec(kind, max_cache_len=max_cache_len if static else 0, num_states=states,
                                   conv_kernel_size=conv_kernel))
        elif layer_type == "hybrid_sliding":
            kind = LayerKind.LINEAR_STATIC_SLIDING if static else LayerKind.LINEAR_DYNAMIC_SLIDING
            specs.append(LayerSpec(kind, window=window, max_cache_len=max_cache_len if static else 0,
                                   num_states=states, conv_kernel_size=conv_kernel))
        elif layer_type == "dummy":
            # DummyLayer (5.23 on; get_layer_types_and_kwargs also names "moe"/"mlp" blocks and the layers that
            # kv_sharing_modes marks "reuse" so): no storage, in DynamicCache and StaticCache alike.
            if _DummyLayer is None:
                raise NotImplementedError(
                    f"kvcache.transformers: layer {i} has layer type 'dummy', for which transformers "
                    f"{transformers.__version__} has no DummyLayer; {_DUMMY_SINCE} and later have it")
            specs.append(LayerSpec(LayerKind.DUMMY))
        elif layer_type in ("indexed_attention", "deepseek_sparse_attention"):
            # DynamicIndexedLayer / StaticIndexedLayer (transformers >= 5.11; the type's name until some release
            # after 5.17 was "deepseek_sparse_attention")
            specs.append(LayerSpec(LayerKind.STATIC_INDEXED, max_cache_len=max_cache_len) if static
                         else LayerSpec(LayerKind.DYNAMIC_INDEXED))
        else:
            raise NotImplementedError(f"kvcache.transformers: layer {i} has layer type {layer_type!r}, which kvcache "
                                      "has no layer kind for")
    return specs


# ---------------------------------------------------------------- layers

class _LayerOverC:
    """transformers' layer interface over C layer ``index`` of a kvcache cache: the methods of every drop-in
    layer class. No transformers base of its own, so that a linear-attention layer, which transformers does not
    make a CacheLayerMixin, is none here either (5.24's Cache.is_linear asks)."""

    supports_early_init = True  # CacheLayerMixin has it from 5.14; the cache's is_initialized reads it
    # transformers' CacheLayerMixin.__init_subclass__ (5.14 on) registers a subclass naming a _layer_type as the
    # class its own caches build for that layer type: the drop-in's subclasses must never take those slots.
    _layer_type = None

    def __init__(self, cache: "_KvcacheCache", index: int, kind: LayerKind) -> None:
        self._attach_layer(cache, index, kind)

    def _attach_layer(self, cache: "_KvcacheCache", index: int, kind: LayerKind) -> None:
        self._cache = cache
        self._index = index
        self.kind = kind
        self.is_sliding = kind in _SLIDING

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._index}, {self.kind.name.lower()})"

    @property
    def is_compileable(self) -> bool:  # type: ignore[override]
        # A property, not an attribute: transformers 5.24's linear-attention mixin makes it one, which an
        # assignment in __init__ could not override.
        return self.kind in (LayerKind.STATIC, LayerKind.STATIC_SLIDING, LayerKind.STATIC_CHUNKED,
                             LayerKind.STATIC_INDEXED)

    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        return self._cache._kv.layer_is_croppable(self._index)

    @property
    def info(self):
        return self._cache._kv.layer_info(self._index)

    @property
    def is_initialized(self) -> bool:  # type: ignore[override]
        return self.info.is_initialized

    @property
    def keys(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        kv = self._cache._layer_tensors(self._index)
        return None if kv is None else kv[0]

    @property
    def values(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        kv = self._cache._layer_tensors(self._index)
        return None if kv is None else kv[1]

    @property
    def device(self) -> Optional[torch.device]:
        """The cache's torch device once it is placed (None before, as a lazy transformers layer)."""
        return self._cache.device

    @property
    def max_cache_len(self) -> int:
        # A static layer's slots (min(window, max_cache_len) for the sliding ones), as transformers' attribute,
        # also where get_max_length says -1 (the static linear hybrids)
        if self.kind in _STATIC:
            return self.info.capacity
        return self._cache._kv.get_max_length(self._index)

    @property
    def sliding_window(self) -> Optional[int]:
        w = self.info.window
        return w or None

    @property
    def dtype(self) -> Optional[torch.dtype]:
        """The dtype of the layer's keys (None before its first tensors, as a lazy transformers layer)."""
        keys = self.keys
        return None if keys is None else keys.dtype

    @property
    def cumulative_length(self) -> int:
        return self.get_seq_length()

    @property
    def record_past(self) -> bool:
        return self.info.records_past

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> None:
        if self.kind == LayerKind.QUANTIZED_FP8:
            # Its first update calibrates the fp8 scales on the states: empty ones would fix them to the minimum.
            raise NotImplementedError("kvcache.transformers: an fp8 quantized layer calibrates its scales on its "
                                      "first update and cannot be initialized with empty states")
        # A zero-token update fixes the layer's batch, heads, head dims and dtype without storing anything.
        self._cache.update(key_states[..., :0, :], value_states[..., :0, :], self._index)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return self._cache.update(key_states, value_states, self._index, *args, **kwargs)

    def get_seq_length(self) -> int:
        return self._cache._kv.get_seq_length(self._index)

    def get_max_length(self) -> int:
        return self._cache._kv.get_max_length(self._index)

    def get_max_cache_shape(self) -> int:
        # transformers 5.0 to 5.13 name get_max_length so (an abstract method of their CacheLayerMixin)
        return self.get_max_length()

    def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
        return self._cache._kv.get_mask_sizes(_query_length(query_length), self._index)

    def offload(self) -> None:
        self._cache._kv.offload(self._index)

    def prefetch(self) -> None:
        self._cache._kv.prefetch(self._index)

    def _whole_cache(self, name: str, *args: Any) -> None:
        """An operation the C API applies to a whole cache: the layer's own when it is its cache's only layer (a
        layer made on its own, ``StaticLayer(16)``), else refused."""
        if len(self._cache.layers) == 1:
            getattr(self._cache, name)(*args)
            return
        raise NotImplementedError(f"kvcache layers are parts of one C cache: call {name}() on the cache, which "
                                  "applies it to every layer in one call")

    def reset(self) -> None:
        self._whole_cache("reset")

    def crop(self, tokens_to_remove: int) -> None:
        self._whole_cache("crop", tokens_to_remove)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._whole_cache("reorder_cache", beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._whole_cache("batch_repeat_interleave", repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._whole_cache("batch_select_indices", indices)

    def activate_past_recording(self, **kwargs: Any) -> None:
        # transformers 5.25 passes recurrent_states_to_keep, which concerns linear layers only (not kvcache's there)
        self._whole_cache("activate_past_recording")

    def __deepcopy__(self, memo):
        # The copy of a layer is the same layer of a copy of its cache (the C cache copies all its layers at once).
        return copy.deepcopy(self._cache, memo).layers[self._index]

    def __copy__(self):
        return self.__deepcopy__({})


class KvcacheLayer(_LayerOverC, _tcu.CacheLayerMixin):
    """One attention layer of a kvcache-backed cache: transformers' layer interface over C layer ``index``.

    ``keys``/``values`` are zero-copy torch views of what the layer stores. Operations that act on the whole
    cache in C (crop, reorder, batch operations, reset) are called on the cache.
    """


# transformers 5.0 to 5.4 have no linear-attention layers in cache_utils (Mamba and Jamba kept their own caches),
# 5.5 to 5.13 layers of one conv and one recurrent state with conv-state updates of other semantics; the C linear
# kinds follow 5.14 on (states by index). Before that this class is left out of the module, and asking for it
# raises an ImportError that says so (__getattr__).
_LinearAttentionMixin = getattr(_tcu, "LinearAttentionCacheLayerMixin", None)


# _LayerOverC first: ahead of every transformers class in the MRO of the subclasses that add transformers' hybrid
# layers (whose DynamicLayer / StaticLayer methods would otherwise come first)
class KvcacheLinearLayer(_LayerOverC, *([_LinearAttentionMixin] if _LinearAttentionMixin else [])):
    """A linear-attention layer (conv and SSM states; and K/V for the hybrid kinds) over a C layer.

    As transformers' LinearAttentionLayer it is no CacheLayerMixin (nor a KvcacheLayer); the hybrids are, through
    their transformers base (LinearAttentionAndFullAttentionLayer subclasses DynamicLayer, ...)."""

    # False for the hybrids too, as transformers' linear-attention mixin (first in their MRO) has it: a cache's
    # is_initialized asks its attention layers only
    supports_early_init = False
    is_compileable = _LayerOverC.is_compileable  # ahead of the mixin's own property (5.24)

    def __repr__(self) -> str:
        return _LayerOverC.__repr__(self)

    @property
    def number_of_states(self) -> int:
        return max(1, self.info.num_states)

    @property
    def conv_states(self) -> dict:
        return {i: self._cache.get_conv_state(self._index, i) for i in range(self.number_of_states)}

    @property
    def recurrent_states(self) -> dict:
        return {i: self._cache.get_recurrent_state(self._index, i) for i in range(self.number_of_states)}

    @property
    def has_previous_state(self) -> dict:  # type: ignore[override]
        return {i: self._cache.has_previous_state(self._index, i) for i in range(self.number_of_states)}

    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        return self._cache._kv.layer_is_croppable(self._index)

    def lazy_initialization(self, *args, **kwargs) -> None:
        if len(args) == 2 and self.kind != LayerKind.LINEAR:
            _LayerOverC.lazy_initialization(self, *args)

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        return self._cache.update_conv_state(conv_states, self._index, state_idx, **kwargs)

    def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        return self._cache.update_recurrent_state(recurrent_states, self._index, state_idx)

    def get_max_length(self) -> int:
        return _LayerOverC.get_max_length(self)

    def offload(self) -> None:
        _LayerOverC.offload(self)

    def prefetch(self) -> None:
        _LayerOverC.prefetch(self)

    def reset(self) -> None:
        _LayerOverC.reset(self)

    def crop(self, tokens_to_remove: int) -> None:
        _LayerOverC.crop(self, tokens_to_remove)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        _LayerOverC.reorder_cache(self, beam_idx)

    def activate_past_recording(self, **kwargs: Any) -> None:
        _LayerOverC.activate_past_recording(self, **kwargs)


class KvcacheIndexedLayer(KvcacheLayer):
    """DynamicIndexedLayer / StaticIndexedLayer over a C layer: K/V plus the sparse-attention indexer's keys.

    ``indexer_position_ids`` is model-side state the cache never writes (transformers crops and reorders it);
    it is kept as a plain attribute here and not cropped or reordered (docs/differences-from-transformers.md).
    """

    def _attach_layer(self, cache: "_KvcacheCache", index: int, kind: LayerKind) -> None:
        KvcacheLayer._attach_layer(self, cache, index, kind)
        self.indexer_position_ids: Optional[torch.Tensor] = None

    @property
    def indexer_keys(self) -> Optional[torch.Tensor]:
        return _torch(self._cache._kv.get_indexer_keys(self._index))

    @property
    def is_indexer_initialized(self) -> bool:
        return self._cache._kv.get_indexer_keys(self._index) is not None

    def update_indexer(self, indexer_key_states: torch.Tensor) -> torch.Tensor:
        return self._cache.update_indexer(indexer_key_states, self._index)

    def lazy_initialization_indexer(self, indexer_key_states: torch.Tensor) -> None:
        # A zero-row update fixes the indexer's batch, head dim and dtype (its buffer, for the static kind) without
        # storing anything; transformers' dynamic layer starts from a 1-D empty tensor, this one from [batch, 0, D].
        self._cache.update_indexer(indexer_key_states[:, :0], self._index)


class KvcacheDummyLayer(*([_DummyLayer] if _DummyLayer else [])):
    """transformers' DummyLayer (5.23) over a C layer of kind DUMMY: a block without attention ("moe", "mlp") or a
    layer that reads another layer's keys and values (``kv_sharing_modes`` "reuse").

    It is a ``DummyLayer`` and, like it, no ``CacheLayerMixin``: it stores nothing (``keys``/``values`` None, always
    initialized), ``update`` raises ``NotImplementedError`` but for ``(None, None)``, which it returns, and its other
    operations do nothing; the cache's operations pass over the C layer the same way. Left out of the module, with
    an ImportError naming the release, before 5.23.
    """

    _layer_type = None  # never registered as a layer type's class (KvcacheLayer)

    def __init__(self, cache: "_KvcacheCache", index: int, kind: LayerKind) -> None:
        self._attach_layer(cache, index, kind)

    def _attach_layer(self, cache: "_KvcacheCache", index: int, kind: LayerKind) -> None:
        _DummyLayer.__init__(self)
        self._cache = cache
        self._index = index
        self.kind = kind

    __deepcopy__ = _LayerOverC.__deepcopy__
    __copy__ = _LayerOverC.__copy__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._index}, dummy)"


# ---------------------------------------------------------------- caches

class _KvcacheCache:
    """transformers' Cache API over one kvcache cache (``self._kv``); mixed into subclasses of transformers' caches.

    ``self._make(device)`` creates the C cache on a kvcache device pair. Until the cache is placed (``device=``, or
    the first tensors) ``_kv`` is a CPU cache without storage and ``_views`` is None; placing recreates it on the
    tensors' device if that is not the CPU. ``_views`` (the extension's TorchViews) makes the per-layer update one
    C call and remembers the tensors it returned (static layers return the same tensors at every step).

    ``update`` of layers below ``_fast_layers`` is that one call. A cache that compiles (``_compiles``: StaticCache,
    kvcache/_torch_compile.py) publishes the stable tensors of its STATIC layers for compiled code; the first
    update of such a layer, before its buffers exist, goes through ``_update``, which publishes them.
    """

    _kv: _cache.Cache
    layers: list
    _compiles = False
    # LayerKind -> the layer class of this cache's C layers where it is not _layer_class(kind) (QuantizedCache's
    # backend picks the quantized layer's class)
    _kind_classes: dict = {}
    # The LayerSpec of each C layer where the cache was built from specs (a quantized layer's options are read
    # from its spec: the C layer info does not carry them)
    _specs: Sequence[LayerSpec] = ()

    def _attach(self, make, device: Any = None, from_tensors: Optional[list] = None, *, offloading: bool = False,
                offload_only_non_sliding: bool = True, layers: Sequence[Any] = ()) -> None:
        """Creates the C cache (``make``) and its layers; ``layers``: layer objects to take as the layers of
        ``self._specs`` (their classes kept), rebound to this cache."""
        if device is None and from_tensors:
            device = next((k.device for k, _ in from_tensors if isinstance(k, torch.Tensor)), None)
        self._make = make
        self._recording = False
        _tcu.Cache.__init__(self, layers=[])
        for i, layer in enumerate(layers):
            layer._attach_layer(self, i, self._specs[i].kind)
        self.layers = list(layers)
        # kvcache offloads inside the C update; transformers' stream-based offloading stays off.
        self.offloading = False
        self._offloading_requested = offloading
        self.only_non_sliding = offload_only_non_sliding
        pair = CPU if device is None else device_pair(device)
        kv = make(pair) if from_tensors is None else make(pair, from_tensors)
        self._bind(kv, pair, placed=device is not None)

    def _bind(self, kv: _cache.Cache, device: DevicePair, placed: bool) -> None:
        self._kv = kv
        self._device = device
        self._views = torch_views(kv._handle, device) if placed else None
        self._num_layers = 0
        self._sync_layers()
        if self._compiles and self._views is not None:
            self._publish()

    def _place(self, device: Any) -> None:
        """Fixes the cache's device at its first tensors (a lazy layer's lazy_initialization)."""
        pair = device_pair(device)
        if self._views is not None:
            if pair != self._device:
                raise ValueError(f"kvcache.transformers: the cache lives on {self.device} but was given tensors on "
                                 f"{device}; one cache lives on one device")
            return
        kv = self._kv
        if pair != self._device:  # the stand-in stored nothing: the cache is made again where the tensors are
            kv = self._make(pair)
            if self._recording:
                kv.activate_past_recording()
        self._bind(kv, pair, placed=True)

    def _follow_stream(self) -> None:
        """Orders the C calls that follow on torch's current stream (update does this itself)."""
        if self._views is not None and self._device != CPU:
            _torch_follow_stream(self._views)

    def _sync_layers(self) -> None:
        n = len(self._kv)
        for i in range(len(self.layers), n):
            kind = self._kv.layer_info(i).kind
            self.layers.append(_bind_layer(self._kind_classes.get(kind) or _layer_class(kind), self, i, kind))
        self._num_layers = self._fast_layers = len(self.layers)
        # What never changes per layer, kept as Python lists: masks ask for them at every forward (compiled too).
        self._dummy = [layer.kind == LayerKind.DUMMY for layer in self.layers]
        self._linear = [self._kv.layer_info(i).is_linear if layer.kind in _LINEAR else False
                        for i, layer in enumerate(self.layers)]
        # The layer answering length queries for layer 0 when layer 0 has no K/V (core/cache.c).
        self._first_kv = next((i for i, layer in enumerate(self.layers)
                               if layer.kind not in (LayerKind.LINEAR, LayerKind.DUMMY)), 0)

    # -- torch.compile (kvcache/_torch_compile.py)
    def _publish(self) -> None:
        """Publishes the (keys, values) of every STATIC layer whose buffers exist; updates of the others go through
        _update until they do."""
        stores = [_torch_layer_view(self._views, i) if layer.kind == LayerKind.STATIC else None
                  for i, layer in enumerate(self.layers)]
        _torch_compile.publish(self, self._views, stores)
        self._fast_layers = next((i for i, (layer, store) in enumerate(zip(self.layers, stores))
                                  if layer.kind == LayerKind.STATIC and store is None), self._num_layers)

    def _publish_layer(self, layer_idx: int) -> None:
        """After the first update of a STATIC layer: publishes its tensors alone (a prefill updates every layer)."""
        stores = list(self._views.record.stores)
        stores[layer_idx] = _torch_layer_view(self._views, layer_idx)
        _torch_compile.publish(self, self._views, stores)
        self._fast_layers = next((i for i in range(self._fast_layers, self._num_layers)
                                  if self.layers[i].kind == LayerKind.STATIC and stores[i] is None), self._num_layers)

    def _compiled_store(self, layer_idx: int):
        """In compiled code: (store, token) of the published STATIC layer that answers for ``layer_idx``, or None
        (the query is then a C call at a graph break)."""
        record = None if self._views is None else self._views.record
        if record is None or not 0 <= layer_idx < self._num_layers:
            return None
        if layer_idx == 0:
            layer_idx = self._first_kv
        store = record.stores[layer_idx] if layer_idx < len(record.stores) else None
        return None if store is None else (store, record.token)

    def _layer_tensors(self, layer_idx: int) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        if self._views is None:
            return None
        return _torch_layer_view(self._views, layer_idx)

    @property
    def device(self) -> Optional[torch.device]:
        """Where the cache lives (None until its first tensors or ``device=`` place it)."""
        if self._views is None:
            return None
        if self._device == CPU:
            return torch.device("cpu")
        return torch.device("cuda", self._device[1])

    @classmethod
    def _wrap(cls, kv: _cache.Cache, like: "_KvcacheCache"):
        """A cache of ``like``'s class and settings over ``kv`` (a clone of like's C cache)."""
        obj = cls.__new__(cls)
        own = ("layers", "_kv", "_views", "_device", "_num_layers", "_fast_layers", "_dummy", "_linear", "_first_kv")
        obj.__dict__.update({k: v for k, v in like.__dict__.items() if k not in own})
        obj.layers = [_bind_layer(type(layer), obj, i, layer.kind) for i, layer in enumerate(like.layers)]
        obj._bind(kv, like._device, placed=like._views is not None)
        return obj

    # -- update
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        # The per-layer hot path of a decode step: one C call (kvcache_torch.h), no tensor made in Python.
        views = self._views
        if views is not None and not args and not kwargs and layer_idx < self._fast_layers:
            try:
                return _update_torch(views, layer_idx, key_states, value_states)
            except (KvcacheError, TypeError):
                if not self._dummy[layer_idx]:
                    raise
        return self._update(key_states, value_states, layer_idx, args[0] if args else kwargs.get("cache_kwargs"))

    def _update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, cache_kwargs: Any):
        if layer_idx < self._num_layers and self._dummy[layer_idx]:
            # As transformers' Cache.update, the dummy layer answers: (None, None) for (None, None), else
            # NotImplementedError (the C layer refuses every update, as UNSUPPORTED, and stays unplaced).
            return self.layers[layer_idx].update(key_states, value_states)
        if self._views is None:
            self._place(key_states.device)
        # The drop-in's layers read no RoPE tables (no sink layers); cache_position matters to static layers only.
        positions = None
        if cache_kwargs and layer_idx < self._num_layers and self.layers[layer_idx].kind in _STATIC:
            positions = cache_kwargs.get("cache_position")
            if isinstance(positions, torch.Tensor) and positions.device.type != "cpu":
                positions = positions.cpu()  # the C API takes host positions: one small read from the device
        out = _update_torch(self._views, layer_idx, key_states, value_states, positions)
        if layer_idx >= self._num_layers:
            self._sync_layers()
            if self._compiles:
                self._publish()
        elif layer_idx >= self._fast_layers and self._compiles:
            self._publish_layer(layer_idx)
        return out

    # -- queries (in compiled code a published STATIC layer answers without a C call, as transformers' StaticLayer:
    # lengths as 0-d tensors, mask sizes from its shape)
    def get_seq_length(self, layer_idx: int = 0) -> int:
        if _is_compiling():
            compiled = self._compiled_store(layer_idx)
            if compiled is not None:
                return _torch_compile.seq_length(*compiled, layer_idx)
        if _DUMMY_HAS_NO_LENGTH and layer_idx < self._num_layers and self._dummy[layer_idx]:
            # 5.25 asks the layer itself, and a DummyLayer has no get_seq_length (5.23 and 5.24 asked the first
            # attention layer instead, as the C cache does)
            raise AttributeError(f"'{type(self.layers[layer_idx]).__name__}' object has no attribute 'get_seq_length'")
        return self._kv.get_seq_length(layer_idx)

    def get_max_length(self, layer_idx: Optional[int] = None) -> int:
        return self._kv.get_max_length(layer_idx)

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        # transformers 5.0 to 5.19 (deprecated from 5.14): get_max_length of one layer, the first by default
        return self._kv.get_max_length(layer_idx)

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> Tuple[int, int]:
        if _is_compiling():
            compiled = self._compiled_store(layer_idx)
            if compiled is not None:  # a STATIC layer's mask spans all its slots from 0 (core/layer_static.c)
                return compiled[0][0].shape[2], 0
        return self._kv.get_mask_sizes(_query_length(query_length), layer_idx)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        if _is_compiling():  # the drop-in's caches have the standard rule: the offset is the layer's length
            compiled = self._compiled_store(layer_idx)
            if compiled is not None:
                return _torch_compile.seq_length(*compiled, layer_idx)
        return self._kv.get_query_offset(layer_idx)

    def get_usable_length(self, new_seq_length: int, layer_idx: int = 0) -> int:
        return self._kv.get_usable_length(new_seq_length, layer_idx)

    @property
    def batch_size(self) -> int:
        return self._kv.batch_size

    @property
    def is_compileable(self) -> bool:
        return len(self.layers) > 0 and all(layer.is_compileable for layer in self.layers)

    @property
    def is_initialized(self) -> bool:
        layers = [layer for layer in self.layers if layer.supports_early_init]
        return len(layers) > 0 and all(layer.is_initialized for layer in layers)

    @property
    def is_croppable(self) -> bool:
        return self._kv.is_croppable

    @property
    def is_sliding(self) -> List[bool]:
        return [getattr(layer, "is_sliding", False) for layer in self.layers]  # a DummyLayer has no is_sliding

    @property
    def is_linear(self) -> List[bool]:
        return list(self._linear)

    @property
    def is_dummy(self) -> List[bool]:
        return list(self._dummy)

    def is_recording_past(self, layer_idx: int) -> bool:
        layer = self.layers[layer_idx]
        return self._recording and (getattr(layer, "is_sliding", False) or layer.kind in _LINEAR)

    # -- operations on every layer, one C call each (issued on torch's current stream for a device cache)
    def crop(self, tokens_to_remove: int) -> None:
        self._follow_stream()
        self._kv.crop(tokens_to_remove)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        # kvc_cache_reorder takes host indices (it plans which rows move on the host, copying only those): a device
        # beam_idx costs one read of batch int64s to the host. Beam search reads its scores on the host at every
        # step anyway.
        self._follow_stream()
        indices = _host_indices(beam_idx)
        # To another batch size the layers get new buffers, which compiled code must see (the same size: in place).
        moved = self._compiles and self._views is not None and len(indices) != self._kv.batch_size
        self._kv.reorder_cache(indices)
        if moved:
            self._publish()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._follow_stream()
        self._kv.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        # As reorder_cache: the C API takes host indices (a boolean mask's indices are found on the host too).
        if isinstance(indices, torch.Tensor):
            indices = _host_indices(indices)
            if indices.dtype == torch.bool:
                indices = indices.nonzero().flatten()
        self._follow_stream()
        self._kv.batch_select_indices(indices)

    def reset(self) -> None:
        self._follow_stream()
        self._kv.reset()

    def activate_past_recording(self, **kwargs: Any) -> None:
        # transformers 5.25's assisted decoding passes recurrent_states_to_keep: how many intermediate recurrent
        # states linear layers keep for crop. The drop-in has linear layers only under releases without it.
        self._kv.activate_past_recording()
        self._recording = True

    def get_recurrent_states_to_keep(self, layer_idx: Optional[int] = None) -> int:
        """transformers 5.25's question of how many intermediate recurrent states a linear layer keeps while
        recording: 0, as transformers answers for attention layers (the drop-in has linear layers only under
        releases that do not ask)."""
        return 0

    def early_initialization(self, batch_size: int, num_heads, head_dim, dtype: torch.dtype,
                             device: Any = None) -> None:
        """Allocates every layer now, on ``device`` (transformers' default device when None), in ``dtype``."""
        self._place(default_device() if device is None else device)
        self._follow_stream()
        self._kv.early_initialization(batch_size, num_heads, head_dim, dtype)
        if self._compiles:
            self._publish()

    def offload(self, layer_idx: int, only_non_sliding: bool = True) -> None:
        if not (only_non_sliding and getattr(self.layers[layer_idx], "is_sliding", False)):
            self._follow_stream()
            self._kv.offload(layer_idx)

    def prefetch(self, layer_idx: int, only_non_sliding: bool = True) -> None:
        self._follow_stream()
        self._kv.prefetch(layer_idx)

    # -- linear attention (Mamba, Jamba, Bamba): states are zero-copy torch views of C memory
    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> Optional[torch.Tensor]:
        if not self._kv.has_previous_state(layer_idx, state_idx):
            return None
        self._follow_stream()
        return _torch(self._kv.get_conv_state(layer_idx, state_idx))

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> Optional[torch.Tensor]:
        if not self._kv.has_previous_state(layer_idx, state_idx):
            return None
        self._follow_stream()
        return _torch(self._kv.get_recurrent_state(layer_idx, state_idx))

    def update_indexer(self, indexer_key_states: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """Cache.update_indexer (transformers >= 5.11): the layer's whole indexer store, as a torch view."""
        if self._views is None:
            self._place(indexer_key_states.device)
        self._follow_stream()
        return _torch(self._kv.update_indexer(indexer_key_states.detach(), layer_idx))

    def update_conv_state(self, conv_states: torch.Tensor, layer_idx: int, state_idx: int = 0,
                          **kwargs) -> torch.Tensor:
        if self._views is None:
            self._place(conv_states.device)
        self._follow_stream()
        positions = kwargs.get("cache_position")
        view = self._kv.update_conv_state(conv_states.detach(), layer_idx, state_idx,
                                          conv_kernel_size=kwargs.get("conv_kernel_size"),
                                          cache_position=None if positions is None else _host_indices(positions))
        return _torch(view)

    def update_recurrent_state(self, recurrent_states: torch.Tensor, layer_idx: int, state_idx: int = 0,
                               **kwargs) -> torch.Tensor:
        if self._views is None:
            self._place(recurrent_states.device)
        self._follow_stream()
        return _torch(self._kv.update_recurrent_state(recurrent_states.detach(), layer_idx, state_idx))

    def has_previous_state(self, layer_idx: Optional[int] = None, state_idx: Optional[int] = None) -> bool:
        if layer_idx is not None and layer_idx >= len(self.layers):
            return False
        try:
            return self._kv.has_previous_state(layer_idx, state_idx)
        except KvcacheError as e:
            raise ValueError(str(e)) from e

    # -- python protocol
    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]]:
        for layer in self.layers:
            w = getattr(layer, "sliding_window", None)  # None on a DummyLayer, as its keys and values
            yield layer.keys, layer.values, (torch.tensor(w) if getattr(layer, "is_sliding", False) and w else None)

    def __deepcopy__(self, memo):
        self._follow_stream()
        return type(self)._wrap(self._kv.clone(), like=self)  # on the same device, with the same stream

    def __copy__(self):
        return self.__deepcopy__({})

    def __repr__(self) -> str:
        return f"kvcache.transformers.{type(self).__name__}({self._kv!r})"

    @property
    def kvcache(self) -> _cache.Cache:
        """The underlying :class:`kvcache.Cache` (zero-copy views, memory info, update_all ...).

        Before the cache is placed (see the module's docstring) this is the CPU stand-in, which placing replaces.
        """
        return self._kv


def _offload_mode(offloading: bool, only_non_sliding: bool) -> Offload:
    if not offloading:
        return Offload.DEFAULT
    return Offload.NON_SLIDING if only_non_sliding else Offload.ALL


def _maker(preset: Preset, **options: Any):
    """make(device[, from_tensors]) -> a new C cache of these options on ``device`` (for _KvcacheCache._attach)."""

    def make(device: DevicePair, from_tensors: Optional[list] = None) -> _cache.Cache:
        kv = _cache.Cache.__new__(_cache.Cache)
        kv._create(preset, None, device=device, from_tensors=from_tensors, **options)
        return kv

    return make


class DynamicCache(_KvcacheCache, _tcu.DynamicCache):
    """transformers' DynamicCache over kvcache: ``DynamicCache(config=model.config)`` (or lazy without a config).

    ``device=`` places the cache at construction; without it the first tensors do. ``allocator=`` (a
    :class:`kvcache.Allocator`, e.g. :class:`kvcache.TorchAllocator` on the CPU) holds the K/V stores: the tensors
    ``update`` returns are then slices of the allocator's.
    """

    def __init__(self, ddp_cache_data: Optional[Sequence[Tuple[torch.Tensor, ...]]] = None, config: Any = None,
                 offloading: bool = False, offload_only_non_sliding: bool = False, *, device: Any = None,
                 allocator: Any = None) -> None:
        offload = _offload_mode(offloading, offload_only_non_sliding)
        pairs = None if ddp_cache_data is None else [tuple(p)[:2] for p in ddp_cache_data]
        if config is not None:
            make = _maker(Preset.CUSTOM, layers=layer_specs_from_config(config), offload=offload, allocator=allocator)
        else:
            make = _maker(Preset.DYNAMIC, offload=offload, allocator=allocator)
        self._attach(make, device, pairs, offloading=offloading, offload_only_non_sliding=offload_only_non_sliding)


class OffloadedCache(DynamicCache):
    """DynamicCache(offloading=True): layers rest in the host tier between their updates.

    transformers 4.x's name (deprecated from 4.56 for ``DynamicCache(offloading=True)``, removed in transformers
    5.0); an instance of transformers' DynamicCache."""

    def __init__(self, config: Any = None, offload_only_non_sliding: bool = False, *, device: Any = None,
                 allocator: Any = None) -> None:
        super().__init__(config=config, offloading=True, offload_only_non_sliding=offload_only_non_sliding,
                         device=device, allocator=allocator)


class StaticCache(_KvcacheCache, _tcu.StaticCache):
    """transformers' StaticCache(config, max_cache_len) over kvcache: one static layer per config layer type.

    ``device=`` (a keyword, as transformers 4 took it) creates the cache on that device at once; its layers take
    their buffers at the first update or ``early_initialization``, as transformers' StaticLayer, and keep them:
    ``update`` returns the same tensors (same addresses) at every step. ``allocator=`` holds those buffers (see
    :class:`DynamicCache`). Other keywords are accepted and ignored, as transformers 5 does.

    Under ``torch.compile`` the full-attention layers' update, length and mask queries are graph operations (the
    custom ops of kvcache/_torch_compile.py over those tensors, marked as static addresses); see the module's
    docstring for what does not compile and for CUDA graphs.
    """

    def __init__(self, config: Any, max_cache_len: int, offloading: bool = False,
                 offload_only_non_sliding: bool = True, **kwargs: Any) -> None:
        specs = layer_specs_from_config(config, static=True, max_cache_len=max_cache_len)
        # Its STATIC layers compile (kvcache/_torch_compile.py); offloaded ones move between tiers, so they do not.
        self._compiles = _torch_compile.SUPPORTED and not offloading
        make = _maker(Preset.CUSTOM, layers=specs, offload=_offload_mode(offloading, offload_only_non_sliding),
                      transformers_release=_installed_release(), allocator=kwargs.get("allocator"))
        self._attach(make, kwargs.get("device"), offloading=offloading,
                     offload_only_non_sliding=offload_only_non_sliding)
        self._max_cache_len = max_cache_len

    @property
    def max_cache_len(self) -> int:  # type: ignore[override]
        # A property: transformers 5.0 to 5.19 define a read-only (deprecated) one on Cache. A deep copy (made by
        # _wrap, without __init__) asks the C cache, whose full-attention layers hold max_cache_len slots.
        return self.__dict__.get("_max_cache_len") or max(self._kv.get_max_length(i) for i in range(len(self)))


class SlidingWindowCache(StaticCache):
    """StaticCache under transformers 4.x's name: layers follow the config (sliding where it says so).

    Removed in transformers 5.0; later 5.x releases (5.17, 5.23, 5.24 here) define ``SlidingWindowCache`` again as
    a deprecated alias of ``StaticCache``, so an instance is an instance of both wherever transformers has the
    name."""


class HybridCache(StaticCache):
    """StaticCache under transformers 4.x's name (Gemma 2/3 configs give sliding and full layers): deprecated
    from 4.56, removed in transformers 5.0. An instance of transformers' StaticCache."""


class HybridChunkedCache(StaticCache):
    """StaticCache under transformers 4.x's name (chunked layers where the config says so): deprecated from 4.56,
    removed in transformers 5.0. An instance of transformers' StaticCache."""


class OffloadedStaticCache(StaticCache):
    """StaticCache(offloading=True): non-sliding layers rest in the host tier between their updates.

    transformers 4.x's name (deprecated from 4.56, removed in transformers 5.0); an instance of transformers'
    StaticCache."""

    def __init__(self, config: Any, max_cache_len: int, offload_only_non_sliding: bool = True, **kwargs: Any):
        super().__init__(config, max_cache_len, offloading=True, offload_only_non_sliding=offload_only_non_sliding,
                         **kwargs)


class QuantizedCache(_KvcacheCache, _tcu.QuantizedCache):
    """transformers' QuantizedCache(backend, config, ...) over kvcache's quantized layers.

    ``backend="quanto"`` / ``"hqq"``: group-wise integer layers; ``mode="transformers"`` (the default here) follows
    transformers' quantization timeline exactly, so a model generates the same tokens as with transformers'
    QuantizedCache; ``mode="incremental"`` quantizes each token once (constant cost per step).
    ``backend="fp8"``: transformers' Fp8QuantizedLayer (float8 e4m3fn, one scale per tensor fixed by the first
    update), which takes none of the group-wise options. ``allocator=`` holds the layers' K/V stores (the
    residual tokens of the group-wise backends; the quantized records stay the library's).
    """

    _GROUP_WISE = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")

    def __init__(self, backend: str, config: Any, nbits: Optional[int] = None, axis_key: Optional[int] = None,
                 axis_value: Optional[int] = None, q_group_size: Optional[int] = None,
                 residual_length: Optional[int] = None, mode: str = "transformers", *, device: Any = None,
                 allocator: Any = None) -> None:
        if backend not in ("quanto", "hqq", "fp8"):
            raise ValueError(f"kvcache.transformers.QuantizedCache: backend {backend!r}; kvcache implements "
                             "'quanto', 'hqq' and 'fp8'")
        group_wise = dict(zip(self._GROUP_WISE, (nbits, axis_key, axis_value, q_group_size, residual_length)))
        if backend == "fp8":
            unsupported = [name for name, value in group_wise.items() if value is not None]
            if unsupported:
                raise ValueError(f"The `fp8` backend quantizes per-tensor and does not support {unsupported}. Use "
                                 "the `quanto` or `hqq` backend to quantize group-wise.")
            if mode != "transformers":
                raise ValueError(f"kvcache.transformers.QuantizedCache: mode {mode!r} is for the group-wise "
                                 "backends; the `fp8` backend quantizes each token once with fixed scales")
        text_config = config.get_text_config(decoder=True)
        layer_types, _ = _layer_types_and_kwargs(text_config)
        invalid = set(layer_types) - {"full_attention"}
        if invalid:
            raise ValueError("`QuantizedCache` is only supported for models with only full attention layers. "
                             f"We found the following invalid layer types: {invalid}")
        if backend == "fp8":
            specs = [LayerSpec(LayerKind.QUANTIZED_FP8) for _ in range(text_config.num_hidden_layers)]
        else:
            d = QuantOptions()
            quant = QuantOptions(quantizer=backend, mode=mode,
                                 **{name: getattr(d, name) if value is None else value
                                    for name, value in group_wise.items()})
            specs = [LayerSpec(LayerKind.QUANTIZED, quant=quant) for _ in range(text_config.num_hidden_layers)]
            self._kind_classes = {LayerKind.QUANTIZED: globals()[_QUANTIZED_LAYER_CLASSES[backend]]}
        self._specs = specs
        self._attach(_maker(Preset.CUSTOM, layers=specs, allocator=allocator), device)
        self.backend = backend


# The layer class of a group-wise quantized C layer, by quantizer (kvcache/_transformers_layers.py)
_QUANTIZED_LAYER_CLASSES = {"quanto": "QuantoQuantizedLayer", "hqq": "HQQQuantizedLayer"}


class QuantoQuantizedCache(QuantizedCache):
    """``QuantizedCache("quanto", config, ...)`` under the name transformers 4.x gave it (4.56 to 4.57 with these
    arguments; deprecated from 4.56, removed in transformers 5.0). An instance of transformers' QuantizedCache."""

    def __init__(self, config: Any, nbits: int = 4, axis_key: int = 0, axis_value: int = 0, q_group_size: int = 64,
                 residual_length: int = 128, *, device: Any = None, allocator: Any = None) -> None:
        super().__init__("quanto", config, nbits, axis_key, axis_value, q_group_size, residual_length, device=device,
                         allocator=allocator)


class HQQQuantizedCache(QuantizedCache):
    """``QuantizedCache("hqq", config, ...)`` under the name transformers 4.x gave it (4.56 to 4.57 with these
    arguments; deprecated from 4.56, removed in transformers 5.0). An instance of transformers' QuantizedCache."""

    def __init__(self, config: Any, nbits: int = 4, axis_key: int = 0, axis_value: int = 0, q_group_size: int = 64,
                 residual_length: int = 128, *, device: Any = None, allocator: Any = None) -> None:
        super().__init__("hqq", config, nbits, axis_key, axis_value, q_group_size, residual_length, device=device,
                         allocator=allocator)


class Cache(_KvcacheCache, _tcu.Cache):
    """transformers' ``Cache`` composed from layers: ``Cache(layers=[StaticLayer(16), DynamicSlidingWindowLayer(4)])``
    of this module's layer classes (one C cache holds them all; each layer object is rebound to it), or
    ``Cache(layer_class_to_replicate=DynamicLayer)``: a dynamic layer per layer index updated.

    The layers given must be new (no tokens yet) and made on their own, not taken from another cache: the C cache
    is built from their kinds and options, and what they held is not carried over. Only ``DynamicLayer`` (this
    module's or transformers') replicates: the C cache grows plain dynamic layers only. ``offloading`` offloads in
    C, as the other caches of this module. ``device=`` places the cache at construction; ``allocator=`` holds its
    K/V stores (as for DynamicCache).
    """

    def __init__(self, layers: Optional[Sequence[Any]] = None, layer_class_to_replicate: Optional[type] = None,
                 offloading: bool = False, offload_only_non_sliding: bool = True, *, device: Any = None,
                 allocator: Any = None) -> None:
        if layers is not None and layer_class_to_replicate is not None:
            raise ValueError("You can construct a Cache either from a list `layers` of all the predefined "
                             "`CacheLayer`, or from a `layer_class_to_replicate`, not both")
        if layers is None and layer_class_to_replicate is None:
            raise ValueError("You should provide exactly one of `layers` or `layer_class_to_replicate` to "
                             "initialize a Cache.")
        offload = _offload_mode(offloading, offload_only_non_sliding)
        if layers is None:
            if layer_class_to_replicate not in (_LAYER_CLASSES[LayerKind.DYNAMIC], _tcu.DynamicLayer):
                raise ValueError(f"kvcache.transformers.Cache: layer_class_to_replicate={layer_class_to_replicate!r}; "
                                 "kvcache grows dynamic layers only: pass DynamicLayer, or the layers themselves "
                                 "(layers=[...])")
            self.layer_class_to_replicate = layer_class_to_replicate
            self._attach(_maker(Preset.DYNAMIC, offload=offload, allocator=allocator), device, offloading=offloading,
                         offload_only_non_sliding=offload_only_non_sliding)
            return
        layers = list(layers)
        if not layers:
            raise ValueError("kvcache.transformers.Cache: layers=[]; a kvcache cache holds at least one layer "
                             "(layer_class_to_replicate=DynamicLayer makes one that grows from none)")
        for i, layer in enumerate(layers):
            _check_composable(layer, i)
        self._specs = [layer._cache._specs[0] for layer in layers]
        make = _maker(Preset.CUSTOM, layers=self._specs, offload=offload, transformers_release=_installed_release(),
                      allocator=allocator)
        self._attach(make, device, offloading=offloading, offload_only_non_sliding=offload_only_non_sliding,
                     layers=layers)
        self.layer_class_to_replicate = None


def _check_composable(layer: Any, i: int) -> None:
    """Refuses (TypeError/ValueError naming layer ``i``) what Cache(layers=...) cannot take."""
    if not isinstance(layer, (_LayerOverC, *([KvcacheDummyLayer] if _DummyLayer else []))):
        raise TypeError(f"kvcache.transformers.Cache: layers[{i}] is a {type(layer).__module__}."
                        f"{type(layer).__qualname__}; kvcache composes its own layer classes "
                        f"(kvcache.transformers.{type(layer).__name__} and the others, made as in transformers)")
    if not isinstance(layer._cache, _LayerCache):
        raise ValueError(f"kvcache.transformers.Cache: layers[{i}] ({layer!r}) is a layer of another cache; "
                         "compose layers made on their own")
    if layer._cache._views is not None and (layer.is_initialized or layer._cache._kv.get_seq_length(0)):
        raise ValueError(f"kvcache.transformers.Cache: layers[{i}] ({layer!r}) already holds tensors, which a new C "
                         "cache would not carry over; compose new layers")


class _LayerCache(_KvcacheCache, _tcu.Cache):
    """The one-layer C cache behind a layer made on its own (``StaticLayer(16)``): the layer's operations are its."""

    def __init__(self, layer: Any, spec: LayerSpec) -> None:
        self._specs = [spec]
        make = _maker(Preset.CUSTOM, layers=[spec], transformers_release=_installed_release())
        self._attach(make, layers=[layer])


class OffloadedHybridCache(OffloadedStaticCache):
    """``StaticCache(config, max_cache_len, offloading=True)`` under the name transformers 4.x gave it (4.52 to 4.57;
    deprecated from 4.56, removed in transformers 5.0)."""


class EncoderDecoderCache(_tcu.EncoderDecoderCache):
    """transformers' EncoderDecoderCache whose two caches are kvcache-backed DynamicCaches.

    ``EncoderDecoderCache(config=model.config)`` builds both (``allocator=`` holding the stores of both);
    ``EncoderDecoderCache(self_cache, cross_cache)`` takes two caches as transformers does.
    """

    def __init__(self, *caches: Any, config: Any = None, device: Any = None, allocator: Any = None) -> None:
        if allocator is not None and (caches or config is None):
            raise ValueError("kvcache.transformers.EncoderDecoderCache: allocator= goes with config=, which builds "
                             "both caches; two caches given already have their own (DynamicCache(allocator=...))")
        if config is not None and not caches:
            caches = (DynamicCache(config=config, device=device, allocator=allocator),
                      DynamicCache(config=config, device=device, allocator=allocator))
        if len(caches) != 2:
            raise ValueError("kvcache.transformers.EncoderDecoderCache(self_attention_cache, cross_attention_cache) "
                             "or EncoderDecoderCache(config=...)")
        super().__init__(*caches)

    def __deepcopy__(self, memo):
        out = type(self)(self.self_attention_cache.__deepcopy__(memo), self.cross_attention_cache.__deepcopy__(memo))
        out.is_updated = dict(self.is_updated)
        return out


from ._transformers_layers import *  # noqa: E402,F401,F403  (the layer classes, made from this module's)
from ._transformers_layers import __all__ as _LAYER_NAMES  # noqa: E402

__all__ += _LAYER_NAMES
for _name in _UNAVAILABLE:
    globals().pop(_name, None)
    if _name in __all__:
        __all__.remove(_name)
