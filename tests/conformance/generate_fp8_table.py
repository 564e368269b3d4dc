#!/usr/bin/env python3
"""Writes vectors/fp8_e4m3fn.tbl: torch's float8_e4m3fn arithmetic, read by
tests/unit/test_internal_quant_fp8.c to check backends/cpu/quant_fp8.c.

Everything in the file is what torch computed; nothing comes from kvcache.

  KVFP8 1
  meta torch VERSION
  decode 256            then 256 lines `CODE F32BITS`: code.float() (hex)
  encode RUNS           then RUNS lines `START CODE`: x.to(torch.float8_e4m3fn)
                        for every one of the 2^32 float32 bit patterns x,
                        run-length encoded: the code of bit pattern u is the
                        CODE of the last run whose START <= u (hex)
  scale N               then N lines `DT AMAX SCALE`: transformers' calibration
                        (t.abs().amax().float() / 448).clamp(min=tiny) of a
                        one-element tensor of dtype DT (f32, f16, bf16) holding
                        the bit pattern AMAX (hex), SCALE as float32 bits
  quant N               then N lines `DT X SCALE CODE`: (x.float() / scale).to(e4m3fn)
  dequant N             then N lines `DT CODE SCALE OUT`: (code.float() * scale).to(DT),
                        OUT in DT's bits
  end

The encode table is exhaustive: the generator converts all 2^32 patterns
(in chunks, through torch's vectorized CPU kernel), checks the scalar path
(a strided tensor) agrees on a sample, and checks the run list reproduces
every code before writing it. Run with the pinned venv (torch 2.15); about
two minutes on two cores.
"""
import os
import random

import numpy as np
import torch

from vectorgen import arguments, write_table

