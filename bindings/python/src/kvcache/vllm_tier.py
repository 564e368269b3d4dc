"""kvcache's disk and Redis tiers behind vLLM's CPU offloading, as one of its secondary tiers (since 0.7).

vLLM's ``TieringOffloadingSpec`` keeps offloaded KV chunks in a CPU primary tier and loads storage tiers below it
by module path; this module is one. Give it in ``kv_connector_extra_config``::

    "secondary_tiers": [{"type": "KvcacheTier", "module_path": "kvcache.vllm_tier",
                         "kind": "redis", "seeds": "10.0.0.1:6379,10.0.0.2:6379", "call_timeout_ms": 100}]

or ``"kind": "disk", "directory": "/var/cache/kv"``. Every chunk is stored as kvcache's tiers store a pool's block
(docs/tiers.md): under the whole vLLM block hash (never truncated: it carries the request's ``cache_salt``, so one
tenant's chunks are not another's), in a namespace of the model (its name, dtype, chunk geometry and layout), framed
with a CRC-32C or, with ``auth_key_file``, an HMAC-SHA256; a value that does not verify is a miss.

A tier is a cache: a dead, stopped or slow Redis node, a full disk, a corrupt value are misses or failed jobs,
each within the tier's deadline (``call_timeout_ms``), never an exception in vLLM's scheduler. Stores and loads run
on one worker thread of the tier (a queue of ``max_queued_jobs``; a store that finds it full fails at once), so
``submit_store`` and ``submit_load`` never wait on the network; ``lookup`` asks the tier on the scheduler's thread
(one EXISTS, or a stat on disk), through a connection of its own.

docs/vllm-tier.md gives the configuration and the reasons.
"""

from __future__ import annotations

import collections
import hashlib
import queue
import threading
import time
from typing import Any, Callable, ClassVar, Deque, Dict, Iterable, List, Optional, Sequence

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    get_offload_block_hash,
    get_offload_group_idx,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from .redis_tier import RedisTier
from .tier import DiskTier, Tier, TierKey

__all__ = ["KvcacheTier", "namespace_of"]

_NAMESPACE_DOMAIN = b"kvcache.vllm_tier/1\0"


def namespace_of(offloading_spec: Any, extra: str = "") -> bytes:
    """The 32-byte fingerprint of the tier keys: the model, dtype, chunk geometry and layout of vLLM's offloading
    config (and the worker's rank unless the bytes are portable across parallelism), so that only engines whose
    chunks have the same bytes share them. ``extra`` (the tier's ``namespace`` option) separates deployments."""
    cfg = getattr(offloading_spec, "config", None)
    parts: List[str] = [extra]
    if cfg is not None:
        model = getattr(cfg, "model", None)
        cache = getattr(cfg, "cache", None)
        par = getattr(cfg, "parallel", None)
        parts += [str(getattr(model, "name", "")), str(getattr(model, "dtype", "")),
                  str(getattr(cfg, "worker_kv_bytes_per_block", "")), str(getattr(cfg, "kv_cache_layout", "")),
                  str(getattr(cfg, "canonical_layout", "")), str(getattr(cfg, "replicated_layout", "")),
                  str(getattr(cache, "tokens_per_hash", "")), str(getattr(cache, "blocks_per_chunk", ""))]
        parts += [f"{g.group_id}:{g.tokens_per_block}:{len(g.layer_names)}" for g in getattr(cfg, "groups", ())]
        if par is not None and not getattr(par, "is_parallelism_agnostic", False):
            parts += [f"rank {par.rank} of {par.world_size} (tp {par.tp_size}, pp {par.pp_size})"]
    return hashlib.sha256(_NAMESPACE_DOMAIN + "\0".join(parts).encode()).digest()


class _Handle:
    """A kvcache tier opened on demand: after a failed open (no Redis seed answers) it is tried again only after
    ``retry_s``, so a dead deployment costs one connect timeout per interval, not one per call."""

    def __init__(self, open_tier: Callable[[], Tier], retry_s: float) -> None:
        self._open = open_tier
        self._retry_s = retry_s
        self._tier: Optional[Tier] = None
        self._next_try = 0.0

    def get(self) -> Optional[Tier]:
        if self._tier is None and time.monotonic() >= self._next_try:
            try:
                self._tier = self._open()
            except Exception:  # an unreachable or misconfigured store: a miss until the next try
                self._next_try = time.monotonic() + self._retry_s
        return self._tier


