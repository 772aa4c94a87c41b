"""LLVM through llvmlite: the initialised binding and target machines, for the ``llvm`` host
kind and the ``llvm`` packer. A leaf of the package, like :mod:`modpack.toolchain.cc`."""

from __future__ import annotations

import re
import threading
from typing import Any

from ..errors import CompileError
from ..extras import import_extra
from .cc import architecture

__all__ = ["can_assemble", "emit_object", "llvm", "target_machine"]

# Assembly in IR: a `module asm "..."` line, or an inline asm call (`asm sideeffect "..."`). In
# IR text a quote inside a string constant is spelled \22, so these match asm syntax only.
_ASM = re.compile(r'^module asm "|\basm (?:sideeffect |alignstack |inteldialect |unwind )*"',
                  re.M)

_init_lock = threading.Lock()
_initialized = False


def llvm() -> Any:
    """llvmlite's binding, with every target, printer and asm parser it was built with
    initialised (cross targets included). (The asm parser is needed for the ``.incbin``
    packer; llvmlite aborts without it.)"""
    global _initialized
    binding = import_extra("llvmlite.binding", "build", "LLVM IR (modpack.llvm_module)")

    with _init_lock:
        if not _initialized:
            binding.initialize_all_targets()
            binding.initialize_all_asmprinters()
            binding.initialize_native_asmparser()
            _initialized = True
    return binding


def target_machine(triple: str | None = None) -> Any:
    """A PIC target machine for |triple| (default: this process's); CompileError naming the
    triple when LLVM cannot build for it."""
    binding = llvm()
    triple = triple or binding.get_process_triple()
    try:
        target = binding.Target.from_triple(triple)
    except RuntimeError as exc:
        raise CompileError(f"LLVM cannot build for target {triple!r}: {exc}; give a triple "
                           "such as 'x86_64-linux-gnu' or 'aarch64-linux-gnu'") from None
    return target.create_target_machine(opt=2, reloc="pic", codemodel="default")


def can_assemble(triple: str) -> bool:
    """Whether LLVM here can assemble for |triple| (``module asm``, inline asm): llvmlite
    initialises the assembly parser of this machine's target only, and for any other target
    LLVM aborts the whole process on assembly ("Inline asm not supported by this streamer")
    instead of reporting an error, so callers ask first."""
    return architecture(triple) == architecture(llvm().get_process_triple())


def emit_object(machine: Any, module: Any, what: str) -> bytes:
    """|module| compiled by the target |machine| into an object file's bytes; CompileError
    (naming |what|) instead of LLVM aborting the process when the IR holds assembly for a
    target LLVM cannot assemble for here (see :func:`can_assemble`)."""
    if not can_assemble(machine.triple) and _ASM.search(str(module)):
        here = architecture(llvm().get_process_triple())
        raise CompileError(
            f"{what} holds assembly (module asm or inline asm), which LLVM (llvmlite) can "
            f"assemble only for this machine ({here}), not for {machine.triple}: compile the IR "
            "for the target with its own toolchain (clang or llc) and add the object with "
            "modpack.object_module, or remove the assembly")
    return bytes(machine.emit_object(module))
