#!/usr/bin/env python3
"""Host cost of one per-layer call of the transformers drop-in, split into its parts (CPU, no GPU needed).

A decode step of a transformers model calls ``cache.update(k, v, layer_idx)`` once per layer; on a GPU the copy
itself is issued asynchronously, so the step's time is the host's: this bench measures that host time with tiny
tensors ([1, heads, 1, head_dim], default 1 x 8 bfloat16) so that the copy is negligible. Each sample times a whole
step (one call per layer of a 32-layer cache that holds ``--context`` tokens per layer) and divides by the layers;
the parts take turns (round robin, the order rotating every repetition) and their medians are reported:

  drop-in update        kvcache.transformers.DynamicCache.update(k, v, i): what a model's attention calls
  drop-in static        the same through kvcache.transformers.StaticCache (returns the same tensors every step)
  binding call          the extension call the drop-in makes for it (_update_torch, or _update_fast before it)
                        -> Python overhead of the drop-in = drop-in update - binding call
  update + Views        _lib.kvc_cache_update: reads both inputs, runs the C update, makes two View objects
  Views alone           _lib.kvc_cache_layer_view: the two View objects (and the call) without an update
  inputs (to_dlpack)    torch.utils.dlpack.to_dlpack of both inputs (how the generic path reads torch tensors)
                        -> C update ~= update + Views - Views alone - inputs
  DLPack out            torch.utils.dlpack.from_dlpack of both views' capsules (what made torch tensors before)
  torch narrow (ref)    two base.narrow(2, 0, n): what re-slicing a remembered full-capacity tensor would cost
                        instead of a DLPack import when a dynamic layer's length changes (more, on this CPU)

Numbers are noisy on a shared machine: run it a few times (or --rounds) and compare medians. Rows (bench
"python_call", metric ns_per_layer_<part>) go into results.json like the other benches.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import torch
import torch.utils.dlpack
import transformers

import kvcache
import kvcache.transformers as kvt
from kvcache import _lib
from bench_rows import write_rows

LAYERS = 32
BENCH = "python_call"


def make_inputs(heads, head_dim, dtype, steps):
    gen = torch.Generator().manual_seed(3)
    return [[(torch.randn(1, heads, 1, head_dim, generator=gen).to(dtype),
              torch.randn(1, heads, 1, head_dim, generator=gen).to(dtype)) for _ in range(LAYERS)]
            for _ in range(steps)]


def prefilled_drop_in(heads, head_dim, dtype, context, steps, static_len=0):
    config = transformers.LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=heads,
                                      num_key_value_heads=heads, hidden_size=heads * head_dim)
    cache = kvt.StaticCache(config, static_len) if static_len else kvt.DynamicCache(config=config)
    x = torch.zeros(1, heads, context, head_dim, dtype=dtype)
    for i in range(LAYERS):
        cache.update(x, x, i)
    if not static_len:
        cache.kvcache.reserve(context + steps + 1)
    return cache


def parts(cache, static, toks):
    """name -> (fn(step_inputs) running one call per layer, fn after a repetition or None)."""
    kv = cache.kvcache
    handle = kv._handle
    from_dlpack = torch.utils.dlpack.from_dlpack
    to_dlpack = torch.utils.dlpack.to_dlpack
    n = len(toks)
    crop = lambda: cache.crop(-n)  # noqa: E731

    def drop_in(step):
        for i, (k, v) in enumerate(step):
            cache.update(k, v, i)

    torch_views = getattr(cache, "_views", None)
    if torch_views is not None:  # the torch-view cache of the drop-in (this change)
        update_torch = _lib._update_torch

        def binding(step):
            for i, (k, v) in enumerate(step):
                update_torch(torch_views, i, k, v)
    else:  # before it: DLPack capsules made into tensors by the converter
        update_fast = _lib._update_fast

        def binding(step):
            for i, (k, v) in enumerate(step):
                update_fast(handle, i, k, v, from_dlpack)

    update = _lib.kvc_cache_update

    def update_views(step):
        for i, (k, v) in enumerate(step):
            update(handle, i, k, v, None, None, None, 0)

    layer_view = _lib.kvc_cache_layer_view

    def views_alone(step):
        for i in range(len(step)):
            layer_view(handle, i)

    def inputs(step):
        for k, v in step:
            to_dlpack(k)
            to_dlpack(v)

    def dlpack_out(step):
        for i in range(len(step)):
            kk, vv = layer_view(handle, i)
            from_dlpack(kk._capsule())
            from_dlpack(vv._capsule())

    base = torch.zeros(1, toks[0][0][0].shape[1], 2048, toks[0][0][0].shape[3], dtype=toks[0][0][0].dtype)

    def narrow(step):
        for i in range(len(step)):
            base.narrow(2, 0, 1025)
            base.narrow(2, 0, 1025)

    def drop_in_static(step):
        for i, (k, v) in enumerate(step):
            static.update(k, v, i)

    return {"drop-in update": (drop_in, crop), "drop-in static": (drop_in_static, None),
            "binding call": (binding, crop),
            "update + Views": (update_views, crop), "Views alone": (views_alone, None),
            "inputs (to_dlpack)": (inputs, None), "DLPack out": (dlpack_out, None),
            "torch narrow (ref)": (narrow, None)}


def run(heads, head_dim, dtype, context, steps, reps):
    toks = make_inputs(heads, head_dim, dtype, steps)
    cache = prefilled_drop_in(heads, head_dim, dtype, context, steps)
    static = prefilled_drop_in(heads, head_dim, dtype, context, steps, static_len=context + (reps + 2) * steps)
    table = parts(cache, static, toks)
    names = list(table)
    samples = {name: [] for name in names}
    with torch.inference_mode():  # as generate runs the model
        for rep in range(reps + 1):  # the first repetition warms up and is dropped
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                fn, after = table[name]
                for step in toks:
                    t0 = time.perf_counter_ns()
                    fn(step)
                    t1 = time.perf_counter_ns()
                    if rep:
                        samples[name].append((t1 - t0) / LAYERS)
                if after is not None:
                    after()
                if cache.get_seq_length() != context:
                    sys.exit(f"bench_python_call: {name} left {cache.get_seq_length()} tokens, expected {context}")
    del cache, static
    gc.collect()
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="build/bench/results.json")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--head-dim", type=int, default=8)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=16, help="steps per repetition (the cache is cropped back after)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1, help="independent runs; the table shows each and their median")
    a = p.parse_args()
    torch.set_num_threads(1)
    dtype = torch.bfloat16
    print(f"kvcache {kvcache.__version__} ({kvcache.__file__}), torch {torch.__version__}, transformers "
          f"{transformers.__version__}\none call per layer of {LAYERS}, inputs [1, {a.heads}, 1, {a.head_dim}] "
          f"bfloat16, {a.context} cached tokens; median ns per layer call over {a.reps} x {a.steps} steps")
    rounds = [run(a.heads, a.head_dim, dtype, a.context, a.steps, a.reps) for _ in range(a.rounds)]
    names = list(rounds[0])
    med = {name: statistics.median(r[name] for r in rounds) for name in names}
    print(f"{'part':<22}" + "".join(f"{'run ' + str(i + 1):>10}" for i in range(len(rounds))) + f"{'median':>10}")
    for name in names:
        print(f"{name:<22}" + "".join(f"{r[name]:>10.0f}" for r in rounds) + f"{med[name]:>10.0f}")
    python = med["drop-in update"] - med["binding call"]
    c_update = med["update + Views"] - med["Views alone"] - med["inputs (to_dlpack)"]
    print(f"derived: Python overhead of the drop-in {python:.0f} ns; C update (kvc_cache_update minus Views and "
          f"inputs) ~{c_update:.0f} ns")
    rows = [{"bench": BENCH, "impl": "kvcache-python", "metric": "ns_per_layer_" + name.split(" (")[0]
             .replace(" + ", "_and_").replace(" ", "_").replace("-", "_").lower(), "value": v, "unit": "ns"}
            for name, v in med.items()]
    write_rows(a.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
