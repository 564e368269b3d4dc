"""Cache classes with transformers' names and methods, over the kvcache C library."""
from __future__ import annotations

import operator
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import _lib
from ._errors import KvcacheError, OutOfRangeError
from ._owner import HandleOwner
from .allocator import Allocator
from ._streams import StreamLike, stream_handle
from ._types import (
    DeviceLike,
    DtypeLike,
    LayerInfo,
    LayerKind,
    LayerSpec,
    MemoryInfo,
    ModelConfig,
    Offload,
    Preset,
    QuantOptions,
    parse_device,
    parse_dtype,
)

View = _lib.View
TensorLike = Any  # anything with __dlpack__ (torch, numpy >= 2, cupy, jax), a numpy array, or a buffer
C = TypeVar("C", bound="Cache")

_U32 = 2**32


class KV(NamedTuple):
    """A (keys, values) pair of zero-copy :class:`View` objects."""

    keys: View
    values: View


def _split_capacity(full: int, split: int, *caches: "Cache") -> int:
    """How many handles batch_split may write: the number of splits when ``full`` is at most the largest batch a
    layer holds, else 0 (the library refuses such a ``full_batch_size`` before it looks at the capacity), so that a
    huge ``full_batch_size`` is reported by the library instead of allocating room for its splits."""
    rows = max((c.layer_info(i).batch_size for c in caches for i in range(len(c))), default=0)
    if full < 1 or split < 1 or full > rows:
        return 0
    return -(-full // split)


def _layer(layer_idx: Any, name: str = "layer_idx") -> int:
    i = operator.index(layer_idx)
    if i < 0 or i >= _U32:
        raise OutOfRangeError(f"{name} is {i}; layer indices are in [0, 2^32)", _lib.KVC_ERROR_OUT_OF_RANGE)
    return i


def _per_layer(value: Union[int, Sequence[int]], n: int, name: str) -> Tuple[int, Any]:
    """An int for every layer, or a list of one per layer: (the first, an Int64Array of them or None)."""
    if isinstance(value, int):
        return value, None
    values = list(value)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries but the cache has {n} layers")
    arr = _lib.Int64Array(max(n, 1))
    for i, v in enumerate(values):
        arr[i] = operator.index(v)
    return (values[0] if values else 0), arr


def _kwargs_options(cache_kwargs: Optional[Mapping[str, Any]]) -> Tuple[Any, Any, Any, int]:
    """cache_position, rope_cos, rope_sin, partial_rotation_size from transformers-style cache_kwargs."""
    if not cache_kwargs:
        return None, None, None, 0
    return (cache_kwargs.get("cache_position"), cache_kwargs.get("cos"), cache_kwargs.get("sin"),
            int(cache_kwargs.get("partial_rotation_size") or 0))


class Layer:
    """One layer of a cache: ``cache.layers[i]`` (transformers' ``CacheLayerMixin`` surface).

    ``keys`` and ``values`` are zero-copy views of what the layer stores (``None``
    before its first update), valid until the next mutating call on the cache.
    """

    __slots__ = ("_cache", "_index")

    def __init__(self, cache: "Cache", index: int) -> None:
        self._cache = cache
        self._index = index

    @property
    def index(self) -> int:
        return self._index

    @property
    def info(self) -> LayerInfo:
        return self._cache.layer_info(self._index)

    @property
    def kind(self) -> LayerKind:
        return self.info.kind

    @property
    def is_initialized(self) -> bool:
        return self.info.is_initialized

    @property
    def is_sliding(self) -> bool:
        return self.info.is_sliding

    @property
    def is_compileable(self) -> bool:
        return self.info.is_compileable

    @property
    def keys(self) -> Optional[View]:
        kv = self._cache._layer_view_or_none(self._index)
        return None if kv is None else kv.keys

    @property
    def values(self) -> Optional[View]:
        kv = self._cache._layer_view_or_none(self._index)
        return None if kv is None else kv.values

    def get_seq_length(self) -> int:
        return self._cache.get_seq_length(self._index)

    def get_max_length(self) -> int:
        return self._cache.get_max_length(self._index)

    def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
        return self._cache.get_mask_sizes(query_length, self._index)

    def update(self, key_states: TensorLike, value_states: TensorLike, cache_kwargs: Optional[Mapping] = None) -> KV:
        return self._cache.update(key_states, value_states, self._index, cache_kwargs)

    def offload(self) -> None:
        self._cache.offload(self._index)

    def prefetch(self) -> None:
        self._cache.prefetch(self._index)

    def __repr__(self) -> str:
        i = self.info
        extra = f", window={i.window}" if i.window else ""
        extra += f", max_cache_len={i.max_cache_len}" if i.max_cache_len else ""
        return f"Layer({self._index}, {i.kind.name.lower()}{extra}, seq_length={i.seq_length})"


class Cache(HandleOwner):
    """A kvcache cache: an ordered list of layers behind one C handle.

    Use the preset classes (:class:`DynamicCache`, :class:`StaticCache`, ...);
    they all share these methods, named and behaving as transformers' ``Cache``.
    Inputs are any tensors with ``__dlpack__`` (torch, numpy >= 2, cupy, jax) or
    numpy arrays; outputs are zero-copy :class:`View` objects that
    ``torch.from_dlpack`` / ``numpy.from_dlpack`` turn into tensors sharing the
    cache's memory.

    A cache must be used by one thread at a time (the GIL is released during C
    calls; a second thread entering the same cache gets an InvalidStateError);
    distinct caches are independent.

    Every cache class takes ``allocator=`` (a :class:`kvcache.Allocator`, e.g.
    :class:`kvcache.TorchAllocator`): its K/V stores are then the allocator's
    buffers and its views slices of them (``kvcache.allocator``). Clones,
    batch splits and stacks share it.

    Example:
        >>> import numpy as np, kvcache
        >>> cache = kvcache.DynamicCache()
        >>> k = np.ones((1, 2, 3, 4), np.float32)
        >>> keys, values = cache.update(k, k, layer_idx=0)
        >>> keys.shape, cache.get_seq_length()
        ((1, 2, 3, 4), 3)
        >>> float(np.from_dlpack(keys).sum())
        24.0
    """

    _handle: Any
    _what = "cache"
    _unpicklable = "{name} cannot be pickled; copy its tensors out with to_legacy_cache()"

    # ------------------------------------------------------------ creation

    def _create(self, preset: Preset, config: Optional[ModelConfig] = None, *, max_cache_len: int = 0,
                layers: Optional[Sequence[LayerSpec]] = None, device: DeviceLike = "cpu",
                quant: Optional[QuantOptions] = None, offload: Union[Offload, int] = Offload.DEFAULT,
                window_length: int = 0, num_sink_tokens: int = 0,
                from_tensors: Optional[Sequence[Tuple[TensorLike, TensorLike]]] = None,
                transformers_release: int = 0, query_offset_rule: int = 0,
                allocator: Optional[Allocator] = None) -> None:
        options, keep = _options(preset, config, max_cache_len=max_cache_len, layers=layers, device=device,
                                 quant=quant, offload=offload, window_length=window_length,
                                 num_sink_tokens=num_sink_tokens)
        options.transformers_release = operator.index(transformers_release)
        options.query_offset_rule = operator.index(query_offset_rule)
        pairs = None if from_tensors is None else list(from_tensors)
        if pairs is not None and not any(k is None and v is None for k, v in pairs):
            self._handle = _lib.kvc_cache_create_from_tensors(options, pairs, allocator)
        else:
            handle = _lib.kvc_cache_create(options, allocator)
            # transformers' DynamicCache(ddp_cache_data) skips (None, None) pairs (the dummy layers' entries)
            for i, (k, v) in enumerate(pairs or []):
                if not (k is None and v is None):
                    _lib.kvc_cache_update(handle, i, k, v, None, None, None, 0)
            self._handle = handle
        del keep

    @classmethod
    def _from_handle(cls: Type[C], handle: Any) -> C:
        obj = cls.__new__(cls)
        obj._handle = handle
        return obj

    # ---------------------------------------------------------------- update

    def update(self, key_states: TensorLike, value_states: TensorLike, layer_idx: int,
               cache_kwargs: Optional[Mapping[str, Any]] = None) -> KV:
        """Stores the new tokens of layer ``layer_idx`` and returns the keys and values attention uses now.

        ``key_states`` is ``[batch, kv_heads, new_tokens, head_dim]``; both are copied. ``cache_kwargs``
        may hold ``cache_position`` (static layers), ``cos``/``sin`` and ``partial_rotation_size``
        (sink layers). The returned views are valid until the next mutating call.

        Example:
            >>> import numpy as np, kvcache
            >>> cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8)
            >>> x = np.zeros((1, 1, 2, 4), np.float32)
            >>> cache.update(x, x, 0).keys.shape    # static layers return the whole buffer
            (1, 1, 8, 4)
        """
        if key_states is None and value_states is None and self._is_dummy_layer(_layer(layer_idx)):
            return KV(None, None)  # transformers' DummyLayer tolerates (None, None), e.g. from a DDP reconstruction
        pos, cos, sin, prs = _kwargs_options(cache_kwargs)
        return KV(*_lib.kvc_cache_update(self._handle, _layer(layer_idx), key_states, value_states, pos, cos,
                                         sin, prs))

    def _is_dummy_layer(self, i: int) -> bool:
        return i < len(self) and self.layer_info(i).kind == LayerKind.DUMMY

    def update_all(self, key_states: Sequence[TensorLike], value_states: Sequence[TensorLike],
                   cache_kwargs: Optional[Mapping[str, Any]] = None) -> List[KV]:
        """One step for layers ``0..len(key_states)-1`` in one call: every layer is updated, or none is."""
        pos, cos, sin, prs = _kwargs_options(cache_kwargs)
        return [KV(*kv) for kv in _lib.kvc_cache_update_all(self._handle, list(key_states), list(value_states),
                                                            pos, cos, sin, prs)]

    # --------------------------------------------------------------- queries

    def __len__(self) -> int:
        """Number of layers (for a lazy DynamicCache: the layers updated so far)."""
        return _lib.kvc_cache_num_layers(self._handle)

    @property
    def num_layers(self) -> int:
        return len(self)

    @property
    def layers(self) -> List[Layer]:
        """One :class:`Layer` per layer, as transformers' ``cache.layers``."""
        return [Layer(self, i) for i in range(len(self))]

    def layer_info(self, layer_idx: int) -> LayerInfo:
        """What layer ``layer_idx`` is and holds."""
        return LayerInfo._from_lib(_lib.kvc_cache_layer_info(self._handle, _layer(layer_idx)))

    def layer_view(self, layer_idx: int) -> KV:
        """The stored keys/values of one layer (``cache.layers[i].keys/values``), zero-copy.

        Raises InvalidStateError for a layer that was never updated.
        """
        return KV(*_lib.kvc_cache_layer_view(self._handle, _layer(layer_idx)))

    def _layer_view_or_none(self, i: int) -> Optional[KV]:
        if not self.layer_info(i).is_initialized:
            return None
        return self.layer_view(i)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens seen by a layer (static and sliding layers) or stored (dynamic layers); 0 beyond the layers."""
        return _lib.kvc_cache_seq_length(self._handle, _layer(layer_idx))

    def get_max_length(self, layer_idx: Optional[int] = None) -> int:
        """The most tokens a layer keeps (-1: unbounded); the maximum over all layers for ``None``."""
        i = _lib.KVC_ALL_LAYERS if layer_idx is None else _layer(layer_idx)
        if i >= 2**31:
            return -1
        return _lib.kvc_cache_max_length(self._handle, i)

    get_max_cache_shape = get_max_length

    def get_usable_length(self, new_seq_length: int, layer_idx: int = 0) -> int:
        """transformers' legacy ``get_usable_length``: the stored length old models use as kv_seq_len."""
        return _lib.kvc_cache_usable_length(self._handle, operator.index(new_seq_length), _layer(layer_idx))

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> Tuple[int, int]:
        """``(kv_length, kv_offset)`` of the keys the next update of ``query_length`` tokens returns."""
        kv_length, kv_offset = _lib.kvc_cache_mask_sizes(self._handle, operator.index(query_length),
                                                         _layer(layer_idx))
        return kv_length, kv_offset

    @property
    def batch_size(self) -> int:
        """Batch size of the initialized static layers (-1 if there are none)."""
        return _lib.kvc_cache_batch_size(self._handle)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        """Where the next forward's queries start (transformers 5.14): ``get_seq_length`` plus what an
        MTP (``layer_idx + 1``) or DFlash (the previously accepted tokens) cache adds."""
        return _lib.kvc_cache_query_offset(self._handle, _layer(layer_idx))

    def set_previous_accepted_tokens(self, number_of_accepted_tokens: int) -> None:
        """DFlashCache's method: the tokens the previous step accepted (a DFlash cache only)."""
        _lib.kvc_cache_set_previous_accepted_tokens(self._handle, operator.index(number_of_accepted_tokens))

    @property
    def is_croppable(self) -> bool:
        """Whether ``crop`` can put every layer back as it was (transformers 5.17; 5.24's answers unless the
        cache follows an older ``transformers_release``)."""
        return _lib.kvc_cache_is_croppable(self._handle, _lib.KVC_ALL_LAYERS)

    def layer_is_croppable(self, layer_idx: int) -> bool:
        """``is_croppable`` of one layer."""
        return _lib.kvc_cache_is_croppable(self._handle, _layer(layer_idx))

    def memory(self) -> MemoryInfo:
        """Bytes reserved and used, per tier and kind of storage."""
        return MemoryInfo._from_lib(_lib.kvc_cache_memory(self._handle))

    @property
    def is_sliding(self) -> List[bool]:
        return [self.layer_info(i).is_sliding for i in range(len(self))]

    @property
    def is_linear(self) -> List[bool]:
        return [self.layer_info(i).is_linear for i in range(len(self))]

    @property
    def is_dummy(self) -> List[bool]:
        """Which layers are dummy layers (transformers 5.23's ``DummyLayer``: they store nothing)."""
        return [self.layer_info(i).kind == LayerKind.DUMMY for i in range(len(self))]

    @property
    def is_compileable(self) -> bool:
        n = len(self)
        return n > 0 and all(self.layer_info(i).is_compileable for i in range(n))

    @property
    def is_initialized(self) -> bool:
        """Whether every layer that can be initialized is (dummy layers, which never are, do not count)."""
        infos = [info for info in (self.layer_info(i) for i in range(len(self))) if info.kind != LayerKind.DUMMY]
        return len(infos) > 0 and all(info.is_initialized for info in infos)

    def __iter__(self) -> Iterator[KV]:
        """``(keys, values)`` of every layer (``None`` pairs for layers never updated)."""
        for i in range(len(self)):
            kv = self._layer_view_or_none(i)
            yield kv if kv is not None else KV(None, None)

    def to_legacy_cache(self) -> Tuple[KV, ...]:
        """transformers' legacy tuple format ``((k0, v0), (k1, v1), ...)``, as views."""
        return tuple(self)

    # ------------------------------------------------------------ mutations

    def crop(self, max_length: int) -> None:
        """crop(-n) removes the last n tokens of every layer; crop(n > 0) keeps the first n (legacy)."""
        _lib.kvc_cache_crop(self._handle, operator.index(max_length))

    def activate_past_recording(self) -> None:
        """Sliding layers keep every token until a crop, so assisted decoding can roll back."""
        _lib.kvc_cache_activate_past_recording(self._handle)

    def reorder_cache(self, beam_idx: Any) -> None:
        """Beam search: row b becomes former row ``beam_idx[b]`` (ints, or a 1-D integer tensor)."""
        _lib.kvc_cache_reorder(self._handle, beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Row i becomes rows ``i*repeats .. i*repeats+repeats-1`` (contrastive search). Dynamic kinds."""
        _lib.kvc_cache_batch_repeat_interleave(self._handle, operator.index(repeats))

    def batch_select_indices(self, indices: Any) -> None:
        """Keeps the rows ``indices`` in that order. Dynamic kinds."""
        _lib.kvc_cache_batch_select_indices(self._handle, indices)

    def batch_split(self: C, full_batch_size: int, split_size: int) -> List[C]:
        """Independent caches holding rows ``[i, i + split_size)`` (legacy ``batch_split``)."""
        full, split = operator.index(full_batch_size), operator.index(split_size)
        capacity = _split_capacity(full, split, self)
        return [type(self)._from_handle(h) for h in _lib.kvc_cache_batch_split(self._handle, full, split, capacity)]

    @classmethod
    def from_batch_splits(cls: Type[C], splits: Sequence["Cache"]) -> C:
        """One cache whose rows are the splits' rows stacked in order."""
        if not all(isinstance(s, Cache) for s in splits):
            raise TypeError("from_batch_splits: every split must be a kvcache Cache")
        handles = [s._handle for s in splits]
        out = _lib.kvc_cache_from_batch_splits(handles)
        target = cls if cls is not Cache else (type(splits[0]) if splits else Cache)
        return target._from_handle(out)

    def reserve(self, tokens: int) -> None:
        """Reserves room for ``tokens`` tokens in dynamic layers (no growth copies up to it)."""
        _lib.kvc_cache_reserve(self._handle, operator.index(tokens))

    def reset(self) -> None:
        """Empties every layer (static buffers are zeroed; dynamic layers keep their storage)."""
        _lib.kvc_cache_reset(self._handle)

    def early_initialization(self, batch_size: int, num_heads: Union[int, Sequence[int]],
                             head_dim: Union[int, Sequence[int]], dtype: DtypeLike,
                             device: DeviceLike = None, v_head_dim: int = 0) -> None:
        """Allocates every layer now instead of at its first update (transformers' early_initialization).

        ``num_heads`` and ``head_dim`` may be lists with one entry per layer. ``device`` is accepted for
        transformers compatibility and must be the cache's device.
        """
        o = _lib.kvc_init_options()
        o.batch_size = operator.index(batch_size)
        o.dtype = int(parse_dtype(dtype))
        o.num_kv_heads, heads = _per_layer(num_heads, len(self), "num_heads")
        o.k_head_dim, dims = _per_layer(head_dim, len(self), "head_dim")
        if heads is not None:
            o.num_kv_heads_per_layer = heads.cast()
        if dims is not None:
            o.head_dim_per_layer = dims.cast()
        o.v_head_dim = operator.index(v_head_dim)
        _lib.kvc_cache_early_initialization(self._handle, o)
        del heads, dims  # the arrays the options pointed into, alive until here

    # --------------------------------------------------------------- streams

    @property
    def stream(self) -> int:
        """The CUDA/HIP stream all of this cache's device work is ordered on, as an int handle (0: the default).

        Assign a stream to bind the cache to it: ``cache.stream = torch.cuda.current_stream()`` (or any object
        with ``.cuda_stream``, cupy's ``.ptr``, an int handle, or None for the default stream). Work issued before
        is ordered before work issued after (an event, no host synchronisation); updates then return without
        waiting for the device. Inputs must be ready on that stream: make them there, or make it wait for the
        stream that did. Views exported with ``torch.from_dlpack`` are ordered onto the consumer's stream. The
        stream must outlive its use by the cache; a CPU cache takes only None/0. Clones and batch splits inherit
        the stream.

        Example:
            >>> import kvcache
            >>> cache = kvcache.DynamicCache()
            >>> cache.stream = None        # CPU caches have no stream
            >>> cache.stream
            0
        """
        return _lib.kvc_cache_stream(self._handle)

    @stream.setter
    def stream(self, stream: StreamLike) -> None:
        self.set_stream(stream)

    def set_stream(self, stream: StreamLike) -> None:
        """Binds the cache to ``stream`` (see :attr:`stream`)."""
        handle = stream_handle(stream)
        _lib.kvc_cache_set_stream(self._handle, handle or None)

    # ------------------------------------------------------------ offloading

    def offload(self, layer_idx: int) -> None:
        """Moves a layer's K/V to the host tier (offloading caches do this themselves in update)."""
        _lib.kvc_cache_offload(self._handle, _layer(layer_idx))

    def prefetch(self, layer_idx: int) -> None:
        """Moves a layer's K/V back to the device tier."""
        _lib.kvc_cache_prefetch(self._handle, _layer(layer_idx))

    # --------------------------------------------------- recurrent (linear) state

    def update_conv_state(self, conv_states: TensorLike, layer_idx: int, state_idx: int = 0, *,
                          conv_kernel_size: Optional[int] = None, cache_position: Any = None) -> View:
        """LinearAttentionLayer.update_conv_state: ``conv_states`` is ``[batch, channels, n]``.

        With ``cache_position`` it is the legacy MambaCache API (roll by one, write at the positions).
        """
        return _lib.kvc_cache_update_conv_state(self._handle, _layer(layer_idx), conv_states,
                                                operator.index(state_idx), int(conv_kernel_size or 0),
                                                cache_position)

    def update_recurrent_state(self, recurrent_states: TensorLike, layer_idx: int, state_idx: int = 0) -> View:
        """Copies the SSM state (batch first) into the layer and returns a view of it."""
        return _lib.kvc_cache_update_recurrent_state(self._handle, _layer(layer_idx), operator.index(state_idx),
                                                     recurrent_states)

    update_ssm_state = update_recurrent_state

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> Optional[View]:
        """The conv state, or None before its first update."""
        return _lib.kvc_cache_state_view(self._handle, _layer(layer_idx), operator.index(state_idx))[0]

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> Optional[View]:
        """The recurrent (SSM) state, or None before its first update."""
        return _lib.kvc_cache_state_view(self._handle, _layer(layer_idx), operator.index(state_idx))[1]

    # ------------------------------------------------ indexed (sparse-attention) layers

    def update_indexer(self, indexer_key_states: TensorLike, layer_idx: int) -> View:
        """Cache.update_indexer (transformers >= 5.11): ``indexer_key_states`` is ``[batch, n, index_head_dim]``.

        Returns the layer's whole indexer store: ``[batch, total, index_head_dim]`` for a dynamic indexed
        layer, the ``[batch, max_cache_len, index_head_dim]`` buffer for a static one. Raises ValueError
        (kvcache.InvalidArgumentError) on a layer that is not indexed.
        """
        return _lib.kvc_cache_update_indexer(self._handle, _layer(layer_idx), indexer_key_states)

    def get_indexer_keys(self, layer_idx: int) -> Optional[View]:
        """``layers[layer_idx].indexer_keys``: the indexer store, or None before its first update_indexer."""
        return _lib.kvc_cache_indexer_view(self._handle, _layer(layer_idx))

    def has_previous_state(self, layer_idx: Optional[int] = None, state_idx: Optional[int] = None) -> bool:
        """Whether a linear layer's states had their first conv update (the last linear layer for None)."""
        layer = _lib.KVC_ALL_LAYERS if layer_idx is None else _layer(layer_idx)
        state = -1 if state_idx is None else operator.index(state_idx)
        return bool(_lib.kvc_cache_has_previous_state(self._handle, layer, state))

    # ----------------------------------------------------------- lifetime

    def clone(self: C) -> C:
        """A deep copy (same layers, contents, counters and flags): prefill once, clone per request."""
        return type(self)._from_handle(_lib.kvc_cache_clone(self._handle))

    def __deepcopy__(self: C, memo: Dict[int, Any]) -> C:
        return self.clone()

    def __copy__(self: C) -> C:
        # A shallow copy would share one C cache between two objects; it is a deep copy instead.
        return self.clone()

    def close(self) -> None:
        """Releases the cache: later calls raise ValueError and views go stale. Memory is freed once no
        tensor exported from a view still uses it."""
        _lib.kvc_cache_destroy(self._handle)

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"{name}(closed)"
        n = len(self)
        if n == 0:
            return f"{name}(layers=0)"
        infos = [self.layer_info(i) for i in range(n)]
        kinds: List[str] = []
        for info in infos:
            k = info.kind.name.lower() if isinstance(info.kind, LayerKind) else str(info.kind)
            if info.window:
                k += f"({info.window})"
            kinds.append(k)
        runs: List[str] = []
        i = 0
        while i < len(kinds):
            j = i
            while j < len(kinds) and kinds[j] == kinds[i]:
                j += 1
            runs.append(kinds[i] if j - i == 1 else f"{kinds[i]} x{j - i}")
            i = j
        first = next((x for x in infos if x.is_initialized), None)
        shape = ""
        if first is not None:
            shape = (f", batch={first.batch_size}, kv_heads={first.num_kv_heads}, head_dim={first.k_head_dim}, "
                     f"dtype={first.dtype.name.lower() if hasattr(first.dtype, 'name') else first.dtype}")
        try:
            seq = f", seq_length={self.get_seq_length()}"
        except KvcacheError:
            seq = ""
        return f"{name}(layers={n} [{', '.join(runs)}]{seq}{shape})"


def _options(preset: Preset, config: Optional[ModelConfig], *, max_cache_len: int = 0,
             layers: Optional[Sequence[LayerSpec]] = None, device: DeviceLike = "cpu",
             quant: Optional[QuantOptions] = None, offload: Union[Offload, int] = Offload.DEFAULT,
             window_length: int = 0, num_sink_tokens: int = 0) -> Tuple[Any, list]:
    o = _lib.kvc_cache_options()
    keep: list = []
    o.preset = int(preset)
    if config is not None:
        c, k = config._to_lib()
        o.config = c
        keep += [c, k]
    o.max_cache_len = operator.index(max_cache_len or 0)
    if layers is not None:
        specs = list(layers)
        arr = _lib.LayerOptionsArray(max(len(specs), 1))
        for i, spec in enumerate(specs):
            lo = _lib.kvc_layer_options()
            lo.kind = int(spec.kind)
            lo.window = operator.index(spec.window)
            lo.max_cache_len = operator.index(spec.max_cache_len)
            if spec.quant is not None:
                q = spec.quant._to_lib()
                lo.quant = q
                keep.append(q)
            lo.num_sink_tokens = operator.index(spec.num_sink_tokens)
            lo.num_states = operator.index(spec.num_states)
            lo.conv_kernel_size = operator.index(spec.conv_kernel_size)
            arr[i] = lo
        o.num_layers = len(specs)
        o.layers = arr.cast()
        keep.append(arr)
    dev = _lib.kvc_device()
    dev.device_type, dev.device_id = parse_device(device)
    o.device = dev
    if quant is not None:
        q = quant._to_lib()
        o.quant = q
        keep.append(q)
    o.offload = int(offload)
    o.window_length = operator.index(window_length or 0)
    o.num_sink_tokens = operator.index(num_sink_tokens or 0)
    return o, keep


# ------------------------------------------------------------------ presets

class DynamicCache(Cache):
    """transformers' DynamicCache: grows with every token; sliding/chunked layers from the config keep their window.

    Without a config it is lazy: layers appear as they are updated.

    Example:
        >>> import numpy as np, kvcache
        >>> cache = kvcache.DynamicCache(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"],
        ...                              sliding_window=4)
        >>> x = np.zeros((1, 2, 6, 8), np.float32)
        >>> [cache.update(x, x, i).keys.shape[2] for i in range(2)]   # a long prefill returns the whole prompt
        [6, 6]
        >>> cache.layer_view(1).keys.shape[2]                          # ... but the sliding layer keeps window-1
        3
    """

    def __init__(self, ddp_cache_data: Optional[Sequence[Tuple[TensorLike, TensorLike]]] = None,
                 config: Any = None, *, device: DeviceLike = "cpu", offloading: bool = False,
                 offload_only_non_sliding: bool = False, allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        cfg = ModelConfig.from_any(config, **config_fields)
        offload = Offload.DEFAULT
        if offloading:
            offload = Offload.NON_SLIDING if offload_only_non_sliding else Offload.ALL
        self._create(Preset.DYNAMIC, cfg, device=device, offload=offload, allocator=allocator,
                     from_tensors=None if ddp_cache_data is None else [tuple(p)[:2] for p in ddp_cache_data])

    @classmethod
    def from_legacy_cache(cls, past_key_values: Sequence[Tuple[TensorLike, TensorLike]], config: Any = None,
                          **config_fields: Any) -> "DynamicCache":
        """A cache holding the legacy ``((k0, v0), (k1, v1), ...)`` tensors (copied)."""
        return cls(past_key_values, config, **config_fields)


class MtpCache(DynamicCache):
    """transformers' MtpCache (5.14): a DynamicCache whose layer k holds multi-token-prediction depth k, whose
    queries run k + 1 tokens ahead (``get_query_offset`` and the mask's ``kv_offset`` add ``k + 1``)."""

    def __init__(self, config: Any = None, *, device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        self._create(Preset.DYNAMIC, ModelConfig.from_any(config, **config_fields), device=device,
                     query_offset_rule=_lib.KVC_QUERY_OFFSET_MTP, allocator=allocator)


class DFlashCache(DynamicCache):
    """transformers' DFlashCache (5.15): a DynamicCache whose next forward also attends to the tokens the
    previous step accepted (``set_previous_accepted_tokens``), added to ``get_query_offset`` and ``kv_length``."""

    def __init__(self, config: Any = None, *, device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        self._create(Preset.DYNAMIC, ModelConfig.from_any(config, **config_fields), device=device,
                     query_offset_rule=_lib.KVC_QUERY_OFFSET_DFLASH, allocator=allocator)


class StaticCache(Cache):
    """transformers' StaticCache(config, max_cache_len): pre-allocated layers; sliding layers keep min(window, max).

    Example:
        >>> import kvcache
        >>> cache = kvcache.StaticCache(num_hidden_layers=2, max_cache_len=16)
        >>> cache.get_max_length(), cache.get_mask_sizes(3, 0)
        (16, (16, 0))
    """

    _preset = Preset.STATIC

    def __init__(self, config: Any = None, max_cache_len: Optional[int] = None, *, device: DeviceLike = "cpu",
                 offloading: bool = False, offload_only_non_sliding: bool = True, transformers_release: int = 0,
                 allocator: Optional[Allocator] = None, **config_fields: Any) -> None:
        """``transformers_release`` (e.g. 52300 for 5.23; 0: the newest, 5.24) picks the release whose
        behaviour to follow where releases differ: before 5.24 static layers have no ``crop``."""
        if max_cache_len is None:
            raise TypeError(f"{type(self).__name__} needs max_cache_len")
        cfg = ModelConfig.from_any(config, **config_fields)
        offload = Offload.DEFAULT
        if offloading:
            offload = Offload.NON_SLIDING if offload_only_non_sliding else Offload.ALL
        self._create(self._preset, cfg, max_cache_len=max_cache_len, device=device, offload=offload,
                     transformers_release=transformers_release, allocator=allocator)


class SlidingWindowCache(StaticCache):
    """The legacy SlidingWindowCache: every layer a static sliding layer of ``config.sliding_window``."""

    _preset = Preset.SLIDING_WINDOW


class HybridCache(StaticCache):
    """HybridCache (Gemma 2/3): static layers, sliding except every ``sliding_window_pattern``-th (or layer_types)."""

    _preset = Preset.HYBRID


class HybridChunkedCache(StaticCache):
    """HybridChunkedCache (Llama 4): static layers, chunked with ``attention_chunk_size`` (or layer_types)."""

    _preset = Preset.HYBRID_CHUNKED


class OffloadedCache(Cache):
    """OffloadedCache: a DynamicCache whose layers live in the host tier between their updates."""

    def __init__(self, config: Any = None, *, device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        self._create(Preset.OFFLOADED, ModelConfig.from_any(config, **config_fields), device=device,
                     allocator=allocator)


class OffloadedStaticCache(Cache):
    """OffloadedStaticCache: a StaticCache whose non-sliding layers are offloaded between updates."""

    _preset = Preset.OFFLOADED_STATIC

    def __init__(self, config: Any = None, max_cache_len: Optional[int] = None, *, device: DeviceLike = "cpu",
                 allocator: Optional[Allocator] = None, **config_fields: Any) -> None:
        if max_cache_len is None:
            raise TypeError(f"{type(self).__name__} needs max_cache_len")
        self._create(self._preset, ModelConfig.from_any(config, **config_fields), max_cache_len=max_cache_len,
                     device=device, allocator=allocator)


class OffloadedHybridCache(OffloadedStaticCache):
    """OffloadedHybridCache: a HybridChunkedCache whose non-sliding layers are offloaded."""

    _preset = Preset.OFFLOADED_HYBRID


class QuantizedCache(Cache):
    """QuantizedCache(backend, config, nbits, axis_key, axis_value, q_group_size, residual_length).

    ``backend`` is ``"quanto"`` or ``"hqq"``. ``mode="transformers"`` reproduces transformers' timeline exactly
    (same tokens as its QuantizedCache); the default ``"incremental"`` quantizes each token once.

    Example:
        >>> import kvcache
        >>> cache = kvcache.QuantizedCache("quanto", num_hidden_layers=2, nbits=2, residual_length=64)
        >>> [layer.kind.name for layer in cache.layers]
        ['QUANTIZED', 'QUANTIZED']
    """

    def __init__(self, backend: str = "quanto", config: Any = None, nbits: Optional[int] = None,
                 axis_key: Optional[int] = None, axis_value: Optional[int] = None,
                 q_group_size: Optional[int] = None, residual_length: Optional[int] = None, *,
                 mode: str = "incremental", device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        defaults = QuantOptions()
        quant = QuantOptions(
            quantizer=backend, mode=mode,
            nbits=defaults.nbits if nbits is None else nbits,
            axis_key=defaults.axis_key if axis_key is None else axis_key,
            axis_value=defaults.axis_value if axis_value is None else axis_value,
            q_group_size=defaults.q_group_size if q_group_size is None else q_group_size,
            residual_length=defaults.residual_length if residual_length is None else residual_length)
        self._create(Preset.QUANTIZED, ModelConfig.from_any(config, **config_fields), quant=quant, device=device,
                     allocator=allocator)


class SinkCache(Cache):
    """SinkCache(window_length, num_sink_tokens): the first sink tokens plus the most recent ones.

    Kept keys are re-rotated when ``cache_kwargs`` carries the model's RoPE ``cos``/``sin``. Without a config
    the cache is lazy.
    """

    def __init__(self, window_length: int, num_sink_tokens: int, config: Any = None, *,
                 device: DeviceLike = "cpu", allocator: Optional[Allocator] = None, **config_fields: Any) -> None:
        self._create(Preset.SINK, ModelConfig.from_any(config, **config_fields), window_length=window_length,
                     num_sink_tokens=num_sink_tokens, device=device, allocator=allocator)


class MambaCache(Cache):
    """MambaCache: one linear (conv + SSM state) layer per config layer."""

    def __init__(self, config: Any = None, *, device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        self._create(Preset.MAMBA, ModelConfig.from_any(config, **config_fields), device=device,
                     allocator=allocator)


class HybridMambaAttentionDynamicCache(Cache):
    """HybridMambaAttentionDynamicCache (Jamba, Bamba): linear layers for mamba, dynamic ones for attention."""

    def __init__(self, config: Any = None, *, device: DeviceLike = "cpu", allocator: Optional[Allocator] = None,
                 **config_fields: Any) -> None:
        self._create(Preset.HYBRID_MAMBA, ModelConfig.from_any(config, **config_fields), device=device,
                     allocator=allocator)


class CustomCache(Cache):
    """A cache of explicitly listed layers.

    Example:
        >>> import kvcache
        >>> from kvcache import LayerSpec, LayerKind
        >>> cache = kvcache.CustomCache([LayerSpec(LayerKind.DYNAMIC), LayerSpec(LayerKind.STATIC, max_cache_len=8)])
        >>> cache.get_max_length(1)
        8
    """

    def __init__(self, layers: Sequence[LayerSpec], *, device: DeviceLike = "cpu",
                 offload: Union[Offload, int] = Offload.DEFAULT, allocator: Optional[Allocator] = None) -> None:
        self._create(Preset.CUSTOM, None, layers=layers, device=device, offload=offload, allocator=allocator)


# ------------------------------------------------------- encoder-decoder

class EncoderDecoderCache(HandleOwner):
    """EncoderDecoderCache(self_attention_cache, cross_attention_cache).

    Takes the two caches over (they remain usable as ``self_attention_cache`` and ``cross_attention_cache``).
    Cross-attention K/V are computed once per layer: :meth:`update_cross` stores them on the first call and
    returns the stored ones afterwards.

    Example:
        >>> import numpy as np, kvcache
        >>> ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
        >>> enc = np.ones((1, 2, 5, 4), np.float32)
        >>> ed.update_cross(enc, enc, 0).keys.shape, ed.is_updated[0]
        ((1, 2, 5, 4), True)
        >>> ed.update_cross(None, None, 0).keys.shape      # reused
        (1, 2, 5, 4)
    """

    _what = "cache"
    _unpicklable = "EncoderDecoderCache cannot be pickled"

    def __init__(self, self_attention_cache: Cache, cross_attention_cache: Cache) -> None:
        if not isinstance(self_attention_cache, Cache) or not isinstance(cross_attention_cache, Cache):
            raise TypeError("EncoderDecoderCache(self_attention_cache, cross_attention_cache) takes two caches")
        self._handle = _lib.kvc_encoder_decoder_cache_create(self_attention_cache._handle,
                                                             cross_attention_cache._handle)
        self._self = self_attention_cache
        self._cross = cross_attention_cache

    @classmethod
    def _from_handle(cls, handle: Any) -> "EncoderDecoderCache":
        obj = cls.__new__(cls)
        obj._handle = handle
        obj._self = Cache._from_handle(_lib.kvc_encoder_decoder_cache_self_attention(handle))
        obj._cross = Cache._from_handle(_lib.kvc_encoder_decoder_cache_cross_attention(handle))
        return obj

    @property
    def self_attention_cache(self) -> Cache:
        return self._self

    @property
    def cross_attention_cache(self) -> Cache:
        return self._cross

    @property
    def is_updated(self) -> Dict[int, bool]:
        """``{layer: whether its cross-attention K/V are stored}``."""
        n = len(self._cross)
        return {i: bool(_lib.kvc_encoder_decoder_cache_is_updated(self._handle, i)) for i in range(n)}

    def update(self, key_states: TensorLike, value_states: TensorLike, layer_idx: int,
               cache_kwargs: Optional[Mapping[str, Any]] = None) -> KV:
        """Self-attention update (as ``self_attention_cache.update``)."""
        return self._self.update(key_states, value_states, layer_idx, cache_kwargs)

    def update_cross(self, key_states: Optional[TensorLike], value_states: Optional[TensorLike],
                     layer_idx: int) -> KV:
        """Cross-attention: stores key/value the first time for this layer, returns the stored ones."""
        return KV(*_lib.kvc_encoder_decoder_cache_update_cross(self._handle, _layer(layer_idx), key_states,
                                                               value_states))

    def __len__(self) -> int:
        return len(self._self)

    @property
    def stream(self) -> int:
        """The stream of the self-attention cache (see :attr:`Cache.stream`); assigning binds both caches."""
        return self._self.stream

    @stream.setter
    def stream(self, stream: StreamLike) -> None:
        self._self.set_stream(stream)
        self._cross.set_stream(stream)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._self.get_seq_length(layer_idx)

    def get_max_length(self, layer_idx: Optional[int] = None) -> int:
        return self._self.get_max_length(layer_idx)

    get_max_cache_shape = get_max_length

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> Tuple[int, int]:
        return self._self.get_mask_sizes(query_length, layer_idx)

    def crop(self, max_length: int) -> None:
        """Crops the self-attention cache only (cross K/V are never cropped)."""
        _lib.kvc_encoder_decoder_cache_crop(self._handle, operator.index(max_length))

    # These look like Cache's on purpose: each is one C call that changes both halves, or neither.
    def reorder_cache(self, beam_idx: Any) -> None:
        _lib.kvc_encoder_decoder_cache_reorder(self._handle, beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        _lib.kvc_encoder_decoder_cache_batch_repeat_interleave(self._handle, operator.index(repeats))

    def batch_select_indices(self, indices: Any) -> None:
        _lib.kvc_encoder_decoder_cache_batch_select_indices(self._handle, indices)

    def batch_split(self, full_batch_size: int, split_size: int) -> List["EncoderDecoderCache"]:
        full, split = operator.index(full_batch_size), operator.index(split_size)
        capacity = _split_capacity(full, split, self.self_attention_cache, self.cross_attention_cache)
        return [type(self)._from_handle(h)
                for h in _lib.kvc_encoder_decoder_cache_batch_split(self._handle, full, split, capacity)]

    @classmethod
    def from_batch_splits(cls, splits: Sequence["EncoderDecoderCache"]) -> "EncoderDecoderCache":
        if not all(isinstance(s, EncoderDecoderCache) for s in splits):
            raise TypeError("from_batch_splits: every split must be an EncoderDecoderCache")
        return cls._from_handle(_lib.kvc_encoder_decoder_cache_from_batch_splits([s._handle for s in splits]))

    def reset(self) -> None:
        """Resets both caches and marks every cross-attention layer as not updated."""
        _lib.kvc_encoder_decoder_cache_reset(self._handle)

    def clone(self) -> "EncoderDecoderCache":
        return type(self)._from_handle(_lib.kvc_encoder_decoder_cache_clone(self._handle))

    def __deepcopy__(self, memo: Dict[int, Any]) -> "EncoderDecoderCache":
        return self.clone()

    def __copy__(self) -> "EncoderDecoderCache":
        return self.clone()

    def close(self) -> None:
        _lib.kvc_encoder_decoder_cache_destroy(self._handle)

    def __repr__(self) -> str:
        if self.closed:
            return "EncoderDecoderCache(closed)"
        return (f"EncoderDecoderCache(self_attention_cache={self._self!r}, "
                f"cross_attention_cache={self._cross!r})")
