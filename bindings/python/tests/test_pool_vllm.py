"""A pool in vLLM's hash mode and its events in vLLM's wire form (docs/block-hash.md, 'vLLM's hash';
docs/pool.md, 'Events in vLLM's form'), from Python:

- the block hashes against tests/pool/vllm_hash_vectors.txt (written by vLLM's own functions);
- Pool.events_vllm's bytes for make_vllm_event_vectors.py's scenario against tests/pool/vllm_event_vectors.txt
  (the bytes of vLLM's encoder; the Rust and Go tests compare with the same file);
- with vLLM installed (.venv-vllm/, scripts/setup.sh): vLLM's decoder (msgspec, KVEventBatch) reads the bytes
  of a pool's events, field by field against the pool's own events and hashes vLLM computes, vLLM's encoder
  gives them back byte for byte, and both vector scripts reproduce their files."""
from __future__ import annotations

import pathlib
import runpy
import sys

import pytest

import kvcache

POOL_TESTS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "pool"
sys.path.insert(0, str(POOL_TESTS))
import vllm_modules  # noqa: E402

needs_vllm = pytest.mark.skipif(not vllm_modules.available(), reason="SKIPPED: " + vllm_modules.skip_reason())


def unhex(field: str) -> bytes:
    return b"" if field == "-" else bytes.fromhex(field)


def rows(name: str, kind: str, fields: int) -> list:
    path = POOL_TESTS / name
    lines = [ln.split(" ") for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines and all(r[0] == kind and len(r) == fields for r in lines)
    return lines


def vllm_pool(block_size: int, usable: int, seed: bytes = b"") -> kvcache.Pool:
    return kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=block_size,
                                                                   num_blocks=usable + 1)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=2)], hash_seed=seed or None,
                        events=4096, hash_mode="vllm")


def append(seq, tokens):
    seq.reserve(tokens)
    seq.commit()


@pytest.mark.parametrize("row", rows("vllm_hash_vectors.txt", "vllm", 11), ids=lambda r: r[1])
def test_hash_vectors(row):
    _, name, seed, salt, lora, path, items, bs, tokens, none_hash, hashes = row
    bs = int(bs)
    items = [] if items == "-" else [kvcache.MultimodalItem(bytes.fromhex(h), int(o), int(n))
                                     for o, n, h in (i.split(":") for i in items.split(","))]
    tokens = [] if tokens == "-" else [int(t) for t in tokens.split(",")]
    want = [] if hashes == "-" else [bytes.fromhex(h) for h in hashes.split(",")]
    with vllm_pool(bs, len(tokens) // bs + 2, unhex(seed)) as pool:
        with pool.sequence(unhex(salt) or None, adapter_key=unhex(lora) or None, adapter_path=unhex(path) or None,
                           mm_items=items) as seq:
            append(seq, tokens)
        events = pool.events()
    assert [e.block_hash for e in events] == want, name
    assert [e.parent_hash for e in events] == ([bytes.fromhex(none_hash)] + want)[:len(want)], name


def scenario(pool: kvcache.Pool) -> None:
    """make_vllm_event_vectors.py's scenario."""
    a = pool.sequence(adapter_key=b"sql-lora", adapter_path=b"/adapters/sql", adapter_id=3)
    append(a, list(range(1, 7)))
    append(a, [7, 8])
    with pool.sequence() as b:
        append(b, list(range(1, 9)))
    c = pool.sequence()
    append(c, list(range(50, 54)))
    d = pool.sequence()
    append(d, list(range(60, 64)))
    c.close()
    pool.clear_cache()
    a.close()
    d.close()


@pytest.mark.parametrize("row", rows("vllm_event_vectors.txt", "batch", 6), ids=lambda r: r[1])
def test_event_vectors(row):
    _, name, int_hashes, rank, ts, data = row
    with vllm_pool(4, 4) as pool:
        scenario(pool)
        got = pool.events_vllm(float(ts), int_hashes=int_hashes == "1",
                               data_parallel_rank=None if rank == "-1" else int(rank))
        assert got.hex() == data, name
        assert pool.events_vllm(1.0) == bytes.fromhex("93cb3ff000000000000090c0")  # drained: [1.0, [], None]


def test_bad_batch_options():
    with vllm_pool(4, 4) as pool:
        scenario(pool)
        with pytest.raises(kvcache.InvalidArgumentError, match="data_parallel_rank is -2"):
            pool.events_vllm(1.0, data_parallel_rank=-2)
        with pytest.raises(kvcache.InvalidArgumentError, match="ts is nan"):
            pool.events_vllm(float("nan"))
        assert len(pool.events()) == 9  # nothing was taken


def test_bad_keys_refused():
    with vllm_pool(4, 4) as pool:
        with pytest.raises(kvcache.InvalidArgumentError, match="adapter_key is not UTF-8"):
            pool.sequence(adapter_key=b"\xff")
        with pytest.raises(kvcache.InvalidArgumentError, match="hash_mode"):
            kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=4)],
                         layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=2)], hash_mode=7)
        assert pool.stats(0).free_blocks == 4


