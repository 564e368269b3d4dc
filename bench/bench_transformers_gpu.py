#!/usr/bin/env python3
"""transformers' caches and kvcache's Python binding on the GPU: one decode step for every layer.

Shape: as bench_gpu, Llama-3-8B-like: 32 layers, 8 KV heads, head_dim 128, bfloat16, batch 1, at 1k, 8k and 32k
cached tokens. Each repetition times `steps` decode steps (one token of K/V for every layer) between two
torch.cuda events on the current stream; reported are medians over repetitions, per step:

  transformers-dynamic    transformers.DynamicCache: 32 x update (torch.cat of each layer's whole history)
  transformers-static     transformers.StaticCache: 32 x update (index_copy_ into preallocated buffers)
  transformers-offloaded  transformers.DynamicCache(offloading=True): 32 x update, each layer prefetched on a side
                          stream before its update and offloaded to the CPU after it (transformers 5.x has no
                          OffloadedCache class: the offloading flag of DynamicCache is its offloaded cache)
  kvcache-python-cuda     kvcache.DynamicCache(device="cuda:0") bound to a torch stream (cache.stream = stream):
                          one update_all (views out), and 32 x update + torch.from_dlpack of both views (what an
                          attention layer does), with torch CUDA tensors in
  kvcache-transformers-cuda  the drop-in kvcache.transformers.DynamicCache(config=...), placed on the GPU by its
                          first tensors and following torch's current stream: 32 x update, torch tensors out (what
                          a transformers model calls); the issue's targets: at least 3x faster per step than
                          transformers-dynamic at 1k, 5x at 8k and 32k (printed PASS/FAIL, rows *_over_drop_in_*)

A dynamic cache is cropped back after each repetition (kvcache's reserves context + steps tokens first); a static
cache has room for every repetition. Offloaded caches move the whole cache over PCIe twice per step, so they run
fewer steps and stop at 8k. Before timing, each implementation's newest stored token is checked against its input.
Rows (bench "gpu_decode_step", metric step_ns_<ctx>, or step_ns_update_all_<ctx> / step_ns_32_updates_<ctx> for
kvcache) go into the same results.json as bench_gpu; rows of an earlier run of the same (bench, impl) are replaced.
Without a CUDA device the script prints "SKIPPED: <why>" and exits 0. The kvcache rows need the kvcache package
and its CUDA plugin (KVC_BACKEND_PATH names the plugin's directory); without them only they are skipped.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys

from bench_rows import write_rows

LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128
BENCH = "gpu_decode_step"
OFFLOAD_MAX_CONTEXT = 8192


def label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


class Bench:
    def __init__(self, torch, transformers, args):
        self.torch = torch
        self.transformers = transformers
        self.args = args
        self.device = torch.device("cuda", 0)
        self.dtype = torch.bfloat16
        self.rows: list = []
        self.table: dict = {}  # (impl, metric) -> median ns

    # ----------------------------------------------------- shared parts

    def config(self):
        return self.transformers.LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=32,
                                             num_key_value_heads=KV_HEADS, hidden_size=32 * HEAD_DIM)

    def randn(self, gen, length):
        t = self.torch
        return t.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen, device=self.device).to(self.dtype)

    def tokens(self, steps):
        """tokens[s][layer] = (key, value), each [1, KV_HEADS, 1, HEAD_DIM] on the device."""
        gen = self.torch.Generator(device=self.device).manual_seed(7)
        return [[(self.randn(gen, 1), self.randn(gen, 1)) for _ in range(LAYERS)] for _ in range(steps)]

    def prefill(self, length):
        gen = self.torch.Generator(device=self.device).manual_seed(11)
        return self.randn(gen, length), self.randn(gen, length)

    def time_reps(self, step, steps, reps, after_rep=None):
        """Median GPU ns per step over `reps` repetitions of `steps` calls of step(s), on the current stream."""
        torch = self.torch
        samples = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for s in range(steps):
                step(s)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e6 / steps)
            if after_rep is not None:
                after_rep()
        return statistics.median(samples), min(samples), max(samples)

    def check_newest(self, impl, keys, values, tok):
        """The newest stored token of the last layer must be the last step's input."""
        torch = self.torch
        if not (torch.equal(keys[:, :, -1:], tok[0]) and torch.equal(values[:, :, -1:], tok[1])):
            sys.exit(f"bench_transformers_gpu: {impl}: the newest stored token is not the one appended")

    def add(self, impl, metric, stats, unit="ns"):
        med, lo, hi = stats
        self.rows.append({"bench": BENCH, "impl": impl, "metric": metric, "value": med, "unit": unit})
        self.rows.append({"bench": BENCH, "impl": impl, "metric": metric.replace("step_ns", "step_min_ns"),
                          "value": lo, "unit": unit})
        self.rows.append({"bench": BENCH, "impl": impl, "metric": metric.replace("step_ns", "step_max_ns"),
                          "value": hi, "unit": unit})
        self.table[(impl, metric)] = med

    def release(self):
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def fits(self, nbytes, what):
        free, _ = self.torch.cuda.mem_get_info()
        margin = 1 << 30
        if nbytes + margin <= free:
            return True
        print(f"{what}: SKIPPED: needs {nbytes / 2**30:.2f} GiB of device memory, {free / 2**30:.2f} GiB free "
              f"(1 GiB kept as margin)")
        return False

    def report(self, ctx, impl, stats, note=""):
        med, lo, hi = stats
        print(f"{label(ctx):<8} {impl:<40} {med:14.0f} {lo:14.0f} {hi:14.0f}{note}")

    # ------------------------------------------------------ transformers

    def transformers_dynamic(self, ctx, toks, reps, steps, offloading=False, drop_in=None):
        """transformers' DynamicCache, or with drop_in (kvcache.transformers) the drop-in through the same calls."""
        impl = "transformers-offloaded" if offloading else "transformers-dynamic"
        kp, vp = self.prefill(ctx)
        if drop_in is not None:
            impl = "kvcache-transformers-cuda"
            cache = drop_in.DynamicCache(config=self.config())
        else:
            cache = self.transformers.DynamicCache(config=self.config(), offloading=offloading)
        for layer in range(LAYERS):
            cache.update(kp, vp, layer)
        if drop_in is not None:
            cache.kvcache.reserve(ctx + steps)  # as the kvcache rows: no growth inside the timed steps
        del kp, vp

        def step(s):
            for layer in range(LAYERS):
                cache.update(toks[s][layer][0], toks[s][layer][1], layer)

        def crop():
            cache.crop(-steps)

        for s in range(steps):  # warm-up, checked
            step(s)
        last = cache.layers[LAYERS - 1]
        self.check_newest(impl, last.keys.to(self.device), last.values.to(self.device), toks[steps - 1][LAYERS - 1])
        crop()
        if cache.get_seq_length() != ctx:
            sys.exit(f"bench_transformers_gpu: {impl}: crop left {cache.get_seq_length()} tokens, expected {ctx}")
        stats = self.time_reps(step, steps, reps, crop)
        self.add(impl, f"step_ns_{label(ctx)}", stats)
        self.report(ctx, f"{impl}: 32 x update", stats, f"   ({reps} x {steps} steps)")
        del cache, last
        self.release()

    def transformers_static(self, ctx, toks, reps, steps):
        impl = "transformers-static"
        kp, vp = self.prefill(ctx)
        cache = self.transformers.StaticCache(config=self.config(), max_cache_len=ctx + steps * (reps + 1) + 1)
        for layer in range(LAYERS):
            cache.update(kp, vp, layer)
        del kp, vp
        written = [ctx]

        def step(s):
            for layer in range(LAYERS):
                cache.update(toks[s][layer][0], toks[s][layer][1], layer)
            written[0] += 1

        for s in range(steps):
            step(s)
        last = cache.layers[LAYERS - 1]
        n = written[0]
        self.check_newest(impl, last.keys[:, :, :n], last.values[:, :, :n], toks[steps - 1][LAYERS - 1])
        stats = self.time_reps(step, steps, reps)
        self.add(impl, f"step_ns_{label(ctx)}", stats)
        self.report(ctx, f"{impl}: 32 x update", stats)
        del cache, last
        self.release()

    # ----------------------------------------------------------- kvcache

    def kvcache_python(self, kvcache, ctx, toks, reps, steps):
        torch = self.torch
        impl = "kvcache-python-cuda"
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the current stream
        keys = [[toks[s][layer][0] for layer in range(LAYERS)] for s in range(steps)]
        values = [[toks[s][layer][1] for layer in range(LAYERS)] for s in range(steps)]
        with torch.cuda.stream(stream):
            kp, vp = self.prefill(ctx)
            cache = kvcache.DynamicCache(num_hidden_layers=LAYERS, device="cuda:0")
            cache.stream = stream
            cache.reserve(ctx + steps)
            cache.update_all([kp] * LAYERS, [vp] * LAYERS)
            del kp, vp

            def update_all(s):
                cache.update_all(keys[s], values[s])

            def per_layer(s):
                for layer in range(LAYERS):
                    kv = cache.update(keys[s][layer], values[s][layer], layer)
                    torch.from_dlpack(kv.keys)
                    torch.from_dlpack(kv.values)

            def crop():
                cache.crop(-steps)

            for fn, metric, what in ((update_all, "step_ns_update_all", "1 x update_all (views)"),
                                     (per_layer, "step_ns_32_updates", "32 x update + from_dlpack")):
                for s in range(steps):  # warm-up, checked
                    fn(s)
                kv = cache.layer_view(LAYERS - 1)
                self.check_newest(impl, torch.from_dlpack(kv.keys), torch.from_dlpack(kv.values),
                                  toks[steps - 1][LAYERS - 1])
                del kv
                crop()
                if cache.get_seq_length() != ctx:
                    sys.exit(f"bench_transformers_gpu: {impl}: crop left {cache.get_seq_length()} tokens")
                stats = self.time_reps(fn, steps, reps, crop)
                self.add(impl, f"{metric}_{label(ctx)}", stats)
                self.report(ctx, f"{impl}: {what}", stats)
            cache.close()
        del cache
        self.release()

    def kvcache_usable(self):
        """The kvcache module when it can make CUDA caches, else None (and says why)."""
        try:
            import kvcache
        except ImportError as e:
            print(f"kvcache-python-cuda: SKIPPED: the kvcache package is not installed ({e})")
            return None
        try:
            kvcache.DynamicCache(device="cuda:0").close()
        except kvcache.KvcacheError as e:
            print(f"kvcache-python-cuda: SKIPPED: kvcache cannot make CUDA caches: {e} "
                  f"(KVC_BACKEND_PATH={os.environ.get('KVC_BACKEND_PATH', '<unset>')})")
            return None
        if not hasattr(kvcache.Cache, "stream"):
            print("kvcache-python-cuda: SKIPPED: this kvcache package has no Cache.stream")
            return None
        return kvcache

    # --------------------------------------------------------------- run

    def run(self):
        a = self.args
        contexts = [int(x) for x in a.contexts.split(",") if x]
        toks = self.tokens(a.steps)
        kvcache = self.kvcache_usable()
        step_bytes = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2
        print(f"{'context':<8} {'one step (all layers), GPU time':<40} {'median ns':>14} {'min':>14} {'max':>14}")
        for ctx in contexts:
            need = 3 * ctx * step_bytes  # the cache, a concatenation's new copy, the prefill
            if not self.fits(need, f"context {label(ctx)}"):
                continue
            self.transformers_dynamic(ctx, toks, a.reps, a.steps)
            self.transformers_static(ctx, toks, a.reps, a.steps)
            if ctx <= OFFLOAD_MAX_CONTEXT:
                slow = max(1, min(a.steps, a.steps * 1024 // ctx))
                self.transformers_dynamic(ctx, toks, min(a.reps, a.offload_reps), slow, offloading=True)
            else:
                print(f"{label(ctx):<8} {'transformers-offloaded':<40} SKIPPED: moves "
                      f"{2 * ctx * step_bytes / 2**30:.1f} GiB per step; measured up to {label(OFFLOAD_MAX_CONTEXT)}")
            if kvcache is not None:
                self.kvcache_python(kvcache, ctx, toks, a.reps, a.steps)
                import kvcache.transformers as drop_in
                self.transformers_dynamic(ctx, toks, a.reps, a.steps, drop_in=drop_in)
        ctx8 = label(8192)
        dyn = self.table.get(("transformers-dynamic", f"step_ns_{ctx8}"))
        ours = self.table.get(("kvcache-python-cuda", f"step_ns_update_all_{ctx8}"))
        if dyn and ours:
            ratio = dyn / ours
            self.rows.append({"bench": BENCH, "impl": "kvcache-python-cuda",
                              "metric": f"dynamic_over_update_all_{ctx8}", "value": ratio, "unit": "x"})
            print(f"transformers DynamicCache step / kvcache Python update_all step at {ctx8}: {ratio:.1f}x")
        self.drop_in_targets(contexts)
        write_rows(a.json, self.rows)

    def drop_in_targets(self, contexts):
        """The issue's targets for the drop-in: 3x transformers' DynamicCache per step at 1k, 5x at 8k and 32k."""
        for ctx in contexts:
            dyn = self.table.get(("transformers-dynamic", f"step_ns_{label(ctx)}"))
            ours = self.table.get(("kvcache-transformers-cuda", f"step_ns_{label(ctx)}"))
            if not (dyn and ours):
                continue
            ratio, target = dyn / ours, 3.0 if ctx <= 1024 else 5.0
            self.rows.append({"bench": BENCH, "impl": "kvcache-transformers-cuda",
                              "metric": f"dynamic_over_drop_in_{label(ctx)}", "value": ratio, "unit": "x"})
            print(f"{'PASS' if ratio >= target else 'FAIL'}  drop-in step at {label(ctx)}: {ours / 1e3:.0f} us, "
                  f"transformers DynamicCache {dyn / 1e3:.0f} us: {ratio:.1f}x (target {target:.0f}x)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="build/bench/results.json")
    p.add_argument("--contexts", default="1024,8192,32768")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--offload-reps", type=int, default=5, help="repetitions for the offloaded cache")
    a = p.parse_args()
    if a.reps < 1 or a.steps < 1 or a.offload_reps < 1:
        p.error("--reps, --steps and --offload-reps must be >= 1")
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"bench_transformers_gpu: SKIPPED: needs torch and transformers ({e})")
        return 0
    if not torch.cuda.is_available():
        print("bench_transformers_gpu: SKIPPED: torch sees no CUDA device (torch.cuda.is_available() is False)")
        return 0
    torch.cuda.set_device(0)
    print(f"bench_transformers_gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), transformers {transformers.__version__}")
    print(f"shape: {LAYERS} layers x {KV_HEADS} KV heads x head_dim {HEAD_DIM}, bfloat16, batch 1; "
          f"{a.reps} repetitions of {a.steps} steps\n")
    Bench(torch, transformers, a).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
