"""Caches on caller-provided storage (``docs/allocator.md``, C header ``kvcache/allocator.h``).

A cache made with ``allocator=`` keeps its K/V stores in memory that allocator hands out: torch tensors
(:class:`TorchAllocator`), NumPy arrays (:class:`NumpyAllocator`) or anything an :class:`Allocator`
subclass returns. The cache's views are then slices of those buffers, with no copy::

    >>> import numpy as np, kvcache
    >>> arena = kvcache.NumpyAllocator()
    >>> cache = kvcache.DynamicCache(allocator=arena)
    >>> keys, _ = cache.update(np.ones((1, 2, 3, 4), np.float32), np.ones((1, 2, 3, 4), np.float32), 0)
    >>> buffer, offset = arena.find(keys.data_ptr)
    >>> buffer.dtype, offset
    (dtype('uint8'), 0)

The allocator serves the device-tier K/V stores (what the views point into); recurrent states, quantized
records, indexer keys and the host tier of offloaded layers stay the library's. Clones, batch splits and
stacks of such a cache use the same allocator, which the library keeps alive until the last of them is gone.
"""
from __future__ import annotations

import abc
import threading
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Allocator", "TorchAllocator", "NumpyAllocator"]


class Allocator(abc.ABC):
    """Where a cache's K/V stores live: ``kvcache.DynamicCache(allocator=...)`` and the other cache classes.

    The library calls :meth:`alloc` when a layer needs a store (its first update, a growth, ``reserve``, a
    clone) and :meth:`free` when it is done with one, from the thread calling into the cache, holding the GIL.
    Caches made from one another (a clone and its source) may call it from different threads: an allocator
    shared so must be thread-safe. An exception in :meth:`alloc` (or a return of 0) refuses the memory: the
    cache call raises :class:`kvcache.OutOfMemoryError`, whose message and ``__cause__`` carry the exception,
    and the cache is unchanged.
    """

    @abc.abstractmethod
    def alloc(self, nbytes: int, align: int, device: str) -> int:
        """The address of ``nbytes`` writable bytes on ``device`` (``"cpu"``), a multiple of ``align`` (a power
        of two, 256). The memory may be uninitialized (the library zeroes it) and must stay valid, unused by
        anything else, until :meth:`free` is given the address."""

    @abc.abstractmethod
    def free(self, address: int, nbytes: int, device: str) -> None:
        """Gives back what :meth:`alloc` returned, with the same ``nbytes`` and ``device``; called once per
        address, at the latest when the last cache using the allocator is destroyed. Must not raise."""


class _BufferAllocator(Allocator):
    """Aligned slices of one-dimensional uint8 buffers a subclass makes, each kept alive until it is freed."""

    def __init__(self) -> None:
        self._live: Dict[int, Any] = {}
        self._lock = threading.Lock()

    def _empty(self, nbytes: int) -> Any:
        raise NotImplementedError

    @staticmethod
    def _address(buffer: Any) -> int:
        raise NotImplementedError

    def alloc(self, nbytes: int, align: int, device: str) -> int:
        if device != "cpu":
            raise ValueError(f"{type(self).__name__} serves CPU memory; the cache is on {device!r}")
        whole = self._empty(nbytes + align - 1)
        start = -self._address(whole) % align
        piece = whole[start:start + nbytes]
        address = self._address(piece)
        with self._lock:
            self._live[address] = piece
        return address

    def free(self, address: int, nbytes: int, device: str) -> None:
        with self._lock:
            del self._live[address]

    @property
    def buffers(self) -> List[Any]:
        """The buffers handed out and not yet freed (the stores of the caches using this allocator)."""
        with self._lock:
            return list(self._live.values())

    def find(self, address: int) -> Optional[Tuple[Any, int]]:
        """``(buffer, offset)`` of the live buffer holding ``address`` (a view's ``data_ptr``), or None."""
        with self._lock:
            for start, piece in self._live.items():
                if start <= address < start + len(piece):
                    return piece, address - start
        return None


class TorchAllocator(_BufferAllocator):
    """Stores as CPU ``torch.uint8`` tensors: a cache's views are slices of the tensors in :attr:`buffers`
    (``find(view.data_ptr)`` says which), so a write through such a tensor shows in the view and the reverse.

    Example:
        >>> import torch, kvcache
        >>> arena = kvcache.TorchAllocator()
        >>> cache = kvcache.DynamicCache(allocator=arena)
        >>> keys, _ = cache.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), 0)
        >>> tensor, offset = arena.find(keys.data_ptr)
        >>> tensor[offset:offset + 4].view(torch.float32).item()
        1.0
    """

    def __init__(self) -> None:
        import torch  # only this allocator needs torch

        super().__init__()
        self._torch = torch

    def _empty(self, nbytes: int) -> Any:
        return self._torch.empty(nbytes, dtype=self._torch.uint8)

    @staticmethod
    def _address(buffer: Any) -> int:
        return buffer.data_ptr()


class NumpyAllocator(_BufferAllocator):
    """Stores as NumPy ``uint8`` arrays (see :class:`TorchAllocator`)."""

    def __init__(self) -> None:
        import numpy

        super().__init__()
        self._numpy = numpy

    def _empty(self, nbytes: int) -> Any:
        return self._numpy.empty(nbytes, self._numpy.uint8)

    @staticmethod
    def _address(buffer: Any) -> int:
        return buffer.__array_interface__["data"][0]
