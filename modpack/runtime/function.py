"""Callable functions over the runtime's ``mp_function_t`` handles."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .array import Array
from .binding import error_from_status, ffi, lib
from .values import fill_value, value_to_python

__all__ = ["Function"]

_call = lib.mp_function_call
_release = lib.mp_function_release
# The C fast path (binding.c): it converts common arguments itself and answers with one of
# these sentinels when it cannot, or when the call failed.
FAILED, UNSUPPORTED = object(), object()
_fast_call, fast_lookup = ctypes.cast(
    ctypes.c_void_p(lib.modpack_fast_call_init(id(FAILED), id(UNSUPPORTED), id(np.ndarray),
                                               id(Array))),
    ctypes.py_object,
).value
# Parse the C types of the call path once, at import, not during a user's first call.
for _type in ("mp_value_t[]", "mp_function_t**", "DLTensor*", "int64_t[]", "char[]"):
    ffi.typeof(_type)


class Function:
    """A function from a loaded module, called with Python scalars and arrays.

    Holds a runtime reference, so the module it came from (and the library its code lives in)
    stays loaded for as long as the function object exists.
    """

    __slots__ = ("__weakref__", "_address", "name")

    def __init__(self) -> None:
        raise TypeError("Function objects come from Module.get_function()")

    @classmethod
    def _adopt(cls, handle: Any, name: str) -> Function:
        """Wrap the cdata |handle|, taking over one reference."""
        return cls._from_address(int(ffi.cast("uintptr_t", handle)), name)

    @classmethod
    def _from_address(cls, address: int, name: str) -> Function:
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
        result = _fast_call(self._address, *args)
        if result is UNSUPPORTED:
            return self._call_general(args)
        if result is FAILED:
            raise error_from_status(lib.mp_error_code())
        if type(result) is tuple:  # a returned function, already retained
            return Function._from_address(result[0], "<returned>")
        return result

    def _call_general(self, args: tuple) -> Any:
        """Any argument the fast path does not take (DLPack objects, numpy scalars, ...)."""
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
    from ..modules.loaded import LoadedModule

    out = ffi.new("mp_module_t**")
    if lib.modpack_probe_module(out) != 0:
        return
    probe = LoadedModule._adopt(out[0])
    probe["count"](1, 2.5, None, "s", np.zeros(2, np.float32))
    probe.get_function("strided")(np.zeros((2, 2), np.float64)[:, ::2])
    probe.get_function("general")(np.float32(1), np.zeros(2, np.float32).view(_Untyped))


class _Untyped(np.ndarray):
    """An ndarray subclass: it takes the general path, which the warm-up runs once too."""
