#!/usr/bin/env python3
"""A Python scheduler's decode step over 256 running sequences of a pool, against the same step in C.

The step is bench_pool_step's (bench/bench_pool_step.c): every sequence reserves one token, then every sequence
commits; same pool shape, same 64-token prompts, same steps. Made from Python two ways:

  per_sequence   seq.reserve([token]) for each sequence, then seq.commit() for each (a binding call per sequence)
  batch          pool.reserve_batch(seqs, tokens, 1), then pool.commit_batch(seqs): one C call each

The C program runs before and after the Python measurements (its repetitions alternate its own two ways), and
the medians of all its samples are the C step. Reported: medians of ns per step in this thread's CPU time (the
scheduler's own work; on a shared machine other processes inflate wall time, not CPU time) and in wall time,
and the ratios Python / C (C per_sequence, the step a C scheduler makes with the per-sequence calls). Rows: bench
"pool_step_python" in results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import kvcache
from bench_rows import write_rows

SEQS = 256
PROMPT = 64
BLOCK = 16
BENCH = "pool_step_python"


def open_pool(tokens_per_seq):
    blocks = SEQS * ((tokens_per_seq + BLOCK - 1) // BLOCK + 1) + 2
    pool = kvcache.Pool(dtype="float16", groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=8)])
    seqs = [pool.sequence() for _ in range(SEQS)]
    for i, s in enumerate(seqs):
        s.reserve([1 + i * PROMPT + t for t in range(PROMPT)])
        s.commit()
    return pool, seqs


def run_steps(pool, seqs, batch, steps, first):
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    for k in range(steps):
        token = first + k
        if batch:
            r = pool.reserve_batch(seqs, [token] * SEQS, 1)
            if r.num_reserved != SEQS:
                sys.exit(f"bench_pool_python: the pool ran out of blocks ({r.num_reserved} of {SEQS} reserved)")
            pool.commit_batch(seqs)
        else:
            for s in seqs:
                s.reserve([token])
            for s in seqs:
                s.commit()
    return (time.thread_time_ns() - c0) / steps, (time.perf_counter_ns() - w0) / steps


def c_step(binary, reps, steps):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.json")
        subprocess.run([binary, "--json", path, "--reps", str(reps), "--steps", str(steps)], check=True,
                       stdout=subprocess.DEVNULL)
        with open(path) as f:
            return {r["metric"]: r["value"] for r in json.load(f) if r["bench"] == "pool_step"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--c-bench", required=True, help="the bench_pool_step program")
    ap.add_argument("--json", default="build/bench/results.json")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()

    c_runs = [c_step(a.c_bench, a.reps, a.steps)]
    pools = [open_pool(PROMPT + (a.reps + 1) * a.steps) for _ in range(2)]
    samples = {0: ([], []), 1: ([], [])}  # batch -> (cpu, wall)
    for b in (0, 1):
        run_steps(*pools[b], b, a.steps, 100000)  # warm-up
    for r in range(a.reps):
        for k in (0, 1):
            b = (k + r) % 2
            cpu, wall = run_steps(*pools[b], b, a.steps, 100000 + (r + 1) * a.steps)
            samples[b][0].append(cpu)
            samples[b][1].append(wall)
    c_runs.append(c_step(a.c_bench, a.reps, a.steps))

    def c_median(metric):  # the median of the two runs' medians
        return statistics.median(run[metric] for run in c_runs)

    rows = []
    c_cpu, c_wall = c_median("cpu_ns_per_step_per_sequence"), c_median("wall_ns_per_step_per_sequence")
    print(f"pool step: {SEQS} sequences x 1 token (reserve, then commit); {a.reps} repetitions of {a.steps} steps")
    print(f"{'step':34} {'cpu ns/step':>12} {'wall ns/step':>13} {'cpu x C':>8} {'wall x C':>9}")
    lines = [("C, per-sequence calls", c_cpu, c_wall),
             ("C, batch calls", c_median("cpu_ns_per_step_batch"), c_median("wall_ns_per_step_batch"))]
    for b, name in ((0, "per_sequence"), (1, "batch")):
        cpu, wall = statistics.median(samples[b][0]), statistics.median(samples[b][1])
        lines.append((f"Python, {name.replace('_', '-')} calls", cpu, wall))
        rows += [{"bench": BENCH, "impl": "kvcache-python", "metric": f"cpu_ns_per_step_{name}", "value": cpu,
                  "unit": "ns"},
                 {"bench": BENCH, "impl": "kvcache-python", "metric": f"wall_ns_per_step_{name}", "value": wall,
                  "unit": "ns"},
                 {"bench": BENCH, "impl": "kvcache-python", "metric": f"cpu_ratio_to_c_{name}", "value": cpu / c_cpu,
                  "unit": "x"}]
    for name, cpu, wall in lines:
        print(f"{name:34} {cpu:12.0f} {wall:13.0f} {cpu / c_cpu:8.2f} {wall / c_wall:9.2f}")
    rows += [{"bench": BENCH, "impl": "kvcache-c", "metric": "cpu_ns_per_step_per_sequence", "value": c_cpu,
              "unit": "ns"},
             {"bench": BENCH, "impl": "kvcache-c", "metric": "wall_ns_per_step_per_sequence", "value": c_wall,
              "unit": "ns"}]
    print(f"Python batch / C = {statistics.median(samples[1][0]) / c_cpu:.2f} (CPU time; target <= 3)")
    for pool, seqs in pools:
        for s in seqs:
            s.close()
        pool.close()
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
