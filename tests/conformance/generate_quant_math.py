#!/usr/bin/env python3
"""Writes vectors/quant_math.qv: the arithmetic of the two quantizers of
transformers' quantized caches, recorded from the real libraries.

Each case quantizes one [B, H, S, D] tensor the way transformers' layers do
(QuantoQuantizedLayer: optimum-quanto's MaxOptimizer + quantize_weight;
HQQQuantizedLayer: hqq's Quantizer.quantize with its defaults, compute dtype
and device of the cache, then Quantizer.dequantize) and records the codes,
scales, zero points and dequantized values. tests/unit/test_internal_quantizers.c
replays them through backends/cpu/quantize.h. The file is not a .kvv: the conformance
replay does not read it.

hqq's float32 sums are split between torch's threads above 32768 elements,
which may change their last bit, so generation runs on one thread (the
order backends/cpu/quant_hqq.c reproduces).

Format (whitespace-separated tokens; tensors as generate.py's `x` records):
  QUANTMATH 1
  meta optimum-quanto V hqq V torch V transformers V seed S threads 1
  case NAME QUANTIZER NBITS AXIS G VIA       (VIA: how hqq was called, see hqq_reference)
  in x DT B H S D HEX
  then either  refused N                      (transformers refuses G: "... divisor of (N)" / numel N)
  or           groups NGROUPS GROUP
               codes HEX                      (one byte per code, [NGROUPS][GROUP] in the library's group order)
               scale x DT 1 1 1 NGROUPS HEX
               zero x DT 1 1 1 NGROUPS HEX
               deq x DT B H S D HEX
  end                                         (after the last case)
"""
import importlib.metadata as md
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate import DTYPES, expect  # noqa: E402  (the .kvv writer's tensor records)
from vectorgen import arguments, write_table  # noqa: E402

from hqq.core.quantize import Quantizer  # noqa: E402
from optimum.quanto import MaxOptimizer, qint2, qint4, quantize_weight  # noqa: E402

# ------------------------------------------------------------------ the libraries, as transformers calls them


def quanto_reference(t, nbits, axis, group):
    """QuantoQuantizedLayer._quantize / _dequantize. Returns codes, scale,
    shift in group order ([ngroups][group]) and the dequantized tensor."""
    qtype = qint4 if nbits == 4 else qint2
    scale, shift = MaxOptimizer()(t, qtype, axis, group)
    q = quantize_weight(t, qtype, axis, scale, shift, group)
    codes, scale, shift = q._data.unpack(), q._scale, q._shift
    if axis == -1:  # grouped as [G, groups]
        codes, scale, shift = codes.t(), scale.t(), shift.t()
    return codes.contiguous(), scale.contiguous(), shift.contiguous(), q.dequantize()


def hqq_reference(t, nbits, axis, group):
    """HQQQuantizedLayer._quantize / _dequantize on the CPU. hqq's bit packing
    cannot hold some shapes: 1/2/4 bits with a group count that is not a
    multiple of 8/4/2 codes per byte (transformers raises), and 3 bits along
    axis 1, whose unpacking slices a 4-D shape as if it were 2-D (transformers
    raises, or silently dequantizes the first groups' codes everywhere). Those
    cases, and any whose packed path disagrees with the unpacked one, are
    recorded from hqq's unpacked path (bitpack=False, VIA `unpacked`), whose
    arithmetic is the same."""
    def call(bitpack):
        w_q, meta = Quantizer.quantize(t, axis=axis, device="cpu", compute_dtype=t.dtype, nbits=nbits,
                                       group_size=group, bitpack=bitpack)
        meta["compute_dtype"] = t.dtype
        Quantizer.cuda(w_q, meta=meta, device="cpu")
        deq = Quantizer.dequantize(w_q, meta)
        if bitpack:
            rows = t.numel() // group if axis == 1 else group
            codes = Quantizer.unpack[meta["packing"]](w_q, dtype=torch.uint8)[:rows]
        else:
            codes = w_q.to(torch.uint8)
        return codes, meta["scale"], meta["zero"], deq

    codes, scale, zero, deq = call(False)
    via = "unpacked"
    try:
        p_codes, p_scale, p_zero, p_deq = call(True)
        if (torch.equal(p_codes, codes) and torch.equal(p_scale, scale) and torch.equal(p_zero, zero)
                and torch.equal(p_deq.view(torch.uint8), deq.view(torch.uint8))):
            via = "packed"
    except RuntimeError:
        pass
    if axis == 0:  # grouped as [G, groups]
        codes, scale, zero = codes.t(), scale.t(), zero.t()
    return codes.contiguous(), scale.contiguous(), zero.contiguous(), deq, via


