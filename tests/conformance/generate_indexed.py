#!/usr/bin/env python3
"""Writes the conformance vectors of indexed and dummy layers (transformers 5.23 and 5.24):

  * v5_indexed: DynamicIndexedLayer (5.11) and StaticIndexedLayer with Cache.update_indexer (layer type
    "indexed_attention": DeepSeek V3.2, GLM-MoE-DSA), in DynamicCache(config), StaticCache(config) and custom
    caches next to full and sliding attention layers, driven as a sparse-attention model drives them (per
    layer: mask sizes, the K/V update and the indexer update of the same tokens, in either order), with
    crops, reorders, batch select / repeat, resets, clones, early initialization, views of both stores and
    the errors transformers raises: update_indexer on another kind of layer (ValueError) or beyond the
    layers (IndexError), a static indexer written past max_cache_len (IndexError), an indexer of another
    width or batch, or a static one of another dtype (RuntimeError).
  * v5_dummy: DummyLayer (5.23) in caches mixed with attention layers, from configs (layer type "moe",
    kv_sharing_modes "reuse") and from layer lists: what get_seq_length, get_mask_sizes and
    get_query_offset report through layer 0 and refuse for another dummy layer (ValueError), a cache of
    dummy layers only, get_max_length, updates of a dummy layer (NotImplementedError), is_croppable,
    batch_size, and crop, reorder, batch select / repeat, reset, clone and early initialization passing
    over them.

Both families run under TF_NEW and TF_PREV (generate.sh) and are merged by merge_releases.py: 5.23 has no
crop of static layers, so the two releases write different v5_indexed files. The format and the recording
rules are generate.py's; `iupdate` and `iview` are replay_indexed.c's operations, `lseqlen` and `lmask`
(queries with an outcome) replay_linear.c's.

Deliberately not generated (docs/differences-from-transformers.md): positive crops (65: 5.x raises for
the K/V), crops taking a static counter, K/V's or indexer's, below 0 (62, 66), an indexer of another batch
than the layer's K/V (67: transformers checks nothing), a dynamic indexer update of another dtype (torch
promotes it), offloading (68), indexer_position_ids (69), views of dummy layers and update(None, None)
(46: C tensors cannot be None).

Run: python generate_indexed.py --out DIR (under each transformers release; generate.sh does it).
"""
from transformers import cache_utils as cu

from generate import (BASIC, BATCH, DTYPES, STATIC_CROP, Config, Skip, Walker, gen_spec, geometry, is_static,
                      is_static_full, make_tensor, preset_spec, static_crop_difference, tokens)
from generate_linear import LinearCase, LinearSlot, has_kv, nd_expect, nd_input
from vectorgen import arguments, write_files

# Layer-type letters of the vectors (replay_engine.c's TYPES) and the transformers type each builds; `u` is a
# DummyLayer, written in the config as the "moe" type or as a "reuse" entry of kv_sharing_modes.
TYPE_OF = {"f": "full_attention", "s": "sliding_attention", "c": "chunked_attention", "i": "indexed_attention"}


def is_indexed(layer):
    return isinstance(layer, (cu.DynamicIndexedLayer, cu.StaticIndexedLayer))


def is_dummy(layer):
    return isinstance(layer, cu.DummyLayer)


def indexer_counter(layer):
    """Where the next indexer key goes: the stored length (dynamic) or the indexer's own counter (static)."""
    if not layer.is_indexer_initialized:
        return 0
    if isinstance(layer, cu.StaticIndexedLayer):
        return int(layer.indexer_cumulative_length)
    return int(layer.indexer_keys.shape[1])


def kv_geometry(rng):
    """generate.py's geometry at most 8 elements a token: the returned K/V are most of the bytes."""
    while True:
        dt, b, h, dk, dv = geometry(rng)
        if b * h * max(dk, dv) <= 8:
            return dt, b, h, dk, dv


def indexer_geometry(rng, batch):
    """The indexer's dtype (its own, independent of the K/V's) and index_head_dim, at most 12 elements a token."""
    dt = rng.choice(sorted(DTYPES))
    width = rng.choice([d for d in (1, 2, 3, 4, 6) if batch * d <= 12])
    return dt, width


