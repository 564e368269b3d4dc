#!/usr/bin/env python3
"""Writes conformance vectors by running transformers' own cache classes.

Every operation runs on a real transformers cache first; only what
transformers actually returned is written down, so the vectors record
transformers' behaviour, not our reading of it. The format is described in
docs/conformance.md. Run through generate.sh, which installs the versions.

  * An operation that raises an error nobody planned for is dropped and the
    cache restored from a snapshot, so an odd torch failure never becomes an
    expectation.
  * An operation that raises a planned error is recorded with the kvcache
    code the replay must see, and the Python cache is restored from the
    snapshot too: kvcache promises that a failed call changes nothing, while
    transformers may have half-applied it (layer 0 cropped, layer 1 raising).
  * The deliberate differences listed in docs/conformance.md are avoided.
"""
import copy

import numpy as np
import torch
import transformers
from transformers import cache_utils as cu

from vectorgen import Out, Planned, Skip, arguments, run_skipping, write_files  # noqa: F401  (re-exported)

TF_VERSION = tuple(int(x) for x in transformers.__version__.split(".")[:2])
IS_V5 = TF_VERSION[0] >= 5
Config = getattr(transformers, "PreTrainedConfig", None) or transformers.PretrainedConfig
# Before 4.54 get_mask_sizes ignored its layer index (layer 0's length for every layer).
WITH_MASKS = TF_VERSION >= (4, 54)
# 5.24 gave static layers a crop (5.23: AttributeError, replayed as UNSUPPORTED).
STATIC_CROP = TF_VERSION >= (5, 24)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
INT_VIEW = {"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}
LETTER_TYPE = {"f": "full_attention", "s": "sliding_attention", "c": "chunked_attention"}

# ------------------------------------------------------------------ tensors


def make_tensor(dt, shape, seed):
    """Input contents, reproduced bit for bit by the replay: element i
    (row-major) is splitmix64(seed + (i + 1) * golden) turned into a finite,
    non-zero normal number with random sign, exponent in [-7, 7] and random
    mantissa, so every token is distinct and no key vector is all zero."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    sign = z >> np.uint64(63)
    e = (z >> np.uint64(32)) % np.uint64(15)
    if dt == "f32":
        bits = (sign << np.uint64(31)) | ((e + np.uint64(120)) << np.uint64(23)) | (z & np.uint64(0x7FFFFF))
        arr = bits.astype(np.uint32).view(np.int32)
        return torch.from_numpy(arr.reshape(shape).copy()).view(torch.float32)
    if dt == "f16":
        bits = (sign << np.uint64(15)) | ((e + np.uint64(8)) << np.uint64(10)) | (z & np.uint64(0x3FF))
    else:
        bits = (sign << np.uint64(15)) | ((e + np.uint64(120)) << np.uint64(7)) | (z & np.uint64(0x7F))
    arr = bits.astype(np.uint16).view(np.int16)
    return torch.from_numpy(arr.reshape(shape).copy()).view(DTYPES[dt])


def gen_spec(dt, shape, seed):
    return f"g {dt} {' '.join(str(int(x)) for x in shape)} {seed}"


def expect(t, dt):
    """`e`: 1-D empty (numel checked); `z`: 4-D empty (shape checked);
    `x`: shape and the raw little-endian bytes in hex."""
    if t.dim() != 4:
        if t.numel() != 0:
            raise RuntimeError(f"unexpected {t.dim()}-D tensor")
        return "e"
    if t.dtype != DTYPES[dt]:
        raise RuntimeError(f"dtype {t.dtype} != {dt}")
    shape = " ".join(str(int(s)) for s in t.shape)
    if t.numel() == 0:
        return f"z {dt} {shape}"
    return f"x {dt} {shape} {t.contiguous().view(INT_VIEW[dt]).numpy().tobytes().hex()}"


# ------------------------------------------------------------------ configs


def make_config(n, types=None, sw=0, chunk=0, shared=0):
    kw = {"num_hidden_layers": n}
    if types:
        kw["layer_types"] = [LETTER_TYPE[c] for c in types]
    if sw:
        kw["sliding_window"] = sw
    if chunk:
        kw["attention_chunk_size"] = chunk
    if shared:
        kw["num_kv_shared_layers"] = shared
    return Config(**kw)


def derived_types(n, types, sw, chunk, shared):
    """Layer types as kvcache derives them (transformers' rule)."""
    if not types:
        types = ("s" if sw else "c" if chunk else "f") * n
    if shared:
        types = types[:-shared]
    return types


def preset_spec(name, maxlen, n, types, sw, chunk, shared=0, pattern=0):
    return f"preset {name} {maxlen} {n} {sw} {chunk} {shared} {pattern} {types or '-'}"


# ------------------------------------------------------------------ state


class Slot:
    """A cache (or encoder-decoder pair) and what inputs it accepts."""

    def __init__(self, obj, dt, batch, heads, dk, dv, chunked=(), windows=None, ed=False):
        self.obj, self.dt, self.batch = obj, dt, batch
        self.heads, self.dk, self.dv = heads, dk, dv  # ints, or per-layer lists after early init
        self.chunked = set(chunked)
        self.windows = dict(windows or {})  # static sliding layers: configured window
        self.ed = ed
        self.enc_len = 0
        self.positions_ok = True  # 4.57: every static write so far was an append
        self.next_pos = {}  # 4.57: next append position of each static layer
        self.reset_layers = set()  # dynamic layers emptied by reset and not updated since
        self.reset_cross = set()  # the same for the cross-attention cache of a pair

    def cache(self):
        return self.obj.self_attention_cache if self.ed else self.obj

    def geom(self, i):
        pick = lambda x: x[i] if isinstance(x, list) else x  # noqa: E731
        return pick(self.heads), pick(self.dk), pick(self.dv)


def layers_of(cache):
    return getattr(cache, "layers", None)  # None: legacy DynamicCache (4.53)


def kind_of(layer, chunked):
    name = type(layer).__name__
    table = {
        "DynamicLayer": "d",
        "DynamicSlidingWindowLayer": "dc" if chunked else "ds",
        "StaticLayer": "s",
        "StaticSlidingWindowLayer": "sc" if chunked else "ss",
        "DynamicIndexedLayer": "di",  # generate_indexed.py's families
        "StaticIndexedLayer": "si",
        "DummyLayer": "u",
    }
    return table[name]


def is_static(layer):
    return isinstance(layer, cu.StaticLayer)


def is_static_full(layer):
    return is_static(layer) and not isinstance(layer, cu.StaticSlidingWindowLayer)


def is_dyn_sliding(layer):
    return isinstance(layer, cu.DynamicSlidingWindowLayer)


def seq_len(cache, i):
    return int(cache.get_seq_length(i))


def initialized(cache, i):
    ls = layers_of(cache)
    if ls is None:
        return i < len(cache.key_cache) and cache.key_cache[i].numel() > 0
    return i < len(ls) and ls[i].is_initialized


def stored(cache, i):
    ls = layers_of(cache)
    if ls is None:
        return cache.key_cache[i], cache.value_cache[i]
    return ls[i].keys, ls[i].values


def max_length(layer):
    return int(layer.get_max_length() if IS_V5 else layer.get_max_cache_shape())


# ------------------------------------------------------------------ a case


class Case:
    """One sequence of operations on one or more caches; every method runs
    the operation on transformers and records it if it is recordable."""

    slot_type = Slot  # what `create` keeps a cache in (a family's cases may know more about their caches)

    def __init__(self, out, name, rng):
        self.out, self.rng = out, rng
        self.slots = {}
        out.line(f"case {name}")

    def seed(self):
        return self.rng.getrandbits(63)

    def new_slot(self):
        i = 0
        while i in self.slots:
            i += 1
        return i

    def snapshot(self):
        """The slots as they are, restored when an operation fails."""
        return copy.deepcopy(self.slots)

    def attempt(self, fn):
        saved = self.snapshot()
        try:
            return fn()
        except (Planned, Skip):
            self.slots = saved
            raise
        except Exception as exc:  # noqa: BLE001 - unplanned: never recorded
            self.slots = saved
            raise Skip(repr(exc)) from exc

    # ----------------------------------------------------------- creation

    def create(self, obj, spec, dt, batch, heads, dk, dv, chunked=(), windows=None):
        s = self.new_slot()
        self.slots[s] = self.slot_type(obj, dt, batch, heads, dk, dv, chunked, windows)
        self.out.op(f"create {s} {spec}")
        self.layout(s)
        return s

    def from_tensors(self, build, spec, dt, batch, heads, dk, dv, lengths, chunked=(), windows=None):
        """build(list of (k, v)) -> cache; lengths: tokens per layer."""
        kv, toks = [], []
        for n in lengths:
            ks, vs = self.seed(), self.seed()
            kv.append((make_tensor(dt, (batch, heads, n, dk), ks), make_tensor(dt, (batch, heads, n, dv), vs)))
            toks.append(gen_spec(dt, (batch, heads, n, dk), ks) + " " + gen_spec(dt, (batch, heads, n, dv), vs))
        obj = build(kv)
        s = self.new_slot()
        self.slots[s] = Slot(obj, dt, batch, heads, dk, dv, chunked, windows)
        self.out.op(f"tensors {s} {spec} {len(lengths)} " + " ".join(toks))
        self.layout(s)
        return s

    def ed_create(self, s_self, s_cross):
        a, b = self.slots.pop(s_self), self.slots.pop(s_cross)
        obj = cu.EncoderDecoderCache(a.obj, b.obj)
        e = self.new_slot()
        slot = Slot(obj, a.dt, a.batch, a.heads, a.dk, a.dv, a.chunked, a.windows, ed=True)
        slot.cross = b
        self.slots[e] = slot
        self.out.op(f"edcreate {e} {s_self} {s_cross}")
        return e

    def layout(self, s):
        slot = self.slots[s]
        cache = slot.cache()
        ls = layers_of(cache)
        if ls is None:
            if hasattr(cache, "key_cache"):  # legacy caches: one entry per layer
                self.out.op(f"nlayers {s} {len(cache.key_cache)}")
            return
        toks = [f"layout {s} {len(ls)}"]
        for i, layer in enumerate(ls):
            kind = kind_of(layer, i in slot.chunked)
            window = layer.sliding_window if is_dyn_sliding(layer) else slot.windows.get(i, 0)
            toks.append(f"{kind} {window} {max_length(layer)}")
        self.out.op(" ".join(toks))

    # ----------------------------------------------------------- queries

    def seqlen(self, s, i):
        slot = self.slots[s]
        if not IS_V5 and not slot.positions_ok:
            return  # 4.57 counts non-zero slots: meaningless after arbitrary positions
        self.out.op(f"seqlen {s} {i} {seq_len(slot.obj, i)}")

    def maxlen(self, s, i):
        slot = self.slots[s]
        cache = slot.obj
        if IS_V5:
            if i < 0:
                if len(slot.cache()) == 0:
                    return  # max() of nothing: ValueError in transformers
                v = cache.get_max_length()
            else:
                v = cache.get_max_length(i)
        else:
            if i < 0 or slot.ed or layers_of(cache) is None:
                return
            v = cache.get_max_cache_shape(i)
        self.out.op(f"maxlen {s} {i} {int(v)}")

    def usable(self, s, i, new):
        slot = self.slots[s]
        cache = slot.obj
        if slot.ed or not hasattr(cache, "get_usable_length"):
            return  # get_usable_length exists up to 4.53
        self.out.op(f"usable {s} {new} {i} {int(cache.get_usable_length(new, i))}")

    def mask(self, s, q, i):
        cache = self.slots[s].obj
        arg = q if IS_V5 else torch.arange(q)
        ln, off = cache.get_mask_sizes(arg, i)
        self.out.op(f"mask {s} {q} {i} {int(ln)} {int(off)}")

    def view(self, s, i, cross=False):
        slot = self.slots[s]
        cache = slot.obj.cross_attention_cache if cross else slot.cache()
        op = "xview" if cross else "view"
        if i >= len(cache):
            return
        if not initialized(cache, i):
            if layers_of(cache) is None or i in (slot.reset_cross if cross else slot.reset_layers):
                return  # 5.x un-initializes a reset dynamic layer; kvcache keeps it, empty
            self.out.op(f"{op} {s} {i} err INVALID_STATE NotInitialized")
            return
        k, v = stored(cache, i)
        self.out.op(f"{op} {s} {i} ok {expect(k, slot.dt)} {expect(v, slot.dt)}")

    def nlayers(self, s):
        self.out.op(f"nlayers {s} {len(self.slots[s].cache())}")

    def isupd(self, s, i):
        self.out.op(f"isupd {s} {i} {int(bool(self.slots[s].obj.is_updated.get(i, False)))}")

    # 5.14-5.24 queries: is_croppable, get_query_offset, Cache.batch_size; DFlashCache's accepted tokens

    def croppable(self, s, i):
        """Layer i's is_croppable, or the cache's (i = -1)."""
        cache = self.slots[s].cache()
        v = cache.is_croppable if i < 0 else layers_of(cache)[i].is_croppable
        self.out.op(f"croppable {s} {i} {int(bool(v))}")

    def qoffset(self, s, i):
        self.out.op(f"qoffset {s} {i} {int(self.slots[s].obj.get_query_offset(i))}")

    def accepted(self, s, n):
        self.slots[s].obj.set_previous_accepted_tokens(n)
        self.out.op(f"accepted {s} {n} ok")

    def bsize(self, s):
        def run():
            try:
                return self.slots[s].cache().batch_size
            except ValueError as exc:
                raise Planned("INVALID_STATE", "ValueError") from exc
        try:
            v = self.attempt(run)
        except Planned as p:
            self.out.op(f"bsize {s} err {p.code} {p.cls}")
            return
        self.out.op(f"bsize {s} ok {int(v)}")

    # ----------------------------------------------------------- update

    def update(self, s, i, n, positions=None):
        slot = self.slots[s]
        h, dk, dv = slot.geom(i)
        ks, vs = self.seed(), self.seed()
        k = make_tensor(slot.dt, (slot.batch, h, n, dk), ks)
        v = make_tensor(slot.dt, (slot.batch, h, n, dv), vs)
        ls = layers_of(slot.cache())
        layer = ls[i] if ls is not None and i < len(ls) else None
        overflow = False
        if layer is not None and is_static_full(layer):
            if positions is not None:
                overflow = max(positions) >= layer.max_cache_len
            else:
                overflow = seq_len(slot.cache(), i) + n > layer.max_cache_len

        def run():
            cache = self.slots[s].cache()
            try:
                if IS_V5:
                    return cache.update(k, v, i)
                kw = {"cache_position": torch.tensor(positions)} if positions is not None else None
                return cache.update(k, v, i, kw)
            except IndexError as exc:
                if overflow:
                    raise Planned("OUT_OF_RANGE", "IndexError") from exc
                raise

        branch = classify(layer, n, positions)
        head = f"update {s} {i} {gen_spec(slot.dt, k.shape, ks)} {gen_spec(slot.dt, v.shape, vs)} {pos_spec(positions)}"
        try:
            rk, rv = self.attempt(run)
        except Planned as p:
            self.out.op(f"{head} err {p.code} {p.cls}")
            return False
        if overflow:
            raise RuntimeError("static overflow predicted but transformers did not raise")
        self.slots[s].reset_layers.discard(i)
        if positions is not None and self.slots[s].positions_ok and layers_of(self.slots[s].cache()) is not None:
            layer = layers_of(self.slots[s].cache())[i]
            start = self.slots[s].next_pos.get(i, 0)
            if is_static_full(layer) and positions != list(range(start, start + n)):
                self.slots[s].positions_ok = False
        self.out.op(f"{head} ok {expect(rk, slot.dt)} {expect(rv, slot.dt)}")
        self.out.stats[f"update branch: {branch}"] += 1
        return True

    def cross(self, s, i):
        """The model protocol: compute cross K/V once, then reuse them."""
        slot = self.slots[s]
        ed = slot.obj
        h, dk, dv = slot.cross.geom(i)
        if ed.is_updated.get(i, False):
            kt = vt = "-"

            def run():
                return None
        else:
            ks, vs = self.seed(), self.seed()
            n = slot.enc_len
            k = make_tensor(slot.dt, (slot.batch, h, n, dk), ks)
            v = make_tensor(slot.dt, (slot.batch, h, n, dv), vs)
            kt, vt = gen_spec(slot.dt, k.shape, ks), gen_spec(slot.dt, v.shape, vs)

            def run():
                e = self.slots[s].obj
                e.cross_attention_cache.update(k, v, i)
                e.is_updated[i] = True
        self.attempt(run)
        self.slots[s].reset_cross.discard(i)
        ed = self.slots[s].obj
        rk, rv = stored(ed.cross_attention_cache, i)
        self.out.op(f"cross {s} {i} {kt} {vt} ok {expect(rk, slot.dt)} {expect(rv, slot.dt)}")

    # ----------------------------------------------------------- mutations

    def mutate(self, text, fn, errors=None, predicted=None):
        """Runs fn(); `errors` maps exception classes to kvcache codes. When
        `predicted` is given, the raised error must be that code."""
        errors = errors or {}

        def run():
            try:
                fn()
            except tuple(errors) as exc:
                raise Planned(errors[type(exc)], type(exc).__name__) from exc

        try:
            self.attempt(run)
        except Planned as p:
            # An error nobody predicted is a transformers quirk, not a rule:
            # e.g. crop() on a sliding layer that never saw a token reads
            # `None.shape` and raises AttributeError.
            if p.code != predicted:
                raise Skip(f"{p.code} raised, {predicted} predicted") from None
            self.out.op(f"{text} err {p.code} {p.cls}")
            return False
        if predicted is not None:
            raise Skip(f"{predicted} predicted, nothing raised")
        self.out.op(f"{text} ok")
        return True

    def crop(self, s, x):
        slot = self.slots[s]
        cache = slot.cache()
        ls = layers_of(cache)
        if STATIC_CROP and not slot.ed and any(is_static(layer) for layer in ls):
            reason = static_crop_difference(ls, x)
            if reason is not None:
                return self.crop_differing(s, x, reason)
        predicted = set()
        for layer in ls:
            if is_static(layer):
                if not STATIC_CROP:
                    predicted.add("UNSUPPORTED")
            elif is_dyn_sliding(layer) and layer.is_initialized and layer.cumulative_length >= layer.sliding_window:
                recording = getattr(layer, "record_past", False)
                if not IS_V5 or not recording or x > 0:
                    predicted.add("INVALID_STATE")
                elif x < 0 and -x > layer.cumulative_length:
                    raise Skip("would make the cumulative length negative")
        if len(predicted) > 1:
            raise Skip("several errors possible; the order is not specified")
        errors = {AttributeError: "UNSUPPORTED", TypeError: "UNSUPPORTED"} if slot.ed else {AttributeError: "UNSUPPORTED"}
        errors[RuntimeError if IS_V5 else ValueError] = "INVALID_STATE"
        if slot.ed and any(is_static(layer) for layer in ls):
            raise Skip("EncoderDecoderCache.crop on static caches raises TypeError before looking at layers")
        return self.mutate(f"crop {s} {x}", lambda: self.slots[s].obj.crop(x), errors,
                           next(iter(predicted)) if predicted else None)

    def crop_differing(self, s, x, diff):
        """A 5.24 static crop where kvcache deliberately differs (differences 61 and 62): what
        transformers did (its outcome and every layer's counter after the call) is written down,
        then what kvcache does instead, and the Python cache is brought to kvcache's result so the
        case goes on comparing."""
        ls = layers_of(self.slots[s].cache())
        if any(is_dyn_sliding(layer) and layer.is_initialized and layer.cumulative_length >= layer.sliding_window
               for layer in ls):
            raise Skip("a full dynamic sliding layer as well: its own rules would mix in")
        before = [layer_counter(layer) for layer in ls]
        saved = self.snapshot()
        try:
            self.slots[s].obj.crop(x)
            tf_outcome = "ok"
        except (RuntimeError, ValueError) as exc:
            tf_outcome = f"raise:{type(exc).__name__}"
        tf_after = [layer_counter(layer) for layer in layers_of(self.slots[s].cache())]
        self.slots = saved
        if x > 0 and not all(is_static(layer) for layer in ls):
            raise Skip("positive crop of dynamic layers: 5.x refuses (ValueError), kvcache keeps the legacy meaning")
        if diff == 61 and tf_outcome != "ok":  # both refuse (a positive crop): an ordinary planned error
            self.out.op(f"crop {s} {x} err INVALID_STATE {tf_outcome.split(':')[1]}")
            return False
        if diff == 61:  # kvcache refuses: the cache unchanged
            kv_outcome, kv_after = "err INVALID_STATE -", before
        else:  # 62: a positive argument is the legacy absolute length; a crop past the start stops at 0
            kv_outcome = "ok"
            kv_after = [c if x == 0 else max(0, c + x) if x < 0 else min(c, x) for c in before]
            for layer, c, k in zip(layers_of(self.slots[s].cache()), before, kv_after):
                if k < c:
                    layer.crop(k - c)
        if (tf_outcome, tf_after) == (kv_outcome, kv_after):
            raise RuntimeError("a crop recorded as a difference agrees with kvcache")
        counters = lambda cs: f"{len(cs)} " + " ".join(map(str, cs))  # noqa: E731
        self.out.op(f"dcrop {s} {x} {diff} tf {tf_outcome} {counters(tf_after)} kv {kv_outcome} {counters(kv_after)}")
        self.out.stats[f"dcrop difference {diff} ({'positive' if x > 0 else 'negative'})"] += 1
        return kv_outcome == "ok"

    def record(self, s):
        self.slots[s].obj.activate_past_recording()
        self.out.op(f"record {s}")

    def reorder(self, s):
        b = self.slots[s].batch
        idx = [self.rng.randrange(b) for _ in range(b)]
        self.mutate(f"reorder {s} {b} " + " ".join(map(str, idx)),
                    lambda: self.slots[s].obj.reorder_cache(torch.tensor(idx)))

    def batch_op_ready(self, s):
        """transformers skips layers whose length is 0: then the batch of the
        layers would disagree, which no caller can use."""
        slot = self.slots[s]
        caches = [slot.cache()] + ([slot.obj.cross_attention_cache] if slot.ed else [])
        for cache in caches:
            for i in range(len(cache)):
                layer = cache.layers[i]
                if layer.is_initialized and not is_static(layer) and seq_len(cache, i) == 0:
                    return False
            if slot.reset_layers or slot.reset_cross:
                return False  # whether a reset layer keeps its batch is kvcache's choice
        return True

    def static_errors(self, s):
        slot = self.slots[s]
        caches = [slot.cache()] + ([slot.obj.cross_attention_cache] if slot.ed else [])
        return any(is_static(layer) for c in caches for layer in c.layers)

    def batch_op_prediction(self, s):
        """The error a repeat or select on slot s is predicted to raise (None: it succeeds); Skip where the
        case cannot be recorded."""
        if not self.batch_op_ready(s):
            raise Skip("empty dynamic layer")
        predicted = "UNSUPPORTED" if self.static_errors(s) else None
        if predicted and self.slots[s].ed:
            raise Skip("TypeError on EncoderDecoderCache")
        return predicted

    def repeat(self, s, r):
        predicted = self.batch_op_prediction(s)
        if self.mutate(f"repeat {s} {r}", lambda: self.slots[s].obj.batch_repeat_interleave(r),
                       {AttributeError: "UNSUPPORTED"}, predicted):
            self.slots[s].batch *= r

    def select(self, s, idx):
        predicted = self.batch_op_prediction(s)
        if self.mutate(f"select {s} {len(idx)} " + " ".join(map(str, idx)),
                       lambda: self.slots[s].obj.batch_select_indices(torch.tensor(idx)),
                       {AttributeError: "UNSUPPORTED"}, predicted):
            self.slots[s].batch = len(idx)

    def reset(self, s):
        self.attempt(lambda: self.slots[s].obj.reset())
        self.out.op(f"reset {s}")
        slot = self.slots[s]
        ls = layers_of(slot.cache())
        slot.reset_layers |= {i for i, layer in enumerate(ls or []) if not is_static(layer)}
        if slot.ed:
            xs = layers_of(slot.obj.cross_attention_cache)
            slot.reset_cross |= {i for i, layer in enumerate(xs) if not is_static(layer)}

    def clone(self, s):
        d = self.new_slot()
        self.slots[d] = copy.deepcopy(self.slots[s])
        self.out.op(f"clone {d} {s}")
        return d

    def drop(self, s):
        del self.slots[s]
        self.out.op(f"drop {s}")

    def early(self, s, batch, heads, dims):
        """heads/dims: ints (uniform form) or per-layer lists."""
        slot = self.slots[s]
        dt = slot.dt
        self.attempt(lambda: self.slots[s].obj.early_initialization(batch, heads, dims, DTYPES[dt], "cpu"))
        slot = self.slots[s]
        slot.batch, slot.heads, slot.dk, slot.dv = batch, heads, dims, dims
        if isinstance(heads, list):
            pairs = " ".join(f"{h} {d}" for h, d in zip(heads, dims))
            self.out.op(f"early {s} {batch} {dt} l {len(heads)} {pairs}")
        else:
            self.out.op(f"early {s} {batch} {dt} u {heads} {dims}")

    # 4.53: batch_split / from_batch_splits
    def split(self, s, size):
        slot = self.slots[s]
        full = slot.batch
        parts = self.attempt(lambda: self.slots[s].obj.batch_split(full, size))
        slot = self.slots[s]
        dsts = []
        for p in parts:
            d = self.new_slot()
            part = Slot(p, slot.dt, 0, slot.heads, slot.dk, slot.dv, slot.chunked, slot.windows, ed=slot.ed)
            if slot.ed:
                part.cross, part.enc_len = slot.cross, slot.enc_len
            first = (p.self_attention_cache if slot.ed else p).key_cache[0]
            part.batch = int(first.shape[0])
            self.slots[d] = part
            dsts.append(d)
        self.out.op(f"split {s} {full} {size} {len(dsts)} " + " ".join(map(str, dsts)))
        return dsts

    def stack(self, srcs):
        first = self.slots[srcs[0]]
        cls = cu.EncoderDecoderCache if first.ed else cu.DynamicCache
        obj = self.attempt(lambda: cls.from_batch_splits([self.slots[x].obj for x in srcs]))
        d = self.new_slot()
        slot = Slot(obj, first.dt, sum(self.slots[x].batch for x in srcs), first.heads, first.dk, first.dv,
                    first.chunked, first.windows, ed=first.ed)
        if first.ed:
            slot.cross, slot.enc_len = first.cross, first.enc_len
        self.slots[d] = slot
        self.out.op(f"stack {d} {len(srcs)} " + " ".join(map(str, srcs)))
        return d


def layer_counter(layer):
    """The count crop moves: a static layer's own counter, which transformers 5.24 lets go negative, even
    before the first update; the stored length of a dynamic layer."""
    if isinstance(layer, cu.StaticSlidingWindowLayer):
        return int(layer.cumulative_length_int)
    if is_static(layer):
        return int(layer.cumulative_length)
    return int(layer.get_seq_length()) if layer.is_initialized else 0


def static_crop_difference(layers, x):
    """The difference (docs/differences-from-transformers.md) by which kvcache's crop(x) of a cache with
    static layers departs from transformers 5.24's, or None where they agree: 61, a static sliding layer
    whose window has moved (kvcache refuses); 62, a positive argument (transformers raises, kvcache takes
    the legacy absolute length) or a crop past the start (transformers' counter goes negative, kvcache
    stops at 0)."""
    if x == 0:
        return None
    if any(isinstance(layer, cu.StaticSlidingWindowLayer) and layer.cumulative_length_int > layer.max_cache_len
           for layer in layers):
        return 61
    if x > 0 or any(layer_counter(layer) + x < 0 for layer in layers if is_static(layer)):
        return 62
    return None


def classify(layer, n, positions):
    """Which case of docs/semantics.md (the dynamic to static sliding layer sections) an update takes (for the coverage table)."""
    if layer is None or type(layer).__name__ == "DynamicLayer":
        return "dynamic"
    if not is_static(layer) and not is_dyn_sliding(layer):
        return type(layer).__name__  # the quantized layers of v5_queries
    if is_dyn_sliding(layer):
        c, w = layer.cumulative_length, layer.sliding_window
        if getattr(layer, "record_past", False):
            return "dynamic sliding, recording past"
        if c == 0 and n >= w:
            return "dynamic sliding, prefill longer than the window"
        return "dynamic sliding, reaching the window" if c + n >= w else "dynamic sliding, below the window"
    if is_static_full(layer):
        if positions is None:
            return "static"
        return "static, cache_position" + ("" if positions == sorted(positions) else " (unordered)")
    c = layer.cumulative_length_int if IS_V5 else layer.cumulative_length
    m = layer.max_cache_len
    if c >= m:
        return "static sliding, full, one token (roll)" if n == 1 else "static sliding, full, several tokens"
    if c + n > m:
        return "static sliding, empty, prefill longer than the window" if c == 0 else \
            "static sliding, becoming full"
    return "static sliding, not full"


def pos_spec(positions):
    if positions is None:
        return "-"
    return f"p {len(positions)} " + " ".join(str(p) for p in positions)


# ------------------------------------------------------------------ random walks


def tokens(rng):
    r = rng.random()
    if r < 0.5:
        return 1
    if r < 0.75:
        return rng.randint(2, 3)
    return rng.randint(4, 9)


def geometry(rng, same_dims=False):
    """Small shapes; the per-token size is capped to keep the vectors small."""
    dt = rng.choice(["f32", "f16", "bf16"])
    while True:
        b = rng.choice([1, 1, 1, 2, 2, 3, 4])
        h = rng.choice([1, 1, 2, 3])
        dk = rng.choice([1, 2, 2, 3, 4, 4, 8])
        dv = dk if same_dims or rng.random() < 0.7 else rng.choice([1, 2, 4])
        if b * h * max(dk, dv) <= 16:
            return dt, b, h, dk, dv


class Walker:
    """Random operations on the slots of a case. `allow` names the kinds of
    operations this family may produce."""

    def __init__(self, case, allow, layers_hint=1):
        self.case, self.rng, self.allow = case, case.rng, set(allow)
        self.layers_hint = layers_hint
        self.last_n = 1

    def n_layers(self, s):
        slot = self.case.slots[s]
        return max(len(slot.cache()), self.layers_hint)

    def static_room(self, s, i):
        """Free slots of static full layer i, or None for other layers."""
        slot = self.case.slots[s]
        ls = layers_of(slot.cache())
        if ls is None or i >= len(ls) or not is_static_full(ls[i]):
            return None
        used = slot.next_pos.get(i, 0) if not IS_V5 else seq_len(slot.cache(), i)
        return ls[i].max_cache_len - used

    def positions(self, s, i, n):
        """4.57: cache_position for a static layer (None for dynamic ones)."""
        if IS_V5 or "positions" not in self.allow:
            return None
        slot = self.case.slots[s]
        ls = layers_of(slot.cache())
        if ls is None or i >= len(ls) or not is_static(ls[i]):
            return None
        layer = ls[i]
        if is_static_full(layer):
            start = slot.next_pos.get(i, 0)
            if self.rng.random() < 0.25 and n <= layer.max_cache_len:
                pos = self.rng.sample(range(layer.max_cache_len), n)
                return pos
            return list(range(start, start + n))
        return list(range(layer.cumulative_length, layer.cumulative_length + n))

    def do_update(self, s, i, n):
        room = self.static_room(s, i)
        if room is not None and n > room and self.rng.random() < 0.85:
            if room <= 0:
                raise Skip("full static layer")
            n = self.rng.randint(1, room)
        self.update_at(s, i, n)

    def update_at(self, s, i, n):
        """Updates layer i with n tokens at the positions it expects next, and
        remembers where the next update of that layer starts."""
        pos = self.positions(s, i, n)
        ok = self.case.update(s, i, n, pos)
        if ok and pos is not None:
            slot = self.case.slots[s]
            slot.next_pos[i] = max(slot.next_pos.get(i, 0), max(pos) + 1)

    def longest_stored(self, s):
        cache = self.case.slots[s].cache()
        ls = layers_of(cache)
        if ls is None:
            return max([k.shape[-2] for k in cache.key_cache if k.dim() == 4] or [0])
        return max([layer.keys.shape[-2] for layer in ls
                    if layer.is_initialized and not is_static(layer) and layer.keys.dim() == 4] or [0])

    def step(self, s):
        """One forward pass: every layer asks its mask sizes, then updates.
        Long dynamic layers are cropped first to keep the vectors small."""
        longest = self.longest_stored(s)
        if longest > 10 and "crop" in self.allow:
            x = self.rng.randint(1, 6) if "crop_pos" in self.allow else -self.rng.randint(longest - 6, longest)
            try:
                self.case.crop(s, x)
            except Skip:
                pass
        n = tokens(self.rng)
        nl = self.n_layers(s)
        rooms = [r for r in (self.static_room(s, i) for i in range(nl)) if r is not None]
        if rooms and n > min(rooms) and self.rng.random() < 0.85:
            if min(rooms) <= 0:
                raise Skip("full static cache")
            n = self.rng.randint(1, min(rooms))
        self.last_n = n
        for i in range(nl):
            if self.rng.random() < 0.7 and WITH_MASKS:
                self.case.mask(s, n, i)
            self.update_at(s, i, n)

    def crop_value(self, s):
        slot = self.case.slots[s]
        cache = slot.cache()
        longest = max([seq_len(cache, i) for i in range(len(cache))] or [0])
        if "crop_pos" in self.allow:
            return self.rng.randint(1, longest + 2)
        r = self.rng.random()
        if r < 0.45:
            return -self.rng.randint(1, max(1, self.last_n))
        if r < 0.65:
            return 0
        if r < 0.85:
            return -self.rng.randint(1, 4)
        return -(longest + self.rng.randint(0, 3))

    def one(self):
        case, rng = self.case, self.rng
        s = rng.choice(sorted(case.slots))
        slot = case.slots[s]
        nl = self.n_layers(s)
        choices = [("step", 30), ("update", 8), ("seqlen", 8), ("maxlen", 4), ("mask", 8), ("view", 6),
                   ("nlayers", 2), ("crop", 8), ("record", 2), ("reorder", 4), ("repeat", 3), ("select", 3),
                   ("reset", 2), ("clone", 2), ("cross", 6), ("isupd", 2), ("xview", 2), ("drop", 1)]
        if any(is_static(layer) for layer in (layers_of(slot.cache()) or [])):
            # errors are cheap to record but say little after the first few
            choices = [(c, max(1, w // 3) if c in ("crop", "repeat", "select") else w) for c, w in choices]
        if slot.ed:
            choices = [c for c in choices if c[0] != "nlayers"]
        else:
            choices = [c for c in choices if c[0] not in ("cross", "isupd", "xview")]
        choices = [c for c in choices if c[0] in self.allow or c[0] in ("step", "seqlen", "mask", "view")]
        if not WITH_MASKS:
            choices = [c for c in choices if c[0] != "mask"]
        op = rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]
        if op == "step":
            self.step(s)
        elif op == "update":
            limit = nl + 2 if "lazy_skip" in self.allow else nl
            self.do_update(s, rng.randrange(limit), tokens(rng))
        elif op == "seqlen":
            case.seqlen(s, rng.randrange(nl + 1))
        elif op == "maxlen":
            case.maxlen(s, rng.randrange(-1, nl + 1))
        elif op == "mask":
            case.mask(s, tokens(rng), rng.randrange(nl + 1))
        elif op == "view":
            case.view(s, rng.randrange(nl))
        elif op == "nlayers":
            case.nlayers(s)
        elif op == "crop":
            case.crop(s, self.crop_value(s))
        elif op == "record":
            case.record(s)
        elif op == "reorder":
            case.reorder(s)
        elif op == "repeat":
            r = rng.randint(1, 3)
            if slot.batch * r <= 6:
                case.repeat(s, r)
        elif op == "select":
            k = rng.randint(1, slot.batch)
            case.select(s, rng.sample(range(slot.batch), k))
        elif op == "reset":
            case.reset(s)
            slot = case.slots[s]
            slot.next_pos = {}
            if not IS_V5:
                slot.positions_ok = True
        elif op == "clone":
            if len(case.slots) < 4:
                case.clone(s)
        elif op == "drop":
            if len(case.slots) > 1:
                case.drop(s)
        elif op == "cross":
            case.cross(s, rng.randrange(nl))
        elif op == "isupd":
            case.isupd(s, rng.randrange(nl + 1))
        elif op == "xview":
            case.view(s, rng.randrange(nl), cross=True)

    def run(self, count):
        run_skipping(self.one, count)



# ------------------------------------------------------------------ families

BASIC = {"update", "maxlen", "nlayers", "reorder", "clone", "drop"}
BATCH = {"repeat", "select"}


def v5_dynamic_lazy(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dv)
    Walker(case, BASIC | BATCH | {"crop", "reset", "lazy_skip"}, layers_hint=rng.randint(1, 3)).run(45)


def random_types(rng, n, letters):
    return "".join(rng.choice(letters) for _ in range(n))


def v5_dynamic_config(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 4)
    r = rng.random()
    sw = chunk = 0
    if r < 0.6:
        types = random_types(rng, n, "fsc")
        sw = rng.randint(2, 8) if "s" in types else 0
        chunk = rng.randint(2, 8) if "c" in types else 0
    elif r < 0.8:
        types, sw = "", rng.randint(2, 8)
    else:
        types, chunk = "", rng.randint(2, 8)
    cfg = make_config(n, types, sw, chunk)
    dtypes = derived_types(n, types, sw, chunk, 0)
    chunked = [i for i, t in enumerate(dtypes) if t == "c"]
    case.create(cu.DynamicCache(config=cfg), preset_spec("dynamic", 0, n, types, sw, chunk), dt, b, h, dk, dv,
                chunked)
    w = Walker(case, BASIC | BATCH | {"crop", "record", "reset"})
    if rng.random() < 0.25:
        case.early(0, b, h, dk)
    if rng.random() < 0.3:
        case.record(0)
    w.run(45)


def v5_static(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 3)
    m = rng.randint(1, 12)
    cfg = make_config(n)
    s = case.create(cu.StaticCache(config=cfg, max_cache_len=m), preset_spec("static", m, n, "", 0, 0),
                    dt, b, h, dk, dv)
    if rng.random() < 0.4:
        if rng.random() < 0.5:
            case.early(s, b, h, dk)
        else:
            case.early(s, b, [rng.randint(1, 3) for _ in range(n)], [rng.randint(1, 8) for _ in range(n)])
    Walker(case, BASIC | BATCH | {"crop", "reset"}).run(40)


def static_sliding_setup(rng, preset):
    """A config for StaticCache, kvcache's preset name, and what to record."""
    n = rng.randint(1, 4)
    sw = chunk = 0
    if preset == "sliding_window":
        types, sw = "", rng.randint(1, 8)
    elif preset == "hybrid":
        types = random_types(rng, n, "fs")
        sw = rng.randint(1, 8)
    elif preset == "hybrid_chunked":
        types = random_types(rng, n, "fc")
        chunk = rng.randint(1, 8)
    else:  # static with a mix of the three
        types = random_types(rng, n, "fsc")
        sw = rng.randint(1, 8) if "s" in types else 0
        chunk = rng.randint(1, 8) if "c" in types else 0
    dtypes = derived_types(n, types, sw, chunk, 0)
    windows = {i: (sw if t == "s" else chunk) for i, t in enumerate(dtypes) if t != "f"}
    chunked = [i for i, t in enumerate(dtypes) if t == "c"]
    return n, types, sw, chunk, windows, chunked


def v5_static_sliding(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    preset = rng.choice(["static", "sliding_window", "hybrid", "hybrid_chunked"])
    n, types, sw, chunk, windows, chunked = static_sliding_setup(rng, preset)
    m = rng.randint(1, 12)
    cfg = make_config(n, types, sw, chunk)
    s = case.create(cu.StaticCache(config=cfg, max_cache_len=m), preset_spec(preset, m, n, types, sw, chunk),
                    dt, b, h, dk, dv, chunked, windows)
    if rng.random() < 0.35:
        case.early(s, b, h, dk)
    Walker(case, BASIC | BATCH | {"crop", "reset"}).run(40)


def custom_layers(rng, n, kind_of):
    """n layers of the kinds kind_of(i) names (d, ds, dc, s, ss, sc), each
    drawing its window and length from rng right after its kind: the
    layers, the `layers` spec of the create operation, the windows of the
    static sliding layers and the chunked layers' indices."""
    layers, specs, windows, chunked = [], [], {}, []
    for i in range(n):
        kind = kind_of(i)
        w = rng.randint(2, 8) if kind in ("ds", "dc") else rng.randint(1, 8)
        m = rng.randint(1, 12)
        if kind == "d":
            layers.append(cu.DynamicLayer())
            specs.append("d 0 0")
        elif kind in ("ds", "dc"):
            layers.append(cu.DynamicSlidingWindowLayer(sliding_window=w))
            specs.append(f"{kind} {w} 0")
        elif kind == "s":
            layers.append(cu.StaticLayer(max_cache_len=m))
            specs.append(f"s 0 {m}")
        else:
            layers.append(cu.StaticSlidingWindowLayer(max_cache_len=m, sliding_window=w))
            specs.append(f"{kind} {w} {m}")
            windows[i] = w
        if kind in ("dc", "sc"):
            chunked.append(i)
    return layers, f"layers {n} " + " ".join(specs), windows, chunked


def v5_custom(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 4)
    layers, spec, windows, chunked = custom_layers(rng, n, lambda i: rng.choice(["d", "ds", "dc", "s", "ss", "sc"]))
    cache = cu.Cache(layers=layers)
    s = case.create(cache, spec, dt, b, h, dk, dv, chunked, windows)
    if rng.random() < 0.3:
        case.early(s, b, [rng.randint(1, 3) for _ in range(n)], [rng.randint(1, 4) for _ in range(n)])
    Walker(case, BASIC | BATCH | {"crop", "record", "reset"}).run(40)


def v5_encdec(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 3)
    kind = rng.choice(["dynamic", "dynamic", "static"])
    enc = rng.randint(1, 6)
    if kind == "dynamic":
        a = case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dv)
        x = case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dv)
    else:
        m = rng.randint(2, 12)
        cfg = make_config(n)
        a = case.create(cu.StaticCache(config=cfg, max_cache_len=m), preset_spec("static", m, n, "", 0, 0),
                        dt, b, h, dk, dv)
        mx = enc + rng.randint(0, 3)
        x = case.create(cu.StaticCache(config=cfg, max_cache_len=mx), preset_spec("static", mx, n, "", 0, 0),
                        dt, b, h, dk, dv)
    e = case.ed_create(a, x)
    case.slots[e].enc_len = enc
    Walker(case, BASIC | BATCH | {"crop", "reset", "cross", "isupd", "xview"}, layers_hint=n).run(45)


def v5_from_tensors(case):
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    n = rng.randint(1, 3)
    lengths = [rng.randint(1, 9) for _ in range(n)]
    if rng.random() < 0.5:
        # DDP data without a config: a third element makes a sliding layer
        windows = [rng.choice([0, rng.randint(2, 8)]) for _ in range(n)]
        spec = f"layers {n} " + " ".join(f"ds {w} 0" if w else "d 0 0" for w in windows)

        def build(kv):
            data = [(k, v, torch.tensor(w)) if w else (k, v) for (k, v), w in zip(kv, windows)]
            return cu.DynamicCache(ddp_cache_data=data)
        case.from_tensors(build, spec, dt, b, h, dk, dv, lengths)
    else:
        types = random_types(rng, n, "fsc")
        sw = rng.randint(2, 8) if "s" in types else 0
        chunk = rng.randint(2, 8) if "c" in types else 0
        cfg = make_config(n, types, sw, chunk)
        chunked = [i for i, t in enumerate(types) if t == "c"]
        case.from_tensors(lambda kv: cu.DynamicCache(ddp_cache_data=kv, config=cfg),
                          preset_spec("dynamic", 0, n, types, sw, chunk), dt, b, h, dk, dv, lengths, chunked)
    for i in range(n):
        case.view(0, i)
        case.seqlen(0, i)
    Walker(case, BASIC | BATCH | {"crop", "record", "reset"}).run(25)


def v457_static_positions(case):
    rng = case.rng
    dt, b, h, dk, _ = geometry(rng, same_dims=True)
    preset = rng.choice(["static", "static", "sliding_window", "hybrid", "hybrid_chunked"])
    n, types, sw, chunk, windows, chunked = static_sliding_setup(rng, preset)
    if preset == "static" and rng.random() < 0.5:
        types, sw, chunk, windows, chunked = "", 0, 0, {}, []
    if preset == "static" and "s" in types and "c" in types:
        chunk = sw  # 4.57 and 5.x choose the windows of mixed configs differently
        windows = {i: sw for i in windows}
    m = rng.randint(1, 12)
    cfg = make_config(n, types, sw, chunk)
    cls = {"static": cu.StaticCache, "sliding_window": cu.SlidingWindowCache, "hybrid": cu.HybridCache,
           "hybrid_chunked": cu.HybridChunkedCache}[preset]
    s = case.create(cls(config=cfg, max_cache_len=m), preset_spec(preset, m, n, types, sw, chunk),
                    dt, b, h, dk, dk, chunked, windows)
    if rng.random() < 0.35:
        case.early(s, b, h, dk)
    Walker(case, {"update", "maxlen", "nlayers", "reorder", "clone", "drop", "crop", "crop_pos", "reset",
                  "positions"} | BATCH).run(40)


def v457_legacy(case):
    rng = case.rng
    dt, b, h, dk, _ = geometry(rng, same_dims=True)
    r = rng.random()
    n = rng.randint(1, 3)
    if r < 0.35:
        lengths = [rng.randint(1, 9) for _ in range(n)]
        case.from_tensors(lambda kv: cu.DynamicCache.from_legacy_cache(tuple(kv)), "lazy", dt, b, h, dk, dk,
                          lengths)
        hint = n
    elif r < 0.55:
        enc = rng.randint(1, 6)
        lengths = [rng.randint(1, 6) for _ in range(n)]
        selfs, crosses = [], []
        a = case.from_tensors(lambda kv: selfs.extend(kv) or cu.DynamicCache.from_legacy_cache(tuple(kv)),
                              "lazy", dt, b, h, dk, dk, lengths)
        x = case.from_tensors(lambda kv: crosses.extend(kv) or cu.DynamicCache.from_legacy_cache(tuple(kv)),
                              "lazy", dt, b, h, dk, dk, [enc] * n)
        legacy = tuple(sk + ck for sk, ck in zip(selfs, crosses))
        expected = cu.EncoderDecoderCache.from_legacy_cache(legacy)
        e = case.ed_create(a, x)
        slot = case.slots[e]
        assert slot.obj.is_updated == expected.is_updated
        slot.obj = expected  # the object transformers built from the legacy tuples
        slot.enc_len = enc
        for i in range(n):
            case.isupd(e, i)
            case.view(e, i, cross=True)
        hint = n
    else:
        # DynamicCache(config) with sliding layers below their window, and
        # 4.57's num_kv_shared_layers (the last layers get no cache)
        shared = rng.choice([0, 0, 1])
        nn = n + shared
        types = random_types(rng, nn, "fs")
        sw = rng.randint(2, 8) if "s" in types else 0
        cfg = make_config(nn, types, sw, 0, shared)
        dtypes = derived_types(nn, types, sw, 0, shared)
        case.create(cu.DynamicCache(config=cfg), preset_spec("dynamic", 0, nn, types, sw, 0, shared), dt, b, h,
                    dk, dk)
        hint = len(dtypes)
    Walker(case, BASIC | BATCH | {"crop", "crop_pos"}, layers_hint=hint).run(35)


def v453_batch_split(case):
    rng = case.rng
    dt, b, h, dk, _ = geometry(rng, same_dims=True)
    b = rng.randint(2, 4)
    dk = min(dk, 4)
    n = rng.randint(1, 3)
    ed = rng.random() < 0.35
    s = case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dk)
    if ed:
        x = case.create(cu.DynamicCache(), "lazy", dt, b, h, dk, dk)
        s = case.ed_create(s, x)
        case.slots[s].enc_len = rng.randint(1, 5)
    w = Walker(case, {"reorder", "clone"}, layers_hint=n)
    for _ in range(rng.randint(1, 3)):
        w.step(s)
    if ed:
        for i in range(n):
            case.cross(s, i)
    for _ in range(rng.randint(1, 3)):
        size = rng.randint(1, case.slots[s].batch)
        parts = case.split(s, size)
        for p in parts:
            for i in range(n):
                case.view(p, i)
                if ed:
                    case.view(p, i, cross=True)
                case.seqlen(p, i)
                case.usable(p, i, rng.randint(0, 4))
        if rng.random() < 0.5:
            # the splits live on as independent caches; equal updates keep them stackable
            n_new = tokens(rng)
            for p in parts:
                for i in range(n):
                    case.update(p, i, n_new)
        d = case.stack(parts)
        for i in range(n):
            case.view(d, i)
            if ed:
                case.view(d, i, cross=True)
            case.seqlen(d, i)
        for p in parts:
            case.drop(p)
        w.step(d)
        case.drop(s)
        s = d
    w.run(10)


def v453_static_usable(case):
    """The legacy StaticCache of 4.53, the last with get_usable_length: usable lengths of a bounded cache,
    written through cache_position (its get_seq_length counts non-zero slots, which the inputs never are)."""
    rng = case.rng
    dt, b, h, dk, _ = geometry(rng, same_dims=True)
    n, m = rng.randint(1, 3), rng.randint(2, 10)
    cfg = Config(num_hidden_layers=n, num_attention_heads=h, num_key_value_heads=h, head_dim=dk,
                 hidden_size=h * dk, max_position_embeddings=m)
    s = case.create(cu.StaticCache(config=cfg, max_batch_size=b, max_cache_len=m, dtype=DTYPES[dt]),
                    preset_spec("static", m, n, "", 0, 0), dt, b, h, dk, dk)
    pos = 0
    while True:
        for i in range(n):
            case.seqlen(s, i)
            for new in sorted({1, rng.randint(1, m + 2), m - pos + 1}):
                case.usable(s, i, new)
        if pos >= m:
            break
        k = rng.randint(1, min(3, m - pos))
        for i in range(n):
            case.update(s, i, k, positions=list(range(pos, pos + k)))
        pos += k


# ------------------------------------------------------------------ 5.24 families


def ask_queries(case, s, rng):
    """What generate asks a cache between forwards: is_croppable of the cache and of a layer, the query
    offset and mask sizes of a layer (one past the last too), get_max_length(layer), Cache.batch_size."""
    nl = len(case.slots[s].cache())
    case.croppable(s, -1)
    if nl:
        case.croppable(s, rng.randrange(nl))
    i = rng.randrange(nl + 1)
    case.qoffset(s, i)
    case.mask(s, tokens(rng), i)
    case.maxlen(s, rng.randrange(-1, nl + 1))
    case.bsize(s)


def v5_static_crop(case):
    """5.24's crop of static, static sliding and static chunked layers as assisted decoding uses it: a
    forward of n candidate tokens, then a crop of the rejected ones, the stale slots left in place
    (returned by views and by the next update until it overwrites them); now and then a crop past the
    start, a positive crop, and static sliding layers whose window has moved (differences 61, 62)."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    if rng.random() < 0.6:
        preset = rng.choice(["static", "sliding_window", "hybrid", "hybrid_chunked"])
        n, types, sw, chunk, windows, chunked = static_sliding_setup(rng, preset)
        m = rng.randint(1, 12)
        s = case.create(cu.StaticCache(config=make_config(n, types, sw, chunk), max_cache_len=m),
                        preset_spec(preset, m, n, types, sw, chunk), dt, b, h, dk, dv, chunked, windows)
    else:
        n = rng.randint(1, 3)
        layers, spec, windows, chunked = custom_layers(rng, n, lambda i: rng.choice(["s", "ss", "sc"]))
        s = case.create(cu.Cache(layers=layers), spec, dt, b, h, dk, dv, chunked, windows)
    if rng.random() < 0.3:
        case.early(s, b, h, dk)
    w = Walker(case, BASIC | {"crop", "reset"})
    for _ in range(14):
        try:
            w.step(s)
            if rng.random() < 0.3:
                case.view(s, rng.randrange(n))
            r = rng.random()
            x = -rng.randint(0, w.last_n) if r < 0.75 else rng.randint(1, 6) if r < 0.85 else -rng.randint(1, 14)
            case.crop(s, x)
            case.seqlen(s, rng.randrange(n))
            case.view(s, rng.randrange(n))
            if rng.random() < 0.3:
                ask_queries(case, s, rng)
        except Skip:
            pass
    w.run(10)


def v5_queries(case):
    """is_croppable per kind and for the cache, get_query_offset and get_mask_sizes of MtpCache
    (layer + 1 ahead) and DFlashCache (the previous step's accepted tokens), get_max_length(layer),
    Cache.batch_size (-1 without static layers, ValueError when they disagree) and an FP8 quantized
    cache's is_croppable (5.23: yes, 5.24: no)."""
    rng = case.rng
    dt, b, h, dk, dv = geometry(rng)
    r = rng.random()
    n = rng.randint(1, 4)
    if r < 0.5:
        rule = "mtp" if r < 0.25 else "dflash"
        cls = cu.MtpCache if rule == "mtp" else getattr(cu, "DFlashCache")
        if rng.random() < 0.5:
            obj, spec = cls(), "lazy"
            chunked = []
        else:
            types = random_types(rng, n, "fsc")
            sw = rng.randint(2, 8) if "s" in types else 0
            chunk = rng.randint(2, 8) if "c" in types else 0
            obj = cls(config=make_config(n, types, sw, chunk))
            spec = preset_spec("dynamic", 0, n, types, sw, chunk)
            chunked = [i for i, t in enumerate(types) if t == "c"]
        sl = case.new_slot()
        case.slots[sl] = Slot(obj, dt, b, h, dk, dv, chunked)
        case.out.op(f"rcreate {sl} {rule} {spec}")
        case.layout(sl)
    elif r < 0.85:
        layers, spec, windows, chunked = custom_layers(rng, n, lambda i: rng.choice(["d", "ds", "dc", "s", "ss", "sc"]))
        sl = case.create(cu.Cache(layers=layers), spec, dt, b, h, dk, dv, chunked, windows)
        if rng.random() < 0.3 and n > 1 and any(is_static(layer) for layer in layers):
            # static layers of different batches: Cache.batch_size raises
            i = next(i for i, layer in enumerate(layers) if is_static(layer))
            case.update(sl, i, 1)
            case.bsize(sl)
            case.slots[sl].batch = b + 1 if b < 4 else b - 1
            for j in range(n):
                if j != i and is_static(layers[j]):
                    case.update(sl, j, 1)
            case.bsize(sl)
            return
    else:
        sl = case.new_slot()
        case.slots[sl] = Slot(cu.QuantizedCache("fp8", make_config(n)), dt, b, h, dk, dv)
        case.out.op(f"qcreate {sl} fp8 {n} 0 0 0 0 0")
    ask_queries(case, sl, rng)
    w = Walker(case, BASIC | {"crop", "record", "reset"} if r < 0.85 else {"update", "maxlen"})
    for _ in range(10):
        try:
            w.step(sl)
            if case.slots[sl].obj.__class__.__name__ == "DFlashCache" and rng.random() < 0.6:
                case.accepted(sl, rng.randint(0, 5))
            ask_queries(case, sl, rng)
            if r < 0.85 and rng.random() < 0.4:
                case.crop(sl, -rng.randint(0, w.last_n))
                ask_queries(case, sl, rng)
        except Skip:
            pass


ONLY_524 = {"v5_static_crop"}
SUITES = {
    "v5": [("v5_dynamic", v5_dynamic_lazy, 14), ("v5_dynamic_config", v5_dynamic_config, 16),
           ("v5_static", v5_static, 14), ("v5_static_sliding", v5_static_sliding, 22),
           ("v5_custom", v5_custom, 14), ("v5_encdec", v5_encdec, 12), ("v5_from_tensors", v5_from_tensors, 10),
           ("v5_queries", v5_queries, 24), ("v5_static_crop", v5_static_crop, 24)],
    "v457": [("v457_static_positions", v457_static_positions, 18), ("v457_legacy", v457_legacy, 14)],
    "v453": [("v453_batch_split", v453_batch_split, 7), ("v453_static_usable", v453_static_usable, 12)],
}


def main():
    args = arguments(20260, SUITES)
    # Families of what only 5.24 has (static crop) are not written by older releases.
    files = [f for f in SUITES[args.suite] if STATIC_CROP or f[0] not in ONLY_524]
    write_files(args.out, args.seed, args.suite, files,
                lambda family, out, label, rng, c: family(Case(out, label, rng)))


if __name__ == "__main__":
    main()
