"""export_library: compile the host modules, link one library, write the blob into it, seal it,
and put it in place atomically.

A ``.so`` is made in one of two ways:

- *placed* (64-bit little-endian targets, the default): the linker links the host code with the
  anchor object, a placeholder; modpack then writes the blob once, straight into the final
  file, as a read-only segment of its own (:mod:`modpack.format.image`). No linker reads or
  writes payload bytes and no intermediate file holds them, so export runs at the speed of one
  sequential write;
- *linked*: a blob object holding the whole blob goes through the linker (a custom packer,
  targets the placement does not handle).

Either way the library ends with its seal (:mod:`modpack.format.seal`). A ``.tar`` keeps the
objects for a later link, the blob object among them, with a seal over every member
(:mod:`modpack.format.tar_seal`).
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModpackError, ModpackWarning
from ..format import ALIGNMENT
from ..format.image import (
    HUGE_SEGMENT_ALIGNMENT,
    PLACEABLE_MACHINES,
    find_blob,
    place_blob_into,
)
from ..format.seal import seal_file, seal_library
from ..format.section import machine_name
from ..format.tar_seal import seal_tar
from ..modules.tree import Node, shadowed_kernels
from ..packers import ELF_MACHINES, PACKERS
from ..serializer import ModuleSerializer
from ..toolchain.cc import (
    Toolchain,
    compilers_for_target,
    create_shared,
    create_tar,
    target_machine,
)
from .scratch import AnonymousOutput, new_workspace, scratch_name
from .system_lib import check_system_lib, write_system_lib
from .write_behind import WriteBehind

__all__ = ["export_library"]

_PACKERS = ("auto", "elf", "asm", "llvm")
LARGE_BLOB = 1 << 30  # from here on, a linked blob is linked with GNU ld (see below)
WRITE_BEHIND_FROM = 64 << 20  # payloads from this size go to disk as they stream
_PLACEHOLDER = bytes(8)  # the anchor's stand-in for the blob
# What export_library writes without an explicit fcompile: a .so (possibly versioned) or a .tar.
_KNOWN_SUFFIX = re.compile(r".*(\.so(\.\d+)*|\.tar)")


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
    system_lib: str | None = None,
    target: str | None = None,
) -> Path:
    """See :meth:`modpack.Module.export_library`."""
    output = Path(path).resolve()
    _check_destination(output)
    if target is not None:  # the one choice: every later step asks cc what it builds for
        cc, cxx = compilers_for_target(target, cc, cxx)
    if system_lib is not None:
        check_system_lib(system_lib, output, fcompile)
    if packer not in _PACKERS:
        raise ValueError(f"packer must be one of {sorted(_PACKERS)}, not {packer!r}")
    alignment = payload_alignment or ALIGNMENT
    if alignment < ALIGNMENT or alignment & (alignment - 1):
        raise ValueError(f"payload_alignment must be a power of two >= {ALIGNMENT}")
    if (fcompile is None and system_lib is None
            and not _KNOWN_SUFFIX.fullmatch("".join(output.suffixes[-3:]))):
        given = output.suffix or "a file without a suffix"
        raise ModpackError(
            f"cannot export to {output}: export_library writes a shared library (.so, or "
            f".so.N) or objects to link later (.tar), not {given}; for a relocatable object or "
            "archive (.o, .a) to link into a program, give system_lib='NAME'; any other format "
            "needs an explicit fcompile=")
    as_tar = output.suffix == ".tar" if fcompile is None else fcompile is create_tar
    if fcompile is None:
        fcompile = create_tar if as_tar else create_shared
    options = list(options or [])
    serializer = ModuleSerializer(root)  # validates the tree before any work
    shadowed = shadowed_kernels(serializer.plan.nodes)
    if shadowed:
        warnings.warn(
            f"kernels {shadowed} are defined by more than one device module: a lookup by the "
            "plain name finds the first in import order only; name the modules "
            "(opencl_module(..., name='fp16')) and call 'fp16/kernel'",
            ModpackWarning, stacklevel=3)

    plan = serializer.plan
    has_blob = len(plan.nodes) > 1 or plan.nodes[0] is not None
    placed = (has_blob and not as_tar and fpack_imports is None and system_lib is None
              and machine_name(target_machine(cc)) in PLACEABLE_MACHINES)
    payload_bytes = sum(n.payload_size() for n in plan.nodes if n)
    keep = workspace_dir is not None
    if keep:
        workspace = Path(workspace_dir)
    else:  # (never /dev/shm, which is memory until reboot when an export dies)
        workspace = new_workspace()
    workspace.mkdir(parents=True, exist_ok=True)

    def write_blob(f: Any, offset: int) -> int:
        if payload_bytes < WRITE_BEHIND_FROM:
            return serializer.write_blob_to(f, offset, alignment)
        behind = WriteBehind(f)
        size = serializer.write_blob_to(behind, offset, alignment)
        behind.finish()
        return size

    try:
        objects: list[Path] = []
        toolchain = Toolchain(cc, cxx)
        for i, module in enumerate(plan.dso_modules):
            objects += module.compile_objects(workspace, f"lib{i}", toolchain, options)
        # C++ host code is linked by the C++ driver, which brings the C++ runtime.
        linker = cc
        if any(m.language == "c++" for m in plan.dso_modules):
            linker = shlex.join(toolchain.cpp())
        if system_lib is not None:
            blob_size = [0]

            def write_counted(f: Any, offset: int) -> int:
                blob_size[0] = write_blob(f, offset)
                return blob_size[0]

            if has_blob:
                objects.append(_pack(write_counted, workspace, packer, fpack_imports, cc,
                                     alignment))
            tmp = scratch_name(output)
            try:
                write_system_lib(tmp, output.suffix == ".a", objects, blob_size[0], system_lib,
                                 cc, workspace)
                os.chmod(tmp, 0o644)
                os.replace(tmp, output)
            finally:
                tmp.unlink(missing_ok=True)
            return output
        if placed:
            objects.append(_packer(packer, cc)(_write_placeholder, workspace, cc, alignment,
                                               anchor=True))
        elif has_blob:
            objects.append(_pack(write_blob, workspace, packer, fpack_imports, cc, alignment))
        if not objects:
            raise ModpackError("nothing to export: the tree has no host code and no modules")
        link_options = list(options)
        user_linker = "MODPACK_LINKER" in os.environ
        if (fcompile is create_shared and not placed and payload_bytes >= LARGE_BLOB
                and not user_linker):
            # GNU ld places x86-64 large sections after the data, so code-to-data references
            # never span the blob; lld before 17 does not, and fails past 2 GiB.
            link_options.append("-fuse-ld=bfd")
        # Written beside the output and renamed over it: the output is complete or absent, never
        # half. A placed library is linked small in the workspace and finished in an anonymous
        # file, so a killed export leaves nothing of payload size anywhere.
        tmp = workspace / "linked.so" if placed else scratch_name(output)
        try:
            _call_fcompile(fcompile, tmp, objects, link_options, linker)
            if placed:
                _finish_placed(tmp, output, write_blob, alignment, payload_bytes)
            else:
                if as_tar:
                    seal_tar(tmp)
                else:
                    seal_library(tmp, find_blob(tmp, alignment) if has_blob else None)
                os.chmod(tmp, 0o644 if as_tar else 0o755)
                os.replace(tmp, output)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            full = _full_folder(output, workspace, exc.filename) or output.parent
            raise ModpackError(_no_space(output, full)) from None
        raise
    except ModpackError as exc:  # a compiler or linker that failed: was it the disk?
        full = _full_folder(output, workspace, None)
        if full is not None:
            raise ModpackError(f"{_no_space(output, full)}\n{exc}") from None
        raise
    finally:
        if not keep:
            shutil.rmtree(workspace, ignore_errors=True)
    return output


def _finish_placed(linked: Path, output: Path, write_blob: Callable[[Any, int], int],
                   alignment: int, payload_bytes: int) -> None:
    """Copy the linked library into an anonymous file beside |output|, write the blob into it,
    seal it, and put it in place of |output|."""
    target = AnonymousOutput(output)
    try:
        with open(linked, "rb") as source:
            shutil.copyfileobj(source, target.file)
        huge = HUGE_SEGMENT_ALIGNMENT if payload_bytes >= WRITE_BEHIND_FROM else 0
        seal_file(target.file, place_blob_into(target.file, output, write_blob, alignment, huge))
        target.publish(0o755)
    finally:
        target.discard()


def _check_destination(output: Path) -> None:
    """Fail before any work for a destination that cannot be written."""
    if output.is_dir():
        raise ModpackError(f"cannot export to {output}: it is a directory; give a file path, "
                           f"e.g. {output / 'deploy.so'}")
    if not output.parent.is_dir():
        raise ModpackError(f"cannot export to {output}: the folder {output.parent} does not exist")
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise ModpackError(f"cannot export to {output}: the folder {output.parent} is not "
                           "writable by this user")
    if output.exists() and not output.is_file():
        raise ModpackError(f"cannot export to {output}: it exists and is not a regular file")


def _full_folder(output: Path, workspace: Path, filename: str | None) -> Path | None:
    """Which folder an export ran out of room in: the output's, the workspace's, or $TMPDIR
    (where compilers write their own temporary files; Python's tempfile passes over a full
    one, gcc does not). The one holding |filename| if known, else one that is nearly full."""
    folders = [output.parent, workspace]
    if os.environ.get("TMPDIR"):
        folders.append(Path(os.environ["TMPDIR"]))
    if filename:
        for folder in folders:
            if os.fspath(filename).startswith(os.fspath(folder)):
                return folder
    return next((folder for folder in folders if _nearly_full(folder)), None)


def _no_space(output: Path, full: Path) -> str:
    """The message for a full disk, naming the file system that is full and what to do."""
    if full == output.parent:
        where = f"(the file system of {full}, {_free(full)} free)"
    else:
        where = (f"for the intermediate files in {full} ({_free(full)} free); point TMPDIR (or "
                 "workspace_dir=) at a file system with room")
    return (f"cannot export to {output}: no space left on device {where}; any earlier "
            f"{output.name} is intact")


def _free(folder: Path) -> str:
    try:
        return f"{shutil.disk_usage(folder).free / (1 << 20):.1f} MiB"
    except OSError:
        return "unknown"


def _nearly_full(folder: Path) -> bool:
    """Whether the file system of |folder| has (nearly) no room left, as after a tool ran
    out of it."""
    try:
        return shutil.disk_usage(folder).free < (1 << 20)
    except OSError:
        return False


def _write_placeholder(f: Any, offset: int) -> int:
    f.seek(offset)
    f.write(_PLACEHOLDER)
    return len(_PLACEHOLDER)


def _packer(packer: str, cc: str | None) -> Callable[..., Path]:
    if packer == "auto":
        packer = "elf" if machine_name(target_machine(cc)) in ELF_MACHINES else "asm"
    return PACKERS[packer]


def _pack(write_blob: Callable[[Any, int], int], workspace: Path, packer: str,
          fpack_imports: Callable[[Path, Path], Path] | None, cc: str | None,
          alignment: int) -> Path:
    """The blob object for a linked blob: written directly as ELF where the target allows
    (one pass over the payloads, no assembler), else with the assembler or llvmlite; or by
    the caller's own packer, which takes a blob file."""
    if fpack_imports is not None:
        blob = workspace / "devc.bin"
        with open(blob, "w+b") as f:
            write_blob(f, 0)
        return Path(fpack_imports(blob, workspace))
    return _packer(packer, cc)(write_blob, workspace, cc, alignment)


def _call_fcompile(fcompile: Callable[..., Any], output: Path, objects: list[Path],
                   options: list[str], cc: str | None) -> None:
    if fcompile in (create_shared, create_tar):
        fcompile(output, objects, options, cc)
    else:
        fcompile(str(output), [str(o) for o in objects], options)
