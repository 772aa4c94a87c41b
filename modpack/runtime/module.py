"""Modules of a loaded library: Python views over the runtime's module tree.

Each :class:`LoadedModule` holds one runtime reference. The runtime keeps a module's imports,
and the library its code and data live in, alive as long as the module, so any object handed
out here (module, function, array) is safe to keep after the root is dropped.

A module made by a loader written in Python (``modpack.register_loader``) is that loader's own
object; it appears in the tree as itself (see :mod:`modpack.runtime.callbacks`).
"""

from __future__ import annotations

import functools
import os
import weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, MissingFileError
from ..modules.base import Module
from .binding import check, ffi, lib, string
from .function import Function, lookup
from .names import no_such_array
from .views import view_of
from .weight_files import WeightArrays, current_arrays, current_version, overlay_paths

__all__ = ["LoadedModule", "python_modules", "wrap_module"]

_WEIGHTS_KIND = string(lib.MP_WEIGHTS_KIND)  # the type key of modules that read a weight file
_UINTPTR = ffi.typeof("uintptr_t")  # parsed at import: cffi parses a type's text on first use

# One wrapper per runtime module, so shared imports (diamonds) come back as one object: its
# address -> a weak reference to it. A dict of weakref.ref, not a WeakValueDictionary, whose
# pure-Python first use made up about 20 us of a process's first load of a tiny library.
_wrappers: dict[int, weakref.ref[LoadedModule]] = {}
# Modules implemented in Python (from register_loader): runtime address -> the Python object.
python_modules: dict[int, Module] = {}


def wrap_module(handle: Any) -> LoadedModule | Module:
    """The Python object for a borrowed runtime module |handle| (retained if new)."""
    address = int(ffi.cast(_UINTPTR, handle))
    python_module = python_modules.get(address)
    if python_module is not None:
        # Its imports are whatever the library's tree says, not what its loader built: loaded
        # modules among them, which Module (the authoring side, which cannot import this
        # module without a cycle) does not name in its list[Module].
        count = lib.mp_module_import_count(handle)
        imports = [wrap_module(lib.mp_module_import_at(handle, i)) for i in range(count)]
        python_module._imports = imports  # type: ignore[assignment]
        return python_module
    ref = _wrappers.get(address)
    wrapper = ref() if ref is not None else None
    if wrapper is None:
        lib.mp_module_retain(handle)
        wrapper = LoadedModule._adopt(handle)
        _wrappers[address] = weakref.ref(wrapper, functools.partial(_forget, address))
    return wrapper


def _forget(address: int, ref: weakref.ref[LoadedModule]) -> None:
    """A wrapper died: drop its entry, unless a new wrapper for a new module at the same
    address took the slot since (one atomic step, as WeakValueDictionary does it)."""
    _remove_dead_weakref(_wrappers, address)


