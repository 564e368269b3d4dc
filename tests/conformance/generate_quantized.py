#!/usr/bin/env python3
"""Writes the QuantizedCache conformance vectors (vectors/v5_quantized_*.kvv).

transformers 5.23's QuantizedCache(backend, config, nbits, axis_key,
axis_value, q_group_size, residual_length), with the "quanto"
(optimum-quanto) and "hqq" backends, runs random update timelines: prefills,
one- and several-token decode steps across several flushes, several layers,
float32, float16 and bfloat16; the returned tensors, sequence lengths and mask
sizes are recorded and replayed by kvcache with KVC_QUANT_MODE_TRANSFORMERS
(the `qcreate` and `qlayout` operations of replay_quantized.c; the rest are
the core operations of replay.c). The format, the seeded inputs and the
recording rules are generate.py's (imported, not copied).

Recorded besides updates: reorder_cache (5.23 defers it to the next update,
which applies it to the dequantized history: the same as kvcache's reorder of
the whole history), reset (5.23 drops the quantized states: the next update
starts afresh, as kvcache's reset) and deepcopy (kvc_cache_clone). Not
recorded: crop, batch_select_indices and batch_repeat_interleave, which 5.23
still applies to the residual only (the quirk kvcache fixes; unit tests check
kvcache against a full-precision reference instead), and layer views (5.23's
`keys` is the residual only).

Not recorded either: an update that returns NaN (float16 overflow in hqq's
dequantization of groups of large values), whose NaN bits are torch's own.

Planned errors: an update whose quantization transformers refuses for its
shape (quanto: "Group size (G) must be a divisor of (N)", a ValueError; hqq:
an AssertionError) is recorded as INVALID_ARGUMENT, which kvcache raises
before changing anything; generate.py's Case restores the Python cache.
Run through generate.sh (it installs the venv); regenerating with the same
versions gives identical files.
"""
import copy
import importlib.metadata as md

import transformers
from transformers import cache_utils as cu

from generate import Case, Planned, Slot, expect, gen_spec, make_config, make_tensor
from vectorgen import arguments, run_skipping, write_files

if not transformers.__version__.startswith("5."):
    raise SystemExit(f"generate_quantized.py needs transformers 5.x, not {transformers.__version__}")


class QSlot(Slot):
    def __init__(self, obj, dt, batch, heads, dk, dv, q):
        super().__init__(obj, dt, batch, heads, dk, dv)
        self.q = q  # backend, nbits, axis_key, axis_value, group, residual


def group_fits(backend, axis, group, shape):
    """transformers' rule (optimum-quanto's group(), hqq's assert) for quantizing one [B, H, S, D] tensor."""
    b, h, s, d = shape
    numel = b * h * s * d
    if backend == "quanto":
        axis_numel = numel // (b if axis == 0 else d)
        return group <= axis_numel and axis_numel % group == 0
    return numel % group == 0


def copy_slot(slot):
    """A copy of a slot's cache that later operations cannot change. quanto's tensors cannot be deep-copied, but
    QuantizedLayer never changes a tensor in place (update, reorder_cache and reset assign new ones), so copying
    the cache and its layer objects is enough."""
    new = copy.copy(slot)
    new.obj = copy.copy(slot.obj)
    new.obj.layers = [copy.copy(layer) for layer in slot.obj.layers]
    new.reset_layers, new.reset_cross, new.next_pos = set(slot.reset_layers), set(), {}
    return new


