"""The ``c`` kind: host code as C (or C++) source, compiled by the system compiler at export."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ArgumentError
from ..toolchain.cc import Toolchain, compile_c, compile_cxx
from .base import HostModule

__all__ = ["CSourceModule", "csource_module"]

_LANGUAGES = {"c": ".c", "c++": ".cpp"}


class CSourceModule(HostModule):
    """C or C++ source compiled into the host library. Functions are exported with the macros
    of ``modpack/backend.h`` (``MP_EXPORT_FUNC``, ``MP_EXPORT_VOID_FUNC``, ``MP_EXPORT_PACKED``),
    which work in both languages."""

    type_key = "c"

    def __init__(self, code: str, options: Sequence[str] = (), name: str = "module",
                 language: str = "c") -> None:
        super().__init__()
        if not isinstance(code, str):
            raise ArgumentError("csource_module expects source code as a str")
        if language not in _LANGUAGES:
            raise ArgumentError(f"language must be one of {sorted(_LANGUAGES)}, not {language!r}")
        self.code = code
        self.options = list(options)
        self.name = name
        self.language = language

    def compile_objects(self, workspace: Path, stem: str, toolchain: Toolchain,
                        options: Sequence[str]) -> list[Path]:
        """Write the source into |workspace| and compile it; returns the object files."""
        source = workspace / f"{stem}{_LANGUAGES[self.language]}"
        source.write_text(self.code)
        output, flags = workspace / f"{stem}.o", [*self.options, *options]
        if self.language == "c++":
            return [compile_cxx(source, output, flags, toolchain.cxx)]
        return [compile_c(source, output, flags, toolchain.cc)]


def csource_module(code: str, options: Sequence[str] = (), name: str = "module",
                   language: str = "c") -> CSourceModule:
    """A host module from source: C (compiled by ``$CC``), or C++ with ``language="c++"``
    (compiled by ``$CXX``; the library is then linked by the C++ driver). |options| are extra
    compiler flags for it, given after modpack's own (``-fPIC -O2 -falign-loops=32
    -fvisibility=hidden``), so they can override any of them (``-O3``, say)."""
    return CSourceModule(code, options, name, language)
