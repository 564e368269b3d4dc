"""The exceptions kvcache raises.

Every error of the C library becomes an instance of a :class:`KvcacheError`
subclass that carries the C error code (``.code``, ``.code_name``) and the C
message (``str(e)``). Each subclass also derives from the built-in exception a
Python user expects in that situation, so code written for transformers'
caches keeps catching what it caught before::

    >>> import kvcache, numpy as np
    >>> cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=2)
    >>> x = np.zeros((1, 1, 3, 4), np.float32)
    >>> try:
    ...     cache.update(x, x, 0)
    ... except IndexError as e:          # OutOfRangeError is an IndexError
    ...     print(e.code_name)
    KVC_ERROR_OUT_OF_RANGE
"""
from __future__ import annotations

from . import _lib

__all__ = [
    "KvcacheError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "DtypeMismatchError",
    "ShapeMismatchError",
    "DeviceMismatchError",
    "UnsupportedError",
    "InvalidStateError",
    "OutOfMemoryError",
    "NoDeviceError",
    "VersionMismatchError",
    "InternalError",
    "IoError",
    "StaleViewError",
]


class KvcacheError(Exception):
    """Base class of every error kvcache raises.

    Attributes:
        code: the stable C error code (``kvcache.KVC_ERROR_*``).
        code_name: its name, e.g. ``"KVC_ERROR_OUT_OF_RANGE"``.
        message: the C library's message (also ``str(error)``).
    """

    code: int = 0

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def code_name(self) -> str:
        return _lib.kvc_code_name(self.code)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class InvalidArgumentError(KvcacheError, ValueError):
    """KVC_ERROR_INVALID_ARGUMENT: a bad value or option (ValueError)."""

    code = _lib.KVC_ERROR_INVALID_ARGUMENT


class OutOfRangeError(KvcacheError, IndexError):
    """KVC_ERROR_OUT_OF_RANGE: a layer or batch index, or a static cache overflow (IndexError)."""

    code = _lib.KVC_ERROR_OUT_OF_RANGE


class DtypeMismatchError(KvcacheError, TypeError):
    """KVC_ERROR_DTYPE_MISMATCH: a tensor's dtype differs from the cache's; kvcache never casts (TypeError)."""

    code = _lib.KVC_ERROR_DTYPE_MISMATCH


class ShapeMismatchError(KvcacheError, ValueError):
    """KVC_ERROR_SHAPE_MISMATCH: ndim, batch, heads or head_dim disagree with the cache (ValueError)."""

    code = _lib.KVC_ERROR_SHAPE_MISMATCH


class DeviceMismatchError(KvcacheError, ValueError):
    """KVC_ERROR_DEVICE_MISMATCH: a tensor lives on another device than the cache (ValueError)."""

    code = _lib.KVC_ERROR_DEVICE_MISMATCH


class UnsupportedError(KvcacheError, AttributeError):
    """KVC_ERROR_UNSUPPORTED: this layer kind has no such operation (AttributeError, as transformers)."""

    code = _lib.KVC_ERROR_UNSUPPORTED


class InvalidStateError(KvcacheError, RuntimeError):
    """KVC_ERROR_INVALID_STATE: not allowed in the cache's current state (RuntimeError)."""

    code = _lib.KVC_ERROR_INVALID_STATE


class OutOfMemoryError(KvcacheError, MemoryError):
    """KVC_ERROR_OUT_OF_MEMORY: an allocation failed; nothing changed (MemoryError)."""

    code = _lib.KVC_ERROR_OUT_OF_MEMORY


class NoDeviceError(KvcacheError, RuntimeError):
    """KVC_ERROR_NO_DEVICE: no backend or device for the requested device type (RuntimeError)."""

    code = _lib.KVC_ERROR_NO_DEVICE


class VersionMismatchError(KvcacheError, RuntimeError):
    """KVC_ERROR_VERSION_MISMATCH: a backend plugin speaks another backend API version (RuntimeError)."""

    code = _lib.KVC_ERROR_VERSION_MISMATCH


class InternalError(KvcacheError, RuntimeError):
    """KVC_ERROR_INTERNAL: a bug in kvcache; please report it (RuntimeError)."""

    code = _lib.KVC_ERROR_INTERNAL


class IoError(KvcacheError, OSError):
    """KVC_ERROR_IO: a file could not be read or written, or is not a valid kvcache file (OSError)."""

    code = _lib.KVC_ERROR_IO


class BusyError(InvalidStateError):
    """KVC_ERROR_BUSY: another thread is inside a call on the same handle; this call did nothing (RuntimeError).

    The wrappers release the GIL around C calls, so a second Python thread calling a cache or a pool (or any of
    its sequences) while the first is inside is refused with this error, never raced: use one handle per thread,
    or a lock around a shared one. A subclass of :class:`InvalidStateError`, which these refusals raised before
    0.7. Since 0.7.
    """

    code = _lib.KVC_ERROR_BUSY


class StaleViewError(InvalidStateError):
    """A :class:`kvcache.View` was used after its cache was mutated or closed.

    Views are valid until the next call that mutates their cache; copy what you need to keep.
    """


_BY_CODE: list[type[KvcacheError] | None] = [None] * 14
for _cls in (
    InvalidArgumentError,
    OutOfRangeError,
    DtypeMismatchError,
    ShapeMismatchError,
    DeviceMismatchError,
    UnsupportedError,
    InvalidStateError,
    OutOfMemoryError,
    NoDeviceError,
    VersionMismatchError,
    InternalError,
    IoError,
    BusyError,
):
    _BY_CODE[_cls.code] = _cls

_lib._set_error_classes(KvcacheError, _BY_CODE, StaleViewError)
