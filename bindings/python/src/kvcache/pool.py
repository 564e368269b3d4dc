"""The block pool of serving stacks (``kvcache/pool.h``): paged KV with prefix reuse, copy-on-write and events.

A :class:`Pool` is a fixed set of blocks on one device for one model, shared by many :class:`Sequence` objects
(requests) that join and leave every step, as vLLM, SGLang and TensorRT-LLM do continuous batching. The model
is described once: :class:`PoolGroup` objects (one per attention kind, each with its block size and block
count) and one :class:`PoolLayer` per layer. A step of a serving loop::

    >>> import kvcache, numpy as np
    >>> pool = kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=16)],
    ...                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=8)] * 2,
    ...                     hash_seed=b"tiny-model", events=64)
    >>> prompt = list(range(10))
    >>> with pool.sequence() as seq:
    ...     slots = seq.reserve(prompt)                       # a slot per token and group
    ...     k = np.ones((len(prompt), 2, 8), np.float32)      # [tokens, kv_heads, head_dim] per layer
    ...     pool.write([k, k], [k, k], slots)                 # every layer in one call
    ...     seq.commit()                                      # full blocks are hashed and cached
    ...     table = pool.block_table([seq])                   # int32 [batch, max_blocks], zero-copy
    ...     np.from_dlpack(table).shape
    (1, 3)
    >>> with pool.sequence() as again:                        # the same prompt later: its full blocks hit
    ...     again.match_prefix(prompt)
    8
    >>> [e.kind.name for e in pool.events()]
    ['BLOCK_STORED', 'BLOCK_STORED']

Views (:meth:`Pool.block_table`, :meth:`Pool.layer_storage`, :meth:`Sequence.recurrent_state`) are
:class:`kvcache.View` objects that ``torch.from_dlpack`` turns into tensors sharing the pool's memory. Block
tables and recurrent states are valid until the next call that changes the pool's blocks or tables (every
call but the queries, :meth:`Pool.write`, :meth:`Pool.layer_storage`, :meth:`Sequence.gather`,
:meth:`Sequence.recurrent_state` and :meth:`Sequence.save`) and, for a table, until the next table of the same group and format (the
tables of several groups coexist); the K/V storage never moves, so its views are valid until the pool is
closed. Exporting a stale view raises :class:`kvcache.StaleViewError`.

A pool and its sequences are one object for threading: one thread at a time (a second thread entering gets an
:class:`kvcache.InvalidStateError`). Sequences keep their pool alive; closing a pool closes its sequences.
Running out of blocks raises :class:`kvcache.OutOfMemoryError` (a ``MemoryError``) and changes nothing.
"""
from __future__ import annotations

import array
import enum
import operator
import os
import time
from collections.abc import Mapping as _AbcMapping, Sequence as _AbcSequence
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, List, Mapping, NamedTuple, Optional, Sequence as Seq, Tuple, Union

from . import _lib
from ._cache import KV, TensorLike, View, _layer
from ._errors import InvalidArgumentError, OutOfRangeError
from ._owner import HandleOwner
from ._streams import StreamLike, stream_handle
from ._types import DeviceLike, DeviceType, Dtype, DtypeLike, parse_device, parse_dtype

__all__ = [
    "Pool", "Sequence", "PoolGroup", "PoolLayer", "PoolStats", "PoolEvent", "SlotMapping", "CsrBlockTable",
    "BatchReservation", "RecurrentState", "GroupKind", "Layout", "EventKind", "MultimodalItem", "describe_config",
    "POOL_BLOCK_HASH_VERSION", "model_fingerprint", "model_block_payload",
]

#: The version of ``docs/block-hash.md`` the pool's hashes follow (2: version 1 plus the extra keys).
POOL_BLOCK_HASH_VERSION: int = _lib.KVC_POOL_BLOCK_HASH_VERSION

_U32 = 2**32 - 1
_EVENT_BATCH = 256


class GroupKind(enum.IntEnum):
    """The attention kind of a group (``kvc_pool_group_kind``)."""

    FULL = _lib.KVC_POOL_GROUP_FULL
    SLIDING = _lib.KVC_POOL_GROUP_SLIDING
    CHUNKED = _lib.KVC_POOL_GROUP_CHUNKED
    RECURRENT = _lib.KVC_POOL_GROUP_RECURRENT
    LATENT = _lib.KVC_POOL_GROUP_LATENT  # MLA (DeepSeek): one row per token, no V (since 0.7)


class Storage(enum.IntEnum):
    """How a layer's blocks hold its K/V (``kvc_pool_storage``, since 0.7): the pool's dtype, or float8 e4m3fn
    codes with vLLM's fp8 KV cache convention (code = e4m3fn(x / scale), read code * scale; ``"fp8"`` is
    vLLM's name for it)."""

    DTYPE = _lib.KVC_POOL_STORAGE_DTYPE
    FP8_E4M3 = _lib.KVC_POOL_STORAGE_FP8_E4M3
    FP8 = _lib.KVC_POOL_STORAGE_FP8_E4M3  # vLLM's kv_cache_dtype="fp8"


class Layout(enum.IntEnum):
    """The layout of a layer's K/V storage (``kvc_pool_layout``)."""

    NHD = _lib.KVC_POOL_LAYOUT_NHD  # [num_blocks, block_size, heads, head_dim] (vLLM, FlashInfer NHD)
    HND = _lib.KVC_POOL_LAYOUT_HND  # [num_blocks, heads, block_size, head_dim] (FlashInfer HND)


class EventKind(enum.IntEnum):
    """What a :class:`PoolEvent` reports (``kvc_pool_event_kind``)."""

    BLOCK_STORED = _lib.KVC_POOL_EVENT_BLOCK_STORED
    BLOCK_REMOVED = _lib.KVC_POOL_EVENT_BLOCK_REMOVED
    ALL_CLEARED = _lib.KVC_POOL_EVENT_ALL_CLEARED
    TIER_STORED = _lib.KVC_POOL_EVENT_TIER_STORED  # the tier worker stored the block (block_id: the tier's index)
    TIER_FAILED = _lib.KVC_POOL_EVENT_TIER_FAILED  # the tier refused or failed the store
    TIER_DROPPED = _lib.KVC_POOL_EVENT_TIER_DROPPED  # the store never reached the tier: queue full, or shutdown


class HashMode(enum.IntEnum):
    """How a pool computes its block hashes (``kvc_pool_hash_mode``, docs/block-hash.md). Since 0.7.

    ``KVCACHE``: kvcache's own chain (the default). ``VLLM``: vLLM's prefix-caching hash with ``sha256_cbor``,
    equal to a vLLM server's for the same tokens, LoRA, items and cache salt (all of them UTF-8 text)."""

    KVCACHE = _lib.KVC_POOL_HASH_KVCACHE
    VLLM = _lib.KVC_POOL_HASH_VLLM_SHA256_CBOR


def _enum(cls: Any, value: Any, name: str) -> Any:
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            raise InvalidArgumentError(f"{name} is {value!r}; expected one of "
                                       f"{[m.name.lower() for m in cls]}", _lib.KVC_ERROR_INVALID_ARGUMENT) from None
    return cls(operator.index(value)) if operator.index(value) in cls._value2member_map_ else operator.index(value)


