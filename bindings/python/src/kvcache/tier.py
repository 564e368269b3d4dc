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
import struct
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

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
    queued: int = 0  # blocks the pool asked its tier worker to store here (since 0.7)
    dropped: int = 0  # of those, never given to the store: the queue was full, or shutdown (since 0.7)

    @classmethod
    def _from_lib(cls, raw: Tuple[int, ...]) -> "TierStats":
        return cls(*raw)


@dataclass(frozen=True)
class TierWorkerStats:
    """What the pool's tier worker did since it started (``kvc_tier_worker_stats``; all 0 without a worker)."""

    running: bool
    pending_jobs: int  # batches queued or in flight now
    pending_bytes: int  # their staged bytes
    blocks_queued: int  # blocks whose stores were queued
    blocks_dropped: int  # blocks not queued: the queue was full
    blocks_abandoned: int  # queued blocks dropped at shutdown, past the drain timeout
    prefetches: int  # prefetches started
    prefetches_late: int  # collected before their lookups were done (nothing of them used)
    prefetches_abandoned: int  # closed without a collect
    events_lost: int  # TIER_* events beyond the event capacity since a pull

    @classmethod
    def _from_lib(cls, raw: Tuple[int, ...]) -> "TierWorkerStats":
        return cls(bool(raw[0]), *raw[1:])


