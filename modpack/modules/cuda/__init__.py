"""The ``cuda`` kind, by job: architecture names (:mod:`.arch`), binaries by their bytes
(:mod:`.binaries`), PTX (:mod:`.ptx`), CUDA C++ signatures (:mod:`.signatures`), kernel records
(:mod:`.records`), variants (:mod:`.variants`), compiling (:mod:`.compile`) and the module with its
payload writer (:mod:`.module`).

Kernel functions take their arguments — arrays on a CUDA device for pointer parameters,
numbers for scalars — followed by six integers: grid x, y, z (``blockIdx``) and block x, y, z
(``threadIdx``), and, when the record asks for it, the bytes of dynamic shared memory.
"""

from ..kernel_info import UNTYPED_POINTER
from . import payload_view  # noqa: F401  (importing it registers the tools' view of the payload)
from .arch import DEFAULT_TARGETS
from .binaries import cubin_arch, detect_kind, fatbin_arches
from .compile import INSTALL_HINT, find_nvcc
from .module import CUDAModule, cuda_module
from .ptx import check_against_ptx, ptx_entries, ptx_target
from .records import LAUNCH_TAGS, SHARED_MEMORY_TAG
from .signatures import parse_cuda_signatures
from .triton import from_triton
from .variants import CUDAVariant

__all__ = [
    "DEFAULT_TARGETS",
    "INSTALL_HINT",
    "LAUNCH_TAGS",
    "SHARED_MEMORY_TAG",
    "UNTYPED_POINTER",
    "CUDAModule",
    "CUDAVariant",
    "check_against_ptx",
    "cubin_arch",
    "cuda_module",
    "detect_kind",
    "fatbin_arches",
    "find_nvcc",
    "from_triton",
    "parse_cuda_signatures",
    "ptx_entries",
    "ptx_target",
]
