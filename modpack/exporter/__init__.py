"""Turning a module tree into one deployable library: ``export_library``. (The compilers and
linkers it drives are in :mod:`modpack.toolchain`.)"""

from .export import export_library

__all__ = ["export_library"]
