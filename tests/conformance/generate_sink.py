#!/usr/bin/env python3
"""Writes the SinkCache conformance vectors (vectors/v452_sink*.kvv).

SinkCache exists up to transformers 4.52 (a stub that raises in 4.53-4.57,
deleted in 5.0), so these vectors come from 4.52's own SinkCache, run through
generate_sink.sh. The format, the seeded input tensors and the recording rules
are those of generate.py (imported, not copied); the sink operations
(`screate`, `slayout`, `supdate`) are described in replay_sink.c.

RoPE cos/sin are what a model passes: LlamaRotaryEmbedding's output for the
positions of the call ([batch, seq, dim], the form 4.52's models use), the
whole table ([seq, dim], the older form), with partial rotation as Phi-style
models use it, and hand-made tables of odd rotary sizes. They are written to
the vectors as exact bytes.

Errors: kvcache refuses, before changing anything, the updates on which
transformers' re-rotation cannot work (docs: differences-from-transformers).
predict() states those rules; an update is recorded as an error only when the
rule predicts one and transformers raised too, and is left out when only one
of them fails (see the report of the run for how many).
"""
import warnings

import torch
import transformers
from transformers import LlamaConfig
from transformers import cache_utils as cu
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from generate import DTYPES, INT_VIEW, Case, Planned, Skip, Slot, expect, gen_spec, make_tensor
from vectorgen import arguments, run_skipping, write_files

if not transformers.__version__.startswith("4.52."):
    raise SystemExit(f"generate_sink.py needs transformers 4.52.x (the last SinkCache), not {transformers.__version__}")

warnings.filterwarnings("ignore", message=".*SinkCache.*", category=FutureWarning)


def raw_hex(t, dt):
    """`x DT 1 B SEQ DIM HEX` for a 2-D [seq, dim] or 3-D [batch, seq, dim] cos/sin."""
    shape = ([1, 1] if t.dim() == 2 else [1]) + [int(x) for x in t.shape]
    data = t.contiguous().view(INT_VIEW[dt]).numpy().tobytes().hex()
    return f"x {dt} {' '.join(map(str, shape))} {data}"


class Rope:
    """Where a slot's cos/sin come from: `form` 3 (per call) or 2 (whole table); `rot` channels, rotated as
    `partial` (0: all of head_dim). Two LlamaRotaryEmbeddings (`emb`) for even sizes, two sets of hand-made
    frequencies (`freqs`) for odd ones: the second of each is a table whose values changed (drift)."""

    def __init__(self, rng, form, head_dim, rot, cos_dt):
        self.form, self.rot, self.cos_dt = form, rot, cos_dt
        self.partial = 0 if rot == head_dim else rot
        self.emb, self.freqs = [], []
        for theta in (rng.choice([10000.0, 500.0]), 37.0):
            if rot % 2 == 0:
                cfg = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim,
                                  partial_rotary_factor=rot / head_dim, max_position_embeddings=64, rope_theta=theta)
                self.emb.append(LlamaRotaryEmbedding(cfg))
            else:
                self.freqs.append(torch.tensor([rng.uniform(0.05, 1.5) for _ in range(rot)]))
        if self.table(torch.zeros(1, 1, dtype=torch.long))[0].shape[-1] != rot:
            raise RuntimeError(f"the RoPE table does not rotate {rot} of {head_dim} channels")

    def table(self, positions, alt=0):
        """cos, sin for a [rows, n] tensor of positions: [rows, n, rot] in cos_dt."""
        if self.emb:
            x = torch.zeros(1, dtype=DTYPES[self.cos_dt])
            cos, sin = self.emb[alt](x, positions)
            return cos, sin
        ang = positions.to(torch.float32)[..., None] * self.freqs[alt]
        return torch.cos(ang).to(DTYPES[self.cos_dt]), torch.sin(ang).to(DTYPES[self.cos_dt])


class SinkSlot(Slot):
    def __init__(self, obj, dt, batch, heads, dk, dv, window, sinks, config_layers, rope):
        super().__init__(obj, dt, batch, heads, dk, dv)
        self.window, self.sinks, self.config_layers, self.rope = window, sinks, config_layers, rope
        self.ours_layers = config_layers  # how many layers kvcache's cache has


