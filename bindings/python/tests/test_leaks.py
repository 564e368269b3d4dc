"""No leak over 100 000 create/update/destroy cycles (tracemalloc for Python objects, RSS for C memory)."""
from __future__ import annotations

import gc
import os
import tracemalloc

import numpy as np

import kvcache

CYCLES = 100_000


def rss_bytes():
    try:
        import psutil
        return psutil.Process(os.getpid()).memory_info().rss
    except ImportError:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cycle(k, v, torch_k):
    cache = kvcache.DynamicCache()
    keys, values = cache.update(k, v, 0)
    np.from_dlpack(keys)
    cache.update(torch_k if torch_k is not None else k, torch_k if torch_k is not None else v, 0)
    cache.reorder_cache([0])
    dup = cache.clone()
    try:
        cache.update(k[:, :1], v, 0)  # an error object is freed too
    except kvcache.KvcacheError:
        pass
    dup.close()


def test_no_leak_over_100k_cycles():
    try:
        import torch
        torch_k = torch.ones(1, 2, 1, 8)
    except ImportError:
        torch_k = None
    k = np.ones((1, 2, 1, 8), np.float32)
    v = np.ones((1, 2, 1, 8), np.float32)
    for _ in range(2000):  # warm up allocators and caches
        cycle(k, v, torch_k)
    rss_bytes()  # imports psutil outside the measured window
    gc.collect()
    tracemalloc.start()
    # Allocator free lists and interned objects settle during a first window; a leak keeps growing after it.
    for _ in range(CYCLES // 5):
        cycle(k, v, torch_k)
    gc.collect()
    snap0 = tracemalloc.take_snapshot()
    rss0 = rss_bytes()
    rest = CYCLES - CYCLES // 5
    for _ in range(rest):
        cycle(k, v, torch_k)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = rss_bytes()
    tracemalloc.stop()
    diffs = snap1.compare_to(snap0, "filename")
    grown = sum(s.size_diff for s in diffs)
    # A leak of one object per cycle would be several MB over these cycles; leaked caches tens of MB.
    assert grown < 64 * 1024, f"Python allocations grew by {grown} bytes over {rest} cycles"
    assert rss1 - rss0 < 4 * 1024 * 1024, f"RSS grew by {(rss1 - rss0) / 2**20:.1f} MiB over {rest} cycles"
