"""A pool sequence's extra keys (adapter key, multimodal items; docs/block-hash.md version 2) from Python: the
pool's hashes against block_hash_v2_vectors.txt and a hashlib recomputation, sharing only with equal keys, and
bad items refused with the pool unchanged."""
from __future__ import annotations

import hashlib
import pathlib
import struct

import pytest

import kvcache

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "pool" / "block_hash_v2_vectors.txt"
BLOCK = 4


def le32(n: int) -> bytes:
    return struct.pack("<I", n)


# Version 2's extra bytes, written from docs/block-hash.md with struct only.
def spec_extra(adapter: bytes, items, start: int, end: int) -> bytes:
    out = b"\x01" + le32(len(adapter)) + adapter if adapter else b""
    for h, offset, length in items:
        if offset < end and offset + length > start:
            out += b"\x02" + le32(len(h)) + h
    return out


def unhex(field: str) -> bytes:
    return b"" if field == "-" else bytes.fromhex(field)


def make_pool(block_size: int, num_blocks: int, seed: bytes) -> kvcache.Pool:
    return kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=block_size,
                                                                   num_blocks=num_blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=2)], hash_seed=seed, events=256)


def read_vectors() -> list:
    if not VECTORS.exists():
        pytest.skip(f"SKIPPED: the vectors are not at {VECTORS} (tests run from outside the repository)")
    rows = [line.split(" ") for line in VECTORS.read_text().splitlines() if line and not line.startswith("#")]
    assert len(rows) == 9 and all(r[0] == "pool" and len(r) == 10 for r in rows)
    return rows


@pytest.mark.parametrize("row", read_vectors() if VECTORS.exists() else [], ids=lambda r: r[1])
def test_v2_vectors(row):
    _, name, seed, salt, adapter, items, bs, tokens, extras, hashes = row
    seed, salt, adapter, bs = unhex(seed), unhex(salt), unhex(adapter), int(bs)
    items = [] if items == "-" else [kvcache.MultimodalItem(bytes.fromhex(h), int(o), int(n))
                                     for o, n, h in (i.split(":") for i in items.split(","))]
    tokens = [] if tokens == "-" else [int(t) for t in tokens.split(",")]
    want = [] if hashes == "-" else [bytes.fromhex(h) for h in hashes.split(",")]
    want_extras = [] if extras == "-" else [unhex(e) for e in extras.split(",")]
    assert len(want) == len(tokens) // bs == len(want_extras)
    with make_pool(bs, len(tokens) // bs + 2, seed) as pool:
        with pool.sequence(salt, adapter_key=adapter or None, mm_items=items) as seq:
            seq.reserve(tokens)
            seq.commit()
        assert [e.block_hash for e in pool.events()] == want, name
    # hashlib over the documented layout gives the same extras and hashes
    parent = kvcache.block_hash_root(seed, salt)
    for i, h in enumerate(want):
        extra = spec_extra(adapter, items, i * bs, (i + 1) * bs)
        assert extra == want_extras[i], (name, i)
        parent = hashlib.sha256(parent + le32(bs) + struct.pack(f"<{bs}I", *tokens[i * bs:(i + 1) * bs])
                                + le32(len(extra)) + extra).digest()
        assert parent == h, (name, i)


def fill(pool, tokens, **keys):
    with pool.sequence(**keys) as seq:
        seq.reserve(tokens)
        seq.commit()


def matched(pool, tokens, **keys) -> int:
    with pool.sequence(**keys) as seq:
        return seq.match_prefix(tokens)


def test_equal_tokens_share_only_with_equal_keys():
    tokens = [32000] * 8 + list(range(24))  # an image's placeholders, then text
    cat, dog = hashlib.sha256(b"cat").digest(), hashlib.sha256(b"dog").digest()
    with make_pool(BLOCK, 64, b"m") as pool:
        fill(pool, tokens, mm_items=[(cat, 0, 8)])
        assert matched(pool, tokens, mm_items=[(dog, 0, 8)]) == 0
        assert matched(pool, tokens) == 0
        assert matched(pool, tokens, mm_items=[kvcache.MultimodalItem(cat, 0, 8)]) == len(tokens) - BLOCK
        text = list(range(100, 132))
        fill(pool, text, adapter_key=b"lora:a")
        assert matched(pool, text, adapter_key=b"lora:b") == 0
        assert matched(pool, text) == 0
        assert matched(pool, text, adapter_key=b"lora:a") == len(text) - BLOCK
        # an image at [9, 11): the two blocks before it are shared whatever the image
        text = list(range(200, 232))
        fill(pool, text, mm_items=[(cat, 9, 2)])
        assert matched(pool, text, mm_items=[(dog, 9, 2)]) == 8
    assert kvcache.pool.POOL_BLOCK_HASH_VERSION == 2


@pytest.mark.parametrize("keys, needles", [
    (dict(mm_items=[(b"a", 0, 4), (b"b", 2, 4)]), ["mm_items[1].offset is 2", "must not overlap"]),
    (dict(mm_items=[(b"a", 8, 4), (b"b", 0, 4)]), ["mm_items[1].offset is 0", "sorted by offset"]),
    (dict(mm_items=[(b"a", 0, 0)]), ["mm_items[0].length is 0", ">= 1 token"]),
    (dict(mm_items=[(b"", 0, 1)]), ["mm_items[0].hash_len is 0", "1 to 1024 bytes"]),
    (dict(mm_items=[(b"a", 1 << 40, 1)]), ["mm_items[0] covers tokens [1099511627776", "2^40"]),
    (dict(mm_items=[(b"a", -1, 1)]), ["mm_items[0].offset is -1", ">= 0"]),
    (dict(adapter_key=b"x" * 1025), ["adapter_key_len is 1025", "at most 1024"]),
])
def test_bad_keys_name_the_value_and_change_nothing(keys, needles):
    with make_pool(BLOCK, 16, b"m") as pool:
        fill(pool, list(range(9)))
        before = pool.stats(0), pool.events()
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            pool.sequence(**keys)
        assert all(n in str(e.value) for n in needles), str(e.value)
        assert (pool.stats(0), pool.events()) == (before[0], [])
