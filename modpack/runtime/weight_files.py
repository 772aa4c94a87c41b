"""Weight files read through the runtime: :func:`load_weights` (a file on its own), the arrays
of a loaded tree's ``weights`` modules, and the load options that say where weight files are
and how they are checked.

The C runtime is the one reader (``csrc/src/weights/``); this module turns what it hands out
into read-only numpy views. A view holds the *version* of the weights it was made from (the
weight file the module read then), so it stays valid after ``swap_weights`` replaces them,
and the old file is unmapped once its last view is gone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np

from ..errors import ArgumentError, MissingFileError
from .binding import check, ffi, lib, string
from .names import no_such_array
from .trust import TrustedKey, trusted_keys_array
from .views import view_of

__all__ = ["WeightArrays", "WeightFile", "WeightsLocation", "describe_module", "load_options",
           "load_weights"]

WeightsLocation = Union[str, os.PathLike[str], Mapping[str, Union[str, os.PathLike[str]]]]
"""Where a library's weight files are: one file's path (the library's only weight file), a
folder (each found there by its name), or the path of each by the name the library records
for it (``modpack inspect`` shows it)."""


# Parsed once at import rather than by the first load (cffi parses a type's text on its first
# use, tens of microseconds).
_OPTIONS_TYPE = ffi.typeof("mp_load_options_t*")
_OPTIONS_SIZE = ffi.sizeof("mp_load_options_t")


def load_options(flags: int, trusted_keys: Iterable[TrustedKey] | None = None,
                 weights: WeightsLocation | None = None,
                 overlays: Iterable[str | os.PathLike[str]] | None = None) -> Any:
    """The runtime's ``mp_load_options_t`` (kept alive by the returned object). The options of
    a load naming no keys, no weight files and no overlays are made once per set of flags and
    shared: the runtime only reads them."""
    if trusted_keys is None and weights is None and overlays is None:
        plain = _plain_options.get(flags)
        if plain is None:
            plain = _plain_options[flags] = _options(flags, None, None)
        return plain
    return _options(flags, trusted_keys, weights, overlays)


def overlay_paths(overlays: Iterable[str | os.PathLike[str]]) -> list[bytes]:
    """Each overlay's path, resolved (a load and a later one name the same files alike), each
    an existing file."""
    if isinstance(overlays, (str, bytes, os.PathLike)):
        raise ArgumentError("overlays= is a list of weight files' paths (adapters), not one "
                            "path: overlays=[path]")
    out = []
    for overlay in overlays:
        if not isinstance(overlay, (str, os.PathLike)):
            raise ArgumentError(f"overlays= lists weight files' paths, not "
                                f"{type(overlay).__name__}")
        shown = Path(overlay)
        if not shown.is_file():
            raise MissingFileError(f"no such overlay: {shown}")
        out.append(os.fsencode(shown.resolve()))
    return out


def _options(flags: int, trusted_keys: Iterable[TrustedKey] | None,
             weights: WeightsLocation | None,
             overlays: Iterable[str | os.PathLike[str]] | None = None) -> _Kept:
    keep: list[Any] = []
    options = ffi.new(_OPTIONS_TYPE)
    options.struct_size = _OPTIONS_SIZE
    options.flags = flags
    if overlays is not None:
        paths = [ffi.new("char[]", p) for p in overlay_paths(overlays)]
        array = ffi.new("char*[]", paths)
        keep.extend([*paths, array])
        options.overlays = array
        options.num_overlays = len(paths)
    if trusted_keys is not None:
        keys = trusted_keys_array(trusted_keys)
        keep.append(keys)
        options.trusted_keys = keys
        options.num_trusted_keys = len(keys)
    if weights is None:  # (before isinstance with os.PathLike, an ABC: slow the first time)
        pass
    elif isinstance(weights, (str, os.PathLike)) and os.path.isdir(weights):
        keep.append(ffi.new("char[]", os.fsencode(weights)))
        options.weights_folder = keep[-1]
    else:
        pairs = _locations(weights)
        array = ffi.new("mp_weights_location_t[]", len(pairs))
        for i, (name, path) in enumerate(pairs):
            if name is not None:
                keep.append(ffi.new("char[]", name.encode()))
                array[i].file_name = keep[-1]
            keep.append(ffi.new("char[]", os.fsencode(path)))
            array[i].path = keep[-1]
        keep.append(array)
        options.weights = array
        options.num_weights = len(pairs)
    return _Kept(options, keep)


def _locations(weights: WeightsLocation) -> list[tuple[str | None, str | os.PathLike[str]]]:
    if isinstance(weights, (str, os.PathLike)):
        return [(None, weights)]
    if isinstance(weights, Mapping):
        for name, path in weights.items():
            if not isinstance(name, str) or not isinstance(path, (str, os.PathLike)):
                raise ArgumentError("weights= maps each weight file's name, as the library "
                                    "records it, to its path: {'model.mpw': '/data/model.mpw'}")
        return list(weights.items())
    raise ArgumentError(f"weights= is a weight file's path or a mapping of file name -> path, "
                        f"not {type(weights).__name__}")


class _Kept:
    """A cdata pointer and what it points into."""

    def __init__(self, pointer: Any, keep: list[Any]) -> None:
        self.pointer = pointer
        self._keep = keep


# flags -> the options of a load naming no keys and no weight files; the plain load's made now
_plain_options: dict[int, _Kept] = {0: _options(0, None, None)}


def describe_module(handle: Any) -> dict[str, Any]:
    """The runtime's JSON description of a module (``mp_module_describe``)."""
    length = ffi.new("uint64_t*")
    check(lib.mp_module_describe(handle, ffi.NULL, 0, length))
    buffer = ffi.new("char[]", length[0] + 1)
    check(lib.mp_module_describe(handle, buffer, length[0] + 1, length))
    description: dict[str, Any] = json.loads(string(buffer))
    return description


class WeightArrays(Mapping[str, np.ndarray]):
    """The arrays of a ``weights`` module as one version of its weights holds them: read-only
    numpy views into the weight files' mappings, made on first access (so an array checked on
    first use is checked when it is first read), each keeping its file's version mapped."""

    def __init__(self, handle: Any, versions: list[Any]) -> None:
        self._handle = handle  # the module (kept alive by the owner of this mapping)
        self._versions = versions  # per file read, mp_weight_file_t*, released when collected
        # The names from the module's description: asking the runtime for an array would
        # check it, when the tree verifies arrays on first use.
        self._names: list[str] = [a["name"] for a in describe_module(handle)["arrays"]]
        self._index = {n: i for i, n in enumerate(self._names)}
        self._views: dict[str, np.ndarray] = {}

    @property
    def version(self) -> tuple[int, ...]:
        """The addresses of the weight files these arrays come from (change with each swap)."""
        return tuple(int(ffi.cast("uintptr_t", v)) for v in self._versions)

    def __getitem__(self, key: str) -> np.ndarray:
        view = self._views.get(key)
        if view is None:
            index = self._index.get(key)
            if index is None:  # a NotFoundError (a KeyError) naming the closest name
                raise no_such_array(key, self._names, "the weights module")
            name = ffi.new("char**")
            tensor = ffi.new("DLTensor**")
            version = self._versions[lib.mp_weights_array_file(self._handle, index)]
            check(lib.mp_weights_array_in(self._handle, version, index, name, tensor))
            view = self._views[key] = view_of(tensor[0], version)
        return view

    def __contains__(self, key: object) -> bool:
        return key in self._index  # (Mapping's would build a not-found message per miss)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<modpack weights: {', '.join(self._names[:8])}{'...' if len(self) > 8 else ''}>"


def current_arrays(handle: Any) -> WeightArrays:
    """The arrays of the weights module |handle| as its current versions hold them."""
    versions = []
    for k in range(lib.mp_weights_file_count(handle)):
        out = ffi.new("mp_weight_file_t**")
        check(lib.mp_weights_current_file(handle, k, out))
        versions.append(ffi.gc(out[0], lib.mp_weight_file_release))
    return WeightArrays(handle, versions)


def current_version(handle: Any) -> tuple[int, ...]:
    """The addresses of the weight files the weights module |handle| reads now."""
    addresses = []
    for k in range(lib.mp_weights_file_count(handle)):
        out = ffi.new("mp_weight_file_t**")
        check(lib.mp_weights_current_file(handle, k, out))
        addresses.append(int(ffi.cast("uintptr_t", out[0])))
        lib.mp_weight_file_release(out[0])
    return tuple(addresses)


class WeightFile(Mapping[str, np.ndarray]):
    """A weight file loaded on its own (:func:`load_weights`): a read-only mapping of its
    arrays' names to zero-copy numpy views of the file's mapping, in the file's order. Views
    stay valid after the mapping object is dropped."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle  # the runtime module (released when collected)
        self._arrays = current_arrays(handle)
        info = describe_module(handle)
        described = info["weight_file"]
        self.digest: str = described["digest"]
        """The content digest, ``sha256:<hex>``: what a library that refers to the file binds
        (for safetensors and GGUF, the SHA-256 of the file's header)."""
        self.path = Path(described["path"])
        self.format: str = described["format"]
        """``"modpack"``, ``"safetensors"`` or ``"gguf"``."""
        self.metadata: dict[str, Any] = described.get("metadata", {})
        """The file's own metadata: safetensors' ``__metadata__`` (strings), GGUF's key-value
        pairs (``general.architecture``, the tokenizer, ...; arrays of more than 64 elements as
        ``{"type", "count", "first"}``); empty for a modpack weight file."""
        self._described = {a["name"]: a for a in described["arrays"]}

    def info(self, name: str) -> dict[str, Any]:
        """What the file says of array |name|: dtype, shape, offset and size in the file, its
        checksum and digest where the file records them, and for safetensors and GGUF the
        format's own type (``"Q4_K"``), its block (elements, bytes: ``[256, 144]``), its shape
        in elements (``logical_shape``) and whether it is handed out as an aligned copy
        (``copied``: the file places it misaligned)."""
        return dict(self._described[name])  # KeyError for a name the file does not have

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._arrays:
            raise no_such_array(key, self._arrays, f"the weight file {str(self.path)!r}")
        return self._arrays[key]

    def __contains__(self, key: object) -> bool:
        return key in self._arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __repr__(self) -> str:
        return f"<modpack.WeightFile {str(self.path)!r} arrays={len(self)} {self.digest[:19]}...>"


def load_weights(path: str | os.PathLike[str], *, verify_checksums: bool = True,
                 trusted_keys: Iterable[TrustedKey] | None = None,
                 verify_on_first_use: bool = False) -> WeightFile:
    """The weight file at |path| (made by :func:`modpack.save_weights` or
    ``export_library(weights=...)``) as a read-only mapping of zero-copy arrays.

    The file is mapped once per process, whoever opens it (libraries that refer to it too),
    and validated before any array is handed out: its header, index and seal, and each array's
    XXH3 checksum (``verify_checksums=False`` skips those). With ``trusted_keys``, a signature
    by one of them (``modpack sign``) must hold over the file's content digest, and every array
    is checked against its SHA-256 digest, at load or, with ``verify_on_first_use=True``, when
    it is first read (a mismatch raises :class:`~modpack.SignatureError` naming the array).
    """
    shown = Path(path)
    if not shown.exists():
        raise MissingFileError(f"no such weight file: {shown}")
    flags = 0 if verify_checksums else lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS
    if verify_on_first_use:  # without trusted_keys: the runtime refuses it
        flags |= lib.MP_LOAD_VERIFY_ON_FIRST_USE
    options = load_options(flags, trusted_keys)
    out = ffi.new("mp_module_t**")
    check(lib.mp_weights_load(os.fsencode(shown), options.pointer, out))
    return WeightFile(ffi.gc(out[0], lib.mp_module_release))