class IndexedSlot(LinearSlot):
    """A cache with indexed or dummy layers: the K/V geometry, and per indexed layer the indexer's dtype and
    width once its first update_indexer succeeded (the batch is the slot's: one batch per layer)."""

    def __init__(self, obj, dt, batch, heads, dk, dv, chunked=(), windows=None):
        super().__init__(obj, dt, batch, heads, dk, dv, windows)
        self.chunked = set(chunked)
        self.ix = {}  # layer -> (dtype, width)
        self.was_reset = set()  # dynamic indexed layers whose indexer a reset dropped (for the coverage counts)

    def has_dummy(self):
        return any(is_dummy(layer) for layer in self.layers())


class IndexedCase(LinearCase):
    """Case with update_indexer, indexer views, and the queries and mutations of caches holding dummy layers."""

    slot_type = IndexedSlot

    # ----------------------------------------------------------- the indexer

    def iupdate(self, s, i, n, fault=None):
        """Cache.update_indexer of n keys on layer i; `fault` (width, batch, dtype) makes it one transformers
        refuses for the stored indexer."""
        slot = self.slots[s]
        ls = slot.layers()
        layer = ls[i] if i < len(ls) else None
        dt, width = slot.ix.get(i) or indexer_geometry(self.rng, slot.batch)
        batch = slot.batch
        predicted, errors = None, {IndexError: "OUT_OF_RANGE", ValueError: "INVALID_ARGUMENT"}
        if layer is None:
            predicted = "OUT_OF_RANGE"
        elif not is_indexed(layer):
            predicted = "INVALID_ARGUMENT"
        elif fault is not None:
            static = isinstance(layer, cu.StaticIndexedLayer)
            if i not in slot.ix or (static and indexer_counter(layer) + n > layer.max_cache_len):
                raise Skip("a fault needs a stored indexer and room for the keys")
            if fault == "dtype" and not static:
                fault = "width"  # torch.cat promotes another dtype
            if fault == "dtype":
                dt = self.rng.choice([d for d in sorted(DTYPES) if d != dt])
                predicted = "DTYPE_MISMATCH"
            else:
                if fault == "width":
                    width = width + 1 if width < 4 else width - 1
                else:
                    batch = batch + 1 if batch < 4 else batch - 1
                predicted = "SHAPE_MISMATCH"
            errors[RuntimeError] = predicted
        elif isinstance(layer, cu.StaticIndexedLayer) and indexer_counter(layer) + n > layer.max_cache_len:
            predicted = "OUT_OF_RANGE"
        seed = self.seed()
        x = make_tensor(dt, (batch, n, width), seed)

        def run():
            return self.slots[s].obj.update_indexer(x, i)

        ok, _ = self.call(f"iupdate {s} {i} {nd_input(dt, (batch, n, width), seed)}", run, errors, predicted,
                          nd_expect)
        if ok:
            stats = self.out.stats
            stats[f"iupdate of {type(layer).__name__}"] += 1
            if i not in slot.ix:
                stats["iupdate: first of the layer" + (" after a reset" if i in slot.was_reset else "")] += 1
            if not layer.is_initialized:
                stats["iupdate: K/V not initialized"] += 1
            self.slots[s].ix[i] = (dt, width)
        return ok

    def iview(self, s, i):
        layer = self.slots[s].layers()[i]
        self.out.op(f"iview {s} {i} {nd_expect(layer.indexer_keys)}")

    # ----------------------------------------------------------- K/V and queries with dummy layers

    def update(self, s, i, n, positions=None):
        ls = self.slots[s].layers()
        if i < len(ls) and is_dummy(ls[i]):
            slot = self.slots[s]
            ks, vs = self.seed(), self.seed()
            k = make_tensor(slot.dt, (slot.batch, 1, n, 2), ks)
            head = f"update {s} {i} {gen_spec(slot.dt, k.shape, ks)} {gen_spec(slot.dt, k.shape, vs)} -"
            self.call(head, lambda: self.slots[s].obj.update(k, k, i), {NotImplementedError: "UNSUPPORTED"},
                      "UNSUPPORTED")
            return False
        return super().update(s, i, n, positions)

    def count_dummy_query(self, s, i, what):
        ls = self.slots[s].layers()
        if i < len(ls) and is_dummy(ls[i]):
            self.out.stats[f"{what} of a dummy layer " + ("0" if i == 0 else "other than 0")] += 1

    def seqlen(self, s, i):
        if self.slots[s].has_dummy():
            self.count_dummy_query(s, i, "lseqlen")
            return self.lseqlen(s, i)  # with an outcome: a dummy layer other than 0 has no sequence
        return super().seqlen(s, i)

    def mask(self, s, q, i):
        if self.slots[s].has_dummy():
            self.count_dummy_query(s, i, "lmask")
            return self.lmask(s, q, i)
        return super().mask(s, q, i)

    def view(self, s, i, cross=False):
        if not is_dummy(self.slots[s].layers()[i]):
            super().view(s, i, cross)

    def queries(self, s):
        """What generate asks between forwards: is_croppable of the cache and of a layer, batch_size, the
        query offset of layer 0 (redirected past a dummy layer 0), get_max_length of the cache and a layer."""
        ls = self.slots[s].layers()
        self.croppable(s, -1)
        self.croppable(s, self.rng.randrange(len(ls)))
        self.bsize(s)
        if any(has_kv(layer) for layer in ls):
            self.qoffset(s, 0)
        self.maxlen(s, self.rng.randrange(-1, len(ls) + 1))

    # ----------------------------------------------------------- mutations

    def crop(self, s, x):
        ls = self.slots[s].layers()
        if x > 0:
            raise Skip("positive crop: 5.x raises for the K/V, kvcache keeps the legacy length (difference 65)")
        if STATIC_CROP and any(is_static(layer) for layer in ls):
            if static_crop_difference(ls, x) is not None:
                raise Skip("a static crop kvcache answers differently (differences 61, 62)")
            if any(isinstance(layer, cu.StaticIndexedLayer) and layer.is_indexer_initialized and
                   indexer_counter(layer) + x < 0 for layer in ls):
                raise Skip("the static indexer counter would go negative (difference 66)")
        stored = [type(layer).__name__ for layer in ls if is_indexed(layer) and indexer_counter(layer) > 0]
        ok = super().crop(s, x)
        for name in stored if ok and x < 0 else ():
            self.out.stats[f"crop of a stored {name} indexer"] += 1
        return ok

    def batch_op_ready(self, s):
        """As generate.py's, past dummy layers, and not while an indexer is stored but empty: transformers moves
        the rows of a store that holds tokens only, kvcache the rows of the whole layer."""
        slot = self.slots[s]
        ls = slot.layers()
        if any(not is_dummy(ls[i]) for i in slot.reset_layers):
            return False
        for layer in ls:
            if is_dummy(layer):
                continue
            if layer.is_initialized and not is_static(layer) and int(layer.get_seq_length()) == 0:
                return False
            if is_indexed(layer) and layer.is_indexer_initialized and layer.indexer_keys.numel() == 0:
                return False
        return True

    def reset(self, s):
        super().reset(s)
        slot = self.slots[s]
        ls = slot.layers()
        slot.reset_layers -= {i for i, layer in enumerate(ls) if is_dummy(layer)}
        for i, layer in enumerate(ls):
            if isinstance(layer, cu.DynamicIndexedLayer):
                slot.ix.pop(i, None)  # dropped: a new dtype and width may come
                slot.was_reset.add(i)


