"""Modules of a loaded library: Python views over the runtime's module tree.

Each :class:`LoadedModule` holds one runtime reference. The runtime keeps a module's imports,
and the library its code and data live in, alive as long as the module, so any object handed
out here (module, function, array) is safe to keep after the root is dropped.

A module made by a loader written in Python (``modpack.register_loader``) is that loader's own
object; it appears in the tree as itself (see :mod:`modpack.runtime.callbacks`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from .binding import check, ffi, lib, string
from .dtypes import dtype_from_dl
from .function import Function, lookup

__all__ = ["LoadedModule", "python_modules", "wrap_module"]

# One wrapper per runtime module, so shared imports (diamonds) come back as one object.
_wrappers: weakref.WeakValueDictionary[int, LoadedModule] = weakref.WeakValueDictionary()
# Modules implemented in Python (from register_loader): runtime address -> the Python object.
python_modules: dict[int, Any] = {}


def wrap_module(handle: Any) -> Any:
    """The Python object for a borrowed runtime module |handle| (retained if new)."""
    address = int(ffi.cast("uintptr_t", handle))
    python_module = python_modules.get(address)
    if python_module is not None:
        # Its imports are whatever the library's tree says, not what its loader built.
        count = lib.mp_module_import_count(handle)
        python_module._imports = [
            wrap_module(lib.mp_module_import_at(handle, i)) for i in range(count)
        ]
        return python_module
    wrapper = _wrappers.get(address)
    if wrapper is None:
        lib.mp_module_retain(handle)
        wrapper = LoadedModule._adopt(handle)
        _wrappers[address] = wrapper
    return wrapper


class LoadedModule:
    """A module rebuilt by ``load_module``: ``library`` (host code), ``const``, device kinds.

    Its imports are fixed by the library it came from; it runs functions (``mod[name]``) and
    hands out its arrays, but cannot be exported again.
    """

    __slots__ = ("__weakref__", "_address", "_arrays_cache", "_functions", "_handle",
                 "_imports_cache")

    def __init__(self) -> None:
        raise TypeError("loaded modules come from modpack.load_module()")

    @classmethod
    def _adopt(cls, handle: Any) -> LoadedModule:
        """Wrap the cdata |handle|, taking over one reference."""
        self = object.__new__(cls)
        self._handle = ffi.gc(handle, lib.mp_module_release)
        self._address = int(ffi.cast("uintptr_t", handle))
        self._imports_cache: list[Any] | None = None
        self._functions: dict[tuple[str, bool], Function] = {}
        self._arrays_cache: Mapping[str, np.ndarray] | None = None
        return self

    @property
    def type_key(self) -> str:
        return string(lib.mp_module_type_key(self._handle))

    @property
    def name(self) -> str | None:
        """The module's name (device modules may have one): ``"name/kernel"`` finds a kernel
        in this module only."""
        name = lib.mp_module_name(self._handle)
        return None if name == ffi.NULL else string(name)

    @property
    def imported_modules(self) -> list[Any]:
        """The modules this one imports, in import order."""
        if self._imports_cache is None:
            count = lib.mp_module_import_count(self._handle)
            self._imports_cache = [
                wrap_module(lib.mp_module_import_at(self._handle, i)) for i in range(count)
            ]
        return list(self._imports_cache)

    @property
    def library_path(self) -> str | None:
        """The file this module was loaded from."""
        library = lib.mp_module_library(self._handle)
        return None if library == ffi.NULL else string(lib.mp_library_path(library))

    def get_function(self, name: str, query_imports: bool = False) -> Callable[..., Any]:
        """The function |name|, from this module or (if |query_imports|) its imports.
        Raises ``NotFoundError`` (a ``KeyError``) naming the function when it is absent."""
        key = (name, bool(query_imports))
        cached = self._functions.get(key)
        if cached is None:
            cached = self._functions[key] = lookup(self._address, name, key[1])
        return cached

    def __getitem__(self, name: str) -> Callable[..., Any]:
        cached = self._functions.get((name, False))
        return cached if cached is not None else self.get_function(name)

    @property
    def arrays(self) -> Mapping[str, np.ndarray]:
        """Named arrays (for ``const`` modules): read-only numpy views into the loaded
        library, no copies. Each view keeps the library loaded, and only the library: a
        dropped module whose views are gone is unloaded."""
        if self._arrays_cache is None:
            arrays = {}
            name = ffi.new("char**")
            tensor = ffi.new("DLTensor**")
            count = lib.mp_module_array_count(self._handle)
            reference = _runtime_reference(self._handle) if count else None
            for i in range(count):
                check(lib.mp_module_array_at(self._handle, i, name, tensor))
                arrays[string(name[0])] = _view(tensor[0], reference)
            self._arrays_cache = _ReadOnlyMapping(arrays)
        return self._arrays_cache

    def __repr__(self) -> str:
        count = len(self.imported_modules)
        named = f" name={self.name!r}" if self.name is not None else ""
        return f"<modpack.LoadedModule type_key={self.type_key!r}{named} imports={count}>"


def _runtime_reference(handle: Any) -> Any:
    """A new runtime reference to the module |handle|, released when the returned object is
    collected. Views hold this, not the Python module: the module caches its views, and numpy
    cannot collect a reference cycle that runs through an array's base, so a view holding the
    module would keep it, and its library, loaded for the life of the process."""
    lib.mp_module_retain(handle)
    return ffi.gc(ffi.cast("mp_module_t*", handle), lib.mp_module_release)


def _view(tensor: Any, reference: Any) -> np.ndarray:
    """A read-only numpy view of |tensor|'s bytes, whose base holds |reference|."""
    dtype = dtype_from_dl(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    if dtype.itemsize * 8 != tensor.dtype.bits * tensor.dtype.lanes:
        raise TypeError(f"dtype {dtype} does not match the {tensor.dtype.bits}-bit record")
    shape = tuple(tensor.shape[d] for d in range(tensor.ndim))
    nbytes = int(lib.mp_array_nbytes(tensor))  # the size the runtime checked
    holder = _ArrayHolder(reference, int(ffi.cast("uintptr_t", tensor.data)), nbytes)
    # View the bytes as the dtype (ml_dtypes too); the base chain ends at the holder.
    return np.asarray(holder).view(dtype).reshape(shape)


class _ArrayHolder:
    """Exposes read-only memory to numpy; being the array's base, it keeps the runtime module
    (and so the library mapping) alive through |reference|."""

    __slots__ = ("__array_interface__", "_reference")

    def __init__(self, reference: Any, address: int, nbytes: int) -> None:
        self._reference = reference
        self.__array_interface__ = {
            "version": 3,
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, True),  # read-only: the mapping is not writable
        }


class _ReadOnlyMapping(Mapping):
    def __init__(self, data: dict) -> None:
        self._data = data

    def __getitem__(self, key: str) -> np.ndarray:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"{{{', '.join(f'{k!r}: array{v.shape} {v.dtype}' for k, v in self._data.items())}}}"
