#!/usr/bin/env python3
"""Writes the block hash test vectors (docs/block-hash.md) with hashlib and struct only.

This is a second implementation of the specification, independent from the C
code, so the vectors it writes check the library rather than restate it.

    python3 tests/pool/make_block_hash_vectors.py [OUT_DIR]   (default: this folder)

writes
  block_hash_vectors.txt  roots, single blocks and chains (format below, also in the file's header)
  block_hash_v2_vectors.txt  chains of a pool sequence with extra keys (an adapter key, multimodal items)
  sha256_vectors.txt      SHA-256 of messages of every length 0..300 (the C digest's own test)
The output depends on nothing but this file; running it again gives the same bytes.
"""
from __future__ import annotations

import hashlib
import pathlib
import struct
import sys

DOMAIN = b"kvcache/block-hash/v1"
assert len(DOMAIN) == 21


def le32(n: int) -> bytes:
    return struct.pack("<I", n)


def root(seed: bytes, salt: bytes) -> bytes:
    return hashlib.sha256(DOMAIN + le32(len(seed)) + seed + le32(len(salt)) + salt).digest()


def block(parent: bytes, tokens: list[int], extra: bytes) -> bytes:
    assert len(parent) == 32 and tokens and all(0 <= t < 2**31 for t in tokens)
    body = parent + le32(len(tokens)) + b"".join(le32(t) for t in tokens) + le32(len(extra)) + extra
    return hashlib.sha256(body).digest()


