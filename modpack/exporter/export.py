"""export_library: compile the host modules, pack the blob, link one library, atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModpackError
from ..format import ALIGNMENT
from ..modules.base import Module
from ..packers import pack_with_assembler, pack_with_llvm
from ..serializer import ModuleSerializer
from .toolchain import create_shared, create_tar

__all__ = ["export_library"]

_PACKERS = {"asm": pack_with_assembler, "llvm": pack_with_llvm}


def export_library(
    root: Module,
    path: str | os.PathLike,
    fcompile: Callable[..., Any] | None = None,
    workspace_dir: str | os.PathLike | None = None,
    *,
    options: list[str] | None = None,
    cc: str | None = None,
    packer: str = "asm",
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

    keep = workspace_dir is not None
    workspace = Path(workspace_dir) if keep else Path(tempfile.mkdtemp(prefix="modpack-export-"))
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        objects: list[Path] = []
        for i, module in enumerate(serializer.plan.dso_modules):
            objects += module.compile_objects(workspace, f"lib{i}", cc, options)  # type: ignore[attr-defined]
        if len(serializer.plan.nodes) > 1 or serializer.plan.nodes[0] is not None:
            blob = workspace / "devc.bin"
            alignment = payload_alignment or ALIGNMENT
            serializer.write_blob(blob, alignment)
            if fpack_imports is not None:
                objects.append(Path(fpack_imports(blob, workspace)))
            elif packer == "llvm":
                objects.append(pack_with_llvm(blob, workspace, alignment=alignment))
            else:
                objects.append(pack_with_assembler(blob, workspace, cc, alignment))
        if not objects:
            raise ModpackError("nothing to export: the tree has no host code and no modules")
        # Write next to the target and rename: the output is complete or absent, never half.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            _call_fcompile(fcompile, tmp, objects, options, cc)
            os.chmod(tmp, 0o755 if output.suffix != ".tar" else 0o644)
            os.replace(tmp, output)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        if not keep:
            shutil.rmtree(workspace, ignore_errors=True)
    return output


def _call_fcompile(fcompile: Callable[..., Any], output: Path, objects: list[Path],
                   options: list[str], cc: str | None) -> None:
    if fcompile in (create_shared, create_tar):
        fcompile(output, objects, options, cc)
    else:
        fcompile(str(output), [str(o) for o in objects], options)