class SinkCase(Case):
    def __init__(self, out, name, rng, index):
        super().__init__(out, name, rng)
        self.index = index

    def screate(self, window, sinks, config_layers, dt, batch, heads, dk, dv, rope):
        s = self.new_slot()
        self.slots[s] = SinkSlot(cu.SinkCache(window_length=window, num_sink_tokens=sinks), dt, batch, heads, dk, dv,
                                 window, sinks, config_layers, rope)
        self.out.op(f"screate {s} {window} {sinks} {config_layers}")
        self.slayout(s)
        return s

    def slayout(self, s):
        slot = self.slots[s]
        n = len(slot.obj.key_cache)
        if n != slot.ours_layers:
            return  # kvcache's preset knows its layers from the config; transformers' list grows
        self.out.op(f"slayout {s} {n}" + f" {slot.window} {slot.sinks} {int(slot.obj.get_max_cache_shape())}" * n)

    def maxlen(self, s, i):
        slot = self.slots[s]
        if i >= slot.ours_layers or (i < 0 and slot.ours_layers == 0):
            return  # kvcache: -1 past its layers; SinkCache answers window_length for any index
        self.out.op(f"maxlen {s} {i} {int(slot.obj.get_max_cache_shape())}")

    def usable(self, s, i, new):
        if i < self.slots[s].ours_layers:  # kvcache: a layer it does not have is unbounded
            super().usable(s, i, new)

    def sview(self, s, i):
        slot = self.slots[s]
        cache = slot.obj
        if i >= len(cache.key_cache) or i in slot.reset_layers or cache.key_cache[i].numel() == 0:
            return
        self.out.op(f"view {s} {i} ok {expect(cache.key_cache[i], slot.dt)} {expect(cache.value_cache[i], slot.dt)}")

    def sreset(self, s):
        """kvcache's reset of a sink cache (transformers has none): a new SinkCache with the same settings."""
        slot = self.slots[s]
        slot.obj = cu.SinkCache(window_length=slot.window, num_sink_tokens=slot.sinks)
        slot.reset_layers = set(range(slot.ours_layers))
        self.out.op(f"reset {s}")

    # ----------------------------------------------------------- update

    def predict(self, s, i, n, rope):
        """The error kvcache raises for this update (None: none). Mirrors core/layer_sink.c."""
        if rope is None:
            return None
        slot = self.slots[s]
        c = slot.obj
        cos, _, partial, _ = rope
        if partial > slot.dk:
            return "INVALID_ARGUMENT"
        rot = partial or slot.dk
        if cos.shape[-1] != rot:
            return "SHAPE_MISMATCH"
        has = c._cos_cache is not None
        length, dim = (int(c._cos_cache.shape[0]), int(c._cos_cache.shape[-1])) if has else (0, 0)
        if i == 0:
            if cos.dim() == 2 or not has:
                has, length, dim = True, int(cos.shape[-2]), int(cos.shape[-1])
            elif length < slot.window:
                if int(cos.shape[-1]) != dim:
                    return "SHAPE_MISMATCH"
                length += int(cos.shape[-2])
        stored = int(c.key_cache[i].shape[-2]) if i < len(c.key_cache) else 0
        if stored == 0 or n + stored < slot.window:
            return None
        if n < 1 or slot.window - slot.sinks - n < 1:
            return "INVALID_ARGUMENT"
        if not has or length < slot.window:
            return "INVALID_STATE"
        if dim != rot:
            return "SHAPE_MISMATCH"
        entry = c.cos_sin_rerotation_cache.get(n)
        if entry is not None and int(entry[0].shape[-1]) != rot:
            return "SHAPE_MISMATCH"
        return None

    def branch(self, s, i, n, rope):
        slot = self.slots[s]
        c = slot.obj
        stored = int(c.key_cache[i].shape[-2]) if i < len(c.key_cache) else 0
        if i >= len(c.key_cache):
            return "first update" + (", longer than the window" if n > slot.window else "")
        if n + stored < slot.window:
            return "growing"
        keep = slot.window - slot.sinks - n
        kind = "shift with RoPE" if rope is not None else "shift"
        if keep <= 0:
            return f"{kind}, window - sinks - new = {'0' if keep == 0 else '< 0'}"
        return kind + (" (first shift: kept keys move fewer than new slots)" if stored < slot.window else "")

    def supdate(self, s, i, n, rope=None):
        """rope: None or (cos, sin, partial)."""
        slot = self.slots[s]
        ks, vs = self.seed(), self.seed()
        k = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dk), ks)
        v = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dv), vs)
        predicted = self.predict(s, i, n, rope)
        branch = self.branch(s, i, n, rope)

        def run():
            kw = {} if rope is None else {"cos": rope[0], "sin": rope[1]}
            if rope is not None and rope[2]:
                kw["partial_rotation_size"] = rope[2]
            try:
                out = self.slots[s].obj.update(k, v, i, kw if kw else None)
            except Exception as exc:  # noqa: BLE001 - only recorded when predicted
                if predicted:
                    raise Planned(predicted, type(exc).__name__) from exc
                raise
            if predicted:
                raise Skip(f"kvcache refuses ({predicted}) what transformers accepted")
            return out

        rspec = "-"
        if rope is not None:
            dt = rope[3]
            rspec = f"r {rope[0].dim()} {rope[2]} {raw_hex(rope[0], dt)} {raw_hex(rope[1], dt)}"
        head = f"supdate {s} {i} {gen_spec(slot.dt, k.shape, ks)} {gen_spec(slot.dt, v.shape, vs)} {rspec}"
        try:
            rk, rv = self.attempt(run)
        except Planned as p:
            self.out.op(f"{head} err {p.code} {p.cls}")
            self.out.stats[f"refused: {branch}"] += 1
            return False
        except Skip:
            self.out.stats[f"left out: {branch}" + (f" ({predicted})" if predicted else "")] += 1
            raise
        slot = self.slots[s]
        slot.reset_layers.discard(i)
        slot.ours_layers = max(slot.ours_layers, i + 1)
        self.out.op(f"{head} ok {expect(rk, slot.dt)} {expect(rv, slot.dt)}")
        self.out.stats[f"C.6 {branch}"] += 1
        return True

    # ----------------------------------------------------------- RoPE inputs

    def rope_inputs(self, s, n, stale=False, drift=False):
        """cos/sin a model passes for a forward of n tokens (None without RoPE)."""
        slot = self.slots[s]
        r = slot.rope
        if r is None:
            return None
        c = slot.obj
        start = int(c.get_seq_length(0))  # generate's past length: the stored length of layer 0
        if r.form == 3:
            rows = self.rng.choice([1, slot.batch])
            pos = torch.stack([torch.arange(start, start + n) + (0 if b == 0 else self.rng.randint(0, 3))
                               for b in range(rows)])
            cos, sin = r.table(pos)
        else:
            length = start + n if self.rng.random() < 0.5 else max(slot.window, start + n) + self.rng.randint(0, 2)
            if stale:
                length = self.rng.randint(1, slot.window)
            # drift: a table whose values changed; re-rotations computed before keep the old values
            cos, sin = r.table(torch.arange(length)[None], int(drift))
            cos, sin = cos[0], sin[0]
        return (cos, sin, r.partial, r.cos_dt)


