"""kvcache: the key/value caches of transformer inference, over a C library.

Every cache kind of Hugging Face transformers (dynamic, static, sliding window,
hybrid, chunked, quantized, offloaded, sink, encoder-decoder, Mamba state) with
transformers' method names and semantics. Inputs are any tensors with
``__dlpack__`` (torch, numpy >= 2, cupy, jax) or numpy arrays; outputs are
zero-copy :class:`View` objects over the cache's memory, which
``torch.from_dlpack(view)`` and ``numpy.from_dlpack(view)`` turn into tensors
sharing that memory. A view is valid until the next call that mutates its
cache.

    >>> import numpy as np, kvcache
    >>> cache = kvcache.DynamicCache()
    >>> k = np.random.rand(1, 8, 4, 64).astype(np.float32)
    >>> keys, values = cache.update(k, k, layer_idx=0)
    >>> np.shares_memory(np.from_dlpack(keys), np.from_dlpack(cache.layer_view(0).keys))
    True

``kvcache.transformers`` (needs torch and transformers >= 5) has drop-in
replacements for transformers' caches, usable as ``past_key_values`` in
``model.generate``. :class:`Pool` is the paged block pool of serving stacks
(continuous batching, prefix reuse, copy-on-write, events; ``kvcache.pool``). A cache made with
``allocator=`` (:class:`Allocator`, :class:`TorchAllocator`) keeps its K/V in the caller's buffers
(``kvcache.allocator``); the library's own CPU memory keeps freed stores for reuse, which
:func:`set_host_memory_retention`, :func:`release_host_memory` and :func:`host_memory_retained` control.
"""
from __future__ import annotations

from . import _lib
from ._errors import (
    BusyError,
    DeviceMismatchError,
    DtypeMismatchError,
    InternalError,
    IoError,
    InvalidArgumentError,
    InvalidStateError,
    KvcacheError,
    NoDeviceError,
    OutOfMemoryError,
    OutOfRangeError,
    ShapeMismatchError,
    StaleViewError,
    UnsupportedError,
    VersionMismatchError,
)
from ._types import (
    DeviceType,
    Dtype,
    LayerInfo,
    LayerKind,
    LayerSpec,
    LayerType,
    MemoryInfo,
    ModelConfig,
    Offload,
    Preset,
    QuantMode,
    QuantOptions,
    Quantizer,
)
from ._cache import (
    KV,
    Cache,
    CustomCache,
    DynamicCache,
    MtpCache,
    DFlashCache,
    EncoderDecoderCache,
    HybridCache,
    HybridChunkedCache,
    HybridMambaAttentionDynamicCache,
    Layer,
    MambaCache,
    OffloadedCache,
    OffloadedHybridCache,
    OffloadedStaticCache,
    QuantizedCache,
    SinkCache,
    SlidingWindowCache,
    StaticCache,
)

from ._block_hash import (
    BLOCK_HASH_SIZE,
    BLOCK_HASH_VERSION,
    block_hash,
    block_hash_chain,
    block_hash_root,
)
from .tier import DiskTier, Prefetch, Tier, TierKey, TierStats, TierWorkerStats, TierWrite
from .pool import (
    BatchReservation,
    CsrBlockTable,
    EventKind,
    HashMode,
    GroupKind,
    Layout,
    MultimodalItem,
    Pool,
    PoolEvent,
    PoolGroup,
    PoolLayer,
    PoolStats,
    RecurrentState,
    Sequence,
    SlotMapping,
    Storage,
    describe_config,
    model_block_payload,
    model_fingerprint,
)
from .redis_tier import RedisTier, add_redis_tier, tier_stats

from .persist import FILE_FORMAT_VERSION, load, load_encoder_decoder
from .allocator import Allocator, NumpyAllocator, TorchAllocator
from ._host_memory import host_memory_retained, release_host_memory, set_host_memory_retention

View = _lib.View

#: The version of the C library this package runs on ("MAJOR.MINOR.PATCH").
__version__: str = _lib.kvc_version_string()

#: The version of the C headers the extension was generated from.
HEADER_VERSION: int = _lib.KVC_VERSION_NUMBER


def version() -> str:
    """The version of the loaded C library, ``"MAJOR.MINOR.PATCH"``."""
    return _lib.kvc_version_string()


def features() -> set:
    """Capabilities usable now: a subset of ``{"cpu", "cuda", "hip", "backend_dl"}``."""
    bits = _lib.kvc_features()
    names = {"cpu": _lib.KVC_FEATURE_CPU, "cuda": _lib.KVC_FEATURE_CUDA, "hip": _lib.KVC_FEATURE_HIP,
             "backend_dl": _lib.KVC_FEATURE_BACKEND_DL}
    return {name for name, bit in names.items() if bits & bit}


def _check_abi() -> None:
    loaded = _lib.kvc_version()
    if loaded // 10000 != _lib.KVC_VERSION_MAJOR:
        raise ImportError(f"kvcache: the extension was built for ABI {_lib.KVC_VERSION_MAJOR}.x but the C library "
                          f"loaded is {_lib.kvc_version_string()}; rebuild the package")


_check_abi()

__all__ = [
    "__version__", "version", "features", "HEADER_VERSION",
    "View", "KV", "Cache", "Layer",
    "DynamicCache", "MtpCache", "DFlashCache", "StaticCache", "SlidingWindowCache", "HybridCache", "HybridChunkedCache", "QuantizedCache",
    "OffloadedCache", "OffloadedStaticCache", "OffloadedHybridCache", "SinkCache", "MambaCache",
    "HybridMambaAttentionDynamicCache", "CustomCache", "EncoderDecoderCache",
    "LayerKind", "LayerType", "Preset", "Offload", "Dtype", "Quantizer", "QuantMode", "DeviceType",
    "LayerSpec", "ModelConfig", "QuantOptions", "LayerInfo", "MemoryInfo",
    "KvcacheError", "InvalidArgumentError", "OutOfRangeError", "DtypeMismatchError", "ShapeMismatchError",
    "DeviceMismatchError", "UnsupportedError", "InvalidStateError", "OutOfMemoryError", "NoDeviceError",
    "VersionMismatchError", "InternalError", "IoError", "BusyError", "StaleViewError",
    "block_hash_root", "block_hash", "block_hash_chain", "BLOCK_HASH_SIZE", "BLOCK_HASH_VERSION",
    "DiskTier", "Tier", "TierKey", "RedisTier", "TierStats", "TierWrite", "model_fingerprint", "Prefetch",
    "TierWorkerStats",
    "model_block_payload",
    "Pool", "Sequence", "MultimodalItem", "PoolGroup", "PoolLayer", "PoolStats", "PoolEvent", "SlotMapping",
    "CsrBlockTable", "BatchReservation", "add_redis_tier", "tier_stats",
    "RecurrentState", "GroupKind", "Storage", "Layout", "EventKind", "HashMode", "describe_config",
    "load", "load_encoder_decoder", "FILE_FORMAT_VERSION",
    "Allocator", "TorchAllocator", "NumpyAllocator",
    "set_host_memory_retention", "release_host_memory", "host_memory_retained",
]
