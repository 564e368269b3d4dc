#!/usr/bin/env python3
"""Writes the FP8 QuantizedCache conformance vectors (vectors/v5_quantized_fp8.kvv).

transformers 5.23's QuantizedCache("fp8", config) (Fp8QuantizedLayer: float8
e4m3fn codes, one float32 scale per layer for the keys and one for the
values, calibrated on the first update and frozen, no residual; see the
class in transformers/cache_utils.py) runs random update timelines:
prefills, one- and several-token decode steps, several layers, float32,
float16 and bfloat16, batch 1-4, 34 cases; the returned tensors (the first update's
inputs as they are, then the dequantized whole history), sequence lengths
and mask sizes are recorded. Crafted cases add inputs written out in hex
(`x` tensors, which the replay reads as inputs too): a prefill whose amax is
448 (scale exactly 1) followed by decode tokens on e4m3fn rounding ties,
subnormal steps, the 464 tie, values above 448 (torch saturates them to
448), zeros and negative zeros; an all-zero prefill (the scale clamped to
FLT_MIN); float32 subnormal and huge prefills.

The format, the seeded inputs and the recording rules are generate.py's,
the quantized family's operations and random walk generate_quantized.py's
(both imported, not copied). Operations: `qcreate S fp8 NLAYERS 0 0 0 0 0`
(the five group-wise fields of the quanto/hqq line are not given: 5.23
raises ValueError if any is), `qlayout S N`, and the core update, seqlen,
maxlen, mask, reorder (applied to the codes as they are, scale kept),
reset (drops codes and scales: the next update calibrates afresh) and clone.

Not recorded (transformers 5.23 quirks, see the Layer behaviour notes that
come with these vectors): crop (a negative crop of an initialized layer
slices the empty full-precision `keys` and raises IndexError; a positive one
raises ValueError), batch_select_indices (IndexError, same reason),
batch_repeat_interleave (a silent no-op on the codes: the next update then
fails to concatenate), layer views (`keys` is an empty 1-D tensor), and any
update returning NaN (none can: the inputs are finite and torch saturates).

The file goes to vectors/ with the others (kvcache has the FP8 kind; it went
to a pending/ folder the replay does not read until then). Run through
generate.sh; regenerating with the same versions gives identical files.
"""

import torch
import transformers
from transformers import cache_utils as cu

from generate import DTYPES, Skip, expect, gen_spec, make_config, make_tensor
from generate_quantized import QCase, QSlot, QWalker
from vectorgen import arguments, write_files

if not hasattr(cu, "Fp8QuantizedLayer"):
    raise SystemExit(f"generate_fp8.py needs transformers with Fp8QuantizedLayer, not {transformers.__version__}")


class FCase(QCase):
    """QCase with the fp8 backend: nothing is refused, no residual, the first update returns its inputs."""

    def qcreate(self, q, layers, dt, batch, heads, dk, dv):
        obj = cu.QuantizedCache("fp8", make_config(layers))
        s = self.new_slot()
        self.slots[s] = QSlot(obj, dt, batch, heads, dk, dv, ("fp8",))
        self.out.op(f"qcreate {s} fp8 {layers} 0 0 0 0 0")
        self.out.stats[f"qcreate {dt}"] += 1
        self.qlayout(s)
        return s

    def quantizes(self, s, i, n):
        return n

    def refused(self, s, i, n):
        return False

    def update(self, s, i, n, positions=None, k=None, v=None):
        """Seeded inputs (`g`), or the given tensors written out (`x`)."""
        slot = self.slots[s]
        first = not slot.obj.layers[i].is_initialized
        if k is None:
            ks, vs = self.seed(), self.seed()
            k = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dk), ks)
            v = make_tensor(slot.dt, (slot.batch, slot.heads, n, slot.dv), vs)
            kt, vt = gen_spec(slot.dt, k.shape, ks), gen_spec(slot.dt, v.shape, vs)
        else:
            kt, vt = expect(k, slot.dt), expect(v, slot.dt)

        def run():
            rk, rv = self.slots[s].obj.update(k, v, i)
            if rk.isnan().any() or rv.isnan().any():
                raise ArithmeticError("NaN returned")  # torch's NaN bits depend on its kernel: never recorded
            return rk, rv

        rk, rv = self.attempt(run)
        self.out.op(f"update {s} {i} {kt} {vt} - ok {expect(rk, slot.dt)} {expect(rv, slot.dt)}")
        layer = self.slots[s].obj.layers[i]
        self.out.stats["update: first call (inputs returned)" if first else "update: append (dequantized history)"] += 1
        if not first:
            for x, (_, scale) in ((k, layer._quantized_keys), (v, layer._quantized_values)):
                if ((x.float() / scale).abs() > 448).any():
                    self.out.stats["key or value input with an element saturated to +-448"] += 1
                if ((x.float() / scale).abs() < 2.0 ** -6).any():
                    self.out.stats["key or value input with an element in e4m3fn subnormal range"] += 1
        return True


def setting(rng):
    while True:
        dt = rng.choice(["f32", "f32", "f16", "f16", "bf16", "bf16"])
        b = rng.choice([1, 1, 2, 2, 3, 4])
        h = rng.choice([1, 2, 2, 3])
        dk = rng.choice([1, 2, 4, 4, 8])
        dv = dk if rng.random() < 0.7 else rng.choice([1, 2, 4, 8])
        if b * h * max(dk, dv) <= 32:
            return dt, b, h, dk, dv


