"""The library's own host memory, shared by the whole process (C header ``kvcache/allocator.h``).

CPU caches and pools made without ``allocator=`` / ``storage=`` keep their stores in memory of the
library's. A block of 1 MiB or more is mapped aligned to 2 MiB and advised as huge pages, and when its cache
or pool is freed the library keeps it for the next block of about the same size (no smaller, at most a
quarter larger): a restore, a load or a new cache of the same model then writes into memory that is already
faulted in. A kept block goes back to the kernel after 10 seconds without reuse, when keeping it would pass
the retention limit, and on :func:`release_host_memory`. The limit is ``$KVC_HOST_MEMORY_RETAIN`` (bytes,
read once) or the smaller of 1 GiB and an eighth of the machine's memory until :func:`set_host_memory_retention` sets it.

These functions are process-wide, not tied to a cache, and may be called from any thread at any time. GPU
memory (torch's, the CUDA and HIP backends') is not affected. A long-lived process that wants memory back as
soon as caches are freed::

    >>> import kvcache
    >>> previous = kvcache.set_host_memory_retention(0)
    >>> kvcache.host_memory_retained()
    0
    >>> _ = kvcache.set_host_memory_retention(previous)   # keep blocks for reuse again
"""
from __future__ import annotations

from . import _lib
from .pool import _u64

__all__ = ["set_host_memory_retention", "release_host_memory", "host_memory_retained"]


def set_host_memory_retention(max_bytes: int) -> int:
    """Sets the most bytes kept aside for reuse and returns the previous limit.

    Blocks kept past the new limit are given back at once, the oldest first; ``0`` keeps nothing and gives
    back what is kept now. ``max_bytes`` outside ``[0, 2**64)`` raises :class:`~kvcache.InvalidArgumentError`
    and changes nothing.
    """
    return _lib.kvc_host_memory_set_retention(_u64(max_bytes, "set_host_memory_retention: max_bytes"))


def release_host_memory() -> int:
    """Gives every kept block back to the kernel and returns the bytes given back. The limit is unchanged."""
    return _lib.kvc_host_memory_release()


def host_memory_retained() -> int:
    """The bytes kept aside for reuse now (blocks idle past their time are given back first)."""
    return _lib.kvc_host_memory_retained()