# ------------------------------------------------------------------ walks


class Walk(Walker):
    """generate.py's random walk over the slots of a case (forward passes, updates, queries, crops, batch
    operations, resets, clones), whose forward pass also writes the indexer keys of indexed layers, plus
    update_indexer calls of their own (with the errors transformers raises), indexer views and the queries
    generate asks between forwards."""

    def __init__(self, case):
        super().__init__(case, BASIC | BATCH | {"crop", "reset"})

    def layers(self, s):
        return self.case.slots[s].layers()

    def longest_stored(self, s):
        """The most tokens a dynamic store holds (K/V or indexer): long ones are cropped to keep files small."""
        lengths = [0]
        for layer in self.layers(s):
            if not is_dummy(layer) and not is_static(layer) and layer.is_initialized:
                lengths.append(int(layer.get_seq_length()))
            if isinstance(layer, cu.DynamicIndexedLayer):
                lengths.append(indexer_counter(layer))
        return max(lengths)

    def crop_value(self, s):
        r = self.rng.random()
        return 0 if r < 0.2 else -self.rng.randint(1, 3) if r < 0.8 else -self.rng.randint(4, 12)

    def indexer_tokens(self, layer, n):
        """Models write the indexer keys of the tokens they write K/V for; now and then another count."""
        ni = n if self.rng.random() < 0.85 else self.rng.choice([0, 1, 2, n + 1])
        if isinstance(layer, cu.StaticIndexedLayer) and self.rng.random() < 0.85:
            ni = max(0, min(ni, layer.max_cache_len - indexer_counter(layer)))
        return ni

    def step(self, s):
        """A forward pass: per layer its mask sizes, its K/V update and, on an indexed layer, its indexer update
        (before or after the K/V, as a model's indexer may run first); dummy layers are asked for mask sizes."""
        case, rng = self.case, self.rng
        longest = self.longest_stored(s)
        if longest > 8:
            try:
                case.crop(s, -rng.randint(longest - 4, longest))
            except Skip:
                pass
        n = tokens(rng)
        rooms = [layer.max_cache_len - int(layer.get_seq_length()) for layer in self.layers(s) if is_static_full(layer)]
        if rooms and n > min(rooms) and rng.random() < 0.85:
            if min(rooms) <= 0:
                raise Skip("full static layer")
            n = rng.randint(1, min(rooms))
        self.last_n = n
        for i, layer in enumerate(self.layers(s)):
            if rng.random() < (0.3 if is_dummy(layer) else 0.6):
                case.mask(s, n, i)
            if is_dummy(layer):
                continue
            if not is_indexed(layer):
                case.update(s, i, n)
                continue
            ni = self.indexer_tokens(layer, n)
            first = rng.random() < 0.5
            if first:
                case.iupdate(s, i, ni)
            case.update(s, i, n)
            if not first:
                case.iupdate(s, i, ni)

    def one(self):
        case, rng = self.case, self.rng
        r = rng.random()
        if r >= 0.25:
            return super().one()
        s = rng.choice(sorted(case.slots))
        ls = self.layers(s)
        indexed = [i for i, layer in enumerate(ls) if is_indexed(layer)]
        if r < 0.03 or (r < 0.13 and not indexed):  # another kind of layer, or beyond the layers
            case.iupdate(s, rng.choice([i for i in range(len(ls)) if i not in indexed] + [len(ls)]), 1)
        elif r < 0.13:
            i = rng.choice(indexed)
            fault = rng.choice(["width", "batch", "dtype"]) if r < 0.06 else None
            case.iupdate(s, i, self.indexer_tokens(ls[i], tokens(rng)), fault)
        elif r < 0.18:
            if indexed:
                case.iview(s, rng.choice(indexed))
        elif r < 0.23:  # Walker's crops are rare on static layers, the indexer's counter is worth them here
            case.crop(s, self.crop_value(s))
        else:
            case.queries(s)


