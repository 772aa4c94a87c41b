"""Module kinds: the base class and each kind a user can build or load."""

from .base import BinaryModule, Module
from .const import ConstModule, const_module
from .csource import CSourceModule, csource_module
from .llvm import LLVMModule, llvm_module

__all__ = [
    "BinaryModule",
    "CSourceModule",
    "ConstModule",
    "LLVMModule",
    "Module",
    "const_module",
    "csource_module",
    "llvm_module",
]
