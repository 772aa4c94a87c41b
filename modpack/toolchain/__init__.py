"""The tools that build a library: the system C compiler and linker (:mod:`.cc`), LLVM
through llvmlite (:mod:`.llvm`) and C++ demangling (:mod:`.demangle`). A leaf package:
nothing here imports the rest of modpack but its errors."""

from .cc import (
    Toolchain,
    c_compiler,
    compile_c,
    compile_cxx,
    create_shared,
    create_tar,
    cxx_compiler,
    include_dir,
    run_tool,
    target_machine,
)
from .demangle import demangle, is_mangled

__all__ = [
    "Toolchain",
    "c_compiler",
    "compile_c",
    "compile_cxx",
    "create_shared",
    "create_tar",
    "cxx_compiler",
    "demangle",
    "include_dir",
    "is_mangled",
    "run_tool",
    "target_machine",
]
