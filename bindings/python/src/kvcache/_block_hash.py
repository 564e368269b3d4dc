"""The block hash of prefix caching (``docs/block-hash.md``, C header ``kvcache/block_hash.h``).

A sequence's tokens are cut into blocks of ``block_size`` tokens; every *full*
block gets a 32-byte key that depends on every token before it, on the seed
(what the K/V depends on besides the tokens: the model and its weights) and on
the salt (a tenant's cache salt). Two requests can share a block's K/V exactly
when their keys are equal, so a router that computes these keys knows where a
prompt's prefix is cached. Version 1 is SHA-256 over a fixed little-endian byte
layout, so any language computes the same keys; here with :mod:`hashlib`::

    >>> import hashlib, struct, kvcache
    >>> le32 = lambda n: struct.pack("<I", n)
    >>> root = kvcache.block_hash_root(b"my-model", b"tenant-1")
    >>> root == hashlib.sha256(b"kvcache/block-hash/v1" + le32(8) + b"my-model" + le32(8) + b"tenant-1").digest()
    True
    >>> tokens = [1, 2, 3, 4, 5]
    >>> first, second = kvcache.block_hash_chain(root, tokens, block_size=2)   # token 5 is a partial block
    >>> second == kvcache.block_hash(first, [3, 4])
    True
    >>> first == hashlib.sha256(root + le32(2) + le32(1) + le32(2) + le32(0)).digest()
    True

Errors are the package's exceptions: a negative token id, a parent that is not
32 bytes, a ``block_size`` of 0 raise :class:`~kvcache.InvalidArgumentError`
(a ``ValueError``); a ``str`` where bytes are expected raises ``TypeError``.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Union

from . import _lib

__all__ = ["BLOCK_HASH_SIZE", "BLOCK_HASH_VERSION", "block_hash_root", "block_hash", "block_hash_chain"]

#: Bytes of a block hash (a SHA-256 digest).
BLOCK_HASH_SIZE: int = _lib.KVC_BLOCK_HASH_SIZE
#: The version of the specification the library implements.
BLOCK_HASH_VERSION: int = _lib.KVC_BLOCK_HASH_VERSION

Tokens = Union[Sequence[int], Any]  # a sequence of ints or a 1-D integer tensor on the CPU


def block_hash_root(seed: bytes = b"", salt: bytes = b"") -> bytes:
    """The root of a hash chain: the parent of the first block of every sequence with this seed and salt.

    ``seed`` and ``salt`` are opaque bytes (any bytes-like object); either may be empty, and an empty one
    differs from every non-empty one.

        >>> block_hash_root().hex()[:16]
        'e2de5c284a09d95a'
    """
    return _lib.kvc_block_hash_root(seed, salt)


def block_hash(parent: bytes, tokens: Tokens, extra: bytes = b"") -> bytes:
    """The hash of one full block of ``tokens`` (at least one id, each ``>= 0``) after the block ``parent``.

    ``parent`` is the previous block's hash, or the root for a sequence's first block; ``extra`` is the
    block's extra keys (LoRA adapter, multimodal content hashes), bytes the caller encodes.
    """
    return _lib.kvc_block_hash(parent, tokens, extra)


def block_hash_chain(root: bytes, tokens: Tokens, block_size: int) -> List[bytes]:
    """The hashes of every full block of ``tokens`` in order, with empty extra keys: what a router computes.

    The ``len(tokens) % block_size`` tokens of a partial tail are not hashed (but must be valid ids).

        >>> len(block_hash_chain(block_hash_root(), [7] * 5, block_size=2))
        2
    """
    return _lib.kvc_block_hash_chain(root, tokens, block_size)
