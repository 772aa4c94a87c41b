"""The system toolchain: the C compiler for host sources, the linker, the archiver for ``.tar``
exports, and the target it builds for.

A leaf of the package: it knows compilers, not modules. Every failure raises CompileError with
the command and the tool's own output.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError, MissingFileError
from ..files.tar_writer import TarWriter

__all__ = [
    "Toolchain",
    "architecture",
    "binutil",
    "c_compiler",
    "compile_c",
    "compile_cxx",
    "compilers_for_target",
    "create_shared",
    "create_tar",
    "cxx_compiler",
    "include_dir",
    "is_cross",
    "run_tool",
    "target_machine",
]

_PACKAGE = Path(__file__).resolve().parents[1]


def include_dir() -> Path:
    """Where ``modpack/backend.h`` and friends are: in the package, or in a source checkout."""
    for candidate in (_PACKAGE / "include", _PACKAGE.parent / "csrc" / "include"):
        if (candidate / "modpack" / "backend.h").exists():
            return candidate
    raise MissingFileError("modpack's C headers are missing; reinstall modpack")


def c_compiler(cc: str | None = None) -> list[str]:
    """The C compiler command: |cc|, else ``$CC``, else ``cc``."""
    return shlex.split(cc or os.environ.get("CC") or "cc")


def cxx_compiler(cxx: str | None = None) -> list[str]:
    """The C++ compiler command: |cxx|, else ``$CXX``, else ``c++``."""
    return shlex.split(cxx or os.environ.get("CXX") or "c++")


@dataclass(frozen=True)
class Toolchain:
    """The compilers of one export: C (|cc|, else ``$CC``, else ``cc``) and C++ (|cxx|, else
    ``$CXX``, else ``c++``). Host modules compile with it; the linker driver is the C++ one
    when C++ code is linked."""

    cc: str | None = None
    cxx: str | None = None

    def c(self) -> list[str]:
        return c_compiler(self.cc)

    def cpp(self) -> list[str]:
        return cxx_compiler(self.cxx)


@functools.lru_cache(maxsize=8)
def _dumpmachine(cc: tuple[str, ...]) -> str:
    try:
        proc = subprocess.run([*cc, "-dumpmachine"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def target_machine(cc: str | None = None) -> str | None:
    """The target triple of the C compiler (``x86_64-linux-gnu``); None if it cannot tell."""
    return _dumpmachine(tuple(c_compiler(cc))) or None


@functools.lru_cache(maxsize=8)
def _version_line(cc: tuple[str, ...]) -> str:
    try:
        proc = subprocess.run([*cc, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    lines = proc.stdout.strip().splitlines() if proc.returncode == 0 else []
    return lines[0].strip() if lines else ""


def compiler_version(cc: str | None = None) -> str | None:
    """The first line of ``cc --version`` (``gcc (Debian 12.2.0-14) 12.2.0``): what a library's
    metadata records of the compiler its host code was built with; None if it cannot tell."""
    return _version_line(tuple(c_compiler(cc))) or None


_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "i686": "i386", "i586": "i386"}


def _arch(name: str) -> str:
    return _ARCH_ALIASES.get(name, name)


def architecture(triple: str) -> str:
    """The architecture of a target triple (``aarch64-unknown-linux-gnu`` -> ``aarch64``), its
    aliases normalised (``arm64`` -> ``aarch64``, ``amd64`` -> ``x86_64``)."""
    return _arch(triple.split("-")[0])


def is_cross(cc: str | None = None) -> bool:
    """Whether the C compiler (|cc|, else ``$CC``, else ``cc``) builds for another machine
    than this one, judged by the triple's architecture against this machine's."""
    triple = target_machine(cc)
    return triple is not None and _arch(triple.split("-")[0]) != _arch(platform.machine())


def compilers_for_target(target: str, cc: str | None, cxx: str | None
                         ) -> tuple[str, str | None]:
    """The C and C++ compilers of an export for the target triple |target|: the given ones
    (checked to build for it), else the installed ``<target>-gcc`` and ``<target>-g++``."""
    if cc is None:
        cc = f"{target}-gcc"
        if not shutil.which(cc):
            raise CompileError(
                f"no C compiler for target {target!r}: {cc} is not installed (Debian: apt-get "
                f"install gcc-{target.replace('_', '-')}), or give cc=")
    triple = target_machine(cc)
    wanted = _arch(target.split("-")[0])
    if triple is None or _arch(triple.split("-")[0]) != wanted:
        raise CompileError(f"cc={cc!r} builds for {triple or 'an unknown target'}, not {target!r}:"
                           " give a compiler for the target, or leave cc= out")
    if cxx is None and shutil.which(f"{target}-g++"):
        cxx = f"{target}-g++"
    return cc, cxx


def binutil(name: str, cc: str | None = None) -> str:
    """The binutils program |name| (``objcopy``, ``ar``) for the C compiler's target: the
    target-prefixed one (``aarch64-linux-gnu-objcopy``), the plain one for this machine's
    target, else LLVM's (which handles every target); CompileError saying what to install."""
    triple = target_machine(cc)
    candidates = [f"{triple}-{name}"] if triple else []
    if not is_cross(cc):
        candidates.append(name)
    candidates.append(f"llvm-{name}")
    for candidate in candidates:
        if shutil.which(candidate):
            return candidate
    raise CompileError(f"no {name} for {triple or 'the target'}: tried {', '.join(candidates)}; "
                       f"install binutils{'-' + triple if triple else ''} (Debian) or LLVM")


