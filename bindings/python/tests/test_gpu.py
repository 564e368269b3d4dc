"""GPU checks: run only where torch sees a CUDA device (they skip with the reason elsewhere)."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="SKIPPED: no CUDA device visible to torch")


def test_cpu_cache_refuses_cuda_tensors_without_copying():
    cache = kvcache.DynamicCache()
    x = torch.ones(1, 2, 3, 4, device="cuda")
    with pytest.raises(kvcache.DeviceMismatchError) as info:
        cache.update(x, x, 0)
    assert info.value.code == kvcache._lib.KVC_ERROR_DEVICE_MISMATCH
    assert len(cache) == 0 or not cache.layer_info(0).is_initialized


def test_cuda_caches_need_the_cuda_backend():
    if "cuda" in kvcache.features():
        cache = kvcache.DynamicCache(device="cuda:0")
        x = torch.ones(1, 2, 3, 4, device="cuda")
        keys, _ = cache.update(x, x, 0)
        assert keys.__dlpack_device__() == (2, 0)
        assert torch.equal(torch.from_dlpack(keys), x)
    else:
        with pytest.raises(kvcache.NoDeviceError):
            kvcache.DynamicCache(device="cuda:0")
