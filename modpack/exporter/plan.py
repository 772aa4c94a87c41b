"""What an export will do, decided before it does anything: :func:`plan_export`.

Why a step of its own: every check of ``export_library``'s arguments runs before a compiler
starts or a file is written, so a wrong argument fails at once and leaves nothing behind. The
decisions those arguments lead to (the packer, the alignment, a placed or a linked blob, the
payload's size) are made here too, once, so the later steps only carry them out.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, ModpackWarning
from ..files.destination import check_destination
from ..format import ALIGNMENT, IndexExtras
from ..format.code_frames import compress_level
from ..format.image import PLACEABLE_MACHINES
from ..format.layout import MAX_SELFTESTS
from ..format.section import machine_name
from ..metadata import encode_metadata, producer_metadata
from ..modules.tree import HostNode, Node, check_before_export, shadowed_kernels
from ..packers.llvm import check_llvm_packer
from ..selftests.bundle import encode_bundle
from ..selftests.spec import CheckedTest, SelfTest, check_selftests
from ..toolchain.cc import (
    Toolchain,
    compilers_for_target,
    create_shared,
    create_tar,
    target_machine,
)
from .serializer import ModuleSerializer
from .system_lib import check_system_lib
from .weights import WeightsExport, plan_weights

__all__ = ["ExportPlan", "plan_export"]

_PACKERS = ("auto", "elf", "asm", "llvm")
# What export_library writes without an explicit fcompile: a .so (possibly versioned) or a .tar.
_KNOWN_SUFFIX = re.compile(r".*(\.so(\.\d+)*|\.tar)")


@dataclass(frozen=True)
class ExportPlan:
    """Everything an export does, decided: its arguments checked and completed (the compilers
    for ``target``, the default ``fcompile``), the indexed tree, and how the blob gets into the
    output."""

    output: Path  # resolved; its folder exists and is writable
    serializer: ModuleSerializer  # the indexed (and validated) tree: host modules and blob
    fcompile: Callable[..., Any]  # the link step: create_shared, create_tar or the caller's
    as_tar: bool  # objects for a later link (a .tar), not a library
    system_lib: str | None  # NAME of a system library (.o/.a), else None
    cc: str | None
    cxx: str | None
    options: tuple[str, ...]  # extra compiler (and linker) flags
    packer: str  # one of _PACKERS
    fpack_imports: Callable[[Path, Path], Path] | None  # the caller's blob packer
    alignment: int  # of each payload, and of the blob in memory
    has_blob: bool  # the tree has more than host code, or metadata or self-tests
    placed: bool  # the blob is written into the linked .so, not linked as an object
    weights: WeightsExport | None  # the weight file the const arrays go to (weights=)
    selftests: tuple[CheckedTest, ...] = ()  # checked; their functions once the host code is

    @cached_property
    def payload_bytes(self) -> int:
        """All payloads together (read once the const modules a weight file takes are
        references)."""
        serializer = self.serializer
        return sum(serializer.payload_source(i).payload_size()
                   for i, n in enumerate(serializer.plan.nodes) if n)

    @property
    def toolchain(self) -> Toolchain:
        """The compilers the host modules are compiled with."""
        return Toolchain(self.cc, self.cxx)

    @property
    def host_modules(self) -> list[HostNode]:
        """The host (DSO) modules, compiled into the library's own code."""
        return self.serializer.plan.dso_modules


