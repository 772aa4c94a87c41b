"""load_module and register_loader: the Python entry points of the runtime's loader.

The C runtime reads and validates the blob and rebuilds the tree; this module adds what only
Python can do: relinking ``.tar``/``.o`` exports, and loaders written in Python, which the
runtime calls through the same registry as its C loaders.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .errors import FormatError, ModpackError
from .exporter.toolchain import create_shared
from .modules.base import Module
from .modules.loaded import python_modules, wrap_module
from .runtime.binding import check, error_from_status, ffi, lib

__all__ = ["load_module", "register_loader"]

Loader = TypeVar("Loader", bound=Callable[[memoryview], Module])

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


def load_module(path: str | os.PathLike, *, verify_checksums: bool = True) -> Module:
    """Load a library made by ``export_library`` and return the root of its module tree.

    ``.so`` files are loaded directly; ``.tar`` and ``.o`` exports are first linked into a
    shared library with the system C compiler. ``verify_checksums=False`` skips the payload
    checksums (the index is always verified), for multi-GB weights.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such library: {path}")
    if path.suffix in (".tar", ".o"):
        return _load_relinked(path, verify_checksums)
    flags = 0 if verify_checksums else lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS
    out = ffi.new("mp_module_t**")
    status = lib.mp_module_load_from_file(os.fsencode(path.resolve()), flags, out)
    if status != 0:
        raise error_from_status(status)
    root = wrap_module(out[0])
    lib.mp_module_release(out[0])  # wrap_module took its own reference
    return root


def _load_relinked(path: Path, verify_checksums: bool) -> Module:
    """Link the objects of a ``.tar``/``.o`` export into a private ``.so`` and load that.
    The file can be deleted once loaded: the mapping stays."""
    workspace = Path(tempfile.mkdtemp(prefix="modpack-relink-"))
    try:
        if path.suffix == ".tar":
            try:
                with tarfile.open(path) as tar:
                    tar.extractall(workspace, filter="data")
            except tarfile.TarError as exc:
                raise FormatError(f"{path} is not a readable tar archive: {exc}") from None
            objects = sorted(p for p in workspace.iterdir() if p.suffix == ".o")
            if not objects:
                raise FormatError(f"{path} holds no object files to link")
        else:
            objects = [path]
        shared = workspace / (path.stem + ".so")
        create_shared(shared, objects)
        return load_module(shared, verify_checksums=verify_checksums)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def register_loader(type_key: str) -> Callable[[Loader], Loader]:
    """Decorator registering ``loadbinary_<type_key>``: a function receiving the payload as a
    read-only memoryview (in place in the loaded library; a copy when ``modpack inspect`` runs
    the loader without loading the library) and returning a ``Module``.

    >>> @modpack.register_loader("mykind")
    ... def load_mykind(payload: memoryview) -> modpack.Module:
    ...     return MyKind.from_bytes(payload)
    """

    def decorate(fn: Loader) -> Loader:
        handle = ffi.new_handle(fn)
        with _lock:
            check(lib.mp_loader_register(type_key.encode(), lib._mp_py_loader, handle))
            _loader_handles[type_key] = handle
        return fn

    return decorate


def unregister_loader(type_key: str) -> None:
    """Remove a loader registered from Python."""
    with _lock:
        check(lib.mp_loader_unregister(type_key.encode()))
        _loader_handles.pop(type_key, None)


def _fail(exc: BaseException) -> int:
    status = lib.MP_ERR_RUNTIME
    if isinstance(exc, FormatError):
        status = lib.MP_ERR_FORMAT
    lib.mp_error_set(status, f"{type(exc).__name__}: {exc}".encode())
    return status


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
    data = ffi.gc(ffi.cast("uint8_t*", args.payload.data),
                  lambda _, library=library: lib.mp_library_release(library))
    return memoryview(ffi.buffer(data, args.payload.size)).toreadonly()


@ffi.def_extern()
def _mp_py_loader(user_data: Any, args: Any, out_module: Any) -> int:
    try:
        fn = ffi.from_handle(user_data)
        type_key = ffi.string(args.type_key).decode()
        module = fn(_payload_view(args))
        if not isinstance(module, Module):
            raise ModpackError(
                f"the loader for {type_key!r} returned {type(module).__name__}, not a "
                "modpack.Module"
            )
        handle = _hold(module)
        status = lib.mp_module_create(args.type_key, _PYTHON_VTABLE, handle, out_module)
        if status == 0:
            _module_of_handle[_address(handle)] = _address(out_module[0])
            python_modules[_address(out_module[0])] = module
        return status
    except BaseException as exc:
        return _fail(exc)


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
            fn = module.get_function(ffi.string(name).decode())
        except (KeyError, AttributeError, ModpackError):
            return 0  # absent
        # On failure mp_function_create has already released the handle.
        return lib.mp_function_create(lib._mp_py_call, _hold(fn), lib._mp_py_release, self,
                                      out_function)
    except BaseException as exc:
        return _fail(exc)


@ffi.def_extern()
def _mp_py_call(self: Any, args: Any, num_args: int, out_ret: Any) -> int:
    """Calling a Python function through the packed ABI: scalars, and CPU arrays as numpy
    views valid for the call; it returns a scalar."""
    from .runtime.values import fill_value, value_to_python

    try:
        fn = ffi.from_handle(self)
        result = fn(*(value_to_python(args[i]) for i in range(num_args)))
        keep: list = []
        fill_value(out_ret, result, keep)
        if keep:
            raise ModpackError("Python functions called from C may return only scalars")
        return 0
    except BaseException as exc:
        return _fail(exc)


_PYTHON_VTABLE = ffi.new("mp_module_vtable_t*")
_PYTHON_VTABLE.get_function = lib._mp_py_get_function
_PYTHON_VTABLE.destroy = lib._mp_py_release