def refusal(quantizer, t, axis, group):
    """transformers' refusal of a group size, with its N; None if accepted."""
    if quantizer == "quanto":
        axis_numel = t.numel() // t.shape[axis]
        if group > axis_numel or axis_numel % group != 0:
            return axis_numel
    elif t.numel() % group != 0:
        return t.numel()
    return None


# ------------------------------------------------------------------ cases


def record(lines, name, quantizer, nbits, axis, group, t):
    dt = next(k for k, v in DTYPES.items() if v == t.dtype)
    n_refused = refusal(quantizer, t, axis, group)
    if n_refused is not None:
        try:  # the library must refuse it too
            (quanto_reference if quantizer == "quanto" else hqq_reference)(t, nbits, axis, group)
        except (ValueError, AssertionError):
            pass
        else:
            raise RuntimeError(f"{name}: expected a refusal")
        lines.append(f"case {name} {quantizer} {nbits} {axis} {group} -")
        lines.append("in " + expect(t, dt))
        lines.append(f"refused {n_refused}")
        return
    if quantizer == "quanto":
        codes, scale, zero, deq = quanto_reference(t, nbits, axis, group)
        via = "-"
    else:
        codes, scale, zero, deq, via = hqq_reference(t, nbits, axis, group)
    ngroups = scale.numel()
    assert codes.numel() == t.numel() and deq.dtype == t.dtype and scale.dtype == t.dtype
    lines.append(f"case {name} {quantizer} {nbits} {axis} {group} {via}")
    lines.append("in " + expect(t, dt))
    lines.append(f"groups {ngroups} {t.numel() // ngroups}")
    lines.append("codes " + codes.reshape(-1).numpy().tobytes().hex())
    lines.append("scale " + expect(scale.reshape(1, 1, 1, ngroups), dt))
    lines.append("zero " + expect(zero.reshape(1, 1, 1, ngroups), dt))
    lines.append("deq " + expect(deq.reshape(t.shape), dt))


# Shapes [B, H, S, D]. Per-token groups (quanto axis 0, hqq): head_dim a multiple of G, smaller than G
# and neither; hqq axis 0 sums columns in blocks of 32, of 8 and one by one, hence 40 tokens.
# Per-channel groups (quanto axis -1) need B*H*S to be a multiple of G: small head_dim, many positions.
SHAPES = [(1, 2, 4, 64), (2, 1, 2, 128), (1, 2, 8, 32), (1, 1, 4, 96), (1, 1, 40, 64), (1, 4, 4, 16), (3, 1, 2, 64)]
SHAPES_PER_CHANNEL = [(1, 2, 64, 4), (2, 2, 32, 8), (1, 1, 128, 3), (2, 1, 64, 5), (1, 4, 32, 2)]


def normal(gen, shape, dt):
    scale = 10.0 ** float(torch.empty(()).uniform_(-2, 2, generator=gen))
    offset = float(torch.randn((), generator=gen))
    return (torch.randn(shape, generator=gen) * scale + offset).to(dt)


