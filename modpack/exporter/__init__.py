"""Turning a module tree into one deployable library: compiler drivers and export_library."""

from .export import export_library
from .toolchain import create_shared, create_tar, include_dir

__all__ = ["create_shared", "create_tar", "export_library", "include_dir"]
