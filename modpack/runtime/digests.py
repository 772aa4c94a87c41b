"""XXH3-64 of an array's bytes: how a ``const`` module notices that an array changed between
the module's build and the export.

The calls extension reads the common array in place, from numpy's array struct whose layout
was probed at import (``function.py``): :func:`plain_array_digest`. The buffer protocol, the
way for every other array, builds a format string per array that cost more than hashing a
1 KiB array, and a tree of 10,000 small modules hashes each once. Both give the same number:
XXH3-64, seed 0, of the same bytes.
"""

from __future__ import annotations

import numpy as np
import xxhash

from ._calls import array_digest as _read_in_place

__all__ = ["array_digest", "plain_array_digest"]

plain_array_digest = _read_in_place
"""``plain_array_digest(value) -> int | None``: the digest of |value| when it is an array a
const module can take as it is (exactly a numpy ndarray, C-contiguous, of a standard
native-endian dtype), else None; also None before the layout probe."""


def array_digest(array: np.ndarray) -> int:
    """XXH3-64 of a C-contiguous array's bytes."""
    digest = _read_in_place(array)
    if digest is not None:
        return digest
    try:
        return xxhash.xxh3_64_intdigest(array.data)
    except (TypeError, ValueError, BufferError):  # ml_dtypes arrays export no buffer
        return xxhash.xxh3_64_intdigest(array.reshape(-1).view(np.uint8).data)
