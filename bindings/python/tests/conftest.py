"""Shared fixtures: the same tests run over numpy arrays and torch CPU tensors."""
from __future__ import annotations

import numpy as np
import pytest

import kvcache

try:
    import torch
except ImportError:  # pragma: no cover - the project's test environment installs torch
    torch = None


class NumpyBackend:
    name = "numpy"

    def tensor(self, shape, start=0.0, dtype="float32"):
        n = int(np.prod(shape))
        return (np.arange(n, dtype=np.float64) + start).reshape(shape).astype(dtype)

    def from_view(self, view):
        return np.from_dlpack(view)

    def ptr(self, x):
        return x.__array_interface__["data"][0]

    def copy(self, x):
        return np.array(x, copy=True)

    def equal(self, a, b):
        return np.array_equal(np.asarray(a), np.asarray(b))

    def index(self, values):
        return np.asarray(values, dtype=np.int64)


class TorchBackend:
    name = "torch"

    def tensor(self, shape, start=0.0, dtype="float32"):
        n = int(np.prod(shape))
        return (torch.arange(n, dtype=torch.float64) + start).reshape(shape).to(getattr(torch, dtype))

    def from_view(self, view):
        return torch.from_dlpack(view)

    def ptr(self, x):
        return x.data_ptr()

    def copy(self, x):
        return x.clone()

    def equal(self, a, b):
        return torch.equal(torch.as_tensor(a), torch.as_tensor(b))

    def index(self, values):
        return torch.tensor(values, dtype=torch.long)


BACKENDS = ["numpy", "torch"]


@pytest.fixture(params=BACKENDS)
def xp(request):
    if request.param == "torch":
        if torch is None:
            pytest.skip("SKIPPED: torch is not installed")
        return TorchBackend()
    return NumpyBackend()


def snapshot(cache):
    """Everything observable about a cache, copied: used to check that a failed call changed nothing."""
    out = []
    for i in range(len(cache)):
        info = cache.layer_info(i)
        kv = None
        if info.is_initialized:
            try:
                k, v = cache.layer_view(i)
                kv = (np.array(np.from_dlpack(k), copy=True) if k.dtype != "bfloat16" else None,
                      np.array(np.from_dlpack(v), copy=True) if v.dtype != "bfloat16" else None)
            except kvcache.KvcacheError:
                kv = "no-view"
        out.append((info, kv))
    return len(cache), out


def assert_unchanged(before, cache):
    after = snapshot(cache)
    assert before[0] == after[0]
    for (ia, kva), (ib, kvb) in zip(before[1], after[1]):
        assert ia == ib
        if isinstance(kva, tuple):
            for x, y in zip(kva, kvb):
                assert (x is None and y is None) or np.array_equal(x, y)
        else:
            assert kva == kvb