def chain(parent: bytes, tokens: list[int], block_size: int) -> list[bytes]:
    out = []
    for i in range(len(tokens) // block_size):
        parent = block(parent, tokens[i * block_size:(i + 1) * block_size], b"")
        out.append(parent)
    return out


def token_run(count: int, start: int) -> list[int]:
    """Deterministic ids spread over [0, 2^31): a multiplicative sequence, with the extremes mixed in."""
    ids = [(start + 2654435761 * i) % 2**31 for i in range(count)]
    for i in range(0, count, 7):
        ids[i] = 0 if i % 2 == 0 else 2**31 - 1
    return ids


def hexa(b: bytes) -> str:
    return b.hex() if b else "-"


def ints(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs) if xs else "-"


HEADER = """\
# kvcache block hash, version 1: test vectors (docs/block-hash.md).
# Written by tests/pool/make_block_hash_vectors.py with Python's hashlib and struct only; do not edit.
# One vector a line, fields separated by one space; '#' starts a comment line.
#   root  NAME SEED SALT ROOT
#   block NAME PARENT TOKENS EXTRA HASH
#   chain NAME ROOT BLOCK_SIZE TOKENS HASHES
# SEED, SALT, EXTRA, PARENT, ROOT, HASH: lowercase hex of the bytes, '-' when empty.
# TOKENS: token ids in decimal, comma-separated, '-' when empty. HASHES: the hashes of the full blocks in order,
# comma-separated hex, '-' when no block is full. The tokens of a partial tail are in TOKENS but hash nothing.
"""


def vectors() -> list[str]:
    lines = []
    r_empty = root(b"", b"")
    seed = b"meta-llama/Llama-3.1-8B-Instruct@0e9e39f2"
    salt = b"tenant-0042"
    roots = [
        ("empty-seed-empty-salt", b"", b""),
        ("seed-only", seed, b""),
        ("salt-only", b"", salt),
        ("seed-and-salt", seed, salt),
        # Opaque bytes: UTF-8 beyond ASCII, a NUL, bytes >= 0x80 that are not UTF-8.
        ("non-ascii", "modèle/模型".encode("utf-8") + b"\x00\xff\x80", bytes(range(256))),
        ("nul-is-data", b"a\x00b", b"\x00"),
        # The lengths keep the fields apart: these two differ.
        ("split-ab-c", b"ab", b"c"),
        ("split-a-bc", b"a", b"bc"),
        ("doc-example", b"my-model", b"tenant-1"),  # the worked example of docs/block-hash.md
    ]
    for name, s, t in roots:
        lines.append(f"root {name} {hexa(s)} {hexa(t)} {root(s, t).hex()}")
    r_full = root(seed, salt)

    ones = bytes([0xFF] * 32)
    counting = bytes(range(32))
    lora = b"lora:7"
    image = hashlib.sha256(b"an image").digest() + le32(3) + le32(12)  # a content hash and the token range it covers
    blocks = [
        ("one-token-0", r_empty, [0], b""),
        ("one-token-1", r_empty, [1], b""),
        ("one-token-max", r_empty, [2**31 - 1], b""),
        ("extremes", counting, [0, 1, 2**31 - 1, 1, 0], b""),
        ("sixteen", r_full, token_run(16, 128000), b""),
        ("seventeen", r_full, token_run(17, 50256), b""),
        ("sixteen-lora", r_full, token_run(16, 128000), lora),
        ("sixteen-image", r_full, token_run(16, 128000), image),
        ("parent-ff", ones, token_run(16, 1), b""),
        ("extra-nul", r_empty, [7], b"\x00"),
        ("doc-example-lora", root(b"my-model", b"tenant-1"), [1, 2, 3, 4], b"lora:7"),
    ]
    for name, parent, tokens, extra in blocks:
        lines.append(f"block {name} {parent.hex()} {ints(tokens)} {hexa(extra)} {block(parent, tokens, extra).hex()}")

    chains = [
        ("five-of-16-with-tail", r_full, 16, token_run(5 * 16 + 7, 9)),
        ("exactly-two-of-16", r_empty, 16, token_run(32, 100)),
        ("block-size-1", r_full, 1, [5, 0, 2**31 - 1, 5, 5]),
        ("block-size-3-extremes", r_empty, 3, [0, 1, 2**31 - 1] * 3 + [2**31 - 1]),
        ("five-of-256-with-tail", r_full, 256, token_run(5 * 256 + 100, 31337)),
        ("partial-only", r_full, 16, token_run(15, 4)),
        ("no-tokens", r_full, 16, []),
        ("doc-example", root(b"my-model", b"tenant-1"), 4, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ]
    for name, r, bs, tokens in chains:
        hashes = chain(r, tokens, bs)
        joined = ",".join(h.hex() for h in hashes) if hashes else "-"
        lines.append(f"chain {name} {r.hex()} {bs} {ints(tokens)} {joined}")
    return lines


TAG_ADAPTER = b"\x01"
TAG_MM_ITEM = b"\x02"


def extra_keys(adapter: bytes, items: list[tuple[int, int, bytes]], start: int, end: int) -> bytes:
    """Version 2: the extra bytes of the block of tokens [start, end) (docs/block-hash.md, 'Extra keys')."""
    out = TAG_ADAPTER + le32(len(adapter)) + adapter if adapter else b""
    for offset, length, content in items:
        if offset < end and offset + length > start:  # the item's tokens overlap the block's
            out += TAG_MM_ITEM + le32(len(content)) + content
    return out


HEADER_V2 = """\
# kvcache block hash, version 2 (version 1 plus the pool's extra keys): test vectors (docs/block-hash.md).
# Written by tests/pool/make_block_hash_vectors.py with Python's hashlib and struct only; do not edit.
# One vector a line, fields separated by one space; '#' starts a comment line.
#   pool NAME SEED SALT ADAPTER ITEMS BLOCK_SIZE TOKENS EXTRAS HASHES
# A pool with hash seed SEED, a sequence with salt SALT, adapter key ADAPTER and multimodal items ITEMS holds
# TOKENS, all committed. SEED, SALT, ADAPTER: lowercase hex, '-' when empty. ITEMS: OFFSET:LENGTH:HASH
# (decimal, decimal, hex) comma-separated, '-' when none. TOKENS as in block_hash_vectors.txt. EXTRAS: each
# full block's extra bytes in hex ('-' when empty), comma-separated; HASHES: each full block's hash,
# comma-separated; both '-' when no block is full.
"""


def vectors_v2() -> list[str]:
    seed, salt = b"llava-hf/llava-1.5-7b-hf@8c85e9a4", b"tenant-0042"
    cat, dog = hashlib.sha256(b"cat.png").digest(), hashlib.sha256(b"dog.png").digest()
    short = b"\x00\xff"  # any bytes, NUL included
    run = token_run(5 * 16 + 7, 77)
    cases = [
        # No extra keys: version 1's chain exactly.
        ("no-extra-keys", seed, salt, b"", [], 16, run),
        ("adapter-only", seed, b"", b"lora:sql-expert", [], 16, run),
        # Placeholder ranges that straddle, touch and fall inside blocks of 4.
        ("image-straddles", b"", b"", b"", [(6, 8, cat)], 4, list(range(1, 18))),
        ("image-other-content", b"", b"", b"", [(6, 8, dog)], 4, list(range(1, 18))),
        ("two-in-one-block", b"", b"", b"", [(1, 1, cat), (2, 1, dog), (5, 8, short)], 4, [9] * 16),
        ("block-edges", b"", b"", b"", [(0, 4, cat), (8, 1, dog)], 4, [3] * 12),
        ("item-in-tail-only", seed, salt, b"", [(35, 2, cat)], 16, run[:40]),
        ("adapter-and-items", seed, salt, b"lora:7", [(3, 20, cat), (40, 3, dog)], 16, run),
        ("doc-example", b"my-model", b"tenant-1", b"lora:7", [(2, 3, cat)], 4, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ]
    lines = []
    for name, s, t, adapter, items, bs, tokens in cases:
        parent, extras, hashes = root(s, t), [], []
        for i in range(len(tokens) // bs):
            extra = extra_keys(adapter, items, i * bs, (i + 1) * bs)
            parent = block(parent, tokens[i * bs:(i + 1) * bs], extra)
            extras.append(hexa(extra))
            hashes.append(parent.hex())
        item_field = ",".join(f"{o}:{n}:{c.hex()}" for o, n, c in items) if items else "-"
        lines.append(f"pool {name} {hexa(s)} {hexa(t)} {hexa(adapter)} {item_field} {bs} {ints(tokens)} "
                     f"{','.join(extras) if extras else '-'} {','.join(hashes) if hashes else '-'}")
    return lines


def sha256_message(n: int) -> bytes:
    """The message of length n of sha256_vectors.txt; tests/pool/test_internal_sha256.c builds the same."""
    return bytes((i * 131 + n * 17 + 1) & 0xFF for i in range(n))


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent
    (out / "block_hash_vectors.txt").write_text(HEADER + "\n".join(vectors()) + "\n")
    (out / "block_hash_v2_vectors.txt").write_text(HEADER_V2 + "\n".join(vectors_v2()) + "\n")
    sha = ["# SHA-256 of the message of every length 0..300: byte i of the length-n message is (131*i + 17*n + 1) mod 256.",
           "# Written by tests/pool/make_block_hash_vectors.py with Python's hashlib; do not edit. Fields: LENGTH DIGEST"]
    sha += [f"{n} {hashlib.sha256(sha256_message(n)).hexdigest()}" for n in range(301)]
    (out / "sha256_vectors.txt").write_text("\n".join(sha) + "\n")


if __name__ == "__main__":
    main()
