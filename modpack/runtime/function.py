"""Callable functions over the runtime's ``mp_function_t`` handles."""

from __future__ import annotations

from typing import Any

from .binding import error_from_status, ffi, lib
from .values import fill_value, value_to_python

__all__ = ["Function"]


class Function:
    """A function from a loaded module, called with Python scalars and arrays.

    Holds a runtime reference, so the module it came from (and the library its code lives in)
    stays loaded for as long as the function object exists.
    """

    __slots__ = ("__weakref__", "_handle", "name")

    def __init__(self) -> None:
        raise TypeError("Function objects come from Module.get_function()")

    @classmethod
    def _adopt(cls, handle: Any, name: str) -> Function:
        """Wrap |handle|, taking over one reference."""
        self = object.__new__(cls)
        self._handle = ffi.gc(handle, lib.mp_function_release)
        self.name = name
        return self

    def __call__(self, *args: Any) -> Any:
        keep: list = []
        n = len(args)
        values = ffi.new("mp_value_t[]", n or 1)
        for i, arg in enumerate(args):
            fill_value(values[i], arg, keep)
        ret = ffi.new("mp_value_t*")
        status = lib.mp_function_call(self._handle, values, n, ret)
        if status != 0:
            raise error_from_status(status)
        return value_to_python(ret)

    def __repr__(self) -> str:
        return f"<modpack.Function {self.name}>"
