"""torch.compile of the drop-in's static layers (kvcache.transformers): two torch custom ops over stable tensors.

dynamo traces Python, not C: under ``torch.compile`` the drop-in's per-layer C call would be a graph break. So the
extension's ``_update_torch`` has a Python stand-in that only dynamo uses (``torch.compiler.substitute_in_graph``:
eager calls still go straight to C, at no extra cost). For a layer of kind STATIC whose buffers exist, the stand-in
calls the custom op ``kvcache::update_static``, which mutates the layer's keys and values: zero-copy torch views
of the C layer's static buffers, whose addresses never change, marked as static inputs
(``torch._dynamo.mark_static_address``) as transformers' StaticLayer marks its own. The op's implementation is the
C update. ``kvcache::seq_length`` answers get_seq_length / get_query_offset in a compiled graph with a 0-d tensor, as
StaticLayer's ``cumulative_length`` (it takes the layer's keys so that it stays ordered with the updates).

The ops find their cache through a token, a 0-d tensor the compiled code reads off the cache at every call (the
TorchViews' ``record``, see swig/kvcache_torch.h), never through a constant: one compiled function serves every
cache of the same shapes, as with transformers' StaticCache (no recompilation for a new cache per ``generate``).

What compiles (docs/torch-compile.md): a StaticCache's full-attention (STATIC) layers, from
their first update or ``early_initialization`` on, without graph breaks (``fullgraph=True``). Anything else (dynamic,
sliding or chunked static, linear, quantized or offloaded layers, a static layer before its buffers exist) makes
its C call eagerly at a graph break: correct, not fullgraph. CUDA graphs: the ops run on the host (the C update
writes at the C layer's counter, host state), so they are tagged ``cudagraph_unsafe``: with
``mode="reduce-overhead"`` inductor leaves them out of its CUDA graphs (with graph partitioning, its default, the
rest of a step still replays as graphs; without, that graph runs without CUDA graphs). A CUDA graph captured by hand around ``cache.update`` would replay the
launches of the step it captured (the same slots, no counter moving): that is not supported.

Needs torch >= 2.5 (``torch.library.custom_op``, ``torch.compiler.substitute_in_graph``); with an older torch
nothing is registered and every drop-in C call is a graph break.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import _lib

SUPPORTED = hasattr(torch.library, "custom_op") and hasattr(torch.compiler, "substitute_in_graph")
is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)

Store = Tuple[torch.Tensor, torch.Tensor]

# token -> the drop-in cache it stands for (what the ops' eager implementations call the C library with)
_caches: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_tokens = itertools.count(1)


class Record:
    """What compiled code reads off a TorchViews (``views.record``): per layer, the (keys, values) an update
    mutates (None where the layer's update stays a C call), and the cache's token. It refers to no cache or views
    (a TorchViews is not tracked by the cycle collector)."""

    __slots__ = ("stores", "token")

    def __init__(self, stores: List[Optional[Store]], token: torch.Tensor) -> None:
        self.stores = stores
        self.token = token


def publish(cache: Any, views: Any, stores: Sequence[Optional[Store]]) -> None:
    """Sets what compiled code finds on ``views`` (the cache's TorchViews): ``stores`` per layer, and a token for
    ``cache`` (one per TorchViews: a deep copy, which has its own, gets its own)."""
    if not SUPPORTED:
        return
    record = views.record
    if record is None:
        token = next(_tokens)
        _caches[token] = cache
        record = views.record = Record([], torch.tensor(token, dtype=torch.int64))
    if not is_compiling():  # (as transformers' StaticLayer: mark_static_address cannot run while tracing)
        for store in stores:
            if store is not None:
                torch._dynamo.mark_static_address(store[0])
                torch._dynamo.mark_static_address(store[1])
    record.stores = list(stores)


def _cache_of(token: torch.Tensor) -> Any:
    cache = _caches.get(int(token))
    if cache is None:  # the compiled code read the token off a live cache: only a bug gets here
        raise RuntimeError(f"kvcache: no live cache has torch.compile token {int(token)}")
    return cache


if SUPPORTED:
    _CUDAGRAPH_UNSAFE = [tag for tag in (getattr(torch.Tag, "cudagraph_unsafe", None),) if tag is not None]

    @torch.library.custom_op("kvcache::update_static", mutates_args=("keys", "values"), tags=_CUDAGRAPH_UNSAFE)
    def _update_static(keys: torch.Tensor, values: torch.Tensor, key_states: torch.Tensor,
                       value_states: torch.Tensor, cache_position: Optional[torch.Tensor], token: torch.Tensor,
                       layer: int) -> None:
        """The C update of static layer ``layer`` (kvc_cache_update), which writes ``keys``/``values``."""
        cache = _cache_of(token)
        positions = None if cache_position is None else cache_position.cpu()  # the C API reads host positions
        k, v = _lib._update_torch(cache._views, layer, key_states, value_states, positions)
        # Inductor hands the op the cache's own tensors when it can update them in place; where it hands copies
        # instead (and copies them back after), the copies must hold what the C update wrote.
        if keys.data_ptr() != k.data_ptr():
            keys.copy_(k)
        if values.data_ptr() != v.data_ptr():
            values.copy_(v)

    @_update_static.register_fake
    def _update_static_fake(keys, values, key_states, value_states, cache_position, token, layer) -> None:
        return None

    @torch.library.custom_op("kvcache::seq_length", mutates_args=(), tags=_CUDAGRAPH_UNSAFE)
    def _seq_length(keys: torch.Tensor, token: torch.Tensor, layer: int) -> torch.Tensor:
        """kvc_cache_seq_length of ``layer`` as a 0-d int64 tensor on the keys' device (StaticLayer's
        cumulative_length). ``keys`` is not read: it orders the op with the updates of that layer."""
        return torch.tensor(_cache_of(token)._kv.get_seq_length(layer), dtype=torch.int64, device=keys.device)

    @_seq_length.register_fake
    def _seq_length_fake(keys, token, layer):
        return keys.new_empty((), dtype=torch.int64)

    @torch.compiler.disable
    def _update_torch_eagerly(views, layer, key, value, cache_position=None):
        return _lib._update_torch(views, layer, key, value, cache_position)

    @torch.compiler.substitute_in_graph(_lib._update_torch, skip_signature_check=True)
    def _update_torch_traced(views, layer, key, value, cache_position=None):
        """What dynamo runs for _lib._update_torch: the custom op on a published static layer, else the C call at
        a graph break."""
        record = views.record
        store = record.stores[layer] if record is not None and layer < len(record.stores) else None
        if store is None:
            return _update_torch_eagerly(views, layer, key, value, cache_position)
        keys, values = store
        torch.ops.kvcache.update_static(keys, values, key, value, cache_position, record.token, layer)
        return keys, values


def seq_length(store: Store, token: torch.Tensor, layer: int) -> torch.Tensor:
    """In compiled code: the sequence length of ``layer`` (whose published store, or that of the layer answering
    for it, is ``store``) as a 0-d tensor."""
    return torch.ops.kvcache.seq_length(store[0], token, layer)
