#!/usr/bin/env python3
"""Writes the conformance vectors of linear-attention (recurrent state) layers.

Three transformers versions hold the reference behaviour:

  * v5 (5.23, `.venv-torch`): LinearAttentionLayer and its four hybrids with
    attention, as DynamicCache(config) and StaticCache(config) build them from
    Mamba-, Jamba-, Bamba-, Qwen3-Next- and hybrid-like configs (docs/semantics.md, 'Linear-attention layers', 'Layer types and presets' and 'The cache as a whole'):
    update_conv_state, update_recurrent_state, K/V updates of the attention
    parts, crop with past recording, reorder, reset, early initialization,
    has_previous_state, get_seq_length / get_mask_sizes (redirected from
    linear layers), get_max_length.  Files v5_linear*.kvv.
  * v453 (4.53.3, `.venv-tf4.53.3`): the legacy MambaCache (docs/semantics.md, 'Legacy Mamba caches';
    generation 2): update_conv_state with cache_position (roll left by one,
    write at the clamped positions), update_ssm_state, reset.  v453_mamba.kvv.
  * v457 (4.57.6, `.venv-tf4.57.6`): Jamba's HybridMambaAttentionDynamicCache
    (docs/semantics.md, 'Legacy Mamba caches'), driven the way JambaMambaMixer's slow path drives it, and its
    reorder_cache over key, value, conv and ssm entries.  v457_jamba.kvv.

The format, the seeded inputs and the recording rules are those of
generate.py (imported, not copied); the operations this file adds (`lcreate`,
`llayout`, `conv`, `rec`, `state`, `hasprev`, `lseqlen`, `lmask`) are
documented in replay_linear.c and docs/conformance.md. N-D tensors are
written as their number of dimensions followed by a 4-D tensor token whose
shape is the N-D shape padded with trailing 1s (`0` = no tensor, `-` = not
checked).

Deliberate differences (docs/differences-from-transformers.md) are not
generated: batch_select_indices / batch_repeat_interleave on linear layers
(kvcache moves states too, transformers has no such methods or leaves the
states), crop of a recording linear layer with a conv state never written
(transformers fails on None), inputs whose dtype differs from the stored
state's (torch casts), recurrent states of another shape (torch broadcasts),
a conv kernel size passed after the state exists that differs from it
(transformers ignores it), and the views transformers 5.23 no longer has
after reset() of a dynamic attention part.

Run: .venv-torch/bin/python generate_linear.py --suite v5 --out vectors (and
the v453 / v457 suites with their venvs' python).
"""
import torch
import torch.nn.functional as F
import transformers
from transformers import cache_utils as cu

from generate import (DTYPES, STATIC_CROP, Case, Planned, Skip, Slot, expect, gen_spec, make_tensor,
                      static_crop_difference)
from vectorgen import arguments, run_skipping, write_files

TF_VERSION = tuple(int(x) for x in transformers.__version__.split(".")[:2])
IS_V5 = TF_VERSION[0] >= 5
Config = getattr(transformers, "PreTrainedConfig", None) or transformers.PretrainedConfig
DT_NAME = {v: k for k, v in DTYPES.items()}
LETTER_TYPE = {"f": "full_attention", "s": "sliding_attention", "c": "chunked_attention",
               "l": "linear_attention", "h": "hybrid", "w": "hybrid_sliding"}
KIND = {"DynamicLayer": "d", "DynamicSlidingWindowLayer": "ds", "StaticLayer": "s", "StaticSlidingWindowLayer": "ss",
        "LinearAttentionLayer": "l", "LinearAttentionAndFullAttentionLayer": "ld",
        "LinearAttentionAndSlidingWindowAttentionLayer": "lds", "LinearAttentionAndStaticFullAttentionLayer": "ls",
        "LinearAttentionAndStaticSlidingWindowAttentionLayer": "lss"}


# ------------------------------------------------------------------ tensors


def pad4(shape):
    shape = tuple(int(x) for x in shape)
    return shape + (1,) * (4 - len(shape))


def nd_input(dt, shape, seed):
    return f"{len(shape)} {gen_spec(dt, pad4(shape), seed)}"


def nd_expect(t):
    """`0` for no tensor, else NDIM and the 4-D token of the tensor padded with trailing 1s."""
    if t is None:
        return "0"
    return f"{t.dim()} {expect(t.reshape(pad4(t.shape)), DT_NAME[t.dtype])}"


# ------------------------------------------------------------------ layers