@needs_vllm
def test_vllm_decodes_the_events_field_by_field():
    ev = vllm_modules.kv_events()
    ns = vllm_modules.hashing()
    import msgspec  # from the vLLM folder, which kv_events() put on sys.path
    image = b"0123456789abcdef0123456789abcdef"
    with vllm_pool(4, 16) as pool:
        a = pool.sequence(b"tenant-1", adapter_key=b"sql-lora", adapter_path=b"/p", adapter_id=5,
                          mm_items=[kvcache.MultimodalItem(image, 2, 3)])
        append(a, list(range(10, 19)))  # 2 full blocks
        append(a, [19, 20, 21])  # block 2
        own = pool.events()
        append(a, [22, 23, 24, 25])  # block 3, alone in the next batch: its parent is block 2
        a.close()
        data_1 = None
        with pool.sequence() as b:
            append(b, list(range(10, 18)))
        data_1 = pool.events_vllm(123.5, data_parallel_rank=0)
        pool.clear_cache()
        data_2 = pool.events_vllm(124.0, int_hashes=True)
    # What vLLM computes for the same request (its hasher, with the default seed).
    vllm_modules.init_none_hash(ns)
    vllm_hashes = vllm_modules.block_hashes(ns, 4, range(10, 26), cache_salt="tenant-1", lora=("sql-lora", "/p"),
                                            items=[(2, 3, image.decode())])
    assert [e.block_hash for e in own] == vllm_hashes[:3]

    decoder = msgspec.msgpack.Decoder(ev.KVEventBatch)
    batch = decoder.decode(data_1)
    assert batch.ts == 123.5 and batch.data_parallel_rank == 0
    stored, plain = batch.events
    assert isinstance(stored, ev.BlockStored) and isinstance(plain, ev.BlockStored)
    assert stored.block_hashes == [vllm_hashes[3]]
    assert stored.parent_block_hash == vllm_hashes[2]
    assert stored.token_ids == [22, 23, 24, 25]
    assert stored.block_size == 4
    assert stored.lora_id == 5 and stored.lora_name == "sql-lora"
    assert stored.medium == ev.MEDIUM_CPU and stored.group_idx == 0
    assert stored.extra_keys is None and stored.session_id is None
    assert plain.parent_block_hash is None and plain.lora_id is None and plain.lora_name is None
    assert plain.token_ids == list(range(10, 18)) and len(plain.block_hashes) == 2
    assert msgspec.msgpack.Encoder().encode(batch) == data_1

    batch = decoder.decode(data_2)
    assert batch.data_parallel_rank is None
    assert [type(e) for e in batch.events] == [ev.AllBlocksCleared]
    assert msgspec.msgpack.Encoder().encode(batch) == data_2


@needs_vllm
def test_int_hashes_are_vllms_form():
    ev = vllm_modules.kv_events()
    import msgspec  # from the vLLM folder, which kv_events() put on sys.path
    with vllm_pool(4, 4) as pool:
        scenario(pool)
        data = pool.events_vllm(0.0, int_hashes=True)
    with vllm_pool(4, 4) as pool:
        scenario(pool)
        own = [e for e in pool.events() if e.kind == kvcache.EventKind.BLOCK_STORED]
    batch = msgspec.msgpack.Decoder(ev.KVEventBatch).decode(data)
    stored = [h for e in batch.events if isinstance(e, ev.BlockStored) for h in e.block_hashes]
    # vllm.v1.core.kv_cache_utils.maybe_convert_block_hash with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
    assert stored == [int.from_bytes(e.block_hash, "big") & ((1 << 64) - 1) for e in own]


@needs_vllm
@pytest.mark.parametrize("script,out", [("make_vllm_hash_vectors.py", "vllm_hash_vectors.txt"),
                                        ("make_vllm_event_vectors.py", "vllm_event_vectors.txt")])
def test_vector_scripts_reproduce_the_files(tmp_path, monkeypatch, script, out):
    monkeypatch.setattr(sys, "argv", [script, str(tmp_path / out)])
    runpy.run_path(str(POOL_TESTS / script), run_name="__main__")  # in this process: vLLM's modules are loaded
    assert (tmp_path / out).read_bytes() == (POOL_TESTS / out).read_bytes()


@needs_vllm
def test_tier_stores_in_vllms_form(tmp_path):
    """Blocks a tier worker stored arrive as vLLM's offloading connector reports a store: BlockStored in the tier's
    medium, no parent, no token ids; a failed or dropped store has no vLLM event."""
    ev = vllm_modules.kv_events()
    import msgspec  # from the vLLM folder, which kv_events() put on sys.path
    with vllm_pool(4, 16) as pool:
        pool.add_tier(kvcache.DiskTier(str(tmp_path)))
        pool.start_tier_worker(events=True)
        with pool.sequence() as a:
            append(a, list(range(10, 22)))  # 3 full blocks
        pool.stop_tier_worker(drain_timeout_ms=10_000)
        data = pool.events_vllm(1.0)
    ns = vllm_modules.hashing()
    vllm_modules.init_none_hash(ns)
    hashes = vllm_modules.block_hashes(ns, 4, range(10, 22))
    batch = msgspec.msgpack.Decoder(ev.KVEventBatch).decode(data)
    in_memory = [e for e in batch.events if e.medium == ev.MEDIUM_CPU]
    on_disk = [e for e in batch.events if e.medium == "DISK"]
    assert [h for e in in_memory for h in e.block_hashes] == hashes
    assert [h for e in on_disk for h in e.block_hashes] == hashes
    for e in on_disk:
        assert isinstance(e, ev.BlockStored) and e.parent_block_hash is None and e.token_ids == []
        assert e.block_size == 4 and e.lora_id is None and e.group_idx == 0
    assert not [e for e in batch.events if isinstance(e, ev.AllBlocksCleared)]
    assert msgspec.msgpack.Encoder().encode(batch) == data
