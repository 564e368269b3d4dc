#!/usr/bin/env python3
"""Writes the offloading conformance vectors (vectors/v5_offload_*.kvv).

transformers 5.23 offloads with `Cache(offloading=True)` (DynamicCache,
StaticCache, Cache(layers=...)): Cache.update prefetches the next offloaded
layer on a side stream, updates, then offloads the updated layer (docs/semantics.md, 'The cache as a whole').
Its constructor creates a `torch.Stream()` and its update synchronizes with
`torch.cuda.default_stream`, so it cannot run without a GPU: on a CPU-only
machine both raise a CUDA error. This generator therefore builds the same
caches without offloading, then turns on transformers' own offloading code
path (`offloading`, `only_non_sliding`, the prefetch stream) with a stand-in
stream object whose waits do nothing; Cache.update, Cache.prefetch and
Cache.offload are transformers' own. On the CPU a layer's `.to("cpu")` is the
identity, so every returned and stored tensor is exactly what the same cache
without offloading returns, which the replay requires bit for bit from a
kvcache cache with offloading on. Where each layer's K/V would be is tracked
through the calls transformers makes to CacheLayerMixin.offload / prefetch,
and recorded after every update as the `tiers` operation (replay_offload.c).

Recording rules are those of generate.py (imported, not copied), plus:
  * an update of a layer whose K/V is in the host tier (a layer updated out
    of order, not prefetched by the previous update) is not recorded: on a
    GPU transformers fails there (a CPU tensor concatenated with a device
    one), while kvcache brings the layer back first;
  * a layer that holds nothing in transformers (never updated, or a dynamic
    layer emptied by reset, which 5.23 un-initializes) has no tier (`-1`);
  * every cache has at least one offloaded layer: with none, transformers'
    prefetch raises ValueError from list.index (kvcache never moves a layer).

Run with the .venv-torch environment of generate.sh:
  tests/conformance/.venv-torch/bin/python tests/conformance/generate_offload.py --out tests/conformance/vectors
"""
import torch
import transformers
from transformers import cache_utils as cu

from generate import (BASIC, BATCH, Case, Skip, Slot, Walker, custom_layers, derived_types, geometry, make_config,
                      preset_spec, random_types, static_sliding_setup)
from vectorgen import arguments, write_files

if not transformers.__version__.startswith("5."):
    raise SystemExit(f"generate_offload.py needs transformers 5.x, not {transformers.__version__}")


class NullStream:
    """Stands in for the CUDA streams offloading synchronizes on; the CPU has none to wait for."""

    def wait_stream(self, other):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


torch.cuda.default_stream = lambda device=None: NullStream()

_layer_offload, _layer_prefetch = cu.CacheLayerMixin.offload, cu.CacheLayerMixin.prefetch


def _offload(self):
    _layer_offload(self)
    if self.is_initialized:
        self._kvc_host = True


def _prefetch(self):
    _layer_prefetch(self)
    if self.is_initialized:
        self._kvc_host = False


cu.CacheLayerMixin.offload, cu.CacheLayerMixin.prefetch = _offload, _prefetch


def enable_offloading(cache, only_non_sliding):
    """What Cache.__init__(offloading=True, offload_only_non_sliding=...) sets, with a stand-in stream."""
    cache.offloading = True
    cache.only_non_sliding = only_non_sliding
    cache.prefetch_stream = NullStream()
    return cache


def tier_of(layer):
    """1: K/V in the host tier, 0: on the device, -1: the layer holds nothing."""
    if not layer.is_initialized:
        return -1
    return 1 if getattr(layer, "_kvc_host", False) else 0


class OffloadCase(Case):
    """generate.py's Case, with caches created offloading and their tiers recorded after every update."""

    def ocreate(self, obj, only_non_sliding, mode, spec, dt, batch, heads, dk, dv, chunked=(), windows=None):
        """mode: `all` / `nonsliding` (kvc_cache_options.offload), or `preset` (an OFFLOADED_* preset)."""
        enable_offloading(obj, only_non_sliding)
        s = self.new_slot()
        self.slots[s] = Slot(obj, dt, batch, heads, dk, dv, chunked, windows)
        self.out.op(f"ocreate {s} {mode} {spec}")
        self.layout(s)
        return s

    def tiers(self, s):
        cache = self.slots[s].cache()
        if not getattr(cache, "offloading", False):
            return
        marks = [str(tier_of(layer)) for layer in cache.layers]
        self.out.op(f"tiers {s} {len(marks)} " + " ".join(marks))
        self.out.stats["tiers: host-tier layers"] += marks.count("1")
        self.out.stats["tiers: device-tier layers"] += marks.count("0")

    def update(self, s, i, n, positions=None):
        cache = self.slots[s].cache()
        layers = cache.layers
        if getattr(cache, "offloading", False) and i < len(layers):
            if layers[i].is_initialized and getattr(layers[i], "_kvc_host", False):
                raise Skip("an offloaded layer that was not prefetched: transformers fails on a GPU")
            if not layers[i].is_initialized:
                layers[i]._kvc_host = False  # lazy initialization puts it where the new tokens are
        ok = super().update(s, i, n, positions)
        if ok:
            self.tiers(s)
        return ok

    def clone(self, s):
        d = super().clone(s)
        self.tiers(d)
        return d

    def early(self, s, batch, heads, dims):
        super().early(s, batch, heads, dims)
        self.tiers(s)


