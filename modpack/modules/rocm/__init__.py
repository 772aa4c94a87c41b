"""The ``rocm`` kind, by job: code objects and their metadata (:mod:`.code_object`), compiling
OpenCL C or HIP with clang (:mod:`.compile`), HIP's headers, ROCm's device libraries and the clang
that reads them (:mod:`.toolchain`), and the module with its payload writer (:mod:`.module`).

Kernel functions take their arguments — arrays on a ROCm device for pointer parameters, numbers
for scalars — followed by six integers: grid x, y, z (in blocks) and block x, y, z, and, when
the record asks for it, the bytes of dynamic LDS.
"""

from . import payload_view  # noqa: F401  (importing it registers the tools' view of the payload)
from .code_object import CodeObject, KernelMetadata, read_code_object
from .compile import find_clang
from .module import KIND_LAUNCH_TAGS, LAUNCH_TAGS, ROCmModule, check_target, rocm_module

__all__ = [
    "KIND_LAUNCH_TAGS",
    "LAUNCH_TAGS",
    "CodeObject",
    "KernelMetadata",
    "ROCmModule",
    "check_target",
    "find_clang",
    "read_code_object",
    "rocm_module",
]
