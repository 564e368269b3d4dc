"""A shared tier of a :class:`kvcache.Pool` on Redis or Valkey (``kvcache/redis_tier.h``, docs/redis-tier.md).

A pool with a Redis tier stores its blocks there when they are committed (``write="commit"``: other processes
and machines find them at once) or when memory evicts them (``write="evict"``), and
:meth:`kvcache.Sequence.match_prefix` continues past memory with the tier: two serving processes share a
prompt's prefix through Redis::

    pool = kvcache.Pool(...)
    kvcache.add_redis_tier(pool, "10.0.0.1:6379,10.0.0.2:6379")   # standalone or Redis Cluster (auto)

The library speaks RESP itself (no client library needed). A failure of Redis (a dead or slow node, a timeout)
is a miss or a skipped store, never an exception from the pool; only :func:`add_redis_tier` reports an
unreachable or misconfigured server, as a :class:`kvcache.KvcacheError` naming the seed and the reason.

Every call into the tier (its creation, and each store and lookup the pool makes) returns within
``call_timeout_ms`` whatever the servers do (0, the default: ``connect_timeout_ms + 2 * command_timeout_ms``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from . import _lib
from ._errors import InvalidArgumentError
from .tier import Tier, TierStats

__all__ = ["add_redis_tier", "tier_stats", "TierStats", "RedisTier"]

_CLUSTER = {"auto": _lib.KVC_REDIS_CLUSTER_AUTO, "off": _lib.KVC_REDIS_CLUSTER_OFF, "on": _lib.KVC_REDIS_CLUSTER_ON}
_WRITE = {"commit": _lib.KVC_TIER_WRITE_ON_COMMIT, "evict": _lib.KVC_TIER_WRITE_ON_EVICT}


def _choice(value: str, table: dict, name: str) -> int:
    if value not in table:
        raise InvalidArgumentError(f"add_redis_tier: {name} is {value!r}; it is one of {sorted(table)}")
    return table[value]


def add_redis_tier(pool, seeds: Union[str, Sequence[str]], *, cluster: str = "auto", key_prefix: str = "kvc:",
                   username: Optional[str] = None, password: Optional[str] = None, connect_timeout_ms: int = 50,
                   command_timeout_ms: int = 200, reconnect_interval_ms: int = 1000, ttl_seconds: int = 0,
                   max_pipeline: int = 32, write: str = "commit", call_timeout_ms: int = 0,
                   auth_key: Optional[bytes] = None) -> int:
    """Creates a Redis tier (``kvc_redis_tier_create``) and gives it to ``pool`` after its other tiers; returns
    its index (for :func:`tier_stats`). ``seeds``: ``"host:port"`` strings, or one comma-separated string.
    ``cluster``: ``"auto"`` (ask the server), ``"off"`` or ``"on"``. ``write``: ``"commit"`` or ``"evict"``.
    ``call_timeout_ms`` (since 0.7): the deadline of every call into the tier; 0 derives it from the other two
    timeouts. ``auth_key`` (since 0.7): the tier's authentication key (``bytes``, 16 to 256 random bytes, the same
    for every writer and reader), or ``None``: without one, any client that can SET the tier's keys can serve K/V
    to every pool reading them; with one, values carry an HMAC-SHA256 and those written without the key or moved
    under another key are misses (docs/redis-tier.md). The other options are those of
    ``kvc_redis_tier_options``."""
    if not isinstance(seeds, str):
        seeds = ",".join(seeds)
    mode = _choice(cluster, _CLUSTER, "cluster")
    policy = _choice(write, _WRITE, "write")
    index = _lib.kvc_py_pool_tier_count(pool._handle)
    _lib.kvc_py_pool_add_redis_tier(pool._handle, seeds, mode, key_prefix, username, password, connect_timeout_ms,
                                    command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline,
                                    call_timeout_ms, policy, auth_key)
    return index


def tier_stats(pool, index: int = 0) -> TierStats:
    """The counters of tier ``index`` of ``pool`` (order of adding)."""
    return pool.tier_stats(index)


class RedisTier(Tier):
    """A Redis or Valkey tier Python holds (``kvc_redis_tier_create``, since 0.7 in this form): give it to a pool
    with :meth:`kvcache.Pool.add_tier` like a :class:`kvcache.DiskTier`, or use it by key without a pool
    (:meth:`kvcache.Tier.exists`, :meth:`~kvcache.Tier.get_blocks`, :meth:`~kvcache.Tier.put_blocks`), e.g. from
    an engine's scheduler. The options are :func:`add_redis_tier`'s (less ``write``, which :meth:`Pool.add_tier`
    takes). Creation connects and raises :class:`kvcache.KvcacheError` when no seed answers; after that every
    failure of a server is a miss within ``call_timeout_ms``."""

    def __init__(self, seeds: Union[str, Sequence[str]], *, cluster: str = "auto", key_prefix: str = "kvc:",
                 username: Optional[str] = None, password: Optional[str] = None, connect_timeout_ms: int = 50,
                 command_timeout_ms: int = 200, reconnect_interval_ms: int = 1000, ttl_seconds: int = 0,
                 max_pipeline: int = 32, call_timeout_ms: int = 0, auth_key: Optional[bytes] = None) -> None:
        if not isinstance(seeds, str):
            seeds = ",".join(seeds)
        mode = _choice(cluster, _CLUSTER, "cluster")
        self._init_tier(_lib.kvc_py_redis_tier_create(seeds, mode, key_prefix, username, password,
                                                      connect_timeout_ms, command_timeout_ms, reconnect_interval_ms,
                                                      ttl_seconds, max_pipeline, call_timeout_ms, auth_key))
        self.seeds = seeds
        self.authenticated = auth_key is not None

    def __repr__(self) -> str:
        key = ", auth_key=<set>" if self.authenticated else ""
        return f"RedisTier({self.seeds!r}{key})"
