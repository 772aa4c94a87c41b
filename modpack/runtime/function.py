"""Callable functions over the runtime's ``mp_function_t`` handles.

Calling converts the arguments in C (``modpack.runtime._calls``, built from ``calls.c``), the
one path from Python values to the calling convention, and runs the call without the GIL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, InternalError
from . import _calls
from .array import Array
from .binding import error_from_status, ffi, lib
from .dtypes import BUFFER_FORMATS
from .values import LocalMemory, normalize

__all__ = ["Function", "lookup"]

_call = _calls.call
_release = lib.mp_function_release


class Function:
    """A function from a loaded module, called with Python scalars and arrays.

    Holds a runtime reference, so the module it came from (and the library its code lives in)
    stays loaded for as long as the function object exists.
    """

    __slots__ = ("__weakref__", "_address", "name")

    def __init__(self) -> None:
        raise ArgumentError("Function objects come from Module.get_function()")

    @classmethod
    def _from_address(cls, address: int, name: str = "<returned>") -> Function:
        """Wrap the mp_function_t at |address|, taking over one reference."""
        self = object.__new__(cls)
        self._address = address
        self.name = name
        return self

    def __del__(self) -> None:
        try:
            _release(ffi.cast("mp_function_t*", self._address))
        except (AttributeError, TypeError):  # half-built, or the interpreter is shutting down
            pass

    @property
    def _handle(self) -> Any:
        return ffi.cast("mp_function_t*", self._address)

    def __call__(self, *args: Any) -> Any:
        return _call(self._address, *args)

    def __repr__(self) -> str:
        return f"<modpack.Function {self.name}>"


def lookup(module_address: int, name: str, query_imports: bool) -> Function:
    """The function |name| of the runtime module at |module_address| (and, if
    |query_imports|, its imports); NotFoundError naming it when absent.

    A qualified name, ``"module/kernel"``, names the module it is in: only the module of
    that name answers, wherever it is in the tree below, so its imports are searched even
    without |query_imports| — as host code finds it (``mp_backend_get_function``), and as
    ``lib["f32/Xgemm"]`` on a library's root expects."""
    if isinstance(name, str) and "/" in name:
        query_imports = True
    return Function._from_address(_calls.lookup(module_address, name, query_imports), name)


_calls.init(lib.modpack_calls_api(), Array, Function, LocalMemory, np.ndarray, BUFFER_FORMATS,
            normalize, Function._from_address, error_from_status, ArgumentError, InternalError)