def is_linear(layer):
    return IS_V5 and isinstance(layer, cu.LinearAttentionCacheLayerMixin)


def has_kv(layer):
    return not IS_V5 or isinstance(layer, cu.CacheLayerMixin)


def is_static_kv(layer):
    return isinstance(layer, cu.StaticLayer)


def is_dyn_sliding(layer):
    return isinstance(layer, cu.DynamicSlidingWindowLayer)


def kv_initialized(layer):
    return getattr(layer, "is_initialized", False)


class LinearSlot(Slot):
    """A cache with linear layers: K/V geometry (Slot) plus, per (layer, state), the conv and recurrent states'
    geometry chosen at their first write and the way the caller passes the conv kernel size."""

    def __init__(self, obj, dt, batch, heads, dk, dv, windows=None):
        super().__init__(obj, dt, batch, heads, dk, dv, (), windows)
        self.conv = {}  # (layer, state) -> dict(c, k, dt, policy)
        self.rec = {}  # (layer, state) -> dict(shape, dt)

    def layers(self):
        return getattr(self.obj, "layers", None)


# ------------------------------------------------------------------ a case


def conv_branch(slot, i, st, n, kw, positions):
    """Which rule of docs/semantics.md ('Linear-attention layers', 'Legacy Mamba caches') an update_conv_state follows
    (for the coverage table)."""
    if positions is not None:
        return "legacy cache_position (roll, clamped write)"
    layer = slot.layers()[i] if slot.layers() is not None else None
    if layer is None or not is_linear(layer) or st >= layer.number_of_states:
        return "refused"
    k = layer.conv_kernel_size[st] or kw or n
    if not layer.has_previous_state[st]:
        if layer.record_past:
            return "first call, recording (not padded)"
        return "first call, padded to K" if n < k else "first call, n >= K"
    return "later call, recording (state grows)" if layer.record_past else "later call (keeps the last K)"


