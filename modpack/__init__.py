"""modpack: package compiled kernels into one deployable shared library and load it back.

    host = modpack.csource_module(code)
    host.import_module(modpack.const_module({"w": weights}))
    host.export_library("deploy.so")
    lib = modpack.load_module("deploy.so")
    lib["vadd"](a, b, out)
"""

from .errors import (
    AlreadyExistsError,
    ArgumentError,
    CallError,
    CompileError,
    DLPackError,
    FormatError,
    IncompatibleError,
    InternalError,
    MissingExtraError,
    MissingFileError,
    ModpackError,
    ModpackOSError,
    ModpackWarning,
    NotFoundError,
    ResourceExhaustedError,
    SignatureError,
    UnavailableError,
    WeightsMismatchError,
)
from .exporter.serializer import ModuleSerializer
from .loader import (
    load_module,
    load_module_from_bytes,
    load_system_lib,
    register_loader,
    unregister_loader,
)
from .modules import (
    BinaryModule,
    KernelArg,
    KernelInfo,
    Module,
    const_module,
    csource_module,
    cuda_module,
    from_triton,
    llvm_module,
    object_module,
    opencl_binaries,
    opencl_module,
    rocm_module,
    vulkan_module,
    weights_module,
)
from .oci import pull, push
from .runtime.array import Array, array, empty, from_dlpack
from .runtime.binding import lib as _lib
from .runtime.devices import device_count, device_name, get_stream, set_stream, synchronize
from .runtime.float4 import pack_float4, unpack_float4
from .runtime.function import Function
from .runtime.kernel_cache import kernel_cache_entries, kernel_cache_stats, prune_kernel_cache
from .runtime.module import LoadedModule
from .runtime.subbyte import FLOAT4_E2M1FN_X2 as float4_e2m1fn_x2
from .runtime.values import local_memory
from .runtime.warmup import warm_up as _warm_up
from .runtime.weight_files import WeightFile, load_weights
from .selftests import SelfTest, SelfTestResult, selftest
from .tools.extraction import extract_library
from .tools.inspection import inspect_library
from .tools.preflight import preflight
from .tools.slim import slim_library
from .tools.verification import verify_library
from .weights import save_weights

# The runtime's version, from the one place it is written (csrc/include/modpack/modpack.h).
__version__ = f"{_lib.MP_VERSION_MAJOR}.{_lib.MP_VERSION_MINOR}.{_lib.MP_VERSION_PATCH}"

_warm_up()

__all__ = [
    "AlreadyExistsError",
    "ArgumentError",
    "Array",
    "BinaryModule",
    "CallError",
    "CompileError",
    "DLPackError",
    "FormatError",
    "Function",
    "IncompatibleError",
    "InternalError",
    "KernelArg",
    "KernelInfo",
    "LoadedModule",
    "MissingExtraError",
    "MissingFileError",
    "ModpackError",
    "ModpackOSError",
    "ModpackWarning",
    "Module",
    "ModuleSerializer",
    "NotFoundError",
    "ResourceExhaustedError",
    "SelfTest",
    "SelfTestResult",
    "SignatureError",
    "UnavailableError",
    "WeightFile",
    "WeightsMismatchError",
    "__version__",
    "array",
    "const_module",
    "csource_module",
    "cuda_module",
    "device_count",
    "device_name",
    "empty",
    "extract_library",
    "float4_e2m1fn_x2",
    "from_dlpack",
    "from_triton",
    "get_stream",
    "inspect_library",
    "kernel_cache_entries",
    "kernel_cache_stats",
    "llvm_module",
    "load_module",
    "load_module_from_bytes",
    "load_system_lib",
    "load_weights",
    "local_memory",
    "object_module",
    "opencl_binaries",
    "opencl_module",
    "pack_float4",
    "preflight",
    "prune_kernel_cache",
    "pull",
    "push",
    "register_loader",
    "rocm_module",
    "save_weights",
    "selftest",
    "set_stream",
    "slim_library",
    "synchronize",
    "unpack_float4",
    "unregister_loader",
    "verify_library",
    "vulkan_module",
    "weights_module",
]
