#!/usr/bin/env python3
"""The same work as bench_decode and bench_reorder, done by transformers' DynamicCache on the CPU.

Shape: Llama-3-8B-like, 32 layers, 8 KV heads, head_dim 128, bfloat16.
  decode_append: one token's K/V appended to all 32 layers (cache.update per layer) at 1k, 8k, 32k
                 cached tokens; each repetition times `steps` single-token steps, then crops them off.
  beam_reorder:  reorder_cache on 4 beams at a 4k context, beam_idx {0,1,2,3} and {0,0,2,2} (0 and 2 rows move).
Rows go into the same results.json as the C benchmarks, with impl "transformers" (rows of an earlier
transformers run are replaced, every other row is kept).

transformers' DynamicCache concatenates on every update, so one step at 32k copies the whole history
(4 GiB): long contexts use fewer steps per repetition (down to 1) to keep the run bounded; the steps used
are printed.
torch runs on one thread by default, like the C library (--threads to change).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers
from transformers import DynamicCache

LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128
DTYPE = torch.bfloat16
IMPL = "transformers"


def label(n):
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def make_cache():
    """DynamicCache from a 32-layer config, as bench_decode builds its cache; lazy if that is refused."""
    try:
        config = transformers.LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=32,
                                          num_key_value_heads=KV_HEADS, hidden_size=32 * HEAD_DIM)
        return DynamicCache(config=config)
    except TypeError:
        return DynamicCache()


def stats(samples):
    return statistics.median(samples), min(samples), max(samples)


def bench_append(length, reps, steps, rows):
    cache = make_cache()
    gen = torch.Generator().manual_seed(11)
    k = torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).to(DTYPE)
    v = torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).to(DTYPE)
    for layer in range(LAYERS):
        cache.update(k, v, layer)
    del k, v
    tok = [[(torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE),
             torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE)) for _ in range(LAYERS)]
           for _ in range(steps)]

    samples = []
    for rep in range(-1, reps):  # -1: warm-up
        t0 = time.perf_counter_ns()
        for s in range(steps):
            for layer in range(LAYERS):
                cache.update(tok[s][layer][0], tok[s][layer][1], layer)
        dt = (time.perf_counter_ns() - t0) / steps
        if cache.get_seq_length() != length + steps:
            sys.exit(f"bench_transformers: seq_length {cache.get_seq_length()} != {length + steps}")
        cache.crop(-steps)
        if rep >= 0:
            samples.append(dt)
    med, lo, hi = stats(samples)
    lab = label(length)
    rows += [("decode_append", f"append_ns_per_token_{lab}", med, "ns"),
             ("decode_append", f"append_min_ns_per_token_{lab}", lo, "ns"),
             ("decode_append", f"append_max_ns_per_token_{lab}", hi, "ns")]
    print(f"{lab:<8} {'32 x DynamicCache.update':<26} {med:14.0f} {lo:14.0f} {hi:14.0f}   ({reps} x {steps} steps)")
    return med


def bench_reorder(context, reps, rows):
    beams = 4
    # index_select copies every row whatever the permutation, so two cases show it: none moved, half moved.
    perms = [[0, 1, 2, 3], [0, 0, 2, 2]]
    cache = make_cache()
    gen = torch.Generator().manual_seed(21)
    k = torch.randn(beams, KV_HEADS, context, HEAD_DIM, generator=gen).to(DTYPE)
    v = torch.randn(beams, KV_HEADS, context, HEAD_DIM, generator=gen).to(DTYPE)
    for layer in range(LAYERS):
        cache.update(k, v, layer)
    del k, v
    idx = [torch.tensor(p, dtype=torch.long) for p in perms]
    samples = [[] for _ in perms]
    for rep in range(-1, reps):
        for p, beam_idx in enumerate(idx):
            t0 = time.perf_counter_ns()
            cache.reorder_cache(beam_idx)
            dt = time.perf_counter_ns() - t0
            if rep >= 0:
                samples[p].append(dt)
    print(f"\n{'beam_idx':<14} {'rows':<6} {'median ns':>14} {'min ns':>14} {'max ns':>14}")
    for p, perm in enumerate(perms):
        moved = sum(1 for b, src in enumerate(perm) if src != b)
        med, lo, hi = stats(samples[p])
        rows += [("beam_reorder", f"reorder_ns_{moved}rows", med, "ns"),
                 ("beam_reorder", f"reorder_min_ns_{moved}rows", lo, "ns"),
                 ("beam_reorder", f"reorder_max_ns_{moved}rows", hi, "ns")]
        print(f"{str(perm):<14} {moved:<6} {med:14.0f} {lo:14.0f} {hi:14.0f}")


def write_json(path, rows):
    """Same file format as the C writer: a JSON array, one object per line, keys in this order."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    old = []
    if os.path.exists(path):
        with open(path) as f:
            text = f.read().strip()
        old = json.loads(text) if text else []
    ours = {(bench, IMPL) for bench, *_ in rows}
    kept = [r for r in old if (r.get("bench"), r.get("impl")) not in ours]
    new = [{"bench": b, "impl": IMPL, "metric": m, "value": float(f"{v:.10g}"), "unit": u} for b, m, v, u in rows]
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(r) for r in kept + new) + "\n]\n")
    print(f"results: {len(new)} rows written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="build/bench/results.json")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--steps", type=int, default=32, help="steps per repetition at 1k; fewer at longer contexts")
    ap.add_argument("--lengths", default="1024,8192,32768")
    ap.add_argument("--context", type=int, default=4096, help="reorder context")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"decode append: {LAYERS} layers x {KV_HEADS} KV heads x head_dim {HEAD_DIM}, bfloat16, batch 1, "
          f"DynamicCache\n")
    print(f"{'context':<8} {'impl':<26} {'median ns/tok':>14} {'min':>14} {'max':>14}")
    rows = []
    lengths = [int(x) for x in args.lengths.split(",") if x]
    med = {}
    for n in lengths:
        # Each step copies the whole history, so scale the steps down with the context.
        steps = max(1, min(args.steps, args.steps * 1024 // n))
        med[n] = bench_append(n, args.reps, steps, rows)
    if len(lengths) > 1:
        first, last = lengths[0], lengths[-1]
        ratio = med[last] / med[first]
        rows.append(("decode_append", f"append_{label(last)}_over_{label(first)}", ratio, "x"))
        print(f"\nappend@{label(last)} / append@{label(first)} = {ratio:.2f}")
    bench_reorder(args.context, args.reps, rows)
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