def _u32(value: Any, name: str) -> int:
    v = operator.index(value)
    if v < 0 or v > _U32:
        raise InvalidArgumentError(f"{name} is {v}; it must be in [0, 2^32)", _lib.KVC_ERROR_INVALID_ARGUMENT)
    return v


def _u64(value: Any, name: str) -> int:
    v = operator.index(value)
    if v < 0 or v >= 2**64:
        raise InvalidArgumentError(f"{name} is {v}; it must be in [0, 2^64)", _lib.KVC_ERROR_INVALID_ARGUMENT)
    return v


@dataclass(frozen=True)
class PoolGroup:
    """One group of layers (``kvc_pool_group_options``): an attention kind with its own block size and count.

    ``kind`` is ``"full"``, ``"sliding"`` (``window``: the sliding window in tokens), ``"chunked"``
    (``window``: the chunk size), ``"recurrent"`` (Mamba/SSM layers: ``block_size`` tokens between state
    checkpoints, ``num_blocks`` state slots) or ``"latent"`` (MLA layers: one row per token and no V, every
    block kept as in a full group; since 0.7). Block 0 of every group is the null block: ``num_blocks - 1`` are
    usable.

    Example:
        >>> PoolGroup("sliding", block_size=16, num_blocks=256, window=4096)
        PoolGroup(kind='sliding', block_size=16, num_blocks=256, window=4096)
    """

    kind: Union[str, GroupKind] = "full"
    block_size: int = 16
    num_blocks: int = 0
    window: int = 0

    def _to_lib(self, index: int) -> Any:
        g = _lib.kvc_pool_group_options()
        g.kind = int(_enum(GroupKind, self.kind, f"groups[{index}].kind"))
        g.block_size = _u32(self.block_size, f"groups[{index}].block_size")
        g.num_blocks = _u32(self.num_blocks, f"groups[{index}].num_blocks")
        g.window = operator.index(self.window)
        return g


@dataclass(frozen=True)
class PoolLayer:
    """One layer of the model (``kvc_pool_layer_options``).

    Attention layers: K is ``[num_kv_heads, head_dim]`` per token and V ``[num_kv_heads, value_head_dim]``
    (0: ``head_dim``). Latent layers: one row of ``head_dim`` per token (``num_kv_heads`` 1, no V). Recurrent
    layers: a conv state ``[conv_dim, conv_kernel]`` and an SSM state ``[num_kv_heads, head_dim,
    ssm_state_size]`` per sequence (Mamba2's heads, head_dim, d_state). ``storage`` (since 0.7) is ``"dtype"``
    or ``"fp8"`` (e4m3fn codes; ``k_scale`` and ``v_scale`` are vLLM's per-layer scales, 1.0 otherwise).

    Example:
        >>> PoolLayer(group=0, num_kv_heads=8, head_dim=128)
        PoolLayer(group=0, num_kv_heads=8, head_dim=128, value_head_dim=0, conv_dim=0, conv_kernel=0, ssm_state_size=0, storage='dtype', k_scale=1.0, v_scale=1.0)
    """

    group: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    value_head_dim: int = 0
    conv_dim: int = 0
    conv_kernel: int = 0
    ssm_state_size: int = 0
    storage: Union[str, Storage] = "dtype"
    k_scale: float = 1.0
    v_scale: float = 1.0

    def _to_lib(self, index: int) -> Any:
        lo = _lib.kvc_pool_layer_options()
        name = f"layers[{index}]"
        lo.group = _u32(self.group, f"{name}.group")
        lo.num_kv_heads = _u32(self.num_kv_heads, f"{name}.num_kv_heads")
        lo.key_head_dim = _u32(self.head_dim, f"{name}.head_dim")
        lo.value_head_dim = _u32(self.value_head_dim, f"{name}.value_head_dim")
        lo.conv_dim = _u32(self.conv_dim, f"{name}.conv_dim")
        lo.conv_kernel = _u32(self.conv_kernel, f"{name}.conv_kernel")
        lo.ssm_state_size = _u32(self.ssm_state_size, f"{name}.ssm_state_size")
        lo.storage = int(_enum(Storage, self.storage, f"{name}.storage"))
        lo.k_scale = float(self.k_scale)
        lo.v_scale = float(self.v_scale)
        return lo


@dataclass(frozen=True)
class PoolStats:
    """Counters of one group (``kvc_pool_stats``); ``num_blocks`` counts the usable blocks."""

    group: int
    num_blocks: int
    free_blocks: int
    cached_blocks: int
    used_blocks: int
    pinned_blocks: int
    prefix_queries: int
    prefix_hits: int
    evictions: int

    @property
    def available_blocks(self) -> int:
        """Blocks a reserve can take now: the free ones and the evictable cached ones. With a shared budget
        (``Pool(shared_budget_bytes=...)``) other groups' cached blocks are evictable too: add theirs."""
        return self.free_blocks + self.cached_blocks

    @property
    def hit_rate(self) -> float:
        """prefix_hits / prefix_queries (0.0 before any query)."""
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    @classmethod
    def _from_lib(cls, s: Any) -> "PoolStats":
        return cls(**{f.name: int(getattr(s, f.name)) for f in fields(cls)})


@dataclass(frozen=True)
class PoolEvent:
    """One event of the pool's queue (``kvc_pool_event``), for a router that tracks what each pool caches.

    ``id`` counts 1, 2, 3, ... per pool (a gap means events were dropped because the queue was full).
    ``block_hash`` and ``block_id`` are set for BLOCK_STORED and BLOCK_REMOVED, ``parent_hash`` (the previous
    block's hash, or the chain's root) and ``num_tokens`` for BLOCK_STORED; the others are None.
    """

    id: int
    kind: EventKind
    group: Optional[int]
    block_hash: Optional[bytes]
    parent_hash: Optional[bytes]
    num_tokens: Optional[int]
    block_id: Optional[int]

    @classmethod
    def _from_lib(cls, raw: Tuple[int, int, int, bytes, bytes, int, int]) -> "PoolEvent":
        eid, kind, group, block_hash, parent_hash, num_tokens, block_id = raw
        k = EventKind(kind) if kind in EventKind._value2member_map_ else kind
        stored, removed = k == EventKind.BLOCK_STORED, k == EventKind.BLOCK_REMOVED
        tier = k in (EventKind.TIER_STORED, EventKind.TIER_FAILED, EventKind.TIER_DROPPED)
        return cls(id=eid, kind=k, group=group if stored or removed or tier else None,
                   block_hash=block_hash if stored or removed or tier else None,
                   parent_hash=parent_hash if stored else None, num_tokens=num_tokens if stored or tier else None,
                   block_id=block_id if stored or removed or tier else None)


