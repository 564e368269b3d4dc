"""The block hash (docs/block-hash.md) from Python: the shared vectors, a hashlib recomputation, the inputs a
Python caller has (bytes-likes, lists, ranges, numpy arrays) and the errors."""
from __future__ import annotations

import hashlib
import pathlib
import random
import struct
import subprocess
import sys

import pytest

import kvcache

POOL_TESTS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "pool"
VECTORS = POOL_TESTS / "block_hash_vectors.txt"


# The specification again, written from docs/block-hash.md with hashlib: a router needs nothing else.
def le32(n: int) -> bytes:
    return struct.pack("<I", n)


def spec_root(seed: bytes, salt: bytes) -> bytes:
    return hashlib.sha256(b"kvcache/block-hash/v1" + le32(len(seed)) + seed + le32(len(salt)) + salt).digest()


def spec_block(parent: bytes, tokens, extra: bytes) -> bytes:
    h = hashlib.sha256(parent + le32(len(tokens)))
    h.update(struct.pack(f"<{len(tokens)}I", *tokens))
    h.update(le32(len(extra)) + extra)
    return h.digest()


def spec_chain(root: bytes, tokens, block_size: int) -> list:
    out, parent = [], root
    for i in range(len(tokens) // block_size):
        parent = spec_block(parent, tokens[i * block_size:(i + 1) * block_size], b"")
        out.append(parent)
    return out


def unhex(field: str) -> bytes:
    return b"" if field == "-" else bytes.fromhex(field)


def ids(field: str) -> list:
    return [] if field == "-" else [int(x) for x in field.split(",")]


def read_vectors() -> dict:
    if not VECTORS.exists():
        pytest.skip(f"SKIPPED: the vectors are not at {VECTORS} (tests run from outside the repository)")
    kinds: dict = {"root": [], "block": [], "chain": []}
    for line in VECTORS.read_text().splitlines():
        if line and not line.startswith("#"):
            kind, *fields = line.split(" ")
            kinds[kind].append(fields)
    assert [len(kinds[k]) for k in ("root", "block", "chain")] == [9, 11, 8]
    return kinds


def test_roots():
    for name, seed, salt, want in read_vectors()["root"]:
        seed, salt, want = unhex(seed), unhex(salt), bytes.fromhex(want)
        assert spec_root(seed, salt) == want, name
        assert kvcache.block_hash_root(seed, salt) == want, name
        assert kvcache.block_hash_root(bytearray(seed), memoryview(salt)) == want, name
    assert kvcache.block_hash_root() == kvcache.block_hash_root(b"", b"") == spec_root(b"", b"")


def test_blocks():
    for name, parent, tokens, extra, want in read_vectors()["block"]:
        parent, tokens, extra, want = unhex(parent), ids(tokens), unhex(extra), bytes.fromhex(want)
        assert spec_block(parent, tokens, extra) == want, name
        assert kvcache.block_hash(parent, tokens, extra) == want, name
        assert kvcache.block_hash(bytearray(parent), tuple(tokens), extra=memoryview(extra)) == want, name


def test_chains():
    for name, root, block_size, tokens, hashes in read_vectors()["chain"]:
        root, block_size, tokens = unhex(root), int(block_size), ids(tokens)
        want = [] if hashes == "-" else [bytes.fromhex(h) for h in hashes.split(",")]
        assert len(want) == len(tokens) // block_size, name
        assert spec_chain(root, tokens, block_size) == want, name
        got = kvcache.block_hash_chain(root, tokens, block_size)
        assert isinstance(got, list) and got == want, name


def test_tensors_and_ranges_as_tokens():
    np = pytest.importorskip("numpy", reason="SKIPPED: numpy is not installed")
    root = kvcache.block_hash_root(b"m")
    tokens = list(range(40))
    want = spec_chain(root, tokens, 16)
    assert kvcache.block_hash_chain(root, range(40), 16) == want
    for dtype in (np.int32, np.int64, np.uint16):
        assert kvcache.block_hash_chain(root, np.arange(40, dtype=dtype), 16) == want
    assert kvcache.block_hash_chain(root, np.arange(80, dtype=np.int32)[::2] // 2, 16) == want  # strided
    assert kvcache.block_hash(root, np.array([2**31 - 1], np.int64)) == spec_block(root, [2**31 - 1], b"")


def test_random_inputs_agree_with_hashlib():
    rng = random.Random(15)
    for _ in range(200):
        seed = rng.randbytes(rng.randrange(0, 70))
        salt = rng.randbytes(rng.randrange(0, 3)) if rng.random() < 0.5 else b""
        root = kvcache.block_hash_root(seed, salt)
        assert root == spec_root(seed, salt)
        block_size = rng.choice([1, 2, 16, 17, 64])
        tokens = [rng.choice([0, 2**31 - 1, rng.randrange(2**31)]) for _ in range(rng.randrange(0, 200))]
        assert kvcache.block_hash_chain(root, tokens, block_size) == spec_chain(root, tokens, block_size)
        if tokens:
            extra = rng.randbytes(rng.randrange(0, 40))
            assert kvcache.block_hash(root, tokens, extra) == spec_block(root, tokens, extra)


def test_errors():
    root = kvcache.block_hash_root()
    with pytest.raises(kvcache.InvalidArgumentError, match=r"kvc_block_hash: tokens\[2\] is -7"):
        kvcache.block_hash(root, [0, 1, -7])
    with pytest.raises(kvcache.InvalidArgumentError, match=r"tokens\[1\] is 2147483648"):
        kvcache.block_hash(root, [0, 2**31])
    with pytest.raises(kvcache.InvalidArgumentError, match=r"tokens\[0\] is -2147483649"):
        kvcache.block_hash_chain(root, [-(2**31) - 1], 4)
    with pytest.raises(kvcache.InvalidArgumentError, match="num_tokens is 0"):
        kvcache.block_hash(root, [])
    with pytest.raises(ValueError, match="parent is 31 bytes; a block hash is 32 bytes"):
        kvcache.block_hash(root[:31], [1])
    with pytest.raises(kvcache.InvalidArgumentError, match="root is 33 bytes"):
        kvcache.block_hash_chain(root + b"x", [1], 1)
    with pytest.raises(kvcache.InvalidArgumentError, match="block_size is 0"):
        kvcache.block_hash_chain(root, [1, 2], 0)
    with pytest.raises(kvcache.InvalidArgumentError, match="block_size is -1"):
        kvcache.block_hash_chain(root, [1, 2], -1)
    with pytest.raises(kvcache.InvalidArgumentError, match=r"tokens\[4\] is -1"):
        kvcache.block_hash_chain(root, [1, 2, 3, 4, -1], 2)  # in the tail, still refused
    with pytest.raises(TypeError, match="seed must be bytes, not str"):
        kvcache.block_hash_root("model")
    with pytest.raises(TypeError, match="salt must be a bytes-like object, got int"):
        kvcache.block_hash_root(b"", 5)
    with pytest.raises(TypeError, match="extra must be bytes, not str"):
        kvcache.block_hash(root, [1], "lora")
    with pytest.raises(TypeError):
        kvcache.block_hash(root, ["a"])
    assert kvcache.block_hash_chain(root, [], 16) == []
    assert kvcache.BLOCK_HASH_SIZE == 32 and kvcache.BLOCK_HASH_VERSION == 1


def test_vector_files_are_what_the_script_writes(tmp_path):
    """make_block_hash_vectors.py, run again, writes the committed files byte for byte."""
    read_vectors()
    subprocess.run([sys.executable, str(POOL_TESTS / "make_block_hash_vectors.py"), str(tmp_path)], check=True)
    for name in ("block_hash_vectors.txt", "block_hash_v2_vectors.txt", "sha256_vectors.txt"):
        assert (tmp_path / name).read_bytes() == (POOL_TESTS / name).read_bytes(), name