def offloadable_somewhere(types, only_non_sliding):
    return not only_non_sliding or "f" in types


# ------------------------------------------------------------------ families


def v5_offload_dynamic(case):
    """OffloadedCache: a lazy DynamicCache(offloading=True); sliding layers do not exist, both modes agree."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    only_non_sliding = rng.random() < 0.3
    mode = "preset" if not only_non_sliding and rng.random() < 0.5 else ("nonsliding" if only_non_sliding else "all")
    case.ocreate(cu.DynamicCache(), only_non_sliding, mode, "lazy", dt, b, h, dk, dv)
    Walker(case, BASIC | BATCH | {"crop", "reset", "lazy_skip"}, layers_hint=rng.randint(1, 4)).run(45)


def v5_offload_config(case):
    """DynamicCache(config, offloading=True, offload_only_non_sliding=...) with full, sliding and chunked layers."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(2, 5)
    while True:
        types = random_types(rng, n, "fffsc")
        only_non_sliding = rng.random() < 0.5
        if offloadable_somewhere(types, only_non_sliding):
            break
    sw = rng.randint(2, 8) if "s" in types else 0
    chunk = rng.randint(2, 8) if "c" in types else 0
    chunked = [i for i, t in enumerate(types) if t == "c"]
    mode = "nonsliding" if only_non_sliding else ("preset" if rng.random() < 0.5 else "all")
    case.ocreate(cu.DynamicCache(config=make_config(n, types, sw, chunk)), only_non_sliding, mode,
                 preset_spec("dynamic", 0, n, types, sw, chunk), dt, b, h, dk, dv, chunked)
    if rng.random() < 0.25:
        case.early(0, b, h, dk)
    if rng.random() < 0.3:
        case.record(0)
    Walker(case, BASIC | BATCH | {"crop", "record", "reset"}).run(45)


def v5_offload_static(case):
    """StaticCache(config, max_cache_len, offloading=True, ...) under the static, sliding_window, hybrid and
    hybrid_chunked presets (OffloadedStaticCache and OffloadedHybridCache are the only_non_sliding ones)."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    while True:
        preset = rng.choice(["static", "static", "sliding_window", "hybrid", "hybrid_chunked"])
        n, types, sw, chunk, windows, chunked = static_sliding_setup(rng, preset)
        only_non_sliding = rng.random() < 0.6
        if offloadable_somewhere(derived_types(n, types, sw, chunk, 0), only_non_sliding):
            break
    mode = "nonsliding" if only_non_sliding else "all"
    if only_non_sliding and preset in ("static", "hybrid_chunked") and rng.random() < 0.5:
        mode = "preset"  # KVC_PRESET_OFFLOADED_STATIC / KVC_PRESET_OFFLOADED_HYBRID
    m = rng.randint(1, 12)
    cfg = make_config(n, types, sw, chunk)
    s = case.ocreate(cu.StaticCache(config=cfg, max_cache_len=m), only_non_sliding, mode,
                     preset_spec(preset, m, n, types, sw, chunk), dt, b, h, dk, dv, chunked, windows)
    if rng.random() < 0.35:
        case.early(s, b, h, dk)
    Walker(case, BASIC | BATCH | {"crop", "reset"}).run(45)


def v5_offload_custom(case):
    """Cache(layers=[...], offloading=True, ...): dynamic and static kinds side by side."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(2, 4)
    while True:
        kinds = [rng.choice(["d", "d", "ds", "dc", "s", "s", "ss", "sc"]) for _ in range(n)]
        only_non_sliding = rng.random() < 0.5
        if not only_non_sliding or any(k in ("d", "s") for k in kinds):
            break
    layers, spec, windows, chunked = custom_layers(rng, n, lambda i: kinds[i])
    s = case.ocreate(cu.Cache(layers=layers), only_non_sliding, "nonsliding" if only_non_sliding else "all",
                     spec, dt, b, h, dk, dv, chunked, windows)
    if rng.random() < 0.3:
        case.early(s, b, [rng.randint(1, 3) for _ in range(n)], [rng.randint(1, 4) for _ in range(n)])
    Walker(case, BASIC | BATCH | {"crop", "record", "reset"}).run(40)


def v5_offload_encdec(case):
    """EncoderDecoderCache whose self-attention cache offloads (its cross-attention cache does not)."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 3)
    a = case.ocreate(cu.DynamicCache(), False, "all", "lazy", dt, b, h, dk, dv)
    x = case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dv)
    e = case.ed_create(a, x)
    case.slots[e].enc_len = rng.randint(1, 6)
    Walker(case, BASIC | BATCH | {"crop", "reset", "cross", "isupd", "xview"}, layers_hint=n).run(45)


FAMILIES = [("v5_offload_dynamic", v5_offload_dynamic, 12), ("v5_offload_config", v5_offload_config, 14),
            ("v5_offload_static", v5_offload_static, 16), ("v5_offload_custom", v5_offload_custom, 10),
            ("v5_offload_encdec", v5_offload_encdec, 8)]


def main():
    args = arguments(20264)
    write_files(args.out, args.seed, "v5", FAMILIES,
                lambda family, out, label, rng, c: family(OffloadCase(out, label, rng)))


if __name__ == "__main__":
    main()
