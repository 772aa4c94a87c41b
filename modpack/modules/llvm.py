"""The ``llvm`` kind: host code as LLVM IR, compiled to an object in-process with llvmlite.

IR functions written in the packed ABI are exported by naming them ``__mp_func_<name>``.
Plain functions are exported by listing their C signature in ``signatures``
(``{"add_one": "float(float)"}``): modpack then compiles a small C shim with
``MP_EXPORT_FUNC`` that checks and converts the arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ArgumentError, CompileError
from ..toolchain.cc import Toolchain, compile_c, is_cross
from ..toolchain.cc import target_machine as cc_target
from ..toolchain.llvm import emit_object, llvm, target_machine
from .base import HostModule

__all__ = ["LLVMModule", "llvm_module"]

_SIGNATURE = re.compile(r"^\s*(?P<ret>[^()]+?)\s*\((?P<args>[^()]*)\)\s*$")


def _shim_source(signatures: Mapping[str, str]) -> str:
    lines = ['#include "modpack/backend.h"', ""]
    for name, signature in signatures.items():
        if not isinstance(name, str):
            raise ArgumentError(f"signatures maps function names (str) to C signatures, not "
                                f"{name!r}")
        if not isinstance(signature, str):
            raise ArgumentError(f"function {name}: its signature is a C signature (a str such "
                                f"as 'double(DLTensor*, int64_t)'), not {signature!r}")
        m = _SIGNATURE.match(signature)
        if not m or not name.isidentifier():
            raise ArgumentError(
                f"signature for {name!r} must look like 'double(DLTensor*, int64_t)', got "
                f"{signature!r}"
            )
        ret = m["ret"]
        args = [a.strip() for a in m["args"].split(",") if a.strip() and a.strip() != "void"]
        if not 1 <= len(args) <= 8:
            raise ArgumentError(f"{name}: exported plain functions take 1 to 8 parameters")
        lines.append(f"extern {ret} {name}({', '.join(args)});")
        if ret == "void":
            lines.append(f"MP_EXPORT_VOID_FUNC({name}, {', '.join(args)})")
        else:
            lines.append(f"MP_EXPORT_FUNC({name}, {ret}, {', '.join(args)})")
    return "\n".join(lines) + "\n"


class LLVMModule(HostModule):
    """LLVM IR compiled into the host library."""

    type_key = "llvm"

    def __init__(self, ir: str, signatures: Mapping[str, str] | None = None,
                 triple: str | None = None) -> None:
        super().__init__()
        if not isinstance(ir, str):
            raise ArgumentError("llvm_module expects LLVM IR text as a str")
        self.ir = ir
        if signatures is not None and not isinstance(signatures, Mapping):
            raise ArgumentError("signatures maps each function's name to its C signature, "
                                "e.g. {'add_one': 'float(float)'}, not "
                                f"{type(signatures).__name__}")
        self.signatures = dict(signatures or {})
        if triple is not None and not isinstance(triple, str):
            raise ArgumentError(f"triple must be a target triple such as "
                                f"'x86_64-unknown-linux-gnu', not {triple!r}")
        self.triple = triple
        if self.signatures:
            _shim_source(self.signatures)  # validate now, not at export

    def compile_objects(self, workspace: Path, stem: str, toolchain: Toolchain,
                        options: Sequence[str]) -> list[Path]:
        try:
            module = llvm().parse_assembly(self.ir)
            module.verify()
        except RuntimeError as exc:
            raise CompileError(f"invalid LLVM IR in an llvm module: {exc}") from None
        # The export's target: the module's own triple, else the C compiler's when it builds
        # for another machine (cc=, $CC or target=), else this machine's.
        triple = self.triple or (cc_target(toolchain.cc) if is_cross(toolchain.cc) else None)
        machine = target_machine(triple)
        module.triple = machine.triple
        module.data_layout = str(machine.target_data)
        obj = workspace / f"{stem}.o"
        obj.write_bytes(emit_object(machine, module, "an llvm module's IR"))
        objects = [obj]
        if self.signatures:
            shim = workspace / f"{stem}_exports.c"
            shim.write_text(_shim_source(self.signatures))
            objects.append(compile_c(shim, workspace / f"{stem}_exports.o", options,
                                     toolchain.cc))
        return objects


def llvm_module(ir: str, signatures: Mapping[str, str] | None = None,
                triple: str | None = None) -> LLVMModule:
    """A host module from LLVM IR text; |signatures| exports plain functions by C signature."""
    return LLVMModule(ir, signatures, triple)