class SlotMapping:
    """The slots :meth:`Sequence.reserve` gave the step's tokens, in every group.

    ``data`` is an ``array('q')`` of ``num_groups * num_tokens`` int64 entries, group-major: entry
    ``g * num_tokens + i`` is token ``i``'s slot in group ``g`` (``block * block_size + offset``, the index
    vLLM's slot mapping holds; -1 for a recurrent group). It has the buffer protocol:
    ``torch.frombuffer(m.data, dtype=torch.int64).view(m.num_groups, -1)`` is a zero-copy tensor.

    Example:
        >>> m = SlotMapping(array.array("q", [16, 17, 32, 33]), num_groups=2)
        >>> len(m), m.group(1).tolist()
        (2, [32, 33])
        >>> SlotMapping.concat([m, m]).tolist()
        [[16, 17, 16, 17], [32, 33, 32, 33]]
    """

    __slots__ = ("data", "num_groups")

    def __init__(self, data: "array.array[int]", num_groups: int) -> None:
        if data.typecode != "q":
            raise TypeError(f"SlotMapping: data must be an array('q'), got array({data.typecode!r})")
        if num_groups <= 0 or len(data) % num_groups:
            raise InvalidArgumentError(f"SlotMapping: {len(data)} entries are not num_groups ({num_groups}) rows of "
                                       f"equal length", _lib.KVC_ERROR_INVALID_ARGUMENT)
        self.data = data
        self.num_groups = num_groups

    @property
    def num_tokens(self) -> int:
        return len(self.data) // self.num_groups

    def __len__(self) -> int:
        return self.num_tokens

    def group(self, group: int) -> "array.array[int]":
        """The slots of group ``group`` (a copy)."""
        g = operator.index(group)
        if not 0 <= g < self.num_groups:
            raise OutOfRangeError(f"group is {g}; the mapping has {self.num_groups} groups",
                                  _lib.KVC_ERROR_OUT_OF_RANGE)
        n = self.num_tokens
        return self.data[g * n:(g + 1) * n]

    def tolist(self) -> List[List[int]]:
        return [self.group(g).tolist() for g in range(self.num_groups)]

    @classmethod
    def concat(cls, mappings: Iterable["SlotMapping"]) -> "SlotMapping":
        """The mappings of several sequences as one, group by group: the form one :meth:`Pool.write` of a
        whole batch takes."""
        ms = list(mappings)
        if not ms:
            raise InvalidArgumentError("SlotMapping.concat: no mappings", _lib.KVC_ERROR_INVALID_ARGUMENT)
        groups = ms[0].num_groups
        if any(m.num_groups != groups for m in ms):
            raise InvalidArgumentError("SlotMapping.concat: the mappings have different numbers of groups",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        out = array.array("q")
        for g in range(groups):
            for m in ms:
                out.extend(m.group(g))
        return cls(out, groups)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotMapping) and self.num_groups == other.num_groups and self.data == other.data

    def __repr__(self) -> str:
        return f"SlotMapping({self.tolist()})"


class BatchReservation(NamedTuple):
    """What :meth:`Pool.reserve_batch` did: the first ``num_reserved`` sequences got their tokens (all of them
    unless the pool ran out of blocks), and ``slot_mapping`` holds the batch's slots (-1 for the others)."""

    num_reserved: int
    slot_mapping: SlotMapping


class CsrBlockTable(NamedTuple):
    """Block tables in FlashInfer's CSR form: int32 ``indptr [batch + 1]``, ``indices [indptr[batch]]`` and
    ``last_page_len [batch]`` (tokens in each sequence's last block), zero-copy :class:`kvcache.View` objects."""

    indptr: View
    indices: View
    last_page_len: View


class MultimodalItem(NamedTuple):
    """One image or audio clip of a sequence (``kvc_pool_mm_item``): its content ``hash`` (1 to 1024 bytes) and
    the tokens its placeholders occupy, ``[offset, offset + length)``. Every block overlapping that range hashes
    with ``hash`` (``docs/block-hash.md``, version 2). Plain ``(hash, offset, length)`` tuples work too."""

    hash: bytes
    offset: int
    length: int


def _mm_items(items: Iterable[Tuple[bytes, int, int]]) -> List[Tuple[bytes, int, int]]:
    """The items as the (bytes, int, int) tuples the C layer reads; the library checks ranges and order."""
    out = []
    for i, item in enumerate(items):
        h, offset, length = item
        for name, v in (("offset", offset), ("length", length)):
            if operator.index(v) < 0:
                raise InvalidArgumentError(
                    f"Pool.sequence: mm_items[{i}].{name} is {v}; token positions and counts are >= 0",
                    _lib.KVC_ERROR_INVALID_ARGUMENT)
        out.append((bytes(h), operator.index(offset), operator.index(length)))
    return out


class RecurrentState(NamedTuple):
    """A sequence's live state of one recurrent layer: ``conv [1, conv_dim, conv_kernel]`` and
    ``ssm [1, num_kv_heads, head_dim, ssm_state_size]`` views, read and written in place by the model."""

    conv: View
    ssm: View


def _slots_of(slot_mapping: Any) -> Any:
    """The int64 slots of a write's ``slot_mapping`` argument: a SlotMapping, a list of them, or raw slots."""
    if isinstance(slot_mapping, SlotMapping):
        return slot_mapping.data
    if isinstance(slot_mapping, (list, tuple)) and slot_mapping and isinstance(slot_mapping[0], SlotMapping):
        return SlotMapping.concat(slot_mapping).data
    return slot_mapping


def _torch_device(device: Tuple[int, int]) -> str:
    kind, index = device
    if kind == DeviceType.CPU:
        return "cpu"
    return f"cuda:{index}"  # torch names CUDA and ROCm devices "cuda"


def _pool_options(dtype: Any, groups: Tuple["PoolGroup", ...], layers: Tuple["PoolLayer", ...], device: Any,
                  layout: "Layout") -> Tuple[Any, Tuple[Any, Any]]:
    """``kvc_pool_options`` of a pool's description, and the arrays it points into (keep them alive with it)."""
    o = _lib.kvc_pool_options()
    o.dtype = int(dtype)
    dev = _lib.kvc_device()
    dev.device_type, dev.device_id = device
    o.device = dev
    garr = _lib.PoolGroupOptionsArray(max(len(groups), 1))
    for i, g in enumerate(groups):
        if not isinstance(g, PoolGroup):
            raise TypeError(f"groups[{i}] is a {type(g).__name__}; expected a kvcache.PoolGroup")
        garr[i] = g._to_lib(i)
    larr = _lib.PoolLayerOptionsArray(max(len(layers), 1))
    for i, lay in enumerate(layers):
        if not isinstance(lay, PoolLayer):
            raise TypeError(f"layers[{i}] is a {type(lay).__name__}; expected a kvcache.PoolLayer")
        larr[i] = lay._to_lib(i)
    o.num_groups = len(groups)
    o.groups = garr.cast()
    o.num_layers = len(layers)
    o.layers = larr.cast()
    o.layout = int(layout)
    return o, (garr, larr)


