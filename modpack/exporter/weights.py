"""``export_library(..., weights=PATH)``: the tree's ``const`` arrays go to a weight file, and
the library refers to it.

Why: weights dominate an artifact's size and change on another schedule than code. With them
in a file of their own, re-exporting after a kernel change does not rewrite them, two variants
of one model share one file, and a loaded tree can swap them (``swap_weights``).

Planned before any work (:func:`plan_weights`: the path, and the arrays' names, which one file
holds once each); written during the export (:func:`write_weights`, which also puts a
``weights`` reference in place of each ``const`` module); and put in place just before the
library (:meth:`WeightsExport.publish`), so a failed export leaves any earlier weight file and
library as they were.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..log import export_log, timed
from ..modules.tree import ArraysNode, Node
from ..weights.writer import PendingWeights, prepare_weight_file

__all__ = ["WeightsExport", "plan_weights", "write_weights"]


@dataclass
class WeightsExport:
    """The weight file an export writes: where, and which nodes of the plan it replaces."""

    path: Path
    const_nodes: list[int]  # indices in the plan's nodes of the const modules it takes
    items: list[tuple[str, np.ndarray]]  # the file's arrays, each name once
    pending: PendingWeights | None = field(default=None)

    def publish(self) -> None:
        """Put the weight file in place (before the library that refers to it)."""
        if self.pending is not None:
            self.pending.publish()

    def discard(self) -> None:
        if self.pending is not None:
            self.pending.discard()


def plan_weights(path: str | os.PathLike[str], nodes: list[Node | None], output: Path,
                 system_lib: str | None) -> WeightsExport:
    """Check ``weights=`` before any work: a file path beside which nothing is in the way,
    and const arrays whose names one file can hold (a name twice is one array, the same in
    every module that has it)."""
    if system_lib is not None:
        raise ArgumentError("weights= is for shared libraries (.so, .tar): a system library is "
                            "linked into a program and carries its weights inside")
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"weights= is the weight file's path, not {type(path).__name__}")
    target = Path(path).resolve()
    if target == output:
        raise ArgumentError(f"weights= names the library itself ({output}): give the weight "
                            "file a path of its own, e.g. model.mpw")
    if len(target.name.encode()) > 255:
        raise ArgumentError(f"the weight file's name {target.name!r} is longer than 255 bytes")
    const_nodes = [i for i, n in enumerate(nodes) if isinstance(n, ArraysNode)]
    if not const_nodes:
        raise ArgumentError("weights= was given, but the tree holds no const module whose "
                            "arrays it would take; refer to an existing weight file with "
                            "modpack.weights_module(path) instead")
    items: dict[str, np.ndarray] = {}
    for i in const_nodes:
        # const_nodes are the indices of ArraysNode entries (the isinstance above)
        for name, array in nodes[i].arrays.items():  # type: ignore[union-attr]
            seen = items.get(name)
            if seen is None:
                items[name] = array
            elif not _same(seen, array):
                raise ArgumentError(
                    f"two const modules hold different arrays named {name!r}; a weight file "
                    "holds one array per name: rename one of them")
    return WeightsExport(target, const_nodes, list(items.items()))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (a is b or np.array_equal(a, b))


def write_weights(weights: WeightsExport, nodes: list[Any], alignment: int) -> None:
    """Write the weight file (not yet in place) and put a reference to it in place of each
    const module of |nodes|."""
    with timed(export_log, "write weight file %s (%d arrays)", weights.path.name,
               len(weights.items)):
        weights.pending = prepare_weight_file(weights.items, weights.path, alignment)
    written = weights.pending.written
    for i in weights.const_nodes:
        nodes[i] = nodes[i].as_weights_reference(written.path.name, written.digest)