class LinearCase(Case):
    """Case with the operations of linear-attention layers; every method runs
    the operation on transformers first and records what it did."""

    def call(self, head, fn, errors=None, predicted=None, fmt=lambda r: ""):
        """Runs fn() (which must look its cache up through self.slots); records `head ok FMT(result)` or,
        when `predicted` says exactly which error, `head err CODE CLASS`."""
        errors = errors or {}

        def run():
            try:
                return fn()
            except tuple(errors) as exc:
                raise Planned(errors[type(exc)], type(exc).__name__) from exc

        try:
            res = self.attempt(run)
        except Planned as p:
            if p.code != predicted:
                raise Skip(f"{p.code} raised, {predicted} predicted") from None
            self.out.op(f"{head} err {p.code} {p.cls}")
            return False, None
        if predicted is not None:
            raise Skip(f"{predicted} predicted, nothing raised")
        self.out.op(f"{head} ok {fmt(res)}".rstrip())
        return True, res

    # ----------------------------------------------------------- creation

    def lcreate(self, obj, spec, dt, batch, heads, dk, dv, windows=None):
        s = self.new_slot()
        self.slots[s] = LinearSlot(obj, dt, batch, heads, dk, dv, windows)
        self.out.op(f"lcreate {s} {spec}")
        self.llayout(s)
        return s

    def llayout(self, s):
        ls = self.slots[s].layers()
        if ls is None:
            return
        c = self.slots[s].obj
        toks = [f"llayout {s} {len(ls)}"]
        for layer, lin in zip(ls, c.is_linear):
            window = getattr(layer, "sliding_window", None) or self.slots[s].windows.get(id(layer), 0)
            toks.append(f"{KIND[type(layer).__name__]} {window} {int(layer.get_max_length())} {int(lin)}")
        self.out.op(" ".join(toks))

    # ----------------------------------------------------------- states

    def conv_geom(self, s, i, st, rng):
        slot = self.slots[s]
        g = slot.conv.get((i, st))
        if g is None:
            g = {"c": rng.randint(1, 3), "k": rng.randint(1, 4), "dt": rng.choice(["f32", "f16", "bf16"]),
                 "policy": rng.choice(["always", "always", "first", "never"]), "written": False}
            slot.conv[(i, st)] = g
        return g

    def conv(self, s, i, st, n, positions=None, channels=None, expect_error=None):
        """update_conv_state of n columns; `positions`: the legacy cache_position protocol (4.53)."""
        slot = self.slots[s]
        g = self.conv_geom(s, i, st, self.rng)
        c = channels or g["c"]
        kw = g["k"] if g["policy"] == "always" or (g["policy"] == "first" and not g["written"]) else None
        if kw is None and not g["written"] and n == 0:
            raise Skip("K would be 0")
        seed = self.seed()
        x = make_tensor(g["dt"], (slot.batch, c, n), seed)
        pos = "-" if positions is None else f"p {len(positions)} " + " ".join(map(str, positions))
        head = f"conv {s} {i} {st} {kw or 0} {nd_input(g['dt'], x.shape, seed)} {pos}"
        if positions is not None:
            def fn():
                return self.slots[s].obj.update_conv_state(i, x, torch.tensor(positions))
        elif kw is None:
            def fn():
                return self.slots[s].obj.update_conv_state(x, i, st)
        else:
            def fn():
                return self.slots[s].obj.update_conv_state(x, i, st, conv_kernel_size=kw)
        branch = conv_branch(slot, i, st, n, kw, positions)
        errors = {ValueError: "INVALID_ARGUMENT", KeyError: "OUT_OF_RANGE", RuntimeError: "SHAPE_MISMATCH"}
        ok, _ = self.call(head, fn, errors, expect_error, lambda r: nd_expect(r))
        if ok:
            self.slots[s].conv[(i, st)]["written"] = True
            self.out.stats[f"conv branch: {branch}"] += 1
        return ok

    def mixer_conv(self, s, i, n, prefill):
        """Jamba's slow path on a HybridMambaAttentionDynamicCache (4.57): a prefill stores x left-padded (or cut) to
        d_conv columns, a one-token decode rolls the state left and writes the new column last. kvcache's
        update_conv_state (first call, then one column per call) stores the same; what it returns is not recorded."""
        slot = self.slots[s]
        g = slot.conv[(i, 0)]
        seed = self.seed()
        x = make_tensor(g["dt"], (slot.batch, g["c"], n), seed)

        def fn():
            cache = self.slots[s].obj
            if prefill:
                cache.conv_states[i] = F.pad(x, (g["k"] - n, 0))
            else:
                state = torch.roll(cache.conv_states[i], shifts=-1, dims=-1)
                state[:, :, -1] = x[:, :, 0]
                cache.conv_states[i] = state

        self.call(f"conv {s} {i} 0 {g['k']} {nd_input(g['dt'], x.shape, seed)} -", fn, fmt=lambda r: "-")

    def rec_geom(self, s, i, st, rng):
        slot = self.slots[s]
        g = slot.rec.get((i, st))
        if g is None:
            inner = rng.choice([(2,), (2, 3), (3, 2), (1, 2, 2), (2, 1, 3)])
            g = {"shape": (slot.batch,) + inner, "dt": rng.choice(["f32", "f32", "f16", "bf16"])}
            slot.rec[(i, st)] = g
        return g

    def rec(self, s, i, st, expect_error=None, legacy=False):
        slot = self.slots[s]
        g = self.rec_geom(s, i, st, self.rng)
        seed = self.seed()
        x = make_tensor(g["dt"], g["shape"], seed)
        head = f"rec {s} {i} {st} {nd_input(g['dt'], x.shape, seed)}"
        if legacy:
            def fn():
                return self.slots[s].obj.update_ssm_state(i, x)
        else:
            def fn():
                return self.slots[s].obj.update_recurrent_state(x, i, st)
        errors = {ValueError: "INVALID_ARGUMENT", KeyError: "OUT_OF_RANGE"}
        self.call(head, fn, errors, expect_error, lambda r: nd_expect(r))

    def mixer_ssm(self, s, i):
        """Jamba's mixer assigns the scan's final state: kvcache copies it in place."""
        slot = self.slots[s]
        g = slot.rec[(i, 0)]
        seed = self.seed()
        x = make_tensor(g["dt"], g["shape"], seed)

        def fn():
            self.slots[s].obj.ssm_states[i] = x

        self.call(f"rec {s} {i} 0 {nd_input(g['dt'], x.shape, seed)}", fn, fmt=lambda r: "-")

    def state(self, s, i, st, conv_known=True, rec_known=True):
        """conv_states[st] and recurrent_states[st] of layer i (`0`: never written)."""
        cache = self.slots[s].obj
        if IS_V5:
            layer = cache.layers[i]
            cv, rv = layer.conv_states[st], layer.recurrent_states[st]
        else:
            cv, rv = cache.conv_states[i], cache.ssm_states[i]
        self.out.op(f"state {s} {i} {st} {nd_expect(cv) if conv_known else '-'} {nd_expect(rv) if rec_known else '-'}")

    def hasprev(self, s, i, st):
        """has_previous_state(layer, state); -1 stands for None."""
        cache = self.slots[s].obj
        ls = cache.layers
        predicted = None
        if i >= len(ls):
            pass
        elif i < 0:
            if not any(is_linear(layer) for layer in ls):
                predicted = "INVALID_ARGUMENT"
        elif not is_linear(ls[i]):
            predicted = "INVALID_ARGUMENT"
        if predicted is None and 0 <= i < len(ls) and st >= ls[i].number_of_states:
            predicted = "OUT_OF_RANGE"
        if predicted is None and i < 0 and st >= 0:
            last = [layer for layer in ls if is_linear(layer)][-1]
            if st >= last.number_of_states:
                predicted = "OUT_OF_RANGE"

        def fn():
            return self.slots[s].obj.has_previous_state(None if i < 0 else i, None if st < 0 else st)

        self.call(f"hasprev {s} {i} {st}", fn, {ValueError: "INVALID_ARGUMENT", KeyError: "OUT_OF_RANGE"},
                  predicted, lambda r: str(int(bool(r))))

    # ----------------------------------------------------------- attention parts

    def kv_update(self, s, i, n):
        """Cache.update on layer i: the attention part of a hybrid, or AttributeError on a pure linear layer."""
        slot = self.slots[s]
        h, dk, dv = slot.geom(i)
        ks, vs = self.seed(), self.seed()
        k = make_tensor(slot.dt, (slot.batch, h, n, dk), ks)
        v = make_tensor(slot.dt, (slot.batch, h, n, dv), vs)
        ls = slot.layers()
        layer = ls[i] if ls is not None else None
        predicted = None
        if layer is not None and not has_kv(layer):
            predicted = "UNSUPPORTED"
        elif layer is not None and is_static_kv(layer) and not isinstance(layer, cu.StaticSlidingWindowLayer):
            if int(layer.get_seq_length()) + n > layer.max_cache_len:
                predicted = "OUT_OF_RANGE"

        def fn():
            return self.slots[s].obj.update(k, v, i)

        head = f"update {s} {i} {gen_spec(slot.dt, k.shape, ks)} {gen_spec(slot.dt, v.shape, vs)} -"
        ok, _ = self.call(head, fn, {AttributeError: "UNSUPPORTED", IndexError: "OUT_OF_RANGE"}, predicted,
                          lambda r: f"{expect(r[0], slot.dt)} {expect(r[1], slot.dt)}")
        if ok:
            self.slots[s].reset_layers.discard(i)
        return ok

    def kv_view(self, s, i):
        slot = self.slots[s]
        ls = slot.layers()
        if ls is not None and has_kv(ls[i]) and (i in slot.reset_layers and not is_static_kv(ls[i])):
            return  # 5.23 un-initializes a reset dynamic layer; kvcache keeps it, empty
        if ls is None:
            cache = slot.obj
            if cache.key_cache[i].dim() != 4:
                return  # Jamba's [batch, 0] placeholder before the first update
            self.out.op(f"view {s} {i} ok {expect(cache.key_cache[i], slot.dt)} {expect(cache.value_cache[i], slot.dt)}")
            return
        layer = ls[i]
        if not has_kv(layer):
            self.call(f"view {s} {i}", lambda: self.slots[s].obj.layers[i].keys, {AttributeError: "UNSUPPORTED"},
                      "UNSUPPORTED")
            return
        if not kv_initialized(layer):
            self.out.op(f"view {s} {i} err INVALID_STATE NotInitialized")
            return
        self.out.op(f"view {s} {i} ok {expect(layer.keys, slot.dt)} {expect(layer.values, slot.dt)}")

    def lseqlen(self, s, i):
        ls = self.slots[s].layers()
        predicted = None
        if ls is not None and i < len(ls) and not has_kv(ls[i]):
            if i != 0 or not any(has_kv(layer) for layer in ls):
                predicted = "INVALID_ARGUMENT"
        self.call(f"lseqlen {s} {i}", lambda: self.slots[s].obj.get_seq_length(i), {ValueError: "INVALID_ARGUMENT"},
                  predicted, lambda r: str(int(r)))

    def lmask(self, s, q, i):
        ls = self.slots[s].layers()
        predicted = None
        if i < len(ls) and not has_kv(ls[i]):
            if i != 0 or not any(has_kv(layer) for layer in ls):
                predicted = "INVALID_ARGUMENT"
        self.call(f"lmask {s} {q} {i}", lambda: self.slots[s].obj.get_mask_sizes(q, i),
                  {ValueError: "INVALID_ARGUMENT"}, predicted, lambda r: f"{int(r[0])} {int(r[1])}")

    def lcrop(self, s, x):
        """crop(x), x <= 0, with the errors transformers raises layer by layer
        (docs/semantics.md, 'Linear-attention layers' and 'Hybrid linear-attention layers')."""
        slot = self.slots[s]
        predicted = set()
        plain_static = [layer for layer in slot.layers() if is_static_kv(layer) and not is_linear(layer)]
        if STATIC_CROP and plain_static and static_crop_difference(plain_static, x) is not None:
            raise Skip("a 5.24 static crop where kvcache differs: recorded by generate.py's v5_static_crop")
        for layer in slot.layers():
            if x > 0 and not is_linear(layer):
                raise Skip("positive crop of an attention layer: 5.23 refuses, kvcache keeps the legacy meaning")
            if is_linear(layer):
                if not layer.record_past or x > 0:
                    predicted.add("INVALID_STATE")
                    continue
                if any(layer.conv_states[j] is None for j in range(layer.number_of_states)):
                    raise Skip("a recording conv state never written (transformers slices None)")
                if isinstance(layer, (cu.StaticLayer,)):
                    continue  # static hybrids crop the linear part only
            if is_static_kv(layer):
                if not STATIC_CROP:
                    predicted.add("UNSUPPORTED")
            elif is_dyn_sliding(layer):
                if not kv_initialized(layer):
                    raise Skip("sliding attention part never updated (transformers reads None.shape)")
                if layer.cumulative_length >= layer.sliding_window:
                    if not layer.record_past:
                        predicted.add("INVALID_STATE")
                    elif -x > layer.cumulative_length:
                        raise Skip("would make the cumulative length negative")
        if len(predicted) > 1:
            raise Skip("several errors possible; the order is not specified")
        self.call(f"crop {s} {x}", lambda: self.slots[s].obj.crop(x),
                  {RuntimeError: "INVALID_STATE", AttributeError: "UNSUPPORTED"},
                  next(iter(predicted)) if predicted else None)