# ------------------------------------------------------------------ caches


def letters(rng, n, pool, need):
    """n layer-type letters from `pool`, at least one of `need`."""
    while True:
        types = "".join(rng.choice(pool) for _ in range(n))
        if any(c in types for c in need):
            return types


def config_of(rng, types):
    """A config whose layers transformers types as `types` says (`u`: dummy, as a "moe" layer or a "reuse"
    entry of kv_sharing_modes), with the windows its sliding and chunked layers need."""
    sw = rng.randint(2, 8) if "s" in types else 0
    chunk = rng.randint(2, 8) if "c" in types else 0
    reuse = rng.random() < 0.5
    names = [("full_attention" if reuse else "moe") if c == "u" else TYPE_OF[c] for c in types]
    kw = {"num_hidden_layers": len(types), "layer_types": names}
    if "u" in types and reuse:
        kw["kv_sharing_modes"] = ["reuse" if c == "u" else None for c in types]
    if sw:
        kw["sliding_window"] = sw
    if chunk:
        kw["attention_chunk_size"] = chunk
    return Config(**kw), sw, chunk


def from_config(case, rng, static, types, geom):
    dt, b, h, dk, dv = geom
    cfg, sw, chunk = config_of(rng, types)
    chunked = [i for i, c in enumerate(types) if c == "c"]
    windows = {i: (sw if c == "s" else chunk) for i, c in enumerate(types) if c in "sc"} if static else {}
    if static:
        m = rng.randint(2, 8)
        return case.create(cu.StaticCache(config=cfg, max_cache_len=m), preset_spec("static", m, len(types), types, sw,
                                                                                      chunk), dt, b, h, dk, dv,
                           chunked, windows)
    return case.create(cu.DynamicCache(config=cfg), preset_spec("dynamic", 0, len(types), types, sw, chunk), dt, b,
                       h, dk, dv, chunked)