class LoadedModule:
    """A module rebuilt by ``load_module``: ``library`` (host code), ``const``, device kinds.

    Its imports are fixed by the library it came from; it runs functions (``mod[name]``) and
    hands out its arrays, but cannot be exported again.
    """

    __slots__ = ("__weakref__", "_address", "_arrays_cache", "_functions", "_handle",
                 "_imports_cache")

    _handle: Any  # the runtime's mp_module_t* (cffi), released with this object
    _address: int
    _imports_cache: list[LoadedModule | Module] | None
    _functions: dict[tuple[str, bool], Function]
    _arrays_cache: Mapping[str, np.ndarray] | None

    def __init__(self) -> None:
        raise ArgumentError("loaded modules come from modpack.load_module()")

    @classmethod
    def _adopt(cls, handle: Any) -> LoadedModule:
        """Wrap the cdata |handle|, taking over one reference."""
        self = object.__new__(cls)
        self._handle = ffi.gc(handle, lib.mp_module_release)
        self._address = int(ffi.cast(_UINTPTR, handle))
        self._imports_cache = None
        self._functions = {}
        self._arrays_cache = None
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
    def imported_modules(self) -> list[LoadedModule | Module]:
        """The modules this one imports, in import order: loaded modules, and the objects
        loaders registered from Python made (``modpack.register_loader``), as themselves."""
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

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The metadata the library this module came from was exported with
        (``export_library(..., metadata=...)``): the user's keys, and what modpack recorded of
        the export under ``"modpack"`` (its version, the C compiler and target of the host
        code). A new dict each time; None for a library exported without metadata. It is
        read from the blob's index, which the seal (and a signed load's signature) covers."""
        span = ffi.new("mp_const_byte_span_t*")
        lib.mp_module_metadata(self._handle, span)
        if span.size == 0:
            return None
        from ..metadata import decode_metadata

        return decode_metadata(bytes(ffi.buffer(span.data, span.size)),
                               self.library_path or "the library")

    def get_function(self, name: str, query_imports: bool = False) -> Function:
        """The function |name|, from this module or (if |query_imports|) its imports.
        Raises ``NotFoundError`` (a ``KeyError``) naming the function when it is absent."""
        key = (name, bool(query_imports))
        cached = self._functions.get(key)
        if cached is None:
            cached = self._functions[key] = lookup(self._address, name, key[1])
        return cached

    def __getitem__(self, name: str) -> Function:
        cached = self._functions.get((name, False))
        return cached if cached is not None else self.get_function(name)

    @property
    def arrays(self) -> Mapping[str, np.ndarray]:
        """Named arrays (``const`` and ``weights`` modules): read-only numpy views into the
        loaded library or weight file, no copies. Each view keeps what it points into mapped,
        and only that: a dropped module whose views are gone is unloaded. A ``weights``
        module's views are of the weights it reads now; after ``swap_weights`` this gives
        views of the new ones, and views taken before stay views of the old."""
        if self.type_key == _WEIGHTS_KIND:
            cached = self._arrays_cache
            if not isinstance(cached, WeightArrays) or cached.version != current_version(
                    self._handle):
                cached = self._arrays_cache = current_arrays(self._handle)
            return cached
        if self._arrays_cache is None:
            arrays = {}
            name = ffi.new("char**")
            tensor = ffi.new("DLTensor**")
            count = lib.mp_module_array_count(self._handle)
            reference = _runtime_reference(self._handle) if count else None
            for i in range(count):
                check(lib.mp_module_array_at(self._handle, i, name, tensor))
                arrays[string(name[0])] = view_of(tensor[0], reference)
            self._arrays_cache = _ReadOnlyMapping(arrays, f"the {self.type_key} module")
        return self._arrays_cache

    def swap_weights(self, path: str | os.PathLike[str], file_name: str | None = None) -> None:
        """Replace the weight file this module's tree reads by the one at |path|: the tree's
        only weight file, or the one the library records as |file_name|. The new file is
        checked completely first (its arrays' names, dtypes and shapes against the old ones',
        its checksums, and for a tree loaded with ``trusted_keys`` a trusted signature and its
        digests): on a mismatch :class:`~modpack.WeightsMismatchError` names the first
        difference and the old weights stay. Then the switch is atomic: a call running on
        another thread finishes with the old arrays, calls after see the new ones, and arrays
        host code copied to a device are copied anew. The old file is unmapped once its last
        call, view and device copy are gone."""
        shown = Path(path)
        if not shown.exists():
            raise MissingFileError(f"no such weight file: {shown}")
        check(lib.mp_module_swap_weights(
            self._handle, ffi.NULL if file_name is None else file_name.encode(),
            os.fsencode(shown.resolve())))

    def swap_overlays(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        """Replace the overlays (adapters, ``load_module(..., overlays=...)``) of this module's
        tree by the weight files at |paths| (none: ``[]``), checked as the tree was loaded
        (an array replacing one of the tree's has its dtype and shape; in a signed tree, a
        trusted signature): on a refusal the old ones stay. Then the switch is atomic: a call
        running on another thread finishes with the old ones, calls after see the new ones.
        The base weights are untouched."""
        encoded = [ffi.new("char[]", p) for p in overlay_paths(paths)]
        array = ffi.new("char*[]", encoded) if encoded else ffi.NULL
        check(lib.mp_module_swap_overlays(self._handle, array, len(encoded)))

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


class _ReadOnlyMapping(Mapping[str, np.ndarray]):
    def __init__(self, data: dict[str, np.ndarray], where: str) -> None:
        self._data = data
        self._where = where  # "the const module", for messages

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            return self._data[key]
        except KeyError:
            raise no_such_array(key, self._data, self._where) from None

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"{{{', '.join(f'{k!r}: array{v.shape} {v.dtype}' for k, v in self._data.items())}}}"
