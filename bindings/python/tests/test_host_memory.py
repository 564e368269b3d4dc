"""kvcache.set_host_memory_retention / release_host_memory / host_memory_retained: a freed CPU cache's large
stores are kept for reuse, released on demand, and not kept under a limit of 0.

The kept memory is process-wide: the test collects earlier tests' garbage first and holds the collector off,
so that no other cache's stores are freed while it counts."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kvcache

# One static layer of 4 heads x 1024 slots x 64 dims of float32: 1 MiB per K and V store, the smallest block the
# library keeps.
HEADS, SLOTS, DIM = 4, 1024, 64
STORES_BYTES = 2 * HEADS * SLOTS * DIM * 4


@pytest.fixture
def quiet_process():
    """Nothing kept and no garbage collection during the test; the first limit back afterwards."""
    gc.collect()
    gc.disable()
    first = kvcache.set_host_memory_retention(0)
    try:
        yield
    finally:
        kvcache.set_host_memory_retention(first)
        gc.enable()


def cache_with_large_stores() -> kvcache.CustomCache:
    """A cache whose K and V stores exist: a static layer allocates them at its first update."""
    cache = kvcache.CustomCache([kvcache.LayerSpec(kvcache.LayerKind.STATIC, max_cache_len=SLOTS)])
    x = np.ones((1, HEADS, 3, DIM), np.float32)
    cache.update(x, x, layer_idx=0)
    return cache


def test_freed_stores_are_kept_released_and_not_kept_under_a_zero_limit(quiet_process):
    assert kvcache.host_memory_retained() == 0, "a limit of 0 keeps nothing"
    limit = 1 << 30
    assert kvcache.set_host_memory_retention(limit) == 0, "the previous limit"

    cache_with_large_stores().close()
    kept = kvcache.host_memory_retained()
    assert kept >= STORES_BYTES, "a closed cache's 1 MiB stores are kept"
    assert kvcache.release_host_memory() == kept
    assert kvcache.host_memory_retained() == 0
    assert kvcache.release_host_memory() == 0, "nothing left to give back"

    # Kept stores serve the next cache of the same shape; a cache dropped without close() leaves its stores too.
    cache = cache_with_large_stores()
    del cache
    kept = kvcache.host_memory_retained()
    assert kept >= STORES_BYTES
    reuser = cache_with_large_stores()
    assert kvcache.host_memory_retained() < kept, "the new stores came from the kept ones"
    reuser.close()

    assert kvcache.set_host_memory_retention(0) == limit, "the previous limit"
    assert kvcache.host_memory_retained() == 0, "a limit of 0 gives back what was kept"
    cache_with_large_stores().close()
    assert kvcache.host_memory_retained() == 0, "under a limit of 0 nothing is kept"


@pytest.mark.parametrize("bad", [-1, 1 << 64])
def test_a_limit_out_of_range_is_refused_and_changes_nothing(quiet_process, bad):
    kvcache.set_host_memory_retention(12345)
    with pytest.raises(kvcache.InvalidArgumentError, match=rf"set_host_memory_retention: max_bytes is {bad}; .*2\^64"):
        kvcache.set_host_memory_retention(bad)
    assert kvcache.set_host_memory_retention(0) == 12345
    with pytest.raises(TypeError):
        kvcache.set_host_memory_retention(1.5)


def test_the_largest_limit_passes_through():
    first = kvcache.set_host_memory_retention((1 << 64) - 1)
    assert kvcache.set_host_memory_retention(first) == (1 << 64) - 1
