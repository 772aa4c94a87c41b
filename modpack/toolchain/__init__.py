"""The tools that build a library: the system C compiler and linker (:mod:`.cc`) and LLVM
through llvmlite (:mod:`.llvm`). A leaf package: nothing here imports the rest of modpack but
its errors."""

from .cc import (
    c_compiler,
    compile_c,
    create_shared,
    create_tar,
    include_dir,
    run_tool,
    target_machine,
)

__all__ = [
    "c_compiler",
    "compile_c",
    "create_shared",
    "create_tar",
    "include_dir",
    "run_tool",
    "target_machine",
]
