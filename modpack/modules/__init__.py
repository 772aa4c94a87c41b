"""Module kinds: the base class and each kind a user can build or load."""

from .base import BinaryModule, HostModule, Module
from .const import ConstModule, const_module
from .csource import CSourceModule, csource_module
from .cuda import CUDAModule, cuda_module, from_triton
from .kernel_info import KernelArg, KernelInfo
from .llvm import LLVMModule, llvm_module
from .objects import ObjectModule, object_module
from .opencl import OpenCLModule, opencl_binaries, opencl_module
from .rocm import ROCmModule, rocm_module
from .vulkan import VulkanModule, vulkan_module
from .weights import WeightsModule, weights_module

__all__ = [
    "BinaryModule",
    "CSourceModule",
    "CUDAModule",
    "ConstModule",
    "HostModule",
    "KernelArg",
    "KernelInfo",
    "LLVMModule",
    "Module",
    "ObjectModule",
    "OpenCLModule",
    "ROCmModule",
    "VulkanModule",
    "WeightsModule",
    "const_module",
    "csource_module",
    "cuda_module",
    "from_triton",
    "llvm_module",
    "object_module",
    "opencl_binaries",
    "opencl_module",
    "rocm_module",
    "vulkan_module",
    "weights_module",
]