# ------------------------------------------------------------------ v5 walks


def v5_config(rng, types, window, states):
    kw = {"num_hidden_layers": len(types), "layer_types": [LETTER_TYPE[t] for t in types]}
    if window:
        kw["sliding_window"] = window
    if states:
        kw["number_of_conv_states"] = states
    return Config(**kw)


TYPE_LETTER = {v: k for k, v in LETTER_TYPE.items()}


def model_config(rng, model, n):
    """A small config of a real model class; its layer_types come from the class (Jamba: attn_layer_period /
    offset, Bamba: attn_layer_indices, Qwen3-Next: full_attention_interval)."""
    small = {"num_hidden_layers": n, "hidden_size": 4}
    attn = {"num_attention_heads": 1, "num_key_value_heads": 1}
    if model == "mamba":
        return transformers.MambaConfig(intermediate_size=4, state_size=2, conv_kernel=3, **small)
    if model == "mamba2":
        return transformers.Mamba2Config(num_heads=2, head_dim=4, expand=2, n_groups=1, state_size=2, **small)
    if model == "jamba":
        period = rng.randint(1, 3)
        return transformers.JambaConfig(attn_layer_period=period, attn_layer_offset=rng.randrange(period), **small, **attn)
    if model == "bamba":
        return transformers.BambaConfig(attn_layer_indices=rng.sample(range(n), rng.randint(1, n)), mamba_n_heads=2,
                                        mamba_d_head=4, mamba_expand=2, **small, **attn)
    return transformers.Qwen3NextConfig(full_attention_interval=rng.randint(1, 3), **small, **attn)


