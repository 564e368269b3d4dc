"""Tiers below a pool (``kvcache/tier.h``, docs/tiers.md): where blocks are kept by their hash beyond memory.

A :class:`DiskTier` keeps blocks in a local directory (one file per block, written to a temporary name and
renamed; a restarted process finds them). Give it to a pool with :meth:`kvcache.Pool.add_tier`: the pool then
stores blocks in it when they are committed (``write="commit"``: other processes and a restarted one find them)
or when they are evicted from memory (``write="evict"``: the tier extends the memory), and
:meth:`kvcache.Sequence.match_prefix` continues past the blocks found in memory with its tiers, nearest first.
A tier is a cache: every failure of it (I/O error, corrupt value) is a miss or a skipped store, counted in
:class:`TierStats`, never an error of the pool.

Example:
    >>> import kvcache, tempfile
    >>> pool = kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=8)],
    ...                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=8)])
    >>> with tempfile.TemporaryDirectory() as d:
    ...     pool.add_tier(kvcache.DiskTier(d, max_bytes=1 << 20))
    ...     pool.tier_stats(0).puts
    0
    >>> pool.close()
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from . import _lib
from ._errors import InvalidArgumentError


class TierWrite(enum.IntEnum):
    """When a pool stores blocks in a tier (``kvc_tier_write_policy``)."""

    COMMIT = _lib.KVC_TIER_WRITE_ON_COMMIT  # when a block becomes cached: shared tiers; survives a restart
    EVICT = _lib.KVC_TIER_WRITE_ON_EVICT  # when a cached block is evicted from memory: capacity extension


@dataclass(frozen=True)
class TierStats:
    """Counters of a tier (``kvc_tier_stats``)."""

    puts: int  # values stored
    put_failures: int  # stores that failed or were refused (counted, never raised)
    gets: int  # keys looked up
    hits: int  # of which were found and verified
    corrupt: int  # values found that did not verify (a miss): torn, flipped, or not authenticated by the key
    bytes_written: int
    bytes_read: int

    @classmethod
    def _from_lib(cls, raw: Tuple[int, int, int, int, int, int, int]) -> "TierStats":
        return cls(*raw)


class DiskTier:
    """A tier in a local directory (``kvc_disk_tier_create``), created if missing.

    Args:
        directory: the tier's directory (``str`` or path-like). Several processes may share it.
        max_bytes: size limit; the least recently used blocks go first (0: no limit).
        auth_key: the tier's authentication key (``bytes``, 16 to 256 random bytes; docs/tiers.md, "Authenticated
            tiers"), or ``None``. Without a key, whoever can write the directory can serve K/V to every pool
            reading it; with one, every block carries an HMAC-SHA256 and values written without the key, or moved
            under another block's file, are misses (counted in ``corrupt``). Keyed and keyless tiers do not read
            each other's blocks. The key is not kept by this object.

    Raises:
        InvalidArgumentError: an empty directory name, a negative ``max_bytes``, a key of the wrong length.
        TypeError: ``auth_key`` is not bytes-like (a ``str`` must be encoded first).
        KvcIOError: the directory cannot be created or used.
    """

    def __init__(self, directory: Union[str, "os.PathLike[str]"], *, max_bytes: int = 0,
                 auth_key: Optional[bytes] = None) -> None:
        try:
            path = os.fspath(directory)
        except TypeError:
            raise TypeError(f"DiskTier: directory is a {type(directory).__name__}; give a str path") from None
        if not isinstance(path, str):
            raise InvalidArgumentError(f"DiskTier: directory is {path!r}; give a str path",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        if not isinstance(max_bytes, int) or max_bytes < 0 or max_bytes >= 1 << 64:
            raise InvalidArgumentError(f"DiskTier: max_bytes is {max_bytes!r}; it is an int in [0, 2^64)",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        self._capsule: Any = _lib.kvc_disk_tier_create(path, max_bytes, auth_key)
        self.directory = path
        self.max_bytes = max_bytes
        self.authenticated = auth_key is not None
        self._pool: Any = None
        self._index = -1

    def stats(self) -> TierStats:
        """The tier's counters (through its pool once it was given to one)."""
        if self._pool is not None:
            return self._pool.tier_stats(self._index)
        return TierStats._from_lib(_lib.kvc_tier_stats_get(self._capsule))

    def __repr__(self) -> str:
        key = ", auth_key=<set>" if self.authenticated else ""
        return f"DiskTier({self.directory!r}, max_bytes={self.max_bytes}{key})"


def _write_policy(write: Union[str, int, TierWrite]) -> int:
    if isinstance(write, str):
        try:
            return int(TierWrite[write.upper()])
        except KeyError:
            pass
    elif isinstance(write, int) and not isinstance(write, bool) and write in tuple(TierWrite):
        return int(write)
    raise InvalidArgumentError(f"add_tier: write is {write!r}; it is 'commit' or 'evict'",
                               _lib.KVC_ERROR_INVALID_ARGUMENT)


def add_tier(pool: Any, tier: DiskTier, write: Union[str, int, TierWrite]) -> None:
    """:meth:`kvcache.Pool.add_tier`."""
    if not isinstance(tier, DiskTier):
        raise InvalidArgumentError(f"add_tier: tier is {type(tier).__name__}; give a kvcache.DiskTier",
                                   _lib.KVC_ERROR_INVALID_ARGUMENT)
    policy = _write_policy(write)
    _lib.kvc_pool_add_tier(pool._handle, tier._capsule, policy)
    tier._pool = pool
    tier._index = pool._num_tiers
    pool._num_tiers += 1


def tier_stats(pool: Any, index: int) -> TierStats:
    """:meth:`kvcache.Pool.tier_stats`."""
    return TierStats._from_lib(_lib.kvc_pool_tier_stats(pool._handle, index))


def fingerprint(pool: Any) -> bytes:
    """:meth:`kvcache.Pool.fingerprint`."""
    return bytes(_lib.kvc_pool_fingerprint(pool._handle))