# ------------------------------------------------------------------ walks


def pick_geometry(rng, even_dk, dt):
    while True:
        b = rng.choice([1, 1, 2, 2, 3])
        h = rng.choice([1, 1, 2, 3])
        dk = rng.choice([2, 4, 4, 6, 8, 8]) if even_dk else rng.choice([1, 2, 3, 4, 5, 8])
        dv = dk if rng.random() < 0.7 else rng.choice([1, 2, 4])
        if b * h * max(dk, dv) <= 16:
            return dt, b, h, dk, dv


class SinkWalker:
    def __init__(self, case, s, layers, allow):
        self.case, self.rng, self.s, self.layers, self.allow = case, case.rng, s, layers, set(allow)

    def slot(self):
        return self.case.slots[self.s]

    def new_tokens(self):
        slot, rng = self.slot(), self.rng
        c = slot.obj
        if not c.key_cache:
            return rng.randint(1, slot.window + 4)  # a prefill shorter or longer than the window
        r = rng.random()
        most = slot.window - slot.sinks - 1  # the most a shift with RoPE takes
        if r < 0.6 or most < 2:
            return 1 if r < 0.9 or "zero" not in self.allow else 0
        if r < 0.88:
            return rng.randint(2, most)
        return rng.randint(most + 1, slot.window + 2)  # refused with RoPE; an oversized cache without

    def step(self):
        n = self.new_tokens()
        rope = self.case.rope_inputs(self.s, n, stale="stale" in self.allow and self.rng.random() < 0.15,
                                     drift="drift" in self.allow and self.rng.random() < 0.3)
        skip_rope0 = "no_rope0" in self.allow and self.rng.random() < 0.2
        for i in range(self.layers):
            try:
                self.case.supdate(self.s, i, n, None if (skip_rope0 and i == 0) else rope)
            except Skip:
                pass

    def one(self):
        case, rng, s = self.case, self.rng, self.s
        slot = self.slot()
        choices = [("step", 40), ("seqlen", 6), ("usable", 5), ("view", 8), ("maxlen", 2), ("layout", 2),
                   ("reorder", 4), ("clone", 2), ("refused", 2), ("reset", 1), ("update", 3)]
        op = rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]
        if op == "step":
            self.step()
        elif op == "seqlen":
            case.seqlen(s, rng.randrange(self.layers + 1))
        elif op == "usable":
            case.usable(s, rng.randrange(self.layers), rng.randint(0, slot.window + 2))
        elif op == "view":
            case.sview(s, rng.randrange(self.layers))
        elif op == "maxlen":
            case.maxlen(s, rng.randrange(-1, self.layers + 1))
        elif op == "layout":
            case.slayout(s)
        elif op == "reorder" and slot.obj.key_cache:
            case.reorder(s)
        elif op == "clone" and slot.obj.key_cache:
            # continue on the copy (table and re-rotation cache included); the original stays as it was
            d = case.clone(s)
            case.drop(s)
            self.s = d
        elif op == "refused" and slot.ours_layers > 0:  # a cache without layers has nothing to refuse
            what = rng.choice(["crop", "select", "repeat"])
            if what == "crop":
                case.mutate(f"crop {s} -1", lambda: case.slots[s].obj.crop(-1), {AttributeError: "UNSUPPORTED"},
                            "UNSUPPORTED")
            elif what == "select":
                case.mutate(f"select {s} 1 0", lambda: case.slots[s].obj.batch_select_indices(torch.tensor([0])),
                            {AttributeError: "UNSUPPORTED"}, "UNSUPPORTED")
            else:
                case.mutate(f"repeat {s} 2", lambda: case.slots[s].obj.batch_repeat_interleave(2),
                            {AttributeError: "UNSUPPORTED"}, "UNSUPPORTED")
        elif op == "reset" and "reset" in self.allow:
            case.sreset(s)
        elif op == "update":
            # one layer alone, in transformers' order (its list grows by one at a time)
            i = rng.randrange(min(len(slot.obj.key_cache) + 1, self.layers))
            n = self.new_tokens()
            try:
                case.supdate(s, i, n, case.rope_inputs(s, n))
            except Skip:
                pass

    def run(self, count):
        run_skipping(self.one, count)
        for i in range(self.layers):
            self.case.seqlen(self.s, i)
            self.case.sview(self.s, i)