def model_fingerprint(*, dtype: DtypeLike, groups: Seq["PoolGroup"], layers: Seq["PoolLayer"],
                      layout: Union[str, "Layout"] = "NHD", hash_seed: Optional[bytes] = None) -> bytes:
    """The model fingerprint (32 bytes, the first part of every tier key; docs/tiers.md) a :class:`Pool` created
    with these arguments would have (:meth:`Pool.fingerprint`), without creating one: no memory, no device
    (``kvc_pool_options_fingerprint``, since 0.7). The groups' ``num_blocks`` are not part of it.

    Raises:
        InvalidArgumentError: as :class:`Pool` would, naming the field.
    """
    o, keep = _pool_options(parse_dtype(dtype), tuple(groups), tuple(layers), parse_device("cpu"),
                            Layout(_enum(Layout, layout, "layout")))
    fp = bytes(_lib.kvc_pool_options_fingerprint(o, hash_seed))
    del keep
    return fp


def model_block_payload(*, dtype: DtypeLike, groups: Seq["PoolGroup"], layers: Seq["PoolLayer"],
                        layout: Union[str, "Layout"] = "NHD", group: int = 0) -> Tuple[int, int]:
    """``(payload_size, num_layers)`` of a block of ``group`` in a pool created with these arguments: what
    :meth:`kvcache.Tier.get_blocks` and :meth:`kvcache.Tier.put_blocks` take to share blocks with such pools
    (``kvc_pool_options_block_payload``, since 0.7)."""
    o, keep = _pool_options(parse_dtype(dtype), tuple(groups), tuple(layers), parse_device("cpu"),
                            Layout(_enum(Layout, layout, "layout")))
    size, num_layers = _lib.kvc_pool_options_block_payload(o, None, _u32(group, "group"))
    del keep
    return int(size), int(num_layers)


