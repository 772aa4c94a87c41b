"""Callable functions over the runtime's ``mp_function_t`` handles."""

from __future__ import annotations

from typing import Any

from .binding import error_from_status, ffi, lib
from .values import fill_value, value_to_python

__all__ = ["Function"]

_call = lib.mp_function_call
# Parse the C types of the call path once, at import, not during a user's first call.
for _type in ("mp_value_t[]", "mp_function_t**", "DLTensor*", "int64_t[]", "char[]"):
    ffi.typeof(_type)


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
        values = ffi.new("mp_value_t[]", n + 1)  # the arguments, then the return slot
        for i, arg in enumerate(args):
            fill_value(values[i], arg, keep)
        ret = values + n
        status = _call(self._handle, values, n, ret)
        if status:
            raise error_from_status(status)
        return value_to_python(ret[0])

    def _fill_value(self, slot: Any, keep: list) -> None:
        slot.type_code = lib.MP_TYPE_FUNCTION
        slot.v_handle = self._handle
        keep.append(self)

    def __repr__(self) -> str:
        return f"<modpack.Function {self.name}>"


def warm_up() -> None:
    """Run a lookup and each kind of argument through the Python call path once, so that a
    user's first lookup and call cost what later ones cost, not the interpreter's and cffi's
    first-use overheads (measured: ~25 us -> ~10 us). Called once, when modpack is imported."""
    import numpy as np

    from ..modules.loaded import LoadedModule

    out = ffi.new("mp_module_t**")
    if lib.modpack_probe_module(out) != 0:
        return
    probe = LoadedModule._adopt(out[0])
    probe["count"](1, 2.5, None, "s", np.zeros(2, np.float32))
    probe.get_function("strided")(np.zeros((2, 2), np.float64)[:, ::2])
