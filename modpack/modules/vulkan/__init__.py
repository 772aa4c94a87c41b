"""The ``vulkan`` kind, by job: the module and its payload writer (:mod:`.module`), and GLSL
compiled and SPIR-V reflected with Khronos' tools (:mod:`.spirv`)."""

from . import payload_view  # noqa: F401  (importing it registers the tools' view of the payload)
from .module import LAUNCH_TAGS, VulkanKernel, VulkanModule, vulkan_module

__all__ = ["LAUNCH_TAGS", "VulkanKernel", "VulkanModule", "vulkan_module"]