def plan_export(
    root: Node,
    path: str | os.PathLike[str],
    fcompile: Callable[..., Any] | None = None,
    *,
    options: Sequence[str] | None = None,
    cc: str | None = None,
    cxx: str | None = None,
    packer: str = "auto",
    fpack_imports: Callable[[Path, Path], Path] | None = None,
    payload_alignment: int | None = None,
    compress_code: bool | int = False,
    system_lib: str | None = None,
    target: str | None = None,
    weights: str | os.PathLike[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    selftests: Sequence[SelfTest | Mapping[str, Any]] | None = None,
) -> ExportPlan:
    """Check the arguments of ``export_library`` and decide what it does, before any work
    (raising ``ArgumentError``, also a ``ValueError``, for a wrong argument; warning of kernels
    that shadow others)."""
    output = check_destination(path, "export", "deploy.so")
    if target is not None:  # the one choice: every later step asks cc what it builds for
        cc, cxx = compilers_for_target(target, cc, cxx)
    if system_lib is not None:
        check_system_lib(system_lib, output, fcompile)
    if packer not in _PACKERS:
        raise ArgumentError(f"packer must be one of {sorted(_PACKERS)}, not {packer!r}")
    if packer == "llvm":  # before LLVM is asked: it aborts the process for a target it lacks
        check_llvm_packer(cc)
    alignment = payload_alignment or ALIGNMENT
    if alignment < ALIGNMENT or alignment & (alignment - 1):
        raise ArgumentError(f"payload_alignment must be a power of two >= {ALIGNMENT}")
    if fcompile is None and system_lib is None:
        _check_suffix(output)
    as_tar = output.suffix == ".tar" if fcompile is None else fcompile is create_tar
    if fcompile is None:
        fcompile = create_tar if as_tar else create_shared
    level = compress_level(compress_code)
    checked = check_selftests(selftests)
    extras = IndexExtras(
        b"" if metadata is None else encode_metadata(metadata, producer_metadata(cc)),
        encode_bundle(checked))
    _check_extras_size(extras)
    serializer = ModuleSerializer(root, level, extras)  # validates the tree before any work
    nodes = serializer.plan.nodes
    _warn_of_shadowed_kernels(nodes)
    check_before_export(nodes)  # the modules' own (an opencl module's build_check)
    has_blob = len(nodes) > 1 or nodes[0] is not None or bool(extras)
    placed = (has_blob and not as_tar and fpack_imports is None and system_lib is None
              and _makes_shared_library(fcompile)
              and machine_name(target_machine(cc)) in PLACEABLE_MACHINES)
    weights_export = (plan_weights(weights, nodes, output, system_lib) if weights is not None
                      else None)
    return ExportPlan(
        output=output, serializer=serializer, fcompile=fcompile, as_tar=as_tar,
        system_lib=system_lib, cc=cc, cxx=cxx, options=tuple(options or ()), packer=packer,
        fpack_imports=fpack_imports, alignment=alignment, has_blob=has_blob, placed=placed,
        weights=weights_export, selftests=tuple(checked))


def _check_extras_size(extras: IndexExtras) -> None:
    """Self-tests are read and hashed with the index at every load: refuse a bundle over
    the format's limit, saying what to do (the metadata's own limit is checked where it is
    encoded, naming its largest key)."""
    if len(extras.selftests) > MAX_SELFTESTS:
        raise ArgumentError(
            f"selftests take {len(extras.selftests)} bytes, more than the {MAX_SELFTESTS} a "
            "library holds (every load reads them with the index): test on smaller inputs")


def _makes_shared_library(fcompile: Callable[..., Any]) -> bool:
    """Whether |fcompile| is known to link a shared library, into which the blob can be placed
    after the link: the default one, or one that says so as TVM's do (``output_format =
    "so"``). Any other links the whole blob object, so its output may be anything (a
    relocatable object from ``ld -r``, an archive)."""
    return fcompile is create_shared or getattr(fcompile, "output_format", None) == "so"


def _check_suffix(output: Path) -> None:
    """Fail for an output the default fcompile does not write (it writes .so and .tar)."""
    if not _KNOWN_SUFFIX.fullmatch("".join(output.suffixes[-3:])):
        given = output.suffix or "a file without a suffix"
        raise ArgumentError(
            f"cannot export to {output}: export_library writes a shared library (.so, or "
            f".so.N) or objects to link later (.tar), not {given}; for a relocatable object or "
            "archive (.o, .a) to link into a program, give system_lib='NAME'; any other format "
            "needs an explicit fcompile=")


def _warn_of_shadowed_kernels(nodes: Sequence[Node | None]) -> None:
    """Warn, at the user's call, of kernels a lookup by plain name finds only once."""
    shadowed = shadowed_kernels(nodes)
    if shadowed:
        # stacklevel: here, plan_export, export_library, Module.export_library, the user's call
        warnings.warn(
            f"kernels {shadowed} are defined by more than one device module: a lookup by the "
            "plain name finds the first in import order only; name the modules "
            "(opencl_module(..., name='fp16')) and call 'fp16/kernel'",
            ModpackWarning, stacklevel=5)
