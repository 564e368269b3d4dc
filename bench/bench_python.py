#!/usr/bin/env python3
"""Python-level cost of one decode-step update: kvcache's Python bindings vs transformers' caches.

Shape: Llama-3-8B-like, 8 KV heads, head_dim 128, bfloat16, batch 1. For each context (1k, 8k, 32k cached
tokens) one layer is prefilled, then single-token updates are timed one by one (time.perf_counter_ns around
each call), on the same torch CPU tensors, in the same run, for:

  kvcache-python        kvcache.transformers.DynamicCache.update  (torch in, zero-copy torch views out)
  kvcache-python-view   kvcache.DynamicCache.update               (torch in, kvcache.View out)
  transformers-dynamic  transformers.DynamicCache.update          (torch.cat of the whole history)
  transformers-static   transformers.StaticCache.update           (index_copy_ into a preallocated buffer)

Rows (median ns per update call, bench "python_update", metrics update_ns_1k/8k/32k, plus
dynamic_over_kvcache_8k) go into the same results.json as the C benchmarks (rows of an earlier run of the same
bench/impl are replaced, every other row is kept). Exit status 1 when kvcache's update at 8k is not at least
10x faster than transformers' DynamicCache.update.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import transformers

import kvcache
import kvcache.transformers as kvt
from bench_rows import write_rows

KV_HEADS, HEAD_DIM, DTYPE = 8, 128, torch.bfloat16
BENCH = "python_update"


def label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def llama_config(layers: int = 1):
    return transformers.LlamaConfig(num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=KV_HEADS,
                                    hidden_size=32 * HEAD_DIM)


def time_updates(update, tokens, reps, steps, after_rep=None):
    samples = []
    for _ in range(reps):
        for k, v in tokens[:steps]:
            t0 = time.perf_counter_ns()
            update(k, v)
            samples.append(time.perf_counter_ns() - t0)
        if after_rep is not None:
            after_rep()
    return statistics.median(samples)


def bench_context(length: int, reps: int, steps: int, slow_steps: int):
    gen = torch.Generator().manual_seed(7)
    prefill_k = torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).to(DTYPE)
    prefill_v = torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).to(DTYPE)
    tokens = [(torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE),
               torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE)) for _ in range(steps)]
    out = {}
    n_slow = max(1, min(steps, slow_steps))

    def drop_in():  # kvcache through the transformers drop-in (what model.generate calls)
        cache = kvt.DynamicCache(config=llama_config())
        cache.kvcache.reserve(length + steps)
        cache.update(prefill_k, prefill_v, 0)
        return time_updates(lambda k, v: cache.update(k, v, 0), tokens, reps, steps, lambda: cache.crop(-steps))

    def views():  # kvcache's own API (views out)
        plain = kvcache.DynamicCache(num_hidden_layers=1)
        plain.reserve(length + steps)
        plain.update(prefill_k, prefill_v, 0)
        return time_updates(lambda k, v: plain.update(k, v, 0), tokens, reps, steps, lambda: plain.crop(-steps))

    def dynamic():  # transformers' DynamicCache: every update concatenates the whole history
        dyn = transformers.DynamicCache(config=llama_config())
        dyn.update(prefill_k, prefill_v, 0)
        return time_updates(lambda k, v: dyn.update(k, v, 0), tokens, reps, n_slow, lambda: dyn.crop(-n_slow))

    def static():  # transformers' StaticCache: room for every step of every repetition
        st = transformers.StaticCache(config=llama_config(), max_cache_len=length + reps * steps + 1)
        st.update(prefill_k, prefill_v, 0)
        return time_updates(lambda k, v: st.update(k, v, 0), tokens, reps, steps)

    for impl, fn in (("kvcache-python", drop_in), ("kvcache-python-view", views),
                     ("transformers-dynamic", dynamic), ("transformers-static", static)):
        out[impl] = fn()
        gc.collect()
    return out


def bench_step(length: int, layers: int, reps: int, steps: int):
    """One decode step of a 32-layer model through the Python binding: 32 update calls, or one update_all."""
    gen = torch.Generator().manual_seed(11)
    k = torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).to(DTYPE)
    toks = [[(torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE),
              torch.randn(1, KV_HEADS, 1, HEAD_DIM, generator=gen).to(DTYPE)) for _ in range(layers)]
            for _ in range(steps)]
    out = {}
    for impl in ("update", "update_all"):
        cache = kvcache.DynamicCache(num_hidden_layers=layers)
        cache.reserve(length + steps)
        cache.update_all([k] * layers, [k] * layers)
        samples = []
        for _ in range(reps):
            for step in toks:
                t0 = time.perf_counter_ns()
                if impl == "update":
                    for i, (kk, vv) in enumerate(step):
                        cache.update(kk, vv, i)
                else:
                    cache.update_all([kv[0] for kv in step], [kv[1] for kv in step])
                samples.append(time.perf_counter_ns() - t0)
            cache.crop(-steps)
        out[impl] = statistics.median(samples)
        del cache
        gc.collect()
    return out


def c_row(path: str, bench: str, impl: str, metric: str):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    for row in json.loads(text) if text else []:
        if (row.get("bench"), row.get("impl"), row.get("metric")) == (bench, impl, metric):
            return row.get("value")
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="build/bench/results.json")
    p.add_argument("--contexts", default="1024,8192,32768")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--slow-steps", type=int, default=8, help="steps per repetition for transformers-dynamic")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"kvcache {kvcache.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{a.threads} thread(s); shape [1, {KV_HEADS}, ctx, {HEAD_DIM}] bfloat16, one layer, median ns per update")
    rows = []
    table = {}
    for length in (int(x) for x in a.contexts.split(",")):
        res = bench_context(length, a.reps, a.steps, a.slow_steps)
        table[length] = res
        for impl, ns in res.items():
            rows.append({"bench": BENCH, "impl": impl, "metric": f"update_ns_{label(length)}", "value": ns,
                         "unit": "ns"})
    impls = ["kvcache-python", "kvcache-python-view", "transformers-dynamic", "transformers-static"]
    print(f"{'context':>8} " + " ".join(f"{i:>21}" for i in impls) + "   dynamic/kvcache")
    for length, res in table.items():
        ratio = res["transformers-dynamic"] / res["kvcache-python"]
        print(f"{label(length):>8} " + " ".join(f"{res[i]:>21.0f}" for i in impls) + f"   {ratio:>10.1f}x")
    step = bench_step(1024, 32, a.reps, min(a.steps, 32))
    rows.append({"bench": BENCH, "impl": "kvcache-python-view", "metric": "step_32_updates_ns_1k",
                 "value": step["update"], "unit": "ns"})
    rows.append({"bench": BENCH, "impl": "kvcache-python-view", "metric": "step_update_all_ns_1k",
                 "value": step["update_all"], "unit": "ns"})
    c = c_row(a.json, "decode_append", "kvcache-c", "append_ns_per_token_1k")
    print(f"one decode step, 32 layers at 1k: 32 x update {step['update']:.0f} ns, update_all {step['update_all']:.0f} ns"
          + (f"; the C bench's step (update_all) {c:.0f} ns: Python overhead {step['update_all'] - c:.0f} ns per step"
             if c else ""))
    if c:
        rows.append({"bench": BENCH, "impl": "kvcache-python-view", "metric": "step_update_all_over_c_1k",
                     "value": step["update_all"] / c, "unit": "x"})
    ok = True
    if 8192 in table:
        ratio = table[8192]["transformers-dynamic"] / table[8192]["kvcache-python"]
        rows.append({"bench": BENCH, "impl": "kvcache-python", "metric": "dynamic_over_kvcache_8k", "value": ratio,
                     "unit": "x"})
        ok = ratio >= 10
        print(f"{'PASS' if ok else 'FAIL'}  kvcache Python update at 8k >= 10x faster than transformers' "
              f"DynamicCache.update: {ratio:.1f}x")
    write_rows(a.json, rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