def kv_geometry(rng):
    dt = rng.choice(["f32", "f16", "bf16"])
    return dt, rng.choice([1, 1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 2, 4]), rng.choice([1, 2, 3])


class Walk:
    """Random operations on one slot of a 5.x cache: forward passes (masks and K/V updates of attention parts,
    conv and recurrent updates of linear parts), queries, and the operations every layer shares."""

    def __init__(self, case, s):
        self.case, self.rng, self.s = case, case.rng, s

    def layers(self):
        return self.case.slots[self.s].layers()

    def linear_ids(self):
        return [i for i, layer in enumerate(self.layers()) if is_linear(layer)]

    def kv_ids(self):
        return [i for i, layer in enumerate(self.layers()) if has_kv(layer)]

    def room(self, i):
        layer = self.layers()[i]
        if is_static_kv(layer) and not isinstance(layer, cu.StaticSlidingWindowLayer):
            return layer.max_cache_len - int(layer.get_seq_length())
        return None

    def longest_conv(self):
        return max([int(layer.conv_states[j].shape[-1]) for layer in self.layers() if is_linear(layer)
                    for j in range(layer.number_of_states) if layer.conv_states[j] is not None] or [0])

    def forward(self):
        case, rng, s = self.case, self.rng, self.s
        n = 1 if rng.random() < 0.6 else rng.randint(2, 7)
        rooms = [r for r in (self.room(i) for i in self.kv_ids()) if r is not None]
        if rooms and n > min(rooms):
            if min(rooms) <= 0:
                raise Skip("full static layer")
            n = rng.randint(1, min(rooms))
        for i, layer in enumerate(self.layers()):
            if has_kv(layer):
                if rng.random() < 0.6:
                    case.lmask(s, n, i)
                case.kv_update(s, i, n)
            if is_linear(layer):
                for st in range(layer.number_of_states):
                    if rng.random() < 0.85:
                        case.conv(s, i, st, n)
                    if rng.random() < 0.6:
                        case.rec(s, i, st)

    def crop_value(self):
        r = self.rng.random()
        if r < 0.1:
            return self.rng.randint(1, 3)
        if r < 0.35:
            return 0
        return -self.rng.randint(1, 5)

    def one(self):
        case, rng, s = self.case, self.rng, self.s
        ls = self.layers()
        lin, kv = self.linear_ids(), self.kv_ids()
        if self.longest_conv() > 12 and any(layer.record_past for layer in ls if is_linear(layer)):
            case.lcrop(s, -rng.randint(0, 3))
        ops = [("forward", 20), ("conv", 6), ("rec", 4), ("state", 10), ("hasprev", 5), ("seqlen", 5), ("mask", 4),
               ("maxlen", 2), ("view", 4), ("crop", 6), ("record", 2), ("reorder", 4), ("reset", 2), ("clone", 2),
               ("bad", 4)]
        op = rng.choices([o for o, _ in ops], [w for _, w in ops])[0]
        n_layers = len(ls)
        if op == "forward":
            self.forward()
        elif op == "conv" and lin:
            i = rng.choice(lin)
            case.conv(s, i, rng.randrange(ls[i].number_of_states), rng.choice([1, 1, 2, 5, 0]))
        elif op == "rec" and lin:
            i = rng.choice(lin)
            case.rec(s, i, rng.randrange(ls[i].number_of_states))
        elif op == "state" and lin:
            i = rng.choice(lin)
            case.state(s, i, rng.randrange(ls[i].number_of_states))
        elif op == "hasprev":
            i = rng.choice(lin + [-1, -1, rng.randrange(n_layers + 1)])
            st = rng.choice([-1, 0, 0, 1])
            case.hasprev(s, i, st)
        elif op == "seqlen":
            case.lseqlen(s, rng.randrange(n_layers + 1))
        elif op == "mask":
            case.lmask(s, rng.randint(1, 4), rng.randrange(n_layers + 1))
        elif op == "maxlen":
            case.maxlen(s, rng.randrange(-1, n_layers + 1))
        elif op == "view":
            case.kv_view(s, rng.randrange(n_layers))
        elif op == "crop":
            case.lcrop(s, self.crop_value())
        elif op == "record":
            case.record(s)
        elif op == "reorder":
            case.reorder(s)
        elif op == "reset":
            case.reset(s)
        elif op == "clone":
            if len(case.slots) < 3:
                d = case.clone(s)
                Walk(case, d).run(rng.randint(2, 6))
                case.drop(d)
        elif op == "bad":
            self.bad()

    def bad(self):
        """Calls transformers refuses: states of attention layers, K/V of linear layers, a state index too large,
        a conv input whose channels or batch differ from the stored state's."""
        case, rng, s = self.case, self.rng, self.s
        ls = self.layers()
        lin, kv = self.linear_ids(), self.kv_ids()
        pure_kv = [i for i in kv if not is_linear(ls[i])]
        pure_lin = [i for i in lin if not has_kv(ls[i])]
        what = rng.randrange(5)
        if what == 0 and pure_kv:
            i = rng.choice(pure_kv)
            if rng.random() < 0.5:
                case.conv(s, i, 0, 1, expect_error="INVALID_ARGUMENT")
            else:
                case.rec(s, i, 0, expect_error="INVALID_ARGUMENT")
        elif what == 1 and pure_lin:
            case.kv_update(s, rng.choice(pure_lin), 1)
        elif what == 2 and lin:
            i = rng.choice(lin)
            if rng.random() < 0.5:
                case.conv(s, i, ls[i].number_of_states, 1, expect_error="OUT_OF_RANGE")
            else:
                case.rec(s, i, ls[i].number_of_states, expect_error="OUT_OF_RANGE")
        elif what == 3 and lin:
            i = rng.choice(lin)
            st = rng.randrange(ls[i].number_of_states)
            if ls[i].has_previous_state[st]:
                g = case.slots[s].conv[(i, st)]
                case.conv(s, i, st, 1, channels=g["c"] + 1, expect_error="SHAPE_MISMATCH")
        elif what == 4 and lin:
            i = rng.choice(lin)
            case.state(s, i, rng.randrange(ls[i].number_of_states))

    def run(self, count):
        run_skipping(self.one, count)


