#!/usr/bin/env python3
"""Writes tests/pool/vllm_hash_vectors.txt: block hashes computed by vLLM's own functions
(get_request_block_hasher, hash_block_tokens, generate_block_hash_extra_keys, init_none_hash with
vllm.utils.hashing.sha256_cbor), from the wheel scripts/setup.sh installs into .venv-vllm/ (loaded by
vllm_modules.py), for the pools of hash mode KVC_POOL_HASH_VLLM_SHA256_CBOR to match (docs/block-hash.md,
'vLLM's hash').

    .venv/bin/python tests/pool/make_vllm_hash_vectors.py [OUT_FILE]   (default: vllm_hash_vectors.txt here)

The output depends only on this file and the vLLM release; running it again gives the same bytes. The
tests compare against the committed file (and the Python test re-runs this script when vLLM is installed).
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import vllm_modules  # noqa: E402

HEADER = """\
# vLLM block hash vectors (docs/block-hash.md, 'vLLM's hash'), written by tests/pool/make_vllm_hash_vectors.py
# with vLLM {release}'s own functions (sha256_cbor). One pool sequence a line:
#   vllm NAME SEED SALT LORA_NAME LORA_PATH ITEMS BLOCK_SIZE TOKENS NONE_HASH HASHES
# SEED, SALT, LORA_NAME, LORA_PATH: UTF-8 bytes as hex, - when empty (SEED empty: vLLM's default seed, no
# PYTHONHASHSEED; LORA_NAME empty: no LoRA request). ITEMS: OFFSET:LENGTH:IDENTIFIER_HEX comma-separated, -
# for none. TOKENS decimal comma-separated. NONE_HASH: the chains' root. HASHES: every full block's hash, - when
# none is full.
"""


def hexa(b: bytes) -> str:
    return b.hex() if b else "-"


def vector(ns, name, seed, salt, lora, items, block_size, tokens):
    none_hash = vllm_modules.init_none_hash(ns, seed.decode())
    hashes = vllm_modules.block_hashes(ns, block_size, tokens, cache_salt=salt.decode(),
                                       lora=(lora[0].decode(), lora[1].decode()) if lora[0] else None,
                                       items=[(o, n, i.decode()) for o, n, i in items])
    its = ",".join("%d:%d:%s" % (o, n, i.hex()) for o, n, i in items) or "-"
    return " ".join(["vllm", name, hexa(seed), hexa(salt), hexa(lora[0]), hexa(lora[1]), its, str(block_size),
                      ",".join(map(str, tokens)) or "-", none_hash.hex(),
                      ",".join(h.hex() for h in hashes) or "-"])


def vectors(ns):
    img = b"9f2c0e5b1d7a4c3e8b6f0a2d4c6e8f1a"  # vLLM's identifiers are hex digests, as text
    cat = b"c2e5f8a1b4d7e0f3a6c9b2e5d8f1a4c7"
    nine = list(range(1, 10))
    big = [0, 2**31 - 1, 65535, 65536, 23, 24, 255, 256] * 5
    none = (b"", b"")
    return [
        vector(ns, "plain", b"", b"", none, [], 4, nine),
        vector(ns, "seed-big-ids", b"my-model", b"", none, [], 16, big),
        vector(ns, "salt", b"", b"tenant-1", none, [], 4, nine),
        vector(ns, "lora", b"", b"", (b"sql-lora", b"/adapters/sql"), [], 4, nine),
        vector(ns, "lora-no-path", b"", b"", (b"sql-lora", b""), [], 4, nine),
        vector(ns, "image-straddles", b"", b"", none, [(2, 5, img)], 4, nine),
        vector(ns, "other-image", b"", b"", none, [(2, 5, cat)], 4, nine),
        vector(ns, "two-items-one-block", b"", b"", none, [(0, 1, img), (2, 2, cat)], 4, nine),
        vector(ns, "items-at-edges", b"", b"", none, [(0, 4, img), (8, 4, cat)], 4, list(range(1, 14))),
        vector(ns, "item-in-tail", b"", b"", none, [(8, 1, img)], 4, nine),
        vector(ns, "everything", "modèle-7b".encode(), "locataire-✓".encode(), (b"sql-lora", b"/a/b"),
               [(1, 2, img), (5, 6, cat)], 4, list(range(100, 117))),
        vector(ns, "block-size-1", b"", b"", none, [], 1, [5, 6, 7]),
        vector(ns, "block-size-16", b"", b"tenant-1", none, [(20, 3, img)], 16, list(range(33))),
        vector(ns, "long-item", b"", b"", none, [(3, 300, img)], 16, list(range(320))),
        vector(ns, "no-full-block", b"", b"", none, [], 16, [1, 2, 3]),
    ]


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / \
        "vllm_hash_vectors.txt"
    if not vllm_modules.available():
        sys.exit(vllm_modules.skip_reason())
    lines = vectors(vllm_modules.hashing())
    out.write_text(HEADER.format(release=vllm_modules.release()) + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
