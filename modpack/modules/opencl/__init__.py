"""The ``opencl`` kind, by job: the module and its payload writer (:mod:`.module`), kernel
records read from the source as the OpenCL compiler sees it (:mod:`.signatures`), prebuilt
program binaries (:mod:`.binaries`), and the source built at export when asked
(:mod:`.build_check`)."""

from . import payload_view  # noqa: F401  (importing it registers the tools' view of the payload)
from .binaries import opencl_binaries
from .module import LAUNCH_TAGS, OpenCLModule, opencl_module
from .signatures import parse_kernel_signatures, preprocess

__all__ = [
    "LAUNCH_TAGS",
    "OpenCLModule",
    "opencl_binaries",
    "opencl_module",
    "parse_kernel_signatures",
    "preprocess",
]
