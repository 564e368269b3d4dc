"""What every object over one C handle (a cache, an encoder-decoder cache, a pool, a sequence) does alike."""
from __future__ import annotations

from typing import Any, TypeVar

O = TypeVar("O", bound="HandleOwner")


class HandleOwner:
    """``closed``, the ``with`` block (which closes the object) and the refusal to be pickled, for a class with a
    ``_handle`` (whose ``closed`` the extension keeps) and a ``close()``. ``_what`` names the object in the
    with-block error; ``_unpicklable`` is the pickling error's text (``{name}``: the class's name)."""

    _handle: Any
    _what = "object"
    _unpicklable = "{name} cannot be pickled"

    def close(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return bool(self._handle.closed)

    def __enter__(self: O) -> O:
        # As Python's files do: a with block on a closed object could not use it.
        if self.closed:
            raise ValueError(f"kvcache: the {self._what} is closed; a closed {self._what} cannot start a with block")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError(self._unpicklable.format(name=type(self).__name__))
