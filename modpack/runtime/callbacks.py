"""What the runtime calls back into Python: loaders written in Python, the modules they make,
and Python functions that host code calls.

A loader registered with ``modpack.register_loader`` is called through ``_mp_py_loader`` with
the payload; the module it returns lives in the runtime's tree behind a vtable whose entries
are these callbacks. An exception raised in any of them is parked (:func:`binding.fail`) and
reaches the Python caller as itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError, CallError, ModpackError
from ..modules.base import Module  # the authoring base class, which Python loaders return
from .binding import check, fail, ffi, lib, string
from .function import Function
from .module import python_modules
from .values import value_to_python

__all__ = ["register_python_loader", "unregister_python_loader"]

_lock = threading.Lock()
_loader_handles: dict[str, Any] = {}  # type key -> ffi handle of the Python loader
# Python objects the runtime holds (modules from Python loaders, their functions), by the
# address of their ffi handle; released by _mp_py_release when the runtime lets go.
_handles: dict[int, Any] = {}
_module_of_handle: dict[int, int] = {}  # handle address -> runtime module address


def _address(pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _hold(obj: Any) -> Any:
    handle = ffi.new_handle(obj)
    _handles[_address(handle)] = handle
    return handle


def register_python_loader(type_key: str, fn: Callable[[memoryview], Any]) -> None:
    """Register |fn| as ``loadbinary_<type_key>`` in the runtime's registry."""
    handle = ffi.new_handle(fn)
    with _lock:
        check(lib.mp_loader_register(type_key.encode(), lib._mp_py_loader, handle))
        _loader_handles[type_key] = handle


def unregister_python_loader(type_key: str) -> None:
    with _lock:
        check(lib.mp_loader_unregister(type_key.encode()))
        _loader_handles.pop(type_key, None)


def _payload_view(args: Any) -> memoryview:
    """A read-only view of the payload that keeps the library mapped while it exists.

    Without a library (``modpack inspect``: mp_module_load_from_payload over a mapping that
    inspection closes once the loader returns) there is nothing to keep alive, so the loader
    gets a view of a copy: one it keeps stays valid instead of pointing into unmapped memory.
    """
    library = args.library
    if library == ffi.NULL:
        return memoryview(ffi.buffer(args.payload.data, args.payload.size)[:]).toreadonly()
    lib.mp_library_retain(library)

    def release(_: Any) -> None:
        lib.mp_library_release(library)

    data = ffi.gc(ffi.cast("uint8_t*", args.payload.data), release)
    return memoryview(ffi.buffer(data, args.payload.size)).toreadonly()


@ffi.def_extern()
def _mp_py_loader(user_data: Any, args: Any, out_module: Any) -> int:
    try:
        fn = ffi.from_handle(user_data)
        type_key = string(args.type_key)
        module = fn(_payload_view(args))
        if not isinstance(module, Module):
            raise CallError(
                f"the loader for {type_key!r} returned {type(module).__name__}, not a "
                "modpack.Module"
            )
        handle = _hold(module)
        status: int = lib.mp_module_create(args.type_key, _PYTHON_VTABLE, handle, out_module)
        if status == 0:
            _module_of_handle[_address(handle)] = _address(out_module[0])
            python_modules[_address(out_module[0])] = module
        return status
    except BaseException as exc:
        return fail(exc)


@ffi.def_extern()
def _mp_py_release(handle: Any) -> None:
    """The runtime dropped a Python module or function it held."""
    _handles.pop(_address(handle), None)
    module_address = _module_of_handle.pop(_address(handle), None)
    if module_address is not None:
        python_modules.pop(module_address, None)


@ffi.def_extern()
def _mp_py_get_function(self: Any, name: Any, out_function: Any) -> int:
    """Host code (or C) looking up a function of a Python-implemented module."""
    try:
        module = ffi.from_handle(lib.mp_module_impl(self))
        try:
            fn = module.get_function(string(name))
        except (KeyError, AttributeError, ModpackError):
            return 0  # absent
        # On failure mp_function_create has already released the handle.
        status: int = lib.mp_function_create(lib._mp_py_call, _hold(fn), lib._mp_py_release,
                                             self, out_function)
        return status
    except BaseException as exc:
        return fail(exc)


@ffi.def_extern()
def _mp_py_call(self: Any, args: Any, num_args: int, out_ret: Any) -> int:
    """Calling a Python function through the packed ABI: scalars, and CPU arrays as numpy
    views valid for the call; it returns a scalar (an int, a float or None)."""
    try:
        fn = ffi.from_handle(self)
        result = fn(*(value_to_python(args[i], Function._from_address) for i in range(num_args)))
        if result is None:
            out_ret.type_code = lib.MP_TYPE_NONE
        elif isinstance(result, (bool, int, np.integer, np.bool_)):
            out_ret.type_code = lib.MP_TYPE_INT
            out_ret.v_int64 = int(result)
        elif isinstance(result, (float, np.floating)):
            out_ret.type_code = lib.MP_TYPE_FLOAT
            out_ret.v_float64 = float(result)
        else:
            raise ArgumentError(
                "Python functions called from C may return only int, float or None, not "
                f"{type(result).__name__}"
            )
        return 0
    except BaseException as exc:
        return fail(exc)


_PYTHON_VTABLE = ffi.new("mp_module_vtable_t*")
_PYTHON_VTABLE.get_function = lib._mp_py_get_function
_PYTHON_VTABLE.destroy = lib._mp_py_release