def sink_case(case, rope_form, allow, odd_rot=False, cos_dt_any=False, ops=36):
    rng = case.rng
    dt = ["f32", "f16", "bf16"][case.index % 3]  # every dtype in every file
    dt, b, h, dk, dv = pick_geometry(rng, rope_form is not None and not odd_rot, dt)
    window = rng.randint(2, 9)
    sinks = rng.choice([0, 0, 1, 2, 3]) if window > 3 else rng.randint(0, window - 1)
    if sinks > window - 2 and rng.random() < (0.9 if rope_form is not None else 0.85):
        # with window - 1 sinks every shift keeps window - sinks - new <= 0 tokens: refused with RoPE, and
        # without it transformers' cache grows at every step
        sinks = max(0, window - 2)
    layers = rng.randint(1, 3)
    config_layers = layers if rng.random() < 0.3 else 0
    rope = None
    if rope_form is not None:
        if odd_rot:
            rot = rng.choice([r for r in range(1, dk + 1) if r % 2 == 1] or [1])
        else:
            rot = rng.choice([r for r in range(2, dk, 2)] or [dk]) if rng.random() < 0.45 else dk
        cos_dt = rng.choice(["f32", "f16", "bf16"]) if cos_dt_any else ("f32" if dt == "f32" else dt)
        rope = Rope(rng, rope_form, dk, rot, cos_dt)
    s = case.screate(window, sinks, config_layers, dt, b, h, dk, dv, rope)
    st = case.out.stats
    st[f"case: keys {dt}"] += 1
    st["case: num_sink_tokens " + ("0" if sinks == 0 else "> 0")] += 1
    st["case: " + ("one layer" if layers == 1 else "several layers")] += 1
    st["case: " + ("lazy" if config_layers == 0 else "with a config")] += 1
    if rope is not None:
        st[f"case: RoPE {rope_form}-D cos/sin, " + ("partial" if rope.partial else "full") + " rotation"] += 1
        st[f"case: cos/sin {rope.cos_dt}" + (", odd rotary size" if rope.rot % 2 else "")] += 1
    SinkWalker(case, s, layers, allow).run(ops)


def v452_sink(case):
    """RoPE the 4.52 way: LlamaRotaryEmbedding's [batch, seq, dim] cos/sin, full and partial rotation."""
    sink_case(case, 3, {"reset"})


def v452_sink_table(case):
    """The whole table as [seq, dim] (short ones too, and tables whose values change: re-rotations
    computed before keep the old ones), odd rotary sizes, cos/sin of another dtype than the keys, and
    layer 0 updated without RoPE (no table for the others)."""
    r = case.rng.random()
    sink_case(case, case.rng.choice([2, 3]), {"stale", "no_rope0", "drift"}, odd_rot=r < 0.3, cos_dt_any=True)


def v452_sink_norope(case):
    """No RoPE: nothing re-rotated; updates of 0 tokens; window - sinks - new <= 0 (an oversized cache)."""
    sink_case(case, None, {"reset", "zero"})


SUITE = [("v452_sink", v452_sink, 16), ("v452_sink_table", v452_sink_table, 16),
         ("v452_sink_norope", v452_sink_norope, 12)]


def main():
    args = arguments(20452)
    write_files(args.out, args.seed, "v452", SUITE,
                lambda family, out, label, rng, c: family(SinkCase(out, label, rng, c)))


if __name__ == "__main__":
    main()
