"""What the serializer and the exporter need of a module tree, without the Module class:
walking it, and the shape of its nodes.

The authoring classes (:mod:`modpack.modules.base`) call into the exporter, so the exporter
must not import them back; it sees nodes through these protocols instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import ArgumentError

__all__ = ["ArraysNode", "DeviceNode", "HostNode", "Node", "check_before_export", "imports_of",
           "shadowed_kernels", "walk"]


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


@runtime_checkable
class ArraysNode(Node, Protocol):
    """A module holding named arrays in the library (``const``), which
    ``export_library(weights=...)`` moves to a weight file, leaving a reference behind."""

    @property
    def arrays(self) -> Any: ...

    def as_weights_reference(self, file_name: str, digest: bytes) -> Node: ...


@runtime_checkable
class DeviceNode(Node, Protocol):
    """A module carrying device kernels (``opencl``, ``cuda``), optionally named."""

    name: str | None

    @property
    def kernel_names(self) -> list[str]: ...


def shadowed_kernels(nodes: Iterable[Any]) -> list[str]:
    """Kernel names that more than one device module among |nodes| (in lookup order) defines
    while one of them is unnamed: a lookup by the plain name finds only the first, and the
    unnamed one has no qualified name either. Two modules of one name are refused, since a
    qualified lookup could reach only the first of them."""
    # (hasattr, not isinstance(n, DeviceNode): a protocol check costs ~40 us a node, which
    # 10,000 constant modules would turn into 0.4 s of export)
    devices = [n for n in nodes if hasattr(n, "kernel_names") and hasattr(n, "name")]
    names = [n.name for n in devices if n.name is not None]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ArgumentError(f"device modules share the names {twice}: give each its own name= "
                            "so that 'name/kernel' finds one module")
    owners: dict[str, list[Any]] = {}
    for node in devices:
        for kernel in dict.fromkeys(node.kernel_names):
            owners.setdefault(kernel, []).append(node)
    return sorted(k for k, ns in owners.items() if len(ns) > 1 and any(n.name is None for n in ns))


def check_before_export(nodes: Iterable[Any]) -> None:
    """Each module's own checks before an export does any work, for kinds that have some
    (``check_before_export()``: an ``opencl`` module with ``build_check=True`` builds its
    source here)."""
    for node in nodes:
        check = getattr(node, "check_before_export", None)
        if check is not None:
            check()


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
        stack.extend(reversed(imports_of(module)))


def imports_of(node: Any) -> Sequence[Any]:
    """|node|'s imports in order, without the copy ``imported_modules`` makes: a modpack
    Module's own sequence (only read here), else what ``imported_modules`` gives. A tree of
    10,000 modules is walked several times per export."""
    imports: Sequence[Any] | None = getattr(node, "_imports", None)
    if imports is None:
        imports = node.imported_modules
    return imports