class QCase(Case):
    def snapshot(self):
        return {k: copy_slot(v) for k, v in self.slots.items()}

    def clone(self, s):
        d = self.new_slot()
        self.slots[d] = copy_slot(self.slots[s])
        self.out.op(f"clone {d} {s}")
        return d

    def qcreate(self, q, layers, dt, batch, heads, dk, dv):
        backend, nbits, ak, av, g, r = q
        obj = cu.QuantizedCache(backend, make_config(layers), nbits=nbits, axis_key=ak, axis_value=av, q_group_size=g,
                                residual_length=r)
        s = self.new_slot()
        self.slots[s] = QSlot(obj, dt, batch, heads, dk, dv, q)
        self.out.op(f"qcreate {s} {backend} {layers} {nbits} {ak} {av} {g} {r}")
        self.out.stats[f"qcreate {dt} nbits {nbits} axes {ak} {av}"] += 1
        self.qlayout(s)
        return s

    def qlayout(self, s):
        self.out.op(f"qlayout {s} {len(self.slots[s].obj.layers)}")

    def quantizes(self, s, i, n):
        """The length of the tensor this update quantizes (0: none), as QuantizedLayer.update decides."""
        layer = self.slots[s].obj.layers[i]
        if not layer.is_initialized:
            return n
        residual = layer.keys.shape[-2] if layer.keys.dim() == 4 else 0
        return layer.cumulative_length + n if residual + n >= layer.residual_length else 0

    def refused(self, s, i, n):
        """Whether transformers refuses the group size for the tensor this update quantizes."""
        slot = self.slots[s]
        backend, _, ak, av, g, _ = slot.q
        length = self.quantizes(s, i, n)
        return bool(length) and not all(group_fits(backend, ax, g, (slot.batch, slot.heads, length, d))
                                        for ax, d in ((ak, slot.dk), (av, slot.dv)))

    def reorder(self, s):
        slot = self.slots[s]
        if slot.batch > 1 and any(layer.is_initialized for layer in slot.obj.layers):
            self.out.stats["reorder of several rows"] += 1
        super().reorder(s)

    def update(self, s, i, n, positions=None):
        slot = self.slots[s]
        length = self.quantizes(s, i, n)
        kind = "first call" if not slot.obj.layers[i].is_initialized else "flush" if length else "residual"
        refused = self.refused(s, i, n)
        ks, vs = self.seed(), self.seed()
        k = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dk), ks)
        v = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dv), vs)

        def run():
            try:
                rk, rv = self.slots[s].obj.update(k, v, i)
            except (ValueError, AssertionError) as exc:
                if refused:
                    raise Planned("INVALID_ARGUMENT", type(exc).__name__) from exc
                raise
            if rk.isnan().any() or rv.isnan().any():
                # float16 overflow in hqq's dequantization; the NaN's bits are torch's own (kvcache's NaN is the
                # canonical one), so such an update is not recorded
                raise ArithmeticError("NaN returned")
            return rk, rv

        head = f"update {s} {i} {gen_spec(slot.dt, k.shape, ks)} {gen_spec(slot.dt, v.shape, vs)} -"
        try:
            rk, rv = self.attempt(run)
        except Planned as p:
            self.out.op(f"{head} err {p.code} {p.cls}")
            self.out.stats["update refused by the grouping"] += 1
            return False
        if refused:
            raise RuntimeError("a group size error was predicted but transformers did not raise")
        self.out.op(f"{head} ok {expect(rk, slot.dt)} {expect(rv, slot.dt)}")
        self.out.stats[f"update: {kind}"] += 1
        return True


