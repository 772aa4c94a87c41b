"""Prebuilt host code: relocatable objects (``.o``) and static archives (``.a``) that a compiler
made elsewhere (TVM's ``load_static_library``, a C++ build), linked into the library as they
are. Their exported functions use modpack/backend.h like any host code."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..errors import ArgumentError, MissingFileError
from ..format.tar_members import name_problem
from ..toolchain.cc import Toolchain, run_tool
from .base import HostModule

__all__ = ["ObjectModule", "object_module"]

_ELF_MAGIC = b"\x7fELF"
_ARCHIVE_MAGIC = b"!<arch>\n"
_ET_REL = 1


def _kind(path: Path) -> str:
    """``"object"`` or ``"archive"``, from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(18)
    if head.startswith(_ARCHIVE_MAGIC):
        return "archive"
    if head.startswith(_ELF_MAGIC) and len(head) >= 18:
        e_type = int.from_bytes(head[16:18], "little" if head[5] == 1 else "big")
        if e_type == _ET_REL:
            return "object"
        raise ArgumentError(
            f"{path} is an ELF file of type {e_type}, not a relocatable object (.o): link "
            "host code from its objects, or load a shared library with modpack.load_module"
        )
    raise ArgumentError(f"{path} is neither an ELF relocatable object (.o) nor a static archive "
                        "(.a)")


class ObjectModule(HostModule):
    """A prebuilt object file or static archive linked into the host library. Every member of
    an archive is linked (an exported function is referenced by nothing, so a plain archive
    link would drop it)."""

    type_key = "object"

    def __init__(self, path: str | os.PathLike[str], language: str = "c") -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingFileError(f"object_module: no such file: {self.path}")
        if language not in ("c", "c++"):
            raise ArgumentError(f"language must be 'c' or 'c++', not {language!r}")
        self.kind = _kind(self.path)
        self.language = language

    def compile_objects(self, workspace: Path, stem: str, toolchain: Toolchain,
                        options: Sequence[str]) -> list[Path]:
        """The object copied into |workspace|, or every member of the archive (extracted with
        ``$AR``, else ``ar``), named after |stem| so no two inputs collide (and the member's own
        name, when the whole fits a ``.tar`` export's member names)."""
        if self.kind == "object":
            target = workspace / f"{stem}.o"
            shutil.copyfile(self.path, target)
            return [target]
        folder = workspace / stem
        folder.mkdir()
        ar = shlex.split(os.environ.get("AR") or "ar")
        run_tool([*ar, "x", str(self.path.resolve())], f"extracting {self.path.name}",
                 cwd=folder)
        members = sorted(p for p in folder.iterdir() if p.is_file())
        objects = []
        for i, member in enumerate(members):
            name = f"{stem}_{i}_{member.name}"
            if name_problem(name) is not None:  # too long for a .tar export's member name
                name = f"{stem}_{i}.o"
            objects.append(member.rename(workspace / name))
        return objects

    def __repr__(self) -> str:
        return f"<modpack.ObjectModule {self.kind} {self.path}>"


def object_module(path: str | os.PathLike[str], language: str = "c") -> ObjectModule:
    """Host code from a prebuilt relocatable object (``.o``) or static archive (``.a``),
    compiled with ``-fPIC`` for the export's target; ``language="c++"`` when it needs the C++
    runtime at link time."""
    return ObjectModule(path, language)