def v5_family(case, letters, presets, states_choices, window_choices, models=()):
    rng = case.rng
    n = rng.randint(1, 4)
    preset = rng.choice(presets)
    dt, b, h, dk, dv = kv_geometry(rng)
    model = rng.choice(("generic",) + tuple(models))
    if model == "generic":
        types = "".join(rng.choice(letters) for _ in range(n))
        window = rng.choice(window_choices) if any(t in "sw" for t in types) else 0
        states = rng.choice(states_choices)
        cfg = v5_config(rng, types, window, states)
    else:
        cfg = model_config(rng, model, n)
        types = "".join(TYPE_LETTER[t] for t in cfg.layer_types)
        window, states = 0, 0
        if preset == "mamba" and "f" in types:
            preset = "hybrid_mamba"
    maxlen = rng.randint(4, 12) if preset == "static" else 0
    obj = cu.StaticCache(config=cfg, max_cache_len=maxlen) if preset == "static" else cu.DynamicCache(config=cfg)
    spec = f"{preset} {maxlen} {n} {window} {states} 0 {types}"
    windows = {}
    for layer in obj.layers:
        if isinstance(layer, cu.StaticSlidingWindowLayer):
            windows[id(layer)] = window
    s = case.lcreate(obj, spec, dt, b, h, dk, dv, windows)
    case.slots[s].windows = {}  # only llayout needed them, and layer ids change under deepcopy
    if any(is_static_kv(layer) for layer in obj.layers) and rng.random() < 0.3:
        try:
            case.early(s, b, h, dk)
        except Skip:
            pass
    if rng.random() < 0.3:
        case.record(s)
    Walk(case, s).run(rng.randint(25, 45))


