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
    KernelArg,
    KernelInfo,
    Module,
    const_module,
    csource_module,
    cuda_module,
    llvm_module,
    opencl_binaries,
    opencl_module,
)
from .runtime.array import Array, array, empty
from .runtime.devices import device_count, device_name, get_stream, set_stream, synchronize
from .runtime.function import Function
from .runtime.function import warm_up as _warm_up
from .serializer import ModuleSerializer

_warm_up()

__all__ = [
    "ArgumentError",
    "Array",
    "BinaryModule",
    "CompileError",
    "FormatError",
    "Function",
    "IncompatibleError",
    "KernelArg",
    "KernelInfo",
    "ModpackError",
    "Module",
    "ModuleSerializer",
    "NotFoundError",
    "UnavailableError",
    "__version__",
    "array",
    "const_module",
    "csource_module",
    "cuda_module",
    "device_count",
    "device_name",
    "empty",
    "get_stream",
    "llvm_module",
    "load_module",
    "opencl_binaries",
    "opencl_module",
    "register_loader",
    "set_stream",
    "synchronize",
    "unregister_loader",
]
