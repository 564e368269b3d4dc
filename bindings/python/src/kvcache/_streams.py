"""CUDA/HIP streams as the binding sees them: handles in, and ordering between a cache's stream and a consumer's.

The extension links no GPU runtime; where two streams must be ordered (a view exported through DLPack to a
consumer on another stream than the cache's) it calls :func:`wait_stream`, which uses torch's runtime.
"""
from __future__ import annotations

import operator
import sys
from typing import Any, Optional

from . import _lib

StreamLike = Any  # None, an int handle, torch.cuda.Stream / ExternalStream (.cuda_stream), cupy's Stream (.ptr)


def stream_handle(stream: StreamLike) -> Optional[int]:
    """The stream's handle as an int (None for the default stream).

    Accepts None, an int (a ``cudaStream_t``/``hipStream_t`` value), or a stream object: torch's
    ``torch.cuda.Stream``/``ExternalStream`` (``.cuda_stream``, also on ROCm builds of torch) and cupy's
    ``cupy.cuda.Stream`` (``.ptr``).
    """
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if handle is not None and not callable(handle):
            return operator.index(handle)
    try:
        return operator.index(stream)
    except TypeError:
        raise TypeError(f"stream: expected None, an int handle or a stream object with .cuda_stream (torch) or "
                        f".ptr (cupy), got {type(stream).__name__}") from None


def wait_stream(consumer: Optional[int], producer: int, device_type: int, device_id: int) -> None:
    """Orders a consumer after the work issued so far on stream ``producer`` (DLPack stream values).

    ``consumer`` is a stream (it waits for an event, the host does not block) or None for the host (it waits for
    the producer stream: host-tier views of offloaded layers are written by copies on it). ``device_type`` is
    the view's DLPack device type; torch's CUDA API serves CUDA and ROCm alike.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        raise BufferError(f"kvcache: the view is written on the cache's stream {producer:#x} and read on "
                          f"{'the host' if consumer is None else f'stream {consumer}'}; without torch kvcache cannot "
                          f"order them: bind the cache to the consumer's stream (cache.stream = ...) or synchronize "
                          f"and export with stream=-1")
    device = torch.device("cuda", device_id)

    def torch_stream(handle: int) -> Any:
        # 0 and DLPack's 1 are the default (legacy) stream, torch's default stream; DLPack's 2 is the CUDA runtime's
        # cudaStreamPerThread handle itself.
        if handle in (0, 1):
            return torch.cuda.default_stream(device)
        return torch.cuda.ExternalStream(handle, device=device)

    source = torch_stream(producer)
    if consumer is None:
        source.synchronize()
    else:
        torch_stream(consumer).wait_stream(source)


_lib._set_stream_waiter(wait_stream)
