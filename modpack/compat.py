"""What Python 3.9 lacks and the package uses: ``zip(..., strict=True)`` (3.10). A leaf of the
package: it imports nothing of modpack but its errors."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import ArgumentError

__all__ = ["zip_strict"]


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(*iterables, strict=True)``: the tuples, and a ``ValueError`` (here
    :class:`ArgumentError`, which is one) when one iterable ends before the others."""
    if sys.version_info >= (3, 10):
        return zip(*iterables, strict=True)
    return _zip_strict(iterables)


def _zip_strict(iterables: tuple[Iterable[Any], ...]) -> Iterator[tuple[Any, ...]]:
    iterators = [iter(it) for it in iterables]
    end = object()
    while True:
        items = [next(it, end) for it in iterators]
        ended = [i for i, item in enumerate(items) if item is end]
        if len(ended) == len(items):
            return
        if ended:  # as zip(strict=True) says it
            if ended[0] == 0:
                longer = next(i for i, item in enumerate(items) if item is not end)
                raise ArgumentError(f"zip() argument {longer + 1} is longer than argument 1")
            raise ArgumentError(f"zip() argument {ended[0] + 1} is shorter than argument 1")
        yield tuple(items)
