"""LLVM through llvmlite: the initialised binding and target machines, for the ``llvm`` host
kind and the ``llvm`` packer. A leaf of the package, like :mod:`modpack.toolchain.cc`."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import CompileError

__all__ = ["llvm", "target_machine"]

_init_lock = threading.Lock()
_initialized = False


def llvm() -> Any:
    """llvmlite's binding, with every target, printer and asm parser it was built with
    initialised (cross targets included). (The asm parser is needed for the ``.incbin``
    packer; llvmlite aborts without it.)"""
    global _initialized
    import llvmlite.binding as binding

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