def run_tool(cmd: Sequence[str], what: str, cwd: Path | None = None) -> None:
    """Run |cmd| (in |cwd|); raise CompileError with its output if it fails or cannot start."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, cwd=cwd)
    except FileNotFoundError as exc:
        raise CompileError(f"{what}: cannot run {cmd[0]!r} ({exc.strerror}); install it or "
                           "set $CC") from None
    if proc.returncode != 0:
        output = (proc.stderr + proc.stdout).strip()
        raise CompileError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{output}"
        )


# How host code is compiled, before the module's own options (which may override any).
# -falign-loops=32: a loop of up to 32 bytes then never straddles a 32- or 64-byte boundary.
# At gcc's default (16, when that costs at most 10 bytes of padding), whether a small hot loop
# straddles one is luck of the code before it, and on this project's AMD EPYC VMs the same
# 24-byte float loop ran 405 ns or 780 ns per 1024 elements by that luck alone: an unrelated
# change to a header moved it. The cost is at most 31 bytes of padding per loop.
HOST_CODE_FLAGS = ("-c", "-fPIC", "-O2", "-falign-loops=32", "-fvisibility=hidden")


def compile_cxx(
    source: Path, output: Path, options: Sequence[str] = (), cxx: str | None = None
) -> Path:
    """Compile one C++ file as :func:`compile_c` compiles C (modpack/backend.h is C++ too)."""
    cmd = [*cxx_compiler(cxx), *HOST_CODE_FLAGS, f"-I{include_dir()}", *options, str(source),
           "-o", str(output)]
    run_tool(cmd, f"compiling {source.name}")
    return output


def compile_c(
    source: Path, output: Path, options: Sequence[str] = (), cc: str | None = None
) -> Path:
    """Compile one C file to a position-independent object; only explicitly exported symbols
    (``MP_EXPORT_*`` and the module context) are visible outside the library."""
    cmd = [*c_compiler(cc), *HOST_CODE_FLAGS, f"-I{include_dir()}", *options, str(source),
           "-o", str(output)]
    run_tool(cmd, f"compiling {source.name}")
    return output


def create_shared(output: str | os.PathLike[str], objects: Sequence[str | os.PathLike[str]],
                  options: Sequence[str] = (), cc: str | None = None) -> None:
    """The default ``fcompile``: link |objects| into a shared library.

    ``-Bsymbolic`` binds the library's references to its own module context, so another
    library (or the application) defining the same names cannot capture them.
    """
    chosen = any(o.startswith("-fuse-ld=") for o in options)
    cmd = [*c_compiler(cc), "-shared", "-fPIC", *([] if chosen else _linker_flags(cc)),
           "-Wl,-Bsymbolic",
           "-Wl,-z,noexecstack", "-o", os.fspath(output), *(os.fspath(o) for o in objects),
           *options]
    run_tool(cmd, f"linking {Path(output).name}")


def _linker_flags(cc: str | None) -> list[str]:
    """``-fuse-ld=`` for the linker: ``$MODPACK_LINKER`` (``bfd``, ``gold``, ``lld``, ``mold``,
    or ``default``), else lld or mold when installed and the compiler targets this machine —
    they copy large blobs into the library several times faster than GNU ld."""
    choice = os.environ.get("MODPACK_LINKER", "").strip()
    if choice:
        return [] if choice == "default" else [f"-fuse-ld={choice}"]
    if is_cross(cc):
        return []  # a cross compiler keeps its own linker
    for name, tool in (("lld", "ld.lld"), ("mold", "mold")):
        if shutil.which(tool):
            return [f"-fuse-ld={name}"]
    return []


# What each makes, read by the exporter from any fcompile (a tag on the function object).
create_shared.output_format = "so"  # type: ignore[attr-defined]


def create_tar(output: str | os.PathLike[str], objects: Sequence[str | os.PathLike[str]],
               options: Sequence[str] = (), cc: str | None = None) -> None:
    """``fcompile`` for ``.tar``: store the objects for a later link (see load_module). The
    headers carry no time, owner or permissions of this machine, so the same objects give
    the same archive, byte for byte."""
    names = [Path(o).name for o in objects]
    if len(set(names)) != len(names):
        raise CompileError(f"duplicate object names cannot go in one tar: {names}")
    with open(output, "w+b") as f:
        tar = TarWriter(f)
        for name, obj in zip(names, objects):
            tar.add_file(name, obj)
        tar.close()


create_tar.output_format = "tar"  # type: ignore[attr-defined]
