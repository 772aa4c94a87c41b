"""The ``vulkan`` kind, by job: the module and its payload writer (:mod:`.module`), and GLSL
compiled and SPIR-V reflected with Khronos' tools (:mod:`.spirv`)."""

from .module import LAUNCH_TAGS, VulkanKernel, VulkanModule, vulkan_module

__all__ = ["LAUNCH_TAGS", "VulkanKernel", "VulkanModule", "vulkan_module"]