def from_layers(case, rng, kinds, geom):
    """Cache(layers=...) of the kinds named (d, ds, s, di, si, u)."""
    dt, b, h, dk, dv = geom
    layers, specs, windows = [], [], {}
    for kind in kinds:
        m = rng.randint(2, 8)
        if kind == "d":
            layers.append(cu.DynamicLayer())
            specs.append("d 0 0")
        elif kind == "ds":
            w = rng.randint(2, 8)
            layers.append(cu.DynamicSlidingWindowLayer(sliding_window=w))
            specs.append(f"ds {w} 0")
        elif kind == "s":
            layers.append(cu.StaticLayer(max_cache_len=m))
            specs.append(f"s 0 {m}")
        elif kind == "di":
            layers.append(cu.DynamicIndexedLayer())
            specs.append("di 0 0")
        elif kind == "si":
            layers.append(cu.StaticIndexedLayer(max_cache_len=m))
            specs.append(f"si 0 {m}")
        else:
            layers.append(cu.DummyLayer())
            specs.append("u 0 0")
    return case.create(cu.Cache(layers=layers), f"layers {len(kinds)} " + " ".join(specs), dt, b, h, dk, dv, (),
                       windows)


def maybe_early(case, rng, s, p):
    """early_initialization with probability p, per-layer heads and head dims (those of dummy layers unread)."""
    if rng.random() < p:
        slot = case.slots[s]
        n = len(slot.layers())
        case.early(s, slot.batch, [rng.randint(1, 2) for _ in range(n)], [rng.randint(1, 4) for _ in range(n)])


def mixed_cache(case, rng, geom, n, need, dynamic_types, static_types, kinds):
    """A cache of n layers, one at least of the type letter `need` (`i` or `u`), built as DynamicCache(config)
    from `dynamic_types`, StaticCache(config) from `static_types` or Cache(layers=...) of `kinds`."""
    r = rng.random()
    if r < 0.35:
        return from_config(case, rng, False, letters(rng, n, dynamic_types, need), geom)
    if r < 0.7:
        return from_config(case, rng, True, letters(rng, n, static_types, need), geom)
    chosen = [rng.choice(kinds) for _ in range(n)]
    chosen[rng.randrange(n)] = rng.choice({"i": ["di", "si"], "u": ["u"]}[need])
    return from_layers(case, rng, chosen, geom)


def v5_indexed(case):
    rng = case.rng
    s = mixed_cache(case, rng, kv_geometry(rng), rng.randint(1, 4), "i", "fffsci", "fii",
                    ["d", "ds", "s", "di", "si", "di", "si"])
    maybe_early(case, rng, s, 0.25)
    if rng.random() < 0.3:
        # A prefill whose indexer runs before attention: the layers hold indexer keys and no K/V yet.
        ls = case.slots[s].layers()
        q = tokens(rng)
        for i in (i for i, layer in enumerate(ls) if is_indexed(layer)):
            case.iupdate(s, i, q)
            case.view(s, i)
            case.seqlen(s, i)
            case.mask(s, q, i)
        case.queries(s)
    Walk(case).run(36)


def v5_dummy(case):
    rng = case.rng
    geom = kv_geometry(rng)
    n = rng.randint(2, 5)
    if rng.random() < 0.1:
        s = from_layers(case, rng, ["u"] * (n - 1), geom)  # no layer with K/V: every sequence query refuses
        case.out.stats["caches of dummy layers only"] += 1
    else:
        s = mixed_cache(case, rng, geom, n, "u", "fsiuu", "fiuu", ["d", "ds", "s", "di", "u", "u"])
    maybe_early(case, rng, s, 0.5)
    for i in range(len(case.slots[s].layers()) + 1):
        case.seqlen(s, i)
    case.queries(s)
    Walk(case).run(24)


FAMILIES = [("v5_indexed", v5_indexed, 13), ("v5_dummy", v5_dummy, 9)]


def main():
    args = arguments(20265, out_help="the vectors directory")
    write_files(args.out, args.seed, "v5", FAMILIES,
                lambda family, out, label, rng, c: family(IndexedCase(out, label, rng)))


if __name__ == "__main__":
    main()
