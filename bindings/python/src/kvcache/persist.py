"""Cache files (``docs/file-format.md``, C header ``kvcache/persist.h``).

A file holds everything that makes a cache behave as the one saved: stored keys and values, lengths and
counters, quantized codes and scales, recurrent states, sink tables, indexer keys, which layers are
offloaded, and for an encoder-decoder cache both halves. ``cache.save(path)`` writes one (beside the path,
then renamed: a crash never leaves a partial file), :func:`load` makes a new cache from one (on the CPU),
``cache.restore(path)`` replaces a cache's contents with a file's whose model fingerprint matches::

    >>> import os, tempfile, numpy as np, kvcache
    >>> cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8)
    >>> x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    >>> _ = cache.update(x, x, 0)
    >>> path = os.path.join(tempfile.mkdtemp(), "prompt.kvc")
    >>> cache.save(path)
    >>> copy = kvcache.load(path)
    >>> copy.get_seq_length(), bool((np.asarray(copy.layers[0].keys)[:, :, :3] == x).all())
    (3, True)
    >>> other = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=16)
    >>> try:
    ...     other.restore(path)
    ... except kvcache.InvalidArgumentError as e:       # a ValueError
    ...     print(str(e).split(": ", 2)[2])
    layer 0: max_cache_len 8 (file) vs 16 (cache)

A corrupted or truncated file raises :class:`~kvcache.IoError` (an ``OSError``) naming the section and
offset; a file of another format version raises :class:`~kvcache.VersionMismatchError`. On any error the
cache is unchanged.
"""
from __future__ import annotations

import os
from typing import Optional, Union

from . import _lib
from ._cache import Cache, EncoderDecoderCache
from .allocator import Allocator
from .pool import _u64

__all__ = ["FILE_FORMAT_VERSION", "load", "load_encoder_decoder"]

#: The cache file format version this library writes and reads.
FILE_FORMAT_VERSION: int = _lib.KVC_FILE_FORMAT_VERSION

PathLike = Union[str, "os.PathLike[str]"]


def _load_options(max_bytes: int):
    """C ``kvc_load_options`` with ``max_bytes`` (None when it is 0: the library's defaults)."""
    if not _u64(max_bytes, "max_bytes"):
        return None
    o = _lib.kvc_load_options()
    o.max_bytes = max_bytes
    return o


def load(path: PathLike, *, allocator: Optional[Allocator] = None, max_bytes: int = 0) -> Cache:
    """A new cache (on the CPU) from the cache file at ``path``; its K/V stores come from ``allocator`` when
    given (see :class:`kvcache.Allocator`).

    ``max_bytes`` (0: no limit) is the most the new cache's stores may take as the file declares them (batch x
    heads x capacity x (key dim + value dim) x element size per layer); a file declaring more raises
    :class:`~kvcache.OutOfMemoryError` before that memory is asked for. A file's capacity may lawfully be far
    past its tokens (a dynamic layer keeps the capacity it grew to), so a file of kilobytes can ask for
    gigabytes: set it for files this process did not write."""
    return Cache._from_handle(_lib.kvc_cache_load(path, _load_options(max_bytes), allocator))


def load_encoder_decoder(path: PathLike, *, max_bytes: int = 0) -> EncoderDecoderCache:
    """A new encoder-decoder cache (on the CPU) from the file at ``path``; ``max_bytes`` as in :func:`load`,
    for both halves together."""
    return EncoderDecoderCache._from_handle(_lib.kvc_encoder_decoder_cache_load(path, _load_options(max_bytes)))


def _save(self: Cache, path: PathLike) -> None:
    """Writes the cache to the file ``path`` (created or replaced); the cache is not changed."""
    _lib.kvc_cache_save(self._handle, path, None)


def _restore(self: Cache, path: PathLike) -> None:
    """Replaces the cache's contents with the file's; the file's model fingerprint must equal the cache's.

    Views of the cache taken before are stale afterwards. On error the cache is unchanged.
    """
    _lib.kvc_cache_restore(self._handle, path)


def _save_ed(self: EncoderDecoderCache, path: PathLike) -> None:
    """Writes both halves and the is_updated flags to the file ``path``."""
    _lib.kvc_encoder_decoder_cache_save(self._handle, path, None)


def _restore_ed(self: EncoderDecoderCache, path: PathLike) -> None:
    """Replaces both halves and the flags with the file's (fingerprints must match); unchanged on error."""
    _lib.kvc_encoder_decoder_cache_restore(self._handle, path)


# The methods live here, beside the functions they share their documentation with, and are attached to the
# classes when the package is imported.
Cache.save = _save  # type: ignore[attr-defined]
Cache.restore = _restore  # type: ignore[attr-defined]
EncoderDecoderCache.save = _save_ed  # type: ignore[attr-defined]
EncoderDecoderCache.restore = _restore_ed  # type: ignore[attr-defined]