class Prefetch:
    """A match's tier lookups started early (:meth:`kvcache.Sequence.prefetch`); :meth:`collect` them into an
    empty sequence later. Close it (or use ``with``) when it is not collected: its lookups are then abandoned.
    Since 0.7."""

    def __init__(self, capsule: Any, sequence: Any) -> None:
        self._capsule = capsule
        self._sequence = sequence

    def collect(self, sequence: Any = None, timeout_ms: int = 1000) -> int:
        """Waits up to ``timeout_ms`` for the lookups, copies the blocks found into the pool, and matches the
        prefix into ``sequence`` (default: the sequence the prefetch was started on) from memory alone; returns
        the tokens matched, as :meth:`kvcache.Sequence.match_prefix`."""
        seq = self._sequence if sequence is None else sequence
        if self._capsule is None:
            raise InvalidArgumentError("Prefetch.collect: the prefetch is closed", _lib.KVC_ERROR_INVALID_ARGUMENT)
        return int(_lib.kvc_pool_prefetch_collect(self._capsule, seq._handle, int(timeout_ms)))

    def close(self) -> None:
        """Frees the prefetch; one not collected is abandoned (the worker drops its lookups)."""
        if self._capsule is not None:
            _lib.kvc_pool_prefetch_destroy(self._capsule)
            self._capsule = None

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_tier_worker(pool: Any, max_jobs: int, max_bytes: int, drain_timeout_ms: int, events: bool) -> None:
    """:meth:`kvcache.Pool.start_tier_worker`."""
    for name, value in (("max_jobs", max_jobs), ("drain_timeout_ms", drain_timeout_ms)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
            raise InvalidArgumentError(f"start_tier_worker: {name} is {value!r}; it is an int from 0 to 2**32 - 1",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or not 0 <= max_bytes < 1 << 64:
        raise InvalidArgumentError(f"start_tier_worker: max_bytes is {max_bytes!r}; it is an int from 0 to 2**64 - 1",
                                   _lib.KVC_ERROR_INVALID_ARGUMENT)
    _lib.kvc_pool_start_tier_worker(pool._handle, max_jobs, max_bytes, drain_timeout_ms, 1 if events else 0)


@dataclass(frozen=True)
class TierKey:
    """The key of one block in a tier (``kvc_tier_key``, docs/tiers.md): the model's fingerprint
    (:meth:`kvcache.Pool.fingerprint`, or :func:`kvcache.model_fingerprint` without a pool), the block's hash
    (:func:`kvcache.block_hash_chain`: it covers the tokens, everything before them and the salt) and the group."""

    fingerprint: bytes
    block_hash: bytes
    group: int = 0

    def _packed(self, i: int) -> bytes:
        for name in ("fingerprint", "block_hash"):
            v = getattr(self, name)
            if not isinstance(v, (bytes, bytearray, memoryview)) or len(v) != 32:
                raise InvalidArgumentError(f"keys[{i}].{name} is {v!r:.80}; it is 32 bytes",
                                           _lib.KVC_ERROR_INVALID_ARGUMENT)
        if not isinstance(self.group, int) or not 0 <= self.group < 1 << 32:
            raise InvalidArgumentError(f"keys[{i}].group is {self.group!r}; it is an int in [0, 2^32)",
                                       _lib.KVC_ERROR_INVALID_ARGUMENT)
        return _KEY.pack(bytes(self.fingerprint), bytes(self.block_hash), self.group, 0)


_KEY = struct.Struct("=32s32sII")  # kvc_tier_key in native byte order, as the C struct lies in memory


def _keys_in(keys: Sequence[TierKey]) -> bytes:
    out = []
    for i, k in enumerate(keys):
        if not isinstance(k, TierKey):
            raise TypeError(f"keys[{i}] is a {type(k).__name__}; expected a kvcache.TierKey")
        out.append(k._packed(i))
    return b"".join(out)


class Tier:
    """A tier Python holds: a :class:`DiskTier` or a :class:`kvcache.RedisTier`. Give it to a pool
    (:meth:`kvcache.Pool.add_tier`), or use it by key without a pool (since 0.7; docs/tiers.md, "Blocks by key"):
    :meth:`exists`, :meth:`get_blocks` and :meth:`put_blocks` read and write the values a pool of the same model
    does, checksummed or authenticated as the tier's options say. A key-level call needs a tier not given to a
    pool. Everything the tier does wrong (not stored, another size, a forged value, a dead or slow Redis node:
    within its deadline) is a miss, never an exception; exceptions are for bad arguments."""

    _capsule: Any
    _pool: Any
    _index: int

    def _init_tier(self, capsule: Any) -> None:
        self._capsule = capsule
        self._pool = None
        self._index = -1

    def stats(self) -> TierStats:
        """The tier's counters (through its pool once it was given to one)."""
        if self._pool is not None:
            return self._pool.tier_stats(self._index)
        return TierStats._from_lib(_lib.kvc_tier_stats_get(self._capsule))

    def exists(self, keys: Sequence[TierKey]) -> List[bool]:
        """Whether each key has a value in the tier, without fetching values (``kvc_tier_exists``: a stat per
        key on disk, one pipeline of EXISTS per Redis node). Existence only: a value that does not verify is a
        miss of :meth:`get_blocks`."""
        return [b != 0 for b in _lib.kvc_tier_exists(self._capsule, _keys_in(keys))]

    def get_blocks(self, keys: Sequence[TierKey], buffers: Sequence[Any], num_layers: int) -> List[bool]:
        """Loads the blocks of ``keys`` into ``buffers`` (one writable, contiguous buffer per key, all of the
        payload's size: ``bytearray``, a NumPy array, an engine's CPU block) and says which were found and
        verified (``kvc_tier_get_blocks``); a buffer of a miss may have been written. ``num_layers`` is the
        layer count the values were stored with."""
        return [b != 0 for b in _lib.kvc_tier_get_blocks(self._capsule, _keys_in(keys), num_layers, buffers)]

    def put_blocks(self, keys: Sequence[TierKey], payloads: Sequence[Any], num_layers: int) -> int:
        """Stores ``payloads`` (one bytes-like per key, all of one size) under ``keys``, framed and sealed as the
        tier's values are (``kvc_tier_put_blocks``); returns how many the store took."""
        return int(_lib.kvc_tier_put_blocks(self._capsule, _keys_in(keys), num_layers, payloads))


class DiskTier(Tier):
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
        self._init_tier(_lib.kvc_disk_tier_create(path, max_bytes, auth_key))
        self.directory = path
        self.max_bytes = max_bytes
        self.authenticated = auth_key is not None

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


def add_tier(pool: Any, tier: Tier, write: Union[str, int, TierWrite]) -> None:
    """:meth:`kvcache.Pool.add_tier`."""
    if not isinstance(tier, Tier):
        raise InvalidArgumentError(f"add_tier: tier is {type(tier).__name__}; give a kvcache.DiskTier or "
                                   "kvcache.RedisTier", _lib.KVC_ERROR_INVALID_ARGUMENT)
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
