"""The tools that build a library: the system C compiler and linker (:mod:`.cc`) and LLVM
through llvmlite (:mod:`.llvm`). A leaf package: nothing here imports the rest of modpack but
its errors."""

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

__all__ = [
    "Toolchain",
    "c_compiler",
    "compile_c",
    "compile_cxx",
    "create_shared",
    "create_tar",
    "cxx_compiler",
    "include_dir",
    "run_tool",
    "target_machine",
]