def v5_linear(case):
    """Mamba / Mamba2-like: every layer linear_attention (DynamicCache or StaticCache of LinearAttentionLayer)."""
    v5_family(case, "l", ["dynamic", "static", "mamba"], [0, 1, 2, 3], [0], ("mamba", "mamba2"))


def v5_linear_hybrid(case):
    """Jamba / Bamba / Qwen3-Next-like: linear layers between full and sliding attention layers."""
    v5_family(case, "llfs", ["dynamic", "static", "hybrid_mamba"], [0, 1, 2], [2, 3, 5], ("jamba", "bamba", "qwen3_next"))


def v5_linear_layers(case):
    """hybrid and hybrid_sliding layer types: linear state and attention in one layer (docs/semantics.md, 'Hybrid linear-attention layers')."""
    v5_family(case, "hhwwlf", ["dynamic", "static"], [0, 1, 2], [2, 3, 6])  # window 1: a documented difference


# ------------------------------------------------------------------ legacy walks


def v453_mamba(case):
    """MambaCache of 4.53 (generation 2): the cache_position protocol, update_ssm_state, reset."""
    rng = case.rng
    n_layers, batch = rng.randint(1, 3), rng.randint(1, 3)
    c, k, n_state = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 3)
    dt = rng.choice(["f32", "f16", "bf16"])
    cfg = transformers.MambaConfig(num_hidden_layers=n_layers, hidden_size=2, intermediate_size=c, state_size=n_state,
                                   conv_kernel=k, expand=1)
    obj = cu.MambaCache(cfg, max_batch_size=batch, dtype=DTYPES[dt])
    s = case.lcreate(obj, f"mamba 0 {n_layers} 0 0 {k} -", dt, batch, 1, 1, 1)
    case.out.op(f"nlayers {s} {len(obj.conv_states)}")
    slot = case.slots[s]
    for i in range(n_layers):
        slot.conv[(i, 0)] = {"c": c, "k": k, "dt": dt, "policy": "never", "written": False}
        slot.rec[(i, 0)] = {"shape": (batch, c, n_state), "dt": dt}
    written = {"conv": set(), "rec": set()}
    t = 0
    for _ in range(rng.randint(15, 30)):
        r = rng.random()
        i = rng.randrange(n_layers)
        if r < 0.45:
            if (i, 0) not in written["conv"] or rng.random() < 0.15:
                pos = list(range(k))  # prefill: the whole state (also what generation 4's cache_init does)
            elif rng.random() < 0.7:
                pos = [t + k]  # decode: clamped to K-1
            else:
                pos = [rng.randint(-2, k + 2)]
            case.conv(s, i, 0, len(pos), positions=pos)
            written["conv"].add((i, 0))
            t += 1
        elif r < 0.65:
            case.rec(s, i, 0, legacy=True)
            written["rec"].add((i, 0))
        elif r < 0.9:
            case.state(s, i, 0, (i, 0) in written["conv"], (i, 0) in written["rec"])
        else:
            case.attempt(lambda: case.slots[s].obj.reset())
            case.out.op(f"reset {s}")
    for i in range(n_layers):
        case.state(s, i, 0, (i, 0) in written["conv"], (i, 0) in written["rec"])