def random_family(case):
    rng = case.rng
    dt, b, h, dk, dv = setting(rng)
    layers = rng.randint(1, 3)
    case.qcreate(None, layers, dt, b, h, dk, dv)
    QWalker(case, layers).run(rng.randint(20, 40))


# ------------------------------------------------------------------ crafted inputs


def tensor_of(dt, shape, values, rng):
    """A [B, H, S, D] tensor of dtype dt holding `values` (cycled, in a shuffled order)."""
    n = 1
    for x in shape:
        n *= x
    vals = [values[i % len(values)] for i in range(n)]
    rng.shuffle(vals)
    return torch.tensor(vals, dtype=torch.float32).to(DTYPES[dt]).reshape(shape)


def with_amax(t, amax):
    t = t.clone()
    t.view(-1)[0] = amax
    return t


# e4m3fn grid points, ties between neighbours (even and odd), subnormal steps and ties, the 464 tie, saturation
TIES = [1.0, 1.0625, 1.1875, 1.125, -1.0625, -1.1875, 3.0, 3.25, 3.75, 0.015625, 0.0146484375, 0.013671875,
        1 / 512, 1 / 1024, 3 / 1024, 5 / 1024, -3 / 1024, 7 / 1024, 0.0, -0.0, 448.0, 440.0, 432.0, 464.0, -464.0,
        466.0, 500.0, -600.0, 1.0e4, 2.0 ** -12, 240.0, 232.0, 224.0, 0.5, 0.5625, 0.53125]


def crafted_scale_one(case):
    """Prefill amax exactly 448 (scale 1): every later value is quantized as itself."""
    rng = case.rng
    dt = rng.choice(["f32", "f16", "bf16"])
    b, h, d = rng.choice([(1, 1, 4), (2, 1, 4), (2, 2, 2), (1, 2, 8)])
    layers = rng.randint(1, 2)
    s = case.qcreate(None, layers, dt, b, h, d, d)
    for i in range(layers):
        k = with_amax(tensor_of(dt, (b, h, 3, d), [1.0, -2.5, 0.75], rng), -448.0)
        v = with_amax(tensor_of(dt, (b, h, 3, d), [0.125, 7.0, -3.0], rng), 448.0)
        case.mask(s, 3, i)
        case.update(s, i, 3, k=k, v=v)
    for step in range(6):
        n = rng.choice([1, 1, 2, 3])
        for i in range(layers):
            case.mask(s, n, i)
            case.update(s, i, n, k=tensor_of(dt, (b, h, n, d), TIES, rng), v=tensor_of(dt, (b, h, n, d), TIES, rng))
        if step == 2 and b > 1:
            case.reorder(s)
        case.seqlen(s, rng.randrange(layers))
    case.reset(s)
    case.seqlen(s, 0)
    for i in range(layers):  # calibrates afresh: a different amax now
        case.update(s, i, 2, k=tensor_of(dt, (b, h, 2, d), [3.0, -1.5], rng), v=tensor_of(dt, (b, h, 2, d), TIES, rng))
        case.update(s, i, 1)


def crafted_zero(case):
    """An all-zero prefill: scale clamped to FLT_MIN; later values saturate to +-448 * FLT_MIN."""
    rng = case.rng
    dt = rng.choice(["f32", "f16", "bf16"])
    b, h, d = rng.choice([(1, 1, 4), (2, 1, 2), (1, 2, 4)])
    s = case.qcreate(None, 1, dt, b, h, d, d)
    z = torch.zeros((b, h, 2, d), dtype=DTYPES[dt])
    case.update(s, 0, 2, k=z, v=-z)
    for _ in range(3):
        case.update(s, 0, 1)
        case.update(s, 0, 1, k=tensor_of(dt, (b, h, 1, d), [0.0, -0.0, 1.0e-30, 2.0 ** -130], rng),
                    v=tensor_of(dt, (b, h, 1, d), [0.0, 1.0], rng))
    case.mask(s, 1, 0)
    case.seqlen(s, 0)


def crafted_f32_extremes(case):
    """float32 prefills of subnormals only (scale clamped) and of huge values (scale near FLT_MAX / 448)."""
    rng = case.rng
    for values in ([1.0e-40, -3.0e-42, 1.4e-45, 0.0], [3.0e38, -1.0e38, 1.0, 2.0e-38]):
        s = case.qcreate(None, 1, "f32", 2, 1, 2, 2)
        case.update(s, 0, 2, k=tensor_of("f32", (2, 1, 2, 2), values, rng), v=tensor_of("f32", (2, 1, 2, 2), values, rng))
        case.update(s, 0, 1)
        case.update(s, 0, 1, k=tensor_of("f32", (2, 1, 1, 2), values, rng), v=tensor_of("f32", (2, 1, 1, 2), values, rng))
        case.reorder(s)
        case.update(s, 0, 1)
        case.drop(s)


def crafted_family(case):
    rng = case.rng
    pick = rng.random()
    try:
        if pick < 0.6:
            crafted_scale_one(case)
        elif pick < 0.85:
            crafted_zero(case)
        else:
            crafted_f32_extremes(case)
    except Skip as exc:
        raise RuntimeError(f"a crafted operation failed in transformers: {exc}") from exc


FILES = [("v5_quantized_fp8", lambda c: random_family if c < 24 else crafted_family, 24 + 10)]


def main():
    args = arguments(20268, out_help="the vectors directory")
    # The FP8 file's cases: the random ones first, then the crafted ones, numbered on.
    write_files(args.out, args.seed, "v5", FILES,
                lambda fam, out, label, rng, c: fam(c)(FCase(out, label, rng)))


if __name__ == "__main__":
    main()