class Pool(HandleOwner):
    """A block pool for one model on one device (``kvc_pool``).

    Args:
        dtype: the K/V and state dtype (``torch.bfloat16``, ``"float16"``, :class:`kvcache.Dtype` ...).
        groups: the :class:`PoolGroup` objects; layers name them by index.
        layers: one :class:`PoolLayer` per layer of the model.
        device: ``"cpu"``, ``"cuda:0"``, ``torch.device`` ... (default the CPU).
        layout: the physical layout of the K/V storage, ``"NHD"`` (default) or ``"HND"``; views in the other
            layout are the same memory with strides.
        hash_seed: the pool's hash namespace (bytes): name the model and its weights with it. Blocks are reused
            only within one seed; a router computes the same block hashes from it (docs/block-hash.md).
        prefix_caching: True (default): full committed blocks are hashed and reused. False: never hashed, and
            released blocks are freed.
        events: how many events the queue keeps until :meth:`events` pulls them (0: no events). When full, the
            oldest are dropped.
        hash_mode: ``"kvcache"`` (default) or ``"vllm"`` (:class:`HashMode`): blocks hashed as vLLM hashes
            them with ``sha256_cbor``, so a router that also fronts vLLM servers sees the same prefixes; the
            seed is then vLLM's ``PYTHONHASHSEED`` (empty: its default) and must be UTF-8, like the salts,
            adapter keys and paths and item hashes of the sequences. Since 0.7.
        storage: None (default: the library allocates the blocks), or one writable C-contiguous CPU buffer that
            holds every layer's K/V (a NumPy array, a CPU ``torch`` tensor, a ``bytearray``) of at least
            :meth:`storage_bytes` bytes: the storage views are then slices of it, with no copy (docs/allocator.md).
            The pool keeps the buffer until it is closed and collected; a buffer too small is
            :class:`OutOfMemoryError`.
        shared_budget_bytes: 0 (default): each group has its own ``num_blocks``. Otherwise one budget of this many
            bytes that every group takes its blocks from (the groups' ``num_blocks`` must then be 0): blocks are
            pages of one size (the largest group's block), ids are pool-wide, eviction takes any group's least
            recently used cached block, and :meth:`stats` gives the budget's ``num_blocks`` and ``free_blocks``
            (``kvc_pool_options.shared_budget_bytes``, docs/pool.md "One budget for all groups"). Since 0.7.

    Example:
        >>> import kvcache
        >>> pool = kvcache.Pool(dtype="float16", groups=[kvcache.PoolGroup("full", block_size=16, num_blocks=64)],
        ...                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=8, head_dim=128)] * 4)
        >>> pool.stats(0).num_blocks, pool.num_layers
        (63, 4)
        >>> pool.close()
    """

    _handle: Any
    _what = "pool"
    _unpicklable = "a kvcache.Pool cannot be pickled"

    def __init__(self, *, dtype: DtypeLike, groups: Seq[PoolGroup], layers: Seq[PoolLayer],
                 device: DeviceLike = "cpu", layout: Union[str, Layout] = Layout.NHD,
                 hash_seed: Optional[bytes] = None, prefix_caching: bool = True, events: int = 0,
                 storage: Any = None, shared_budget_bytes: int = 0,
                 hash_mode: Union[str, HashMode] = HashMode.KVCACHE) -> None:
        self._groups: Tuple[PoolGroup, ...] = tuple(groups)
        self._layers: Tuple[PoolLayer, ...] = tuple(layers)
        self._dtype = parse_dtype(dtype)
        self._device = parse_device(device)
        self._layout = Layout(_enum(Layout, layout, "layout"))
        o, keep = _pool_options(self._dtype, self._groups, self._layers, self._device, self._layout)
        o.enable_prefix_caching = 1 if prefix_caching else 0
        o.event_capacity = _u32(events, "events")
        o.shared_budget_bytes = _u64(shared_budget_bytes, "shared_budget_bytes")
        o.hash_mode = int(_enum(HashMode, hash_mode, "hash_mode"))
        if storage is not None and type(storage).__module__.startswith("torch"):
            storage = storage.detach().numpy()  # the same memory; torch tensors have no buffer protocol
        self._handle = _lib.kvc_pool_create(o, hash_seed, storage)
        self._hash_seed = bytes(hash_seed or b"")
        self._num_tiers = 0
        del keep

    @staticmethod
    def storage_bytes(*, dtype: DtypeLike, groups: Seq[PoolGroup], layers: Seq[PoolLayer],
                      shared_budget_bytes: int = 0) -> int:
        """Bytes a ``storage`` buffer needs for these options: every layer's K and V buffer, each aligned to
        ``KVC_ALLOCATOR_ALIGNMENT`` (256) bytes, wherever the buffer starts; with a shared budget its one
        buffer of pages, at most ``shared_budget_bytes``, aligned likewise."""
        elem = _lib.kvc_dtype_size(int(parse_dtype(dtype)))
        align = _lib.KVC_ALLOCATOR_ALIGNMENT
        if shared_budget_bytes:
            return _u64(shared_budget_bytes, "shared_budget_bytes") + align - 1
        total = 0
        for lay in layers:
            g = groups[lay.group]
            kind = _enum(GroupKind, g.kind, "kind")
            if kind == GroupKind.RECURRENT:
                per_block = (lay.conv_dim * lay.conv_kernel, lay.num_kv_heads * lay.head_dim * lay.ssm_state_size)
            elif kind == GroupKind.LATENT:
                per_block = (g.block_size * lay.num_kv_heads * lay.head_dim,)  # rows only, no V
            else:
                vdim = lay.value_head_dim or lay.head_dim
                per_block = (g.block_size * lay.num_kv_heads * lay.head_dim, g.block_size * lay.num_kv_heads * vdim)
            size = 1 if _enum(Storage, lay.storage, "storage") == Storage.FP8_E4M3 else elem  # fp8: one-byte codes
            total += sum(n * g.num_blocks * size + align - 1 for n in per_block)
        return total

    @classmethod
    def from_config(cls, config: Any, *, num_blocks: Union[int, Mapping[str, int], Seq[int]],
                    block_size: int = 16, dtype: Optional[DtypeLike] = None, **kwargs: Any) -> "Pool":
        """A pool for a transformers model configuration (see :func:`describe_config`); ``dtype`` defaults to
        the config's ``dtype`` (``torch_dtype``). Other keyword arguments go to :class:`Pool`."""
        groups, layers = describe_config(config, num_blocks=num_blocks, block_size=block_size)
        if dtype is None:
            text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
            dtype = getattr(text, "dtype", None) or getattr(text, "torch_dtype", None)
            if dtype is None:
                raise InvalidArgumentError("Pool.from_config: the config names no dtype; pass dtype=",
                                           _lib.KVC_ERROR_INVALID_ARGUMENT)
        return cls(dtype=dtype, groups=groups, layers=layers, **kwargs)

    # ------------------------------------------------------------ description

    @property
    def groups(self) -> Tuple[PoolGroup, ...]:
        return self._groups

    @property
    def layers(self) -> Tuple[PoolLayer, ...]:
        return self._layers

    @property
    def num_groups(self) -> int:
        return len(self._groups)

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    @property
    def dtype(self) -> Dtype:
        return self._dtype

    @property
    def device(self) -> Tuple[int, int]:
        """The DLPack (device_type, device_id) pair."""
        return self._device

    @property
    def hash_seed(self) -> bytes:
        return self._hash_seed

    # -------------------------------------------------------------- sequences

    def sequence(self, salt: Optional[bytes] = None, *, adapter_key: Optional[bytes] = None,
                 mm_items: Iterable[Tuple[bytes, int, int]] = (), adapter_path: Optional[bytes] = None,
                 adapter_id: int = 0) -> "Sequence":
        """A new, empty sequence (a request). ``salt`` is its cache salt (per tenant): blocks are reused only
        between sequences with the same salt. Use it as a context manager to release it::

            with pool.sequence() as seq: ...

        The extra keys: ``adapter_key`` (a LoRA adapter's name, up to 1024 bytes) enters every block's hash,
        each of ``mm_items`` (:class:`MultimodalItem` or ``(hash, offset, length)``, sorted by offset, not
        overlapping) the hash of every block its token range overlaps, so requests with equal placeholder
        tokens but different images, or different adapters, share no block. Bad items raise
        :class:`InvalidArgumentError` and the pool is unchanged. ``adapter_path`` (a ``"vllm"`` hash-mode pool
        only: the LoRA's path, part of vLLM's LoRA key) and ``adapter_id`` (vLLM's ``lora_id`` in the events,
        not hashed; 0 = none) since 0.7.
        """
        handle = _lib.kvc_pool_sequence_create(self._handle, salt, adapter_key, _mm_items(mm_items), adapter_path,
                                               operator.index(adapter_id))
        return Sequence._from_handle(handle, self)

    def load_sequence(self, path: Union[str, "os.PathLike[str]"]) -> "Sequence":
        """A new sequence from the file :meth:`Sequence.save` wrote, in this pool (``docs/file-format.md``).

        The pool must have the saved one's layout (dtype, storage layout, hash seed, groups' kinds, block sizes
        and windows, layers' shapes; its block counts may differ): another raises
        :class:`kvcache.InvalidArgumentError` naming the first difference (``group 0: block_size 4 (file) vs 8
        (pool)``). The sequence takes the blocks it needs (evicting cached ones as :meth:`Sequence.reserve`
        does; :class:`kvcache.OutOfMemoryError` when they are not there) and its committed full blocks are
        cached for prefix reuse. A missing, truncated or corrupted file raises :class:`kvcache.IoError`. On any
        error the pool is unchanged."""
        return Sequence._from_handle(_lib.kvc_pool_sequence_load(self._handle, path), self)

    def load_sequence_buffer(self, data: Any) -> "Sequence":
        """As :meth:`load_sequence`, from a file's bytes (any bytes-like object, as :meth:`Sequence.save_to`
        produced them)."""
        return Sequence._from_handle(_lib.kvc_pool_sequence_load_buffer(self._handle, data), self)

    def blocks_needed(self, sequences: Seq["Sequence"], new_tokens: Union[int, Seq[int]]) -> List[int]:
        """Admission control: per group, the blocks that reserving ``new_tokens`` more tokens (one count per
        sequence, or one for all) would take, copy-on-write copies and recurrent slots included, minus what
        sliding groups give back. Compare with ``stats(g).available_blocks``."""
        seqs = list(sequences)
        counts = [operator.index(new_tokens)] * len(seqs) if not isinstance(new_tokens, _AbcSequence) else list(new_tokens)
        return _lib.kvc_pool_blocks_needed(self._handle, [self._own(s, "sequences")._handle for s in seqs], counts)

    def _own(self, seq: Any, name: str) -> "Sequence":
        if not isinstance(seq, Sequence):
            raise TypeError(f"{name}: expected kvcache.Sequence objects, got {type(seq).__name__}")
        return seq

    # ---------------------------------------------------------------- queries

    def stats(self, group: int = 0) -> PoolStats:
        """The counters of ``group``."""
        return PoolStats._from_lib(_lib.kvc_pool_stats_get(self._handle, _u32(group, "group")))

    # ------------------------------------------------------------------ tiers

    def add_tier(self, tier: Any, write: Any = "commit") -> None:
        """Gives ``tier`` (a :class:`kvcache.DiskTier` or :class:`kvcache.RedisTier`) to the pool, after the tiers added before (match_prefix
        asks them in that order). ``write``: ``"commit"`` (store blocks when they become cached) or ``"evict"``
        (when they are evicted from memory). See :mod:`kvcache.tier`."""
        from . import tier as _tier

        _tier.add_tier(self, tier, write)

    def start_tier_worker(self, max_jobs: int = 256, max_bytes: int = 256 << 20, drain_timeout_ms: int = 1000,
                          events: bool = False) -> None:
        """Starts the pool's tier worker: from then on stores into the tiers are queued (at most ``max_jobs``
        batches and ``max_bytes`` staged bytes; beyond that they are dropped and counted) and made by a thread of
        the pool, so a commit never waits for a tier; :meth:`Sequence.prefetch` starts a match's lookups early.
        ``events``: queue TIER_STORED / TIER_FAILED / TIER_DROPPED events. Since 0.7."""
        from . import tier as _tier

        _tier.start_tier_worker(self, max_jobs, max_bytes, drain_timeout_ms, events)

    def stop_tier_worker(self, drain_timeout_ms: int = 0) -> None:
        """Stops the tier worker: queued stores run for up to ``drain_timeout_ms``, the rest are dropped."""
        _lib.kvc_pool_stop_tier_worker(self._handle, _u32(drain_timeout_ms, "drain_timeout_ms"))

    def tier_worker_stats(self) -> Any:
        """The :class:`kvcache.TierWorkerStats` of the running worker (all 0 without one)."""
        from . import tier as _tier

        return _tier.TierWorkerStats._from_lib(_lib.kvc_pool_tier_worker_stats(self._handle))

    def tier_stats(self, index: int = 0) -> Any:
        """The :class:`kvcache.TierStats` of tier ``index`` (order of :meth:`add_tier`)."""
        from . import tier as _tier

        return _tier.tier_stats(self, _u32(index, "index"))

    def fingerprint(self) -> bytes:
        """The pool's model fingerprint (32 bytes, the first part of every tier key; docs/tiers.md)."""
        from . import tier as _tier

        return _tier.fingerprint(self)

    def events(self) -> List[PoolEvent]:
        """Takes every queued event, oldest first (the queue is empty afterwards)."""
        out: List[PoolEvent] = []
        while True:
            batch = _lib.kvc_pool_events_pull(self._handle, _EVENT_BATCH)
            out.extend(PoolEvent._from_lib(e) for e in batch)
            if len(batch) < _EVENT_BATCH:
                return out

    def events_vllm(self, ts: Optional[float] = None, *, int_hashes: bool = False,
                    data_parallel_rank: Optional[int] = None) -> bytes:
        """Takes every queued event as one batch in vLLM's wire form: the msgpack bytes vLLM's KV event
        publisher sends for a ``KVEventBatch`` (``BlockStored`` with several blocks, their token ids, no parent
        for a chain's first block, ``medium``, ``lora_id`` and ``lora_name``; ``BlockRemoved``;
        ``AllBlocksCleared``), which NVIDIA Dynamo and llm-d read (docs/pool.md, 'Events in vLLM's form').
        ``ts`` defaults to ``time.time()``; ``int_hashes`` gives vLLM's 64-bit hash form. Since 0.7."""
        return _lib.kvc_pool_events_pull_vllm(self._handle, 1 if int_hashes else 0,
                                              time.time() if ts is None else float(ts),
                                              -1 if data_parallel_rank is None else operator.index(data_parallel_rank))

    # --------------------------------------------------------------- mutation

    def clear_cache(self) -> None:
        """Evicts every cached, unreferenced, unpinned block (after a weights update) and queues an ALL_CLEARED
        event; blocks in use are untouched."""
        _lib.kvc_pool_clear_cache(self._handle)

    def unpin_all(self) -> None:
        """Unpins every block pinned by :meth:`Sequence.pin`; they stay cached, evictable again."""
        _lib.kvc_pool_unpin_all(self._handle)

    # -------------------------------------------------------------- data path

    def write(self, keys: Seq[Optional[TensorLike]], values: Seq[Optional[TensorLike]],
              slot_mapping: Union[SlotMapping, Seq[SlotMapping], Any]) -> None:
        """Writes one step's K/V through a slot mapping, every layer in one call (one launch on a GPU).

        ``keys[l]`` and ``values[l]`` are ``[num_tokens, num_kv_heads, head_dim]`` tensors on the pool's device
        (None for recurrent layers). ``slot_mapping`` is a :class:`SlotMapping`, a list of them (the sequences
        of a batch, concatenated group by group in that order), or ``num_groups * num_tokens`` int64 slots in
        the same group-major form; a slot of -1 is skipped. Table and state views stay valid.
        """
        _lib.kvc_pool_write(self._handle, list(keys), list(values), _slots_of(slot_mapping))

    def write_layer(self, layer: int, key: TensorLike, value: Optional[TensorLike],
                    slot_mapping: Union[SlotMapping, Seq[SlotMapping], Any]) -> None:
        """Writes one layer's K/V of a step through the step's slot mapping: what a model's forward pass calls
        per layer, once the layer computed them (one launch on a GPU).

        ``key`` and ``value`` are ``[num_tokens, num_kv_heads, head_dim]`` tensors on the pool's device (a
        latent layer: ``key`` its rows, ``value`` None); an fp8 layer stores their codes.
        ``slot_mapping`` is the whole step's mapping, as :meth:`write` takes it: pass the same object to every
        layer of the step (concatenate a batch's mappings once per step, with :meth:`SlotMapping.concat` or
        :meth:`reserve_batch`). Its row for the layer's group is checked on the first layer of the step only;
        the later layers compare it with that row. Table and state views stay valid.
        """
        _lib.kvc_pool_write_layer(self._handle, _layer(layer, "layer"), key, value, _slots_of(slot_mapping))

    # ------------------------------------------------------------- scheduling

    def reserve_batch(self, sequences: Seq["Sequence"], tokens: Any,
                      num_tokens: Union[int, Seq[int], Any] = 1) -> "BatchReservation":
        """A scheduler's step in one call: :meth:`Sequence.reserve` for every sequence, in order.

        ``tokens`` holds the sequences' tokens one after another (a list or a 1-D integer array);
        ``num_tokens`` how many each takes (one count per sequence, or one int for all: 1 for a decode step).
        Returns a :class:`BatchReservation`: ``num_reserved`` sequences (a prefix of ``sequences``) got their
        tokens, and ``slot_mapping`` is the batch's mapping, ready for :meth:`write` and :meth:`write_layer`.
        When the pool runs out of blocks the batch stops at the first sequence that does not fit: it and the
        later ones are unchanged (preempt or defer them) and their slots are -1, which a write skips. That is
        not an error; bad arguments are (nothing is reserved then).
        """
        reserved, raw = _lib.kvc_pool_reserve_batch(self._handle, sequences, tokens, num_tokens)
        data = array.array("q")
        data.frombytes(raw)
        return BatchReservation(int(reserved), SlotMapping(data, len(self._groups)))

    def commit_batch(self, sequences: Seq["Sequence"]) -> None:
        """:meth:`Sequence.commit` of every sequence, in one call."""
        _lib.kvc_pool_commit_batch(self._handle, sequences)

    def layer_storage(self, layer: int, layout: Union[str, Layout, None] = None) -> KV:
        """The K and V storage of ``layer`` over all its group's blocks, zero-copy:
        ``[num_blocks, block_size, heads, head_dim]`` (NHD) or ``[num_blocks, heads, block_size, head_dim]``
        (HND; default: the pool's layout). Valid until the pool is closed: the storage never moves. A latent
        layer's V is None; an fp8 layer's views are uint8 codes (value = code * the layer's scale)."""
        lay = self._layout if layout is None else Layout(_enum(Layout, layout, "layout"))
        return KV(*_lib.kvc_pool_layer_storage(self._handle, _layer(layer, "layer"), int(lay)))

    def block_table(self, sequences: Seq["Sequence"], group: int = 0) -> View:
        """The block tables of ``sequences`` in ``group`` as an int32 ``[batch, max_blocks]`` view on the pool's
        device, rows padded with 0 (vLLM, FlashAttention). Valid until the next call that changes blocks or
        tables, or the next padded table of the same group."""
        table, _, _ = _lib.kvc_pool_block_table(self._handle, self._seq_handles(sequences), _u32(group, "group"),
                                                _lib.KVC_POOL_TABLE_PADDED)
        return table

    def block_table_csr(self, sequences: Seq["Sequence"], group: int = 0) -> CsrBlockTable:
        """The block tables in FlashInfer's CSR form (indptr, indices, last_page_len); validity as
        :meth:`block_table`."""
        indices, indptr, last = _lib.kvc_pool_block_table(self._handle, self._seq_handles(sequences),
                                                          _u32(group, "group"), _lib.KVC_POOL_TABLE_CSR)
        return CsrBlockTable(indptr, indices, last)

    def _seq_handles(self, sequences: Seq["Sequence"]) -> List[Any]:
        return [self._own(s, "sequences")._handle for s in sequences]

    # ----------------------------------------------------------------- stream

    @property
    def stream(self) -> int:
        """The CUDA/HIP stream the pool's device work is issued on, as an int handle (0: the default stream).
        Assign a stream (torch/cupy stream object, int handle, None) to bind the pool to it, as
        :attr:`kvcache.Cache.stream`."""
        return self._handle.stream

    @stream.setter
    def stream(self, stream: StreamLike) -> None:
        _lib.kvc_pool_set_stream(self._handle, stream_handle(stream))

    # --------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Closes the pool and its sequences: later calls raise ValueError and views go stale. Memory is freed
        once no sequence object or exported tensor uses it. Closing twice does nothing."""
        _lib.kvc_pool_destroy(self._handle)

    def __repr__(self) -> str:
        if self.closed:
            return "Pool(closed)"
        groups = ", ".join(f"{GroupKind(_enum(GroupKind, g.kind, 'kind')).name.lower()}({g.block_size}x"
                           f"{g.num_blocks})" for g in self._groups)
        return f"Pool({self._dtype.name.lower()}, {self.num_layers} layers, groups=[{groups}])"


class Sequence(HandleOwner):
    """A request in a :class:`Pool` (``kvc_pool_sequence``): its tokens and one block table per group.

    Create one with :meth:`Pool.sequence` or :meth:`fork`; close it (or leave its ``with`` block) when the
    request is done: its blocks go back to the pool, the cached ones staying reusable. A sequence keeps its
    pool alive.
    """

    _handle: Any
    _what = "sequence"
    _unpicklable = "a kvcache.Sequence cannot be pickled"
    _pool: Pool

    @classmethod
    def _from_handle(cls, handle: Any, pool: Pool) -> "Sequence":
        s = cls.__new__(cls)
        s._handle = handle
        s._pool = pool
        return s

    def __init__(self) -> None:
        raise TypeError("create sequences with Pool.sequence() or Sequence.fork()")

    @property
    def pool(self) -> Pool:
        return self._pool

    def __len__(self) -> int:
        """Tokens the sequence holds (reserved, committed or not)."""
        return int(_lib.kvc_pool_sequence_length(self._handle))

    @property
    def length(self) -> int:
        return len(self)

    @property
    def committed(self) -> int:
        """Tokens committed (written and declared by :meth:`commit`, or matched)."""
        return int(_lib.kvc_pool_sequence_committed(self._handle))

    def match_prefix(self, tokens: Any) -> int:
        """Attaches the longest cached prefix of ``tokens`` (a whole number of blocks of every group, at most
        ``len(tokens) - 1`` tokens: the last token is always computed) to this empty sequence and returns how
        many tokens matched. Reserve the rest: ``seq.reserve(tokens[matched:])``."""
        return int(_lib.kvc_pool_match_prefix(self._handle, tokens))

    def prefetch(self, tokens: Any) -> Any:
        """Starts the tier lookups :meth:`match_prefix` of ``tokens`` would make, in the pool's tier worker
        (:meth:`Pool.start_tier_worker`), and returns a :class:`kvcache.Prefetch` to collect later into this
        (still empty) sequence. Without a worker, collecting it is :meth:`match_prefix`. Since 0.7."""
        from . import tier as _tier

        return _tier.Prefetch(_lib.kvc_pool_prefetch_start(self._handle, tokens), self)

    def reserve(self, tokens: Any) -> SlotMapping:
        """Appends ``tokens`` and gives each a slot in every attention group (copying a shared or cached last
        block first, evicting least recently used cached blocks when no block is free). Raises
        :class:`kvcache.OutOfMemoryError` (naming the group and the numbers) when the pool is full; nothing
        changes then."""
        raw = _lib.kvc_pool_reserve(self._handle, tokens)
        data = array.array("q")
        data.frombytes(raw)
        return SlotMapping(data, self._pool.num_groups)

    def commit(self) -> None:
        """Declares every reserved token written: blocks that became full are hashed and cached (a BLOCK_STORED
        event each), recurrent groups checkpoint their state at block boundaries."""
        _lib.kvc_pool_commit(self._handle)

    def fork(self) -> "Sequence":
        """A new sequence sharing every block of this one (``n > 1`` sampling, beam search): nothing is copied
        until one of them writes into a shared partial block (copy-on-write)."""
        return Sequence._from_handle(_lib.kvc_pool_fork(self._handle), self._pool)

    def truncate(self, num_tokens: int) -> None:
        """Keeps the first ``num_tokens`` tokens (speculative decoding's rollback); blocks wholly past them are
        released."""
        n = operator.index(num_tokens)
        if n < 0:
            raise InvalidArgumentError(f"truncate: num_tokens is {n}; it must be >= 0",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        _lib.kvc_pool_truncate(self._handle, n)

    def pin(self) -> None:
        """Pins the sequence's cached blocks: never evicted, even after the sequence is closed, until
        :meth:`Pool.unpin_all` (a system prompt every request shares)."""
        _lib.kvc_pool_sequence_pin(self._handle)

    def gather(self, layer: int, keys: Optional[TensorLike] = None, values: Optional[TensorLike] = None) -> KV:
        """Copies the sequence's K/V of ``layer`` into contiguous ``[1, num_kv_heads, length, head_dim]`` tensors
        (the transformers layout) and returns them: ``keys``/``values`` when given (tensors on the pool's
        device), else new torch tensors (numpy arrays without torch). A latent layer returns its rows and
        None; an fp8 layer its decoded values, in the pool's dtype."""
        i = _layer(layer, "layer")
        if keys is None or values is None:
            if i >= self._pool.num_layers:
                raise OutOfRangeError(f"layer is {i}; the pool has {self._pool.num_layers} layers",
                                      _lib.KVC_ERROR_OUT_OF_RANGE)
            desc = self._pool.layers[i]
            latent = _enum(GroupKind, self._pool.groups[desc.group].kind, "kind") == GroupKind.LATENT
            n = len(self)
            vdim = desc.value_head_dim or desc.head_dim
            keys = self._empty((1, desc.num_kv_heads, n, desc.head_dim)) if keys is None else keys
            if values is None and not latent:
                values = self._empty((1, desc.num_kv_heads, n, vdim))
        _lib.kvc_pool_gather(self._handle, i, keys, values)
        return KV(keys, values)

    def _empty(self, shape: Tuple[int, ...]) -> Any:
        try:
            import torch
        except ImportError:
            torch = None
        dtype = self._pool.dtype
        if torch is not None:
            tdt = {Dtype.FLOAT32: torch.float32, Dtype.FLOAT16: torch.float16, Dtype.BFLOAT16: torch.bfloat16}[dtype]
            return torch.empty(shape, dtype=tdt, device=_torch_device(self._pool.device))
        import numpy as np
        if dtype == Dtype.BFLOAT16 or self._pool.device[0] != DeviceType.CPU:
            raise TypeError("gather: without torch, pass keys= and values= tensors to copy into (numpy has no "
                            "bfloat16 and no device memory)")
        return np.empty(shape, dtype=np.float32 if dtype == Dtype.FLOAT32 else np.float16)

    def recurrent_state(self, layer: int) -> RecurrentState:
        """The live state of recurrent ``layer``: conv and SSM views the model reads and writes in place (valid
        until the next call that changes blocks or tables)."""
        return RecurrentState(*_lib.kvc_pool_recurrent_state(self._handle, _layer(layer, "layer")))

    # ------------------------------------------------------------------ files

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the sequence to the file ``path`` (created or replaced; written beside it, then renamed): its
        tokens, lengths, hash chain root and every layer's block bytes (recurrent layers: the live state), under
        a fingerprint of the pool's layout. :meth:`Pool.load_sequence` makes it again in a pool of the same
        layout. The sequence is not changed; views stay valid. Raises :class:`kvcache.IoError` (an
        ``OSError``) when the file cannot be written."""
        _lib.kvc_pool_sequence_save(self._handle, path, None)

    def save_to(self, write: Callable[[bytes], Any]) -> None:
        """The bytes :meth:`save` writes, given to ``write(chunk)`` in order (a socket's ``sendall``, a list's
        ``append``). An exception ``write`` raises stops the save and is raised here."""
        if not callable(write):
            raise TypeError(f"save_to: write is a {type(write).__name__}; give a callable taking bytes")
        _lib.kvc_pool_sequence_save_to(self._handle, write)

    # --------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Releases the sequence's blocks (cached ones stay reusable until evicted). Closing twice, or after the
        pool was closed, does nothing."""
        _lib.kvc_pool_sequence_destroy(self._handle)

    def __repr__(self) -> str:
        if self.closed:
            return "Sequence(closed)"
        return f"Sequence(length={len(self)}, committed={self.committed})"


_KIND_OF_LAYER_TYPE = {
    "full_attention": GroupKind.FULL,
    "attention": GroupKind.FULL,
    "sliding_attention": GroupKind.SLIDING,
    "chunked_attention": GroupKind.CHUNKED,
}


def describe_config(config: Any, *, num_blocks: Union[int, Mapping[str, int], Seq[int]],
                    block_size: int = 16) -> Tuple[List[PoolGroup], List[PoolLayer]]:
    """The groups and layers of a pool for a transformers model configuration (its decoder text config).

    Layers come from ``layer_types`` (``full_attention``, ``sliding_attention`` with ``sliding_window``,
    ``chunked_attention`` with ``attention_chunk_size``; without layer_types every layer is sliding if
    ``sliding_window`` is set, chunked if ``attention_chunk_size`` is, else full), heads from
    ``num_key_value_heads`` (else ``num_attention_heads``) and ``head_dim`` (else ``hidden_size //
    num_attention_heads``). One group per attention kind, in the order the kinds first appear. ``num_blocks``
    is one count for every group, a mapping from kind (``"full"``, ``"sliding"``, ``"chunked"``) to count, or a
    list with one count per group. Recurrent layers (Mamba) need their state sizes: describe those with
    :class:`PoolLayer` yourself.

    Example:
        >>> cfg = dict(num_hidden_layers=4, layer_types=["sliding_attention", "full_attention"] * 2,
        ...            sliding_window=4096, num_attention_heads=16, num_key_value_heads=4, hidden_size=2048)
        >>> groups, layers = describe_config(cfg, num_blocks={"full": 1024, "sliding": 300})
        >>> [(g.kind, g.num_blocks, g.window) for g in groups]
        [('sliding', 300, 4096), ('full', 1024, 0)]
        >>> layers[1]
        PoolLayer(group=1, num_kv_heads=4, head_dim=128, value_head_dim=0, conv_dim=0, conv_kernel=0, ssm_state_size=0, storage='dtype', k_scale=1.0, v_scale=1.0)
    """
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)

    def get(name: str) -> Any:
        return config.get(name) if isinstance(config, _AbcMapping) else getattr(config, name, None)

    types = get("layer_types")
    if types is None:
        n = get("num_hidden_layers")
        if n is None:
            raise InvalidArgumentError("describe_config: the config has neither layer_types nor num_hidden_layers",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        default = ("sliding_attention" if get("sliding_window") else
                   "chunked_attention" if get("attention_chunk_size") else "full_attention")
        types = [default] * operator.index(n)
    heads = get("num_attention_heads")
    kv_heads = get("num_key_value_heads") or heads
    head_dim = get("head_dim") or (get("hidden_size") // heads if get("hidden_size") and heads else None)
    if not kv_heads or not head_dim:
        raise InvalidArgumentError("describe_config: the config names no num_key_value_heads / num_attention_heads "
                                   "and head_dim / hidden_size", _lib.KVC_ERROR_INVALID_ARGUMENT)
    kinds: List[GroupKind] = []
    layers: List[PoolLayer] = []
    for i, t in enumerate(types):
        kind = _KIND_OF_LAYER_TYPE.get(str(t))
        if kind is None:
            raise InvalidArgumentError(f"describe_config: layer_types[{i}] is {t!r}; describe_config knows "
                                       f"{sorted(_KIND_OF_LAYER_TYPE)} (describe other layers with PoolLayer)",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        if kind not in kinds:
            kinds.append(kind)
        layers.append(PoolLayer(group=kinds.index(kind), num_kv_heads=operator.index(kv_heads),
                                head_dim=operator.index(head_dim)))
    groups = []
    for g, kind in enumerate(kinds):
        name = kind.name.lower()
        if isinstance(num_blocks, _AbcMapping):
            if name not in num_blocks:
                raise InvalidArgumentError(f"describe_config: num_blocks has no entry for the {name!r} group",
                                           _lib.KVC_ERROR_INVALID_ARGUMENT)
            count = num_blocks[name]
        elif isinstance(num_blocks, _AbcSequence):
            if len(num_blocks) != len(kinds):
                raise InvalidArgumentError(f"describe_config: num_blocks has {len(num_blocks)} entries for "
                                           f"{len(kinds)} groups", _lib.KVC_ERROR_INVALID_ARGUMENT)
            count = num_blocks[g]
        else:
            count = num_blocks
        window = (get("sliding_window") if kind == GroupKind.SLIDING else
                  get("attention_chunk_size") if kind == GroupKind.CHUNKED else 0)
        groups.append(PoolGroup(name, block_size=block_size, num_blocks=operator.index(count),
                                window=operator.index(window or 0)))
    return groups, layers

