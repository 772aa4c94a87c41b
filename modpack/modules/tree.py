"""What the serializer and the exporter need of a module tree, without the Module class:
walking it, and the shape of its nodes.

The authoring classes (:mod:`modpack.modules.base`) call into the exporter, so the exporter
must not import them back; it sees nodes through these protocols instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["HostNode", "Node", "walk"]


@runtime_checkable
class Node(Protocol):
    """A module of the tree: its type key, imports and capabilities; binary-serializable ones
    also stream their payload."""

    type_key: str

    @property
    def imported_modules(self) -> list[Any]: ...

    @property
    def is_dso_exportable(self) -> bool: ...

    @property
    def is_binary_serializable(self) -> bool: ...

    def payload_size(self) -> int: ...

    def payload_chunks(self) -> Iterable[Any]: ...


@runtime_checkable
class HostNode(Node, Protocol):
    """A module compiled into the library's own code (``c``, ``llvm``, prebuilt objects);
    ``language`` is ``"c++"`` when linking it needs the C++ driver."""

    language: str

    def compile_objects(self, workspace: Path, stem: str, toolchain: Any,
                        options: Sequence[str]) -> list[Path]: ...


def walk(root: Node) -> Iterator[Any]:
    """Every module reachable from |root| once, depth-first in import order, without
    recursion (a long chain cannot overflow the stack)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield module
        stack.extend(reversed(module.imported_modules))
