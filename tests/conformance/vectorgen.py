"""What every conformance generator shares: the command line, the .kvv writer
and the loop that fills one file per family from a seeded random stream.

One copy keeps the generators' files identical in form (header, seeds, case
labels) and keeps a change to the format in one place. Nothing here imports
generate.py, which imports this module.
"""
import argparse
import collections
import os
import random

import torch
import transformers


class Planned(Exception):
    """An error transformers raises on purpose; recorded with the code the replay must see."""

    def __init__(self, code, cls):
        super().__init__(code)
        self.code, self.cls = code, cls


class Skip(Exception):
    """An operation that is not recorded (an unplanned error, or one not worth recording)."""


class Out:
    def __init__(self, path, suite, seed):
        self.path, self.lines, self.ops = path, [], 0
        self.stats = collections.Counter()  # coverage, printed, not written
        self.line("KVCONF 1")
        self.line(f"meta transformers {transformers.__version__} torch {torch.__version__.split('+')[0]} "
                  f"suite {suite} seed {seed}")

    def line(self, text):
        self.lines.append(text)

    def op(self, text):
        self.lines.append(text)
        self.ops += 1
        words = text.split()
        self.stats[words[0]] += 1
        if "err" in words:
            self.stats[f"{words[0]} -> {words[words.index('err') + 1]}"] += 1

    def write(self):
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\nend\n")
        size = os.path.getsize(self.path)
        print(f"{os.path.basename(self.path)}: {self.ops} ops, {size} bytes", flush=True)
        for key, count in sorted(self.stats.items()):
            print(f"    {count:5d}  {key}")
        return self.ops, size


def arguments(default_seed, suites=None, out_help=None):
    """The generators' command line: --out DIR, --seed N and, where a generator
    serves several transformers versions, --suite NAME."""
    ap = argparse.ArgumentParser()
    if suites is not None:
        ap.add_argument("--suite", required=True, choices=sorted(suites))
    ap.add_argument("--out", required=True, help=out_help)
    ap.add_argument("--seed", type=int, default=default_seed)
    return ap.parse_args()


def write_files(out_dir, base_seed, suite, files, run_case, meta=None):
    """Writes one OUT_DIR/NAME.kvv per (NAME, FAMILY, CASES) of `files`. File
    number i draws from random.Random(base_seed * 100 + i), so a family added
    at the end leaves the earlier files unchanged; run_case(family, out, label,
    rng, c) records case number c. `meta` extends the header's meta line."""
    torch.manual_seed(0)
    os.makedirs(out_dir, exist_ok=True)
    for fi, (name, family, cases) in enumerate(files):
        seed = base_seed * 100 + fi
        rng = random.Random(seed)
        out = Out(os.path.join(out_dir, name + ".kvv"), suite, seed)
        if meta:
            out.lines[1] += " " + meta
        for c in range(cases):
            run_case(family, out, f"{name}_{c}", rng, c)
        out.write()


def run_skipping(step, count):
    """Calls step() `count` times; a step that raised Skip recorded nothing, and the walk goes on."""
    for _ in range(count):
        try:
            step()
        except Skip:
            pass


def write_table(out_dir, name, lines):
    """Writes a non-.kvv table (lines, then a newline) and returns its path."""
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
