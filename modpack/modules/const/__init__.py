"""The ``const`` kind: named arrays stored in the library and loaded as zero-copy read-only
views (:mod:`.module`; the C side is csrc/src/kinds/const/)."""

from .module import ConstModule, const_module

__all__ = ["ConstModule", "const_module"]
