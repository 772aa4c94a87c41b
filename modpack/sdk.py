"""Where the C SDK of an installed modpack is: the runtime library, its headers (C and C++,
DLPack's among them), a CMake package and a pkg-config file, so that a C or C++ program builds
against ``pip install modpack`` with nothing else installed.

A wheel lays them out as an install prefix inside the package (``modpack/``)::

    modpack/include/modpack/modpack.h, modpack.hpp, ...   modpack/include/dlpack/dlpack.h
    modpack/lib/libmodpack_runtime.so, libmodpack_runtime.a
    modpack/lib/cmake/modpack/modpackConfig.cmake     (modpack::runtime, modpack::runtime_static)
    modpack/lib/pkgconfig/modpack.pc

and the command line prints them: ``modpack --cmake-dir``, ``--includes``, ``--libs``,
``--pkgconfig-dir`` (``python -m modpack`` takes the same). An editable install from a source
tree has the headers (``csrc/include``) but builds no runtime library: build that with CMake
(``cmake -S . -B build && cmake --install build``), whose install has the same layout.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .errors import MissingFileError

__all__ = ["cmake_dir", "compile_flags", "include_dir", "library_dir", "link_flags",
           "pkgconfig_dir", "quoted"]

_PACKAGE = Path(__file__).resolve().parent
RUNTIME = "libmodpack_runtime.so"
_NOT_BUILT = (
    "this modpack has no C runtime library ({what} missing): it is an editable install from a "
    "source tree, which builds only the Python extensions. Install a wheel (scripts/dev.sh "
    "wheels, then pip install wheelhouse/modpack-...whl), or build the runtime with CMake: "
    "cmake -S . -B build && cmake --build build && cmake --install build --prefix PREFIX"
)


def include_dir() -> Path:
    """The folder holding ``modpack/modpack.h``, ``modpack/modpack.hpp`` and
    ``dlpack/dlpack.h``: the package's, or a source tree's ``csrc/include``."""
    for candidate in (_PACKAGE / "include", _PACKAGE.parent / "csrc" / "include"):
        if (candidate / "modpack" / "modpack.hpp").is_file():
            return candidate
    raise MissingFileError("modpack's C headers are missing from this install; reinstall "
                           "modpack")


def library_dir() -> Path:
    """The folder holding ``libmodpack_runtime.so`` and ``libmodpack_runtime.a``."""
    folder = _PACKAGE / "lib"
    if not (folder / RUNTIME).is_file():
        raise MissingFileError(_NOT_BUILT.format(what=folder / RUNTIME))
    return folder


def cmake_dir() -> Path:
    """The folder of ``modpackConfig.cmake``: ``cmake -Dmodpack_DIR=...``, then
    ``find_package(modpack)`` gives ``modpack::runtime`` and ``modpack::runtime_static``."""
    folder = _PACKAGE / "lib" / "cmake" / "modpack"
    if not (folder / "modpackConfig.cmake").is_file():
        raise MissingFileError(_NOT_BUILT.format(what=folder / "modpackConfig.cmake"))
    return folder


def pkgconfig_dir() -> Path:
    """The folder of ``modpack.pc`` (for ``PKG_CONFIG_PATH``)."""
    folder = _PACKAGE / "lib" / "pkgconfig"
    if not (folder / "modpack.pc").is_file():
        raise MissingFileError(_NOT_BUILT.format(what=folder / "modpack.pc"))
    return folder


def compile_flags() -> list[str]:
    """The compiler flags that find the headers: ``["-I<include dir>"]``."""
    return [f"-I{include_dir()}"]


def link_flags() -> list[str]:
    """The linker flags for the shared runtime, with an rpath to it (so the program finds it
    where pip put it without ``LD_LIBRARY_PATH``)."""
    lib = library_dir()
    return [f"-L{lib}", f"-Wl,-rpath,{lib}", "-lmodpack_runtime"]


def quoted(flags: list[str]) -> str:
    """|flags| as one line for a shell."""
    return " ".join(shlex.quote(flag) for flag in flags)
