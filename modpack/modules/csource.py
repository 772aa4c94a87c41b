"""The ``c`` kind: host code as C source, compiled by the system C compiler at export."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..toolchain.cc import compile_c
from .base import HostModule

__all__ = ["CSourceModule", "csource_module"]


class CSourceModule(HostModule):
    """C source compiled into the host library. Functions are exported with the macros of
    ``modpack/backend.h`` (``MP_EXPORT_FUNC``, ``MP_EXPORT_VOID_FUNC``, ``MP_EXPORT_PACKED``)."""

    type_key = "c"

    def __init__(self, code: str, options: Sequence[str] = (), name: str = "module") -> None:
        super().__init__()
        if not isinstance(code, str):
            raise TypeError("csource_module expects C source code as a str")
        self.code = code
        self.options = list(options)
        self.name = name

    def compile_objects(self, workspace: Path, stem: str, cc: str | None,
                        options: Sequence[str]) -> list[Path]:
        """Write the source into |workspace| and compile it; returns the object files."""
        source = workspace / f"{stem}.c"
        source.write_text(self.code)
        return [compile_c(source, workspace / f"{stem}.o", [*self.options, *options], cc)]


def csource_module(code: str, options: Sequence[str] = (), name: str = "module") -> CSourceModule:
    """A host module from C source; |options| are extra compiler flags for it."""
    return CSourceModule(code, options, name)