FP8 = torch.float8_e4m3fn
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
INT_VIEW = {"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}
CHUNK = 1 << 24


def codes_of(bits_u32):
    """torch's e4m3fn codes of float32 bit patterns (numpy uint32) as numpy uint8."""
    x = torch.from_numpy(bits_u32.view(np.int32)).view(torch.float32)
    return x.to(FP8).view(torch.uint8).numpy()


def encode_runs():
    runs = []  # (start, code)
    prev = None
    for c in range((1 << 32) // CHUNK):
        base = c * CHUNK
        bits = np.arange(base, base + CHUNK, dtype=np.uint64).astype(np.uint32)
        codes = codes_of(bits)
        change = np.flatnonzero(np.diff(codes.astype(np.int16)) != 0) + 1
        if prev is None or codes[0] != prev:
            runs.append((base, int(codes[0])))
        for i in change:
            runs.append((base + int(i), int(codes[i])))
        prev = codes[-1]
        if c == 0 or c % 64 == 63:
            print(f"  encode: chunk {c + 1}/256, {len(runs)} runs", flush=True)
    return runs


def check_runs(runs):
    """The run list reproduces torch's code of every pattern; the scalar path agrees on a sample."""
    starts = np.array([s for s, _ in runs], dtype=np.uint64)
    vals = np.array([c for _, c in runs], dtype=np.uint8)
    for c in range((1 << 32) // CHUNK):
        base = c * CHUNK
        bits = np.arange(base, base + CHUNK, dtype=np.uint64)
        want = codes_of(bits.astype(np.uint32))
        got = vals[np.searchsorted(starts, bits, side="right") - 1]
        if not np.array_equal(got, want):
            raise SystemExit(f"run list disagrees with torch in chunk {c}")
        if c % 16 == 0:
            # every other element of a chunk: a non-contiguous tensor, torch's non-vectorized loop
            x = torch.from_numpy(bits.astype(np.uint32).view(np.int32)).view(torch.float32)[::2]
            strided = x.to(FP8).view(torch.uint8).numpy()
            if not np.array_equal(strided, want[::2]):
                raise SystemExit(f"strided conversion disagrees in chunk {c}")


def special_f32(rng):
    """Interesting float32 bit patterns: zeros, subnormals, FLT_MIN neighbours, near 448 * 2^k, inf, NaN."""
    out = [0, 1, 2, 0x7FFFFF, 0x800000, 0x800001, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF,
           0x3F800000, 0x43E00000, 0x43E80000, 0x43E7FFFF, 0x43E80001, 0x43F00000]
    out += [b | 0x80000000 for b in out]
    for _ in range(500):
        out.append(rng.getrandbits(32))
    for _ in range(500):  # finite, spread over the exponents a cache sees
        e = rng.randint(90, 160)
        out.append((rng.getrandbits(1) << 31) | (e << 23) | rng.getrandbits(23))
    return out


def to_dtype_bits(dt, f32_bits):
    """Patterns of dtype dt made from float32 patterns (the high half for 16-bit types, or a rounding)."""
    x = torch.tensor(np.array(f32_bits, dtype=np.uint32).view(np.int32)).view(torch.float32)
    if dt == "f32":
        return x
    return x.to(DTYPES[dt])


def hexbits(t, dt):
    mask = 0xFFFFFFFF if dt == "f32" else 0xFFFF
    return [f"{v & mask:x}" for v in t.contiguous().view(INT_VIEW[dt]).reshape(-1).tolist()]


def scale_lines(rng):
    lines = []
    for dt in DTYPES:
        vals = to_dtype_bits(dt, special_f32(rng))
        for i in range(vals.numel()):
            t = vals[i:i + 1].reshape(1, 1, 1, 1)
            scale = (t.abs().amax().float() / torch.finfo(FP8).max).clamp(min=torch.finfo(torch.float32).tiny)
            lines.append(f"{dt} {hexbits(t, dt)[0]} {scale.view(torch.int32).item() & 0xFFFFFFFF:x}")
    return lines


def quant_lines(rng):
    lines = []
    for dt in DTYPES:
        xs = to_dtype_bits(dt, special_f32(rng))
        amaxes = to_dtype_bits(dt, special_f32(rng))
        for i in range(xs.numel()):
            # scales as transformers makes them (from a tensor's amax), and near x's own magnitude half the time
            a = amaxes[i:i + 1] if rng.random() < 0.5 else (xs[i:i + 1].float() * rng.uniform(0.5, 4)).to(xs.dtype)
            scale = (a.abs().amax().float() / torch.finfo(FP8).max).clamp(min=torch.finfo(torch.float32).tiny)
            x = xs[i:i + 1]
            code = (x.float() / scale).to(FP8).view(torch.uint8).item()
            lines.append(f"{dt} {hexbits(x, dt)[0]} {scale.view(torch.int32).item() & 0xFFFFFFFF:x} {code:x}")
    return lines


def dequant_lines(rng):
    lines = []
    pool = special_f32(rng)
    for dt in DTYPES:
        for code in range(256):
            for _ in range(4):
                b = pool[rng.randrange(len(pool))] if rng.random() < 0.3 else \
                    ((rng.randint(90, 140) << 23) | rng.getrandbits(23))
                scale = torch.tensor([b], dtype=torch.int64).to(torch.int32).view(torch.float32)
                if not torch.isfinite(scale).all() or scale.item() <= 0:
                    scale = torch.tensor([1.0])
                q = torch.tensor([code], dtype=torch.uint8).view(FP8)
                out = (q.float() * scale).to(DTYPES[dt])
                lines.append(f"{dt} {code:x} {scale.view(torch.int32).item() & 0xFFFFFFFF:x} {hexbits(out, dt)[0]}")
    return lines


def main():
    args = arguments(8)
    rng = random.Random(args.seed)
    torch.manual_seed(0)
    lines = ["KVFP8 1", f"meta torch {torch.__version__.split('+')[0]}"]
    dec = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(FP8).float()
    lines.append("decode 256")
    lines += [f"{c:x} {v & 0xFFFFFFFF:x}" for c, v in enumerate(dec.view(torch.int32).tolist())]
    runs = encode_runs()
    check_runs(runs)
    lines.append(f"encode {len(runs)}")
    lines += [f"{s:x} {c:x}" for s, c in runs]
    for name, fn in (("scale", scale_lines), ("quant", quant_lines), ("dequant", dequant_lines)):
        part = fn(rng)
        lines.append(f"{name} {len(part)}")
        lines += part
    lines.append("end")
    path = write_table(args.out, "fp8_e4m3fn.tbl", lines)
    print(f"{path}: {len(runs)} encode runs, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