class KvcacheTier(SecondaryTierManager):
    """A vLLM secondary tier on kvcache's disk tier (``kind="disk"``) or Redis tier (``kind="redis"``).

    Options (the keys of its entry in ``secondary_tiers``, besides ``type`` and ``module_path``):
        kind: ``"disk"`` or ``"redis"``.
        directory, max_bytes: the disk tier's directory and size limit (0: none).
        seeds, cluster, key_prefix, username, password, connect_timeout_ms, command_timeout_ms, call_timeout_ms,
            reconnect_interval_ms, ttl_seconds: the Redis tier's (:class:`kvcache.RedisTier`); ``call_timeout_ms`` is
            the deadline of every call, lookups included.
        auth_key_file: a file whose bytes (16 to 256) are the tier's authentication key; every writer and reader
            of the store uses the same one.
        namespace: a string mixed into the key namespace (deployments that must not share chunks).
        max_queued_jobs: stores and loads waiting for the worker; a store beyond it fails at once.
        locality: ``"LOCAL"`` or ``"REMOTE"`` (vLLM's tier filter); by default the disk is local, Redis remote.
    """

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None, *, kind: str = "disk", directory: Optional[str] = None,
                 max_bytes: int = 0, seeds: Optional[str] = None, cluster: str = "auto",
                 key_prefix: str = "kvc:vllm:", username: Optional[str] = None, password: Optional[str] = None,
                 connect_timeout_ms: int = 50, command_timeout_ms: int = 200, call_timeout_ms: int = 0,
                 reconnect_interval_ms: int = 1000, ttl_seconds: int = 0, auth_key_file: Optional[str] = None,
                 namespace: str = "", max_queued_jobs: int = 64, locality: Optional[str] = None) -> None:
        super().__init__(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view, tier_type=tier_type,
                         backpressure_detector=backpressure_detector)
        auth_key = None
        if auth_key_file is not None:
            with open(auth_key_file, "rb") as f:
                auth_key = f.read()
        if kind == "disk":
            if not directory:
                raise ValueError("KvcacheTier: kind 'disk' needs 'directory' (the tier's directory)")
            open_tier: Callable[[], Tier] = lambda: DiskTier(directory, max_bytes=max_bytes, auth_key=auth_key)
            DiskTier(directory, max_bytes=max_bytes, auth_key=auth_key)  # a bad directory is the operator's error
        elif kind == "redis":
            if not seeds:
                raise ValueError("KvcacheTier: kind 'redis' needs 'seeds' ('host:port', comma-separated)")
            open_tier = lambda: RedisTier(seeds, cluster=cluster, key_prefix=key_prefix, username=username,
                                          password=password, connect_timeout_ms=connect_timeout_ms,
                                          command_timeout_ms=command_timeout_ms,
                                          reconnect_interval_ms=reconnect_interval_ms, ttl_seconds=ttl_seconds,
                                          call_timeout_ms=call_timeout_ms, auth_key=auth_key)
        else:
            raise ValueError(f"KvcacheTier: kind is {kind!r}; it is 'disk' or 'redis'")
        self.kind = kind
        self.locality = Locality(locality) if locality else (Locality.LOCAL if kind == "disk" else Locality.REMOTE)
        self._fingerprint = namespace_of(offloading_spec, namespace)
        groups = getattr(getattr(offloading_spec, "config", None), "groups", ())
        self._layers = {i: max(1, len(g.layer_names)) for i, g in enumerate(groups)}
        self._flat = primary_kv_view.cast("B") if primary_kv_view.ndim != 1 else primary_kv_view
        retry_s = max(reconnect_interval_ms, 1) / 1000.0
        # One tier per thread: the scheduler's lookups and the worker's transfers never share a connection.
        self._lookup_tier = _Handle(open_tier, retry_s)
        self._worker_tier = _Handle(open_tier, retry_s)
        self._jobs: "queue.Queue[Optional[tuple]]" = queue.Queue(maxsize=max(1, max_queued_jobs))
        self._finished: Deque[JobResult] = collections.deque()
        self._in_flight = 0
        self._state = threading.Condition()
        self.stores_dropped = 0
        self._worker = threading.Thread(target=self._work, name="kvcache-vllm-tier", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ keys and bytes

    def _key(self, key: OffloadKey) -> TierKey:
        block_hash = get_offload_block_hash(key)
        if len(block_hash) != 32:  # another hash function's width: widened, never truncated
            block_hash = hashlib.sha256(b"vllm block hash\0" + block_hash).digest()
        return TierKey(self._fingerprint, block_hash, get_offload_group_idx(key))

    def _chunk(self, chunk_id: int) -> memoryview:
        size = self.block_size_bytes
        return self._flat[int(chunk_id) * size:(int(chunk_id) + 1) * size]

    def _by_group(self, job: TransferJob) -> Dict[int, List[int]]:
        """Positions of the job's keys by group (a group's blocks share a layer count, which the frames carry)."""
        out: Dict[int, List[int]] = {}
        for i, key in enumerate(job.keys):
            out.setdefault(get_offload_group_idx(key), []).append(i)
        return out

    # ------------------------------------------------------------------ the worker

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                self._jobs.task_done()
                return
            is_load, job = item
            start = time.monotonic()
            try:
                result = self._load(job) if is_load else self._store(job)
            except Exception:  # a tier failure is a failed job, never an exception in the scheduler
                result = JobResult(job_id=job.job_id, success=False)
            result.transfer_time = time.monotonic() - start
            with self._state:
                self._finished.append(result)
                self._in_flight -= 1
            self._jobs.task_done()

    def _store(self, job: TransferJob) -> JobResult:
        tier = self._worker_tier.get()
        keys = list(job.keys)
        if tier is None:
            return JobResult(job_id=job.job_id, success=False)
        stored = 0
        for group, at in self._by_group(job).items():
            stored += tier.put_blocks([self._key(keys[i]) for i in at], [self._chunk(job.chunk_ids[i]) for i in at],
                                      self._layers.get(group, 1))
        return JobResult(job_id=job.job_id, success=stored == len(keys),
                         transfer_bytes=stored * self.block_size_bytes)

    def _load(self, job: TransferJob) -> JobResult:
        tier = self._worker_tier.get()
        keys = list(job.keys)
        if tier is None:
            return JobResult(job_id=job.job_id, success=False, successful_keys=())
        ok: List[OffloadKey] = []
        for group, at in self._by_group(job).items():
            found = tier.get_blocks([self._key(keys[i]) for i in at], [self._chunk(job.chunk_ids[i]) for i in at],
                                    self._layers.get(group, 1))
            ok += [keys[i] for i, hit in zip(at, found) if hit]
        return JobResult(job_id=job.job_id, success=len(ok) == len(keys), successful_keys=ok,
                         transfer_bytes=len(ok) * self.block_size_bytes)

    def _submit(self, is_load: bool, job: TransferJob) -> None:
        with self._state:
            self._in_flight += 1
        try:
            self._jobs.put_nowait((is_load, job))
        except queue.Full:  # never block the scheduler: the job fails now
            with self._state:
                self._in_flight -= 1
                if not is_load:
                    self.stores_dropped += 1
                self._finished.append(JobResult(job_id=job.job_id, success=False,
                                                successful_keys=() if is_load else None))

    # ------------------------------------------------------------------ SecondaryTierManager

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        tier = self._lookup_tier.get()
        if tier is None:
            return LookupResult.MISS
        try:
            return LookupResult.HIT if tier.exists([self._key(key)])[0] else LookupResult.MISS
        except Exception:
            return LookupResult.MISS

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._submit(False, job_metadata)

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._submit(True, job_metadata)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        with self._state:
            out = list(self._finished)
            self._finished.clear()
        return out

    def has_pending_work(self) -> bool:
        with self._state:
            return self._in_flight > 0 or bool(self._finished)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        self._jobs.join()

    def shutdown(self) -> None:
        if self._worker.is_alive():
            self._jobs.put(None)
            self._worker.join()

    def tier_stats(self) -> Sequence[Any]:
        """The counters of the worker's and the lookups' kvcache tiers (:class:`kvcache.TierStats`), where open."""
        return [t.stats() for t in (self._worker_tier._tier, self._lookup_tier._tier) if t is not None]