def v457_jamba(case):
    """Jamba's HybridMambaAttentionDynamicCache of 4.57, driven like the mixer and attention layers of a forward
    pass, then reordered for beam search: every key, value, conv and ssm entry follows the beams."""
    from transformers.models.jamba.modeling_jamba import HybridMambaAttentionDynamicCache
    rng = case.rng
    n_layers = rng.randint(2, 4)
    period, offset = rng.choice([(2, 1), (2, 0), (3, 1)])
    d_conv, d_state, expand = rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 2)
    batch = rng.randint(1, 3)
    dt = rng.choice(["f32", "f16", "bf16"])
    heads, head_dim = 1, 2
    cfg = transformers.JambaConfig(num_hidden_layers=n_layers, hidden_size=2, num_attention_heads=1,
                                   num_key_value_heads=1, attn_layer_period=period, attn_layer_offset=offset,
                                   mamba_d_conv=d_conv, mamba_d_state=d_state, mamba_expand=expand,
                                   num_experts=1, expert_layer_period=1, expert_layer_offset=0)
    obj = HybridMambaAttentionDynamicCache(cfg, batch, dtype=DTYPES[dt])
    types = "".join("l" if b == "mamba" else "f" for b in cfg.layers_block_type)
    s = case.lcreate(obj, f"hybrid_mamba 0 {n_layers} 0 0 {d_conv} {types}", dt, batch, heads, head_dim, head_dim)
    case.out.op(f"nlayers {s} {len(obj.key_cache)}")
    slot = case.slots[s]
    mamba = [i for i, t in enumerate(types) if t == "l"]
    attn = [i for i, t in enumerate(types) if t == "f"]
    for i in mamba:
        slot.conv[(i, 0)] = {"c": expand * 2, "k": d_conv, "dt": dt, "policy": "always", "written": False}
        slot.rec[(i, 0)] = {"shape": (batch, expand * 2, d_state), "dt": dt}
    prefill = True
    for step in range(rng.randint(3, 7)):
        n = rng.randint(1, 6) if prefill else 1
        for i in range(n_layers):
            if i in mamba:
                case.mixer_conv(s, i, n, prefill)
                case.mixer_ssm(s, i)
            else:
                case.kv_update(s, i, n)
        prefill = False
        if rng.random() < 0.6:
            case.reorder(s)
        for i in range(n_layers):
            if i in mamba:
                case.state(s, i, 0)
            else:
                case.kv_view(s, i)
        if attn:
            case.lseqlen(s, rng.choice(attn + [0]))  # index 0 of a mamba layer means the first attention layer


# ------------------------------------------------------------------ main

SUITES = {
    "v5": [("v5_linear", v5_linear, 16), ("v5_linear_hybrid", v5_linear_hybrid, 16),
           ("v5_linear_layers", v5_linear_layers, 16)],
    "v453": [("v453_mamba", v453_mamba, 14)],
    "v457": [("v457_jamba", v457_jamba, 12)],
}


def main():
    args = arguments(20261, SUITES)
    write_files(args.out, args.seed, args.suite, SUITES[args.suite],
                lambda family, out, label, rng, c: family(LinearCase(out, label, rng)))


if __name__ == "__main__":
    main()
