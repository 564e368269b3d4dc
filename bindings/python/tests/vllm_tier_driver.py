"""One process of vLLM's CPU offloading with kvcache.vllm_tier as its secondary tier, on vLLM's own classes.

Run by test_vllm_tier.py with vLLM's wheel on PYTHONPATH (scripts/setup.sh, install_vllm_wheel):
``python vllm_tier_driver.py JOBS_JSON``, each job a mode, a tier config, a chunk count and a salt. vLLM's ``TieringOffloadingSpec`` builds the manager
from the config exactly as its offloading connector does (the tier loaded by module path through
``SecondaryTierFactory``); this process plays the scheduler and the GPU worker:

  store   a request's chunks are written into the CPU primary tier (as the GPU->CPU copy would), completed, and
          cascaded to the secondary tier; the process waits for the tier's jobs and exits;
  load    a fresh manager looks the chunks up (a miss in the empty primary tier, then the secondary tier), lets the
          promotions run, and checks the bytes that reach the primary tier.

It prints one JSON line: what happened to each job, for the test to check.
"""
import hashlib
import json
import sys
import time

from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig, OffloadingGroupConfig,
                                       OffloadingModelConfig, OffloadingParallelConfig)
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

BLOCK_BYTES = 4096  # one page: vLLM's shared region aligns chunks to pages


def spec_of(tier: dict, engine: str) -> TieringOffloadingSpec:
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layers.0", "layers.1"), group_id=0),),
        worker_kv_bytes_per_block=BLOCK_BYTES, enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": 16 * BLOCK_BYTES, "secondary_tiers": [tier], "tier_poll_interval_s": 0},
        engine_id=engine, model=OffloadingModelConfig(name="tiny-test-model", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                          data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                                          is_parallelism_agnostic=True))
    return TieringOffloadingSpec(config)


def chunk_hashes(n: int, salt: str) -> list:
    """A chain of block hashes as vLLM's are made: each over its parent, with the request's cache_salt in the
    first (the salt reaches every hash after it)."""
    out, parent = [], hashlib.sha256(b"root").digest()
    for i in range(n):
        extra = salt.encode() if i == 0 else b""
        parent = hashlib.sha256(parent + i.to_bytes(4, "little") + extra).digest()
        out.append(parent)
    return out


def chunk_bytes(h: bytes) -> bytes:
    return (h * (BLOCK_BYTES // len(h) + 1))[:BLOCK_BYTES]


def step(manager, rounds: int = 1) -> None:
    for _ in range(rounds):
        manager.on_schedule_end(ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))


def settle(manager, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    step(manager)
    while manager.has_pending_work() and time.monotonic() < end:
        time.sleep(0.005)
        step(manager)


def run(job: dict) -> dict:
    """One request's store or load on a fresh manager (its own CPU primary tier) with `job["tier"]` below it."""
    mode, n, salt = job["mode"], job["chunks"], job["salt"]
    manager = spec_of(job["tier"], f"kvc-test-{mode}-{time.monotonic_ns()}").get_manager()
    primary = manager.primary_tier.get_kv_memoryview()
    view, stride = primary.cast("B"), primary.strides[0]
    keys = [make_offload_key(h, 0) for h in chunk_hashes(n, salt)]
    ctx = ReqContext(req_id="request-1")
    manager.on_new_request(ctx)
    tier = manager.secondary_tiers[0]
    out: dict = {"mode": mode, "tier": f"{type(tier).__module__}.{type(tier).__name__}"}
    t0 = time.monotonic()
    if mode == "store":
        prepared = manager.prepare_store(keys, ctx)
        for key, chunk in zip(prepared.keys_to_store, prepared.store_spec.chunk_ids):
            view[int(chunk) * stride:int(chunk) * stride + BLOCK_BYTES] = chunk_bytes(key[:-4])
        manager.complete_store(prepared.keys_to_store, ctx)
        manager.on_request_finished(ctx)
        settle(manager)
        out["puts"] = sum(s.puts for s in tier.tier_stats())
    else:
        first = [manager.lookup(k, ctx) for k in keys]
        out["lookup_s"] = time.monotonic() - t0
        settle(manager)
        second = [manager.lookup(k, ctx) for k in keys]
        hits = [k for k, r in zip(keys, second) if r is LookupResult.HIT]
        good = 0
        if hits:
            loaded = manager.prepare_load(hits, ctx)
            for key, chunk in zip(hits, loaded.chunk_ids):
                good += bytes(view[int(chunk) * stride:int(chunk) * stride + BLOCK_BYTES]) == chunk_bytes(key[:-4])
            manager.complete_load(hits, ctx)
        manager.on_request_finished(ctx)
        settle(manager)
        out.update(first=[r.name for r in first], second=[r.name for r in second], verified=good,
                   corrupt=sum(s.corrupt for s in tier.tier_stats()))
    out["seconds"] = time.monotonic() - t0
    manager.shutdown()
    return out


def main() -> None:
    """argv[1]: a JSON list of jobs ({mode, tier, chunks, salt}); prints the JSON list of their results."""
    print(json.dumps([run(job) for job in json.loads(sys.argv[1])]))


if __name__ == "__main__":
    main()
