"""modpack: package compiled kernels into one deployable shared library and load it back.

    host = modpack.csource_module(code)
    host.import_module(modpack.const_module({"w": weights}))
    host.export_library("deploy.so")
    lib = modpack.load_module("deploy.so")
    lib["vadd"](a, b, out)
"""

__version__ = "0.1.0"

from .errors import (
    ArgumentError,
    CompileError,
    FormatError,
    IncompatibleError,
    ModpackError,
    NotFoundError,
    UnavailableError,
)
from .loader import load_module, register_loader, unregister_loader
from .modules import (
    BinaryModule,
    Module,
    const_module,
    csource_module,
    llvm_module,
)
from .runtime.function import Function
from .serializer import ModuleSerializer

__all__ = [
    "ArgumentError",
    "BinaryModule",
    "CompileError",
    "FormatError",
    "Function",
    "IncompatibleError",
    "ModpackError",
    "Module",
    "ModuleSerializer",
    "NotFoundError",
    "UnavailableError",
    "__version__",
    "const_module",
    "csource_module",
    "llvm_module",
    "load_module",
    "register_loader",
    "unregister_loader",
]