def adversarial(gen, kind, shape, dt, group):
    """Inputs that stress the corners of the arithmetic."""
    n = 1
    for s in shape:
        n *= s
    x = torch.randn(n, generator=gen)
    if kind == "constant_groups":  # every other run of G values constant (quanto divides 0 by 0 there)
        for start in range(0, n, 2 * group):
            x[start:start + group] = x[start]
    elif kind == "zeros":
        x.zero_()
    elif kind == "constant":
        x.fill_(0.7)
    elif kind == "tiny_range":  # range below hqq's 1e-4 (scale 1), and a range where hqq clamps s to 2e4
        x = 1.0 + x.abs().clamp(max=3.0) * (2e-5 if float(torch.rand((), generator=gen)) < 0.5 else 1.6e-4)
    elif kind == "outliers":
        x[torch.randint(0, n, (max(1, n // 50),), generator=gen)] *= 300.0
    elif kind == "grid":  # values on a quarter grid: many exact rounding ties
        x = torch.round(x * 8.0) / 4.0
    elif kind == "extremes":  # near the top of the dtype's range, and subnormals
        top = {torch.float32: 3e38, torch.float16: 6e4, torch.bfloat16: 3e38}[dt]
        tiny = {torch.float32: 1e-40, torch.float16: 3e-6, torch.bfloat16: 1e-40}[dt]
        # (max - min stays finite in float32: an infinite range only yields NaN zero points)
        x = torch.where(torch.rand(n, generator=gen) < 0.5, x * tiny, x.clamp(-1, 1) * top * 0.45)
    elif kind == "positive":
        x = x.abs() + 5.0
    return x.reshape(shape).to(dt)


def cases(gen):
    dts = list(DTYPES.values())
    short = {v: k for k, v in DTYPES.items()}
    i = 0
    for nbits in (2, 4):
        for axis in (0, -1):
            for dt in dts:
                for group in (32, 64, 128):
                    shapes = SHAPES_PER_CHANNEL if axis == -1 else SHAPES
                    shape = shapes[i % len(shapes)]
                    i += 1
                    yield f"quanto_normal_{i}", "quanto", nbits, axis, group, normal(gen, shape, dt)
    i = 0
    for nbits in (1, 2, 3, 4, 8):
        for axis in (1, 0):
            for dt in dts:
                for group in (32, 64, 128):
                    shape = SHAPES[i % len(SHAPES)]
                    i += 1
                    yield f"hqq_normal_{i}", "hqq", nbits, axis, group, normal(gen, shape, dt)
    kinds = ["constant_groups", "zeros", "constant", "tiny_range", "outliers", "grid", "extremes", "positive"]
    i = 0
    for kind in kinds:
        for dt in dts:
            for quantizer, nbits, axis in (("quanto", 4, 0), ("quanto", 2, -1), ("hqq", 4, 1), ("hqq", 2, 0),
                                           ("hqq", 8, 1), ("hqq", 1, 0)):
                i += 1
                shape = (1, 2, 32, 4) if axis == -1 else (1, 2, 2, 64)
                yield f"{kind}_{i}", quantizer, nbits, axis, 64, adversarial(gen, kind, shape, dt, 64)
    # one group for the whole tensor (quanto falls back to one scale per element), and group sizes refused
    for dt in dts:
        for quantizer, nbits, axis in (("quanto", 4, 0), ("quanto", 4, -1), ("hqq", 4, 1), ("hqq", 4, 0)):
            yield f"single_{quantizer}_{axis}_{short[dt]}", quantizer, nbits, axis, 64, normal(gen, (1, 1, 1, 64), dt)
            yield f"single_d1_{quantizer}_{axis}_{short[dt]}", quantizer, nbits, axis, 64, normal(gen, (1, 1, 64, 1), dt)
    # groups of other sizes: element-wise loops with a scalar tail, sums of fewer than 8 values
    for group, shape in ((20, (1, 1, 3, 20)), (7, (2, 1, 7, 3)), (3, (1, 3, 1, 5)), (24, (1, 2, 3, 40))):
        for dt in dts:
            for quantizer, nbits, axis in (("quanto", 4, 0), ("quanto", 2, -1), ("hqq", 3, 1), ("hqq", 4, 0)):
                yield (f"odd_{quantizer}_{axis}_g{group}_{'x'.join(map(str, shape))}_{short[dt]}", quantizer, nbits, axis,
                       group, normal(gen, shape, dt))
    refused = [("quanto", 0, (1, 2, 3, 20)), ("quanto", -1, (1, 2, 3, 64)), ("quanto", -1, (2, 2, 48, 64)),
               ("quanto", 0, (2, 1, 1, 32)), ("hqq", 1, (1, 2, 3, 20)), ("hqq", 0, (1, 1, 1, 48))]
    for quantizer, axis, shape in refused:
        yield f"refused_{quantizer}_{axis}_{'x'.join(map(str, shape))}", quantizer, 4, axis, 64, normal(
            gen, shape, torch.float32)


def main():
    args = arguments(20263, out_help="directory of the vectors")
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(args.seed)
    versions = " ".join(f"{p} {md.version(p)}" for p in ("optimum-quanto", "hqq"))
    lines = ["QUANTMATH 1",
             f"meta {versions} torch {torch.__version__.split('+')[0]} transformers {md.version('transformers')} "
             f"seed {args.seed} threads 1"]
    count = 0
    for name, quantizer, nbits, axis, group, t in cases(gen):
        record(lines, name, quantizer, nbits, axis, group, t)
        count += 1
    print(f"hqq cases recorded from the unpacked path: {sum(' unpacked' in line for line in lines)}")
    path = write_table(args.out, "quant_math.qv", lines + ["end"])
    print(f"quant_math.qv: {count} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
