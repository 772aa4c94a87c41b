"""export_library: compile the host modules, pack the blob, link one library, atomically."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModpackError, ModpackWarning
from ..format import ALIGNMENT
from ..format.section import machine_name
from ..modules.tree import Node, shadowed_kernels
from ..packers import ELF_MACHINES, PACKERS
from ..serializer import ModuleSerializer
from ..toolchain.cc import Toolchain, create_shared, create_tar, target_machine

__all__ = ["export_library"]

_PACKERS = ("auto", "elf", "asm", "llvm")
LARGE_BLOB = 1 << 30  # from here on, link with GNU ld (see below)


def export_library(
    root: Node,
    path: str | os.PathLike,
    fcompile: Callable[..., Any] | None = None,
    workspace_dir: str | os.PathLike | None = None,
    *,
    options: list[str] | None = None,
    cc: str | None = None,
    cxx: str | None = None,
    packer: str = "auto",
    fpack_imports: Callable[[Path, Path], Path] | None = None,
    payload_alignment: int | None = None,
) -> Path:
    """See :meth:`modpack.Module.export_library`."""
    output = Path(path).resolve()
    if not output.parent.is_dir():
        raise ModpackError(f"cannot export to {output}: the folder {output.parent} does not exist")
    if packer not in _PACKERS:
        raise ValueError(f"packer must be one of {sorted(_PACKERS)}, not {packer!r}")
    if fcompile is None:
        fcompile = create_tar if output.suffix == ".tar" else create_shared
    options = list(options or [])
    serializer = ModuleSerializer(root)  # validates the tree before any work
    shadowed = shadowed_kernels(serializer.plan.nodes)
    if shadowed:
        warnings.warn(
            f"kernels {shadowed} are defined by more than one device module: a lookup by the "
            "plain name finds the first in import order only; name the modules "
            "(opencl_module(..., name='fp16')) and call 'fp16/kernel'",
            ModpackWarning, stacklevel=3)

    keep = workspace_dir is not None
    payload_bytes = sum(n.payload_size() for n in serializer.plan.nodes if n)
    if keep:
        workspace = Path(workspace_dir)
    else:
        scratch = _scratch_root(payload_bytes)
        workspace = Path(tempfile.mkdtemp(prefix="modpack-export-", dir=scratch))
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        objects: list[Path] = []
        toolchain = Toolchain(cc, cxx)
        for i, module in enumerate(serializer.plan.dso_modules):
            objects += module.compile_objects(workspace, f"lib{i}", toolchain, options)
        # C++ host code is linked by the C++ driver, which brings the C++ runtime.
        linker = cc
        if any(m.language == "c++" for m in serializer.plan.dso_modules):
            linker = shlex.join(toolchain.cpp())
        if len(serializer.plan.nodes) > 1 or serializer.plan.nodes[0] is not None:
            objects.append(_pack(serializer, workspace, packer, fpack_imports, cc,
                                 payload_alignment or ALIGNMENT))
        if not objects:
            raise ModpackError("nothing to export: the tree has no host code and no modules")
        link_options = list(options)
        user_linker = "MODPACK_LINKER" in os.environ
        if fcompile is create_shared and payload_bytes >= LARGE_BLOB and not user_linker:
            # GNU ld places x86-64 large sections after the data, so code-to-data references
            # never span the blob; lld before 17 does not, and fails past 2 GiB.
            link_options.append("-fuse-ld=bfd")
        # Write next to the target and rename: the output is complete or absent, never half.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            _call_fcompile(fcompile, tmp, objects, link_options, linker)
            os.chmod(tmp, 0o755 if output.suffix != ".tar" else 0o644)
            os.replace(tmp, output)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        if not keep:
            shutil.rmtree(workspace, ignore_errors=True)
    return output


def _scratch_root(payload_bytes: int) -> str | None:
    """Where intermediates go: memory-backed /dev/shm when it has room for the blob object
    twice over, since the object is written once and read once by the linker and never needs
    to reach the disk (that halves export time for large blobs); else the temp folder."""
    shm = "/dev/shm"
    try:
        if os.path.isdir(shm) and os.access(shm, os.W_OK):
            if shutil.disk_usage(shm).free > 2 * payload_bytes + (64 << 20):
                return shm
    except OSError:
        pass
    return None


def _pack(serializer: ModuleSerializer, workspace: Path, packer: str,
          fpack_imports: Callable[[Path, Path], Path] | None, cc: str | None,
          alignment: int) -> Path:
    """The blob object: written directly as ELF where the target allows (one pass over the
    payloads, no assembler), else with the assembler or llvmlite; or by the caller's own
    packer, which takes a blob file."""

    def write_blob(f: Any, offset: int) -> int:
        return serializer.write_blob_to(f, offset, alignment)

    if fpack_imports is not None:
        blob = workspace / "devc.bin"
        serializer.write_blob(blob, alignment)
        return Path(fpack_imports(blob, workspace))
    if packer == "auto":
        packer = "elf" if machine_name(target_machine(cc)) in ELF_MACHINES else "asm"
    return PACKERS[packer](write_blob, workspace, cc, alignment)


def _call_fcompile(fcompile: Callable[..., Any], output: Path, objects: list[Path],
                   options: list[str], cc: str | None) -> None:
    if fcompile in (create_shared, create_tar):
        fcompile(output, objects, options, cc)
    else:
        fcompile(str(output), [str(o) for o in objects], options)
