"""LLVM through llvmlite: the initialised binding and target machines, for the ``llvm`` host
kind and the ``llvm`` packer. A leaf of the package, like :mod:`modpack.toolchain.cc`."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["llvm", "target_machine"]

_init_lock = threading.Lock()
_initialized = False


def llvm() -> Any:
    """llvmlite's binding, with the native target, printer and asm parser initialised.
    (The asm parser is needed for the ``.incbin`` packer; llvmlite aborts without it.)"""
    global _initialized
    import llvmlite.binding as binding

    with _init_lock:
        if not _initialized:
            binding.initialize_native_target()
            binding.initialize_native_asmprinter()
            binding.initialize_native_asmparser()
            _initialized = True
    return binding


def target_machine(triple: str | None = None) -> Any:
    """A PIC target machine for |triple| (default: this process's)."""
    binding = llvm()
    triple = triple or binding.get_process_triple()
    target = binding.Target.from_triple(triple)
    return target.create_target_machine(opt=2, reloc="pic", codemodel="default")
