#!/usr/bin/env python3
"""Writes tests/pool/vllm_event_vectors.txt: the bytes vLLM's KV event publisher sends
(msgspec.msgpack.Encoder().encode of a vllm.distributed.kv_events.KVEventBatch) for the events of one pool
scenario, built with vLLM's own event classes and block-hash functions from the wheel in .venv-vllm/
(vllm_modules.py). Every language runs the scenario on a kvcache pool and compares
kvc_pool_events_pull_vllm's bytes with these (docs/pool.md, 'Events in vLLM's form').

The scenario (a CPU pool, vLLM hash mode with the default seed, one full group of block size 4 and 4 usable
blocks, events on):
  1. sequence A, LoRA "sql-lora" at "/adapters/sql", adapter_id 3: reserve tokens 1..6, commit (block 0
     stored), reserve 7, 8, commit (block 1 stored, its parent block 0): one BlockStored of 2 blocks, no parent
  2. sequence B, no keys: reserve tokens 1..8, commit: one BlockStored of 2 blocks (another chain: no LoRA)
  3. destroy B: its blocks stay cached, released last first (block 1 is the least recently used)
  4. sequence C: reserve 50..53 (evicts B's block 1: BlockRemoved), commit: BlockStored of 1 block
  5. sequence D: reserve 60..63 (evicts B's block 0: BlockRemoved), commit: BlockStored of 1 block
  6. destroy C, clear the cache: AllBlocksCleared
then one pull. Batches: `hashes` (32-byte hashes, no data-parallel rank, ts 1700000000.25) and `int-hashes`
(vLLM's 64-bit form, rank 2, ts 0.5), each from a fresh pool.

    .venv/bin/python tests/pool/make_vllm_event_vectors.py [OUT_FILE]
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import vllm_modules  # noqa: E402

HEADER = """\
# vLLM KV event batches (docs/pool.md, 'Events in vLLM's form'), written by tests/pool/make_vllm_event_vectors.py
# with vLLM {release}'s KVEventBatch and msgspec's encoder, for the scenario in that script. One batch a line:
#   batch NAME INT_HASHES DATA_PARALLEL_RANK TS BYTES_HEX
# DATA_PARALLEL_RANK -1: none. TS as Python's repr of the float.
"""

LORA = ("sql-lora", "/adapters/sql", 3)


def chain(ns, tokens, lora=None):
    return vllm_modules.block_hashes(ns, 4, tokens, lora=lora[:2] if lora else None)


def batch(ns, ev, int_hashes, rank, ts):
    def h(x):
        return int.from_bytes(x, "big") & ((1 << 64) - 1) if int_hashes else x

    a = chain(ns, range(1, 9), LORA)
    b = chain(ns, range(1, 9))
    c = chain(ns, range(50, 54))
    d = chain(ns, range(60, 64))

    def stored(hashes, tokens, lora=None):
        return ev.BlockStored(block_hashes=[h(x) for x in hashes], parent_block_hash=None, token_ids=list(tokens),
                              block_size=4, lora_id=lora[2] if lora else None, medium="CPU",
                              lora_name=lora[0] if lora else None, group_idx=0)

    def removed(x):
        return ev.BlockRemoved(block_hashes=[h(x)], medium="CPU", group_idx=0)

    events = [stored(a, range(1, 9), LORA), stored(b, range(1, 9)), removed(b[1]), stored(c, range(50, 54)),
              removed(b[0]), stored(d, range(60, 64)), ev.AllBlocksCleared()]
    return ev.KVEventBatch(ts=ts, events=events, data_parallel_rank=None if rank < 0 else rank)


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / \
        "vllm_event_vectors.txt"
    if not vllm_modules.available():
        sys.exit(vllm_modules.skip_reason())
    ns = vllm_modules.hashing()
    ev = vllm_modules.kv_events()
    import msgspec  # from the vLLM folder, which kv_events() put on sys.path
    vllm_modules.init_none_hash(ns)
    enc = msgspec.msgpack.Encoder()
    lines = []
    for name, int_hashes, rank, ts in (("hashes", 0, -1, 1700000000.25), ("int-hashes", 1, 2, 0.5)):
        data = enc.encode(batch(ns, ev, int_hashes, rank, ts))
        lines.append("batch %s %d %d %r %s" % (name, int_hashes, rank, ts, data.hex()))
    out.write_text(HEADER.format(release=vllm_modules.release()) + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