def setting(rng):
    """A quantizer and a geometry whose groups fit most (not all) of the shapes a timeline makes."""
    while True:
        backend = rng.choice(["quanto", "hqq"])
        dt = rng.choice(["f32", "f32", "f16", "f16", "bf16"])
        b = rng.choice([1, 1, 2, 2, 3, 4])
        h = rng.choice([1, 2, 2, 3])
        dk = rng.choice([2, 4, 4, 8])
        dv = dk if rng.random() < 0.7 else rng.choice([2, 4, 8])
        if b * h * max(dk, dv) <= 32:
            break
    if backend == "quanto":
        nbits, axes = rng.choice([2, 4]), [0, -1]
    else:
        nbits, axes = rng.choice([1, 2, 3, 4, 8]), [0, 1]
    ak, av = rng.choice(axes), rng.choice(axes)
    if backend == "hqq" and nbits == 3 and 1 in (ak, av):
        # hqq's 3-bit dequantize keeps shape[0] * shape[1] // group_size packed rows, a rule for 2-D weights:
        # on a 4-D [B, H, S, D] tensor it drops most groups (or raises). kvcache dequantizes every group.
        nbits = rng.choice([1, 2, 4, 8])
    per_token = min(dk, dv)
    g = rng.choice([1, 2, per_token, per_token, 2 * per_token, b * h, 4, 8])
    r = rng.choice([0, 1, 2, 3, 4, 4, 6, 8])
    return (backend, nbits, ak, av, g, r), dt, b, h, dk, dv


def n_tokens(rng, prefill):
    if prefill:
        return rng.randint(1, 10)
    x = rng.random()
    return 1 if x < 0.6 else rng.randint(2, 3) if x < 0.85 else rng.randint(4, 7)


class QWalker:
    """Forward passes (mask sizes, then every layer's update), queries, reorder, reset, clone, drop."""

    def __init__(self, case, layers):
        self.case, self.rng, self.layers = case, case.rng, layers

    def step(self, s):
        c = self.case
        slot = c.slots[s]
        fresh = not slot.obj.layers[0].is_initialized
        if slot.obj.get_seq_length(0) > 14:
            c.reset(s)  # keeps the vectors small: every update returns the whole history
            fresh = True
        n = n_tokens(self.rng, fresh)
        # A refused quantization changes nothing, so the next step would likely be refused too: a few are enough.
        for _ in range(4):
            if not c.refused(s, 0, n) or self.rng.random() < 0.2:
                break
            n = n_tokens(self.rng, fresh)
        for i in range(self.layers):
            if self.rng.random() < 0.6:
                c.mask(s, n, i)
            c.update(s, i, n)

    def one(self):
        c, rng = self.case, self.rng
        s = rng.choice(sorted(c.slots))
        op = rng.choices(["step", "update", "seqlen", "maxlen", "mask", "reorder", "reset", "clone", "drop", "layout"],
                         [40, 6, 6, 2, 5, 6, 2, 2, 1, 1])[0]
        if op == "step":
            self.step(s)
        elif op == "update":
            c.update(s, rng.randrange(self.layers), n_tokens(rng, False))
        elif op == "seqlen":
            c.seqlen(s, rng.randrange(self.layers + 1))
        elif op == "maxlen":
            c.maxlen(s, rng.randrange(-1, self.layers + 1))
        elif op == "mask":
            c.mask(s, n_tokens(rng, False), rng.randrange(self.layers + 1))
        elif op == "reorder":
            c.reorder(s)
        elif op == "reset":
            c.reset(s)
        elif op == "clone":
            if len(c.slots) < 3:
                c.clone(s)
        elif op == "drop":
            if len(c.slots) > 1:
                c.drop(s)
        elif op == "layout":
            c.qlayout(s)

    def run(self, count):
        run_skipping(self.one, count)


def family(backend):
    def run(case):
        rng = case.rng
        while True:
            q, dt, b, h, dk, dv = setting(rng)
            if q[0] == backend:
                break
        layers = rng.randint(1, 3)
        case.qcreate(q, layers, dt, b, h, dk, dv)
        QWalker(case, layers).run(rng.randint(30, 60))
    return run


FILES = [("v5_quantized_quanto", family("quanto"), 26), ("v5_quantized_hqq", family("hqq"), 26)]


def main():
    args = arguments(20261)
    versions = f"optimum-quanto {md.version('optimum-quanto')} hqq {md.version('hqq')}"
    write_files(args.out, args.seed, "v5", FILES, lambda fam, out, label, rng, c: fam(QCase(out, label, rng)),
                meta=versions)


if __name__ == "__main__":
    main()
