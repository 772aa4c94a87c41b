"""The host code of an export: its host (DSO) modules compiled into object files, and the
linker driver those objects need.

Why apart: this is the one step that runs the host modules' compilers, the same for every
form the output takes (a ``.so``, a ``.tar``, a system library); and which driver links the
objects follows from the languages they were compiled from, so it is chosen here, beside them.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..log import export_log, timed
from .plan import ExportPlan

__all__ = ["compile_host_code", "host_linker"]


def compile_host_code(plan: ExportPlan, workspace: Path) -> list[Path]:
    """Compile each host module of |plan| into |workspace| (files named ``lib<N>*``, in the
    modules' order); returns the object files."""
    objects: list[Path] = []
    toolchain = plan.toolchain
    options = list(plan.options)
    for i, module in enumerate(plan.host_modules):
        with timed(export_log, "compile host module %d (%s)", i, module.type_key):
            objects += module.compile_objects(workspace, f"lib{i}", toolchain, options)
    return objects


def host_linker(plan: ExportPlan) -> str | None:
    """The compiler driver that links the host objects: the C compiler, or the C++ driver
    when any host module is C++ (it brings the C++ runtime)."""
    if any(m.language == "c++" for m in plan.host_modules):
        return shlex.join(plan.toolchain.cpp())
    return plan.cc
