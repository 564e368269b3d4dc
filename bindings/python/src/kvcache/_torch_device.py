"""torch devices and streams as kvcache sees them: what kvcache.transformers places its caches with (imports torch)."""
from __future__ import annotations

from typing import Any, Tuple

import torch

from . import _lib
from ._types import DeviceType

DevicePair = Tuple[int, int]  # (DLPack device type, device id), as kvc_device

CPU: DevicePair = (int(DeviceType.CPU), 0)


def device_pair(device: Any) -> DevicePair:
    """kvcache's device for a torch device, a device string (``"cuda:1"``), a CUDA index, or a DLPack pair.

    ``"cuda"`` without an index is torch's current CUDA device, as for torch tensors. On a ROCm build of torch,
    torch's "cuda" devices are ROCm devices.
    """
    if isinstance(device, tuple) and len(device) == 2:
        return int(device[0]), int(device[1])
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cpu":
        return CPU
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        kind = DeviceType.ROCM if getattr(torch.version, "hip", None) else DeviceType.CUDA
        return int(kind), int(index)
    raise ValueError(f"kvcache.transformers: device {str(device)!r}: kvcache caches live on the CPU or a CUDA/ROCm "
                     f"device (torch's 'cpu' and 'cuda')")


def default_device() -> torch.device:
    """Where torch puts a tensor made without a device (torch.set_default_device)."""
    return torch.empty(0).device


def torch_views(handle: Any, device: DevicePair) -> Any:
    """The extension's per-cache memory of returned torch tensors; a device cache follows torch's current stream."""
    if device == CPU:
        return _lib._torch_views(handle, None, 0)
    return _lib._torch_views(handle, torch._C._cuda_getCurrentRawStream, device[1])
