"""load_module and register_loader: the Python entry points of the runtime's loader.

The C runtime reads and validates the blob and rebuilds the tree; this module adds what only
Python does: relinking ``.tar`` exports, and registering loaders written in Python
(which the runtime then calls through :mod:`modpack.runtime.callbacks`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

from .errors import (
    AlreadyExistsError,
    ArgumentError,
    FormatError,
    MissingFileError,
    NotFoundError,
)
from .files.scratch import new_workspace
from .format.tar_seal import check_tar_seal, has_tar_seal
from .modules.base import Module
from .progress import Progress
from .runtime.binding import error_from_status, ffi, lib
from .runtime.callbacks import register_python_loader, unregister_python_loader
from .runtime.load_log import follow_logger
from .runtime.module import LoadedModule, wrap_module
from .runtime.trust import TrustedKey
from .runtime.weight_files import WeightsLocation, load_options

__all__ = ["load_module", "load_module_from_bytes", "load_system_lib", "register_loader",
           "unregister_loader"]

Loader = TypeVar("Loader", bound=Callable[[memoryview], Module])
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE_OUT = ffi.typeof("mp_module_t**")  # parsed at import, not by the first load
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def load_module(path: str | os.PathLike[str], *, verify_checksums: bool = True,
                allow_unsealed: bool = False,
                trusted_keys: Iterable[TrustedKey] | None = None,
                private_copy: bool = False,
                weights: WeightsLocation | None = None,
                verify_on_first_use: bool = False,
                overlays: Iterable[str | os.PathLike[str]] | None = None,
                trusted_oms: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None
                = None,
                kernel_cache: bool = True) -> LoadedModule:
    """Load a library made by ``export_library`` and return the root of its module tree (a
    :class:`~modpack.runtime.module.LoadedModule`, or the object a Python loader made when the
    root is such a module).

    ``.so`` files are loaded directly; ``.tar`` exports are first linked into a shared library
    with the system C compiler. A relocatable object (a system library), a library built for
    another machine or an executable is refused, saying which. Before anything of the file is
    mapped, its seal is checked: every byte but the payloads (code, headers, symbol tables,
    the blob's index) must be as exported, else :class:`~modpack.FormatError` names the damage.
    Loading a path whose library is loaded returns the live tree when the file is the one
    loaded; when the file was replaced since (a new export renamed over it), the new file is
    loaded as a tree of its own, and the old tree stays valid for whoever holds it. A file
    rewritten in place under a loaded version is refused.
    ``verify_checksums=False`` skips the payload checksums, for multi-GB weights whose
    integrity is guaranteed otherwise. ``allow_unsealed=True`` loads a library that carries no
    seal (linked by hand, or by a modpack before the seal), whose code and headers are then
    not checked before ``dlopen``. A missing file raises :class:`~modpack.MissingFileError`
    (a ``FileNotFoundError``).

    ``trusted_keys`` (Ed25519 public keys: PEM bytes, PEM files' paths, or 32 raw bytes) loads
    the library only if a signature by one of them holds (``modpack sign``), checked before any
    of its code runs; otherwise :class:`~modpack.SignatureError`. The file is read once: what
    the process runs or parses (code, headers, the blob's index, device code) is copied into a
    sealed in-memory copy as it is hashed, and that copy is what loads; the weights (const
    arrays) are hashed through a read-only mapping of the file, which the arrays then point
    into, shared with every other process. A writer who changes the file afterwards cannot
    change the code, but can change the weights the process reads: ``private_copy=True``
    copies them too (their size in memory, per process). docs/trust.md says what each
    guarantees. Without ``trusted_keys``, signatures are ignored.

    A library exported with ``weights=`` (or holding a :func:`~modpack.weights_module`) refers
    to a weight file by name and content digest; it is found beside the library, or where
    ``weights`` says (a path, or ``{file name: path}`` for several). A missing file raises
    :class:`~modpack.NotFoundError`; a file with other arrays or other contents than the
    library was exported with :class:`~modpack.WeightsMismatchError` (for a signed load,
    :class:`~modpack.SignatureError`), naming the file and the first difference, before any
    host code runs. It is mapped once per process and shared with every library that refers to
    it. In a signed load the library's signature covers the weight file's digest, and every
    array is checked against its digest at load, or with ``verify_on_first_use=True`` the
    first time it is read (a large model whose arrays are touched over minutes).

    ``overlays`` are adapters (a LoRA, a fine-tune's changed layers): weight files, modpack's,
    safetensors or GGUF, whose arrays host code finds before the tree's own, by name. An array
    of a new name is added; one of a name the tree has replaces it, with the same dtype and
    shape (else :class:`~modpack.WeightsMismatchError` names it); a later overlay over an
    earlier one. The base weights are untouched and stay shared with every other tree and
    process that maps them: a second program over the same base with another adapter costs
    that adapter. :meth:`~modpack.runtime.module.LoadedModule.swap_overlays` replaces them,
    atomically for callers. In a signed load each overlay needs its own trusted signature.

    ``path`` may be a registry reference, ``oci://HOST/REPO:TAG[@DIGEST]`` (pushed with
    ``modpack push``): the variant this machine's devices need is pulled into the local store
    (``$MODPACK_CACHE``) unless it is there, and loaded from there in place (the ``oci``
    extra: ``pip install modpack[oci]``). ``trusted_oms`` (EC public keys' PEM files) loads
    only if an OpenSSF model-signing bundle by one of them covers the library and every weight
    file it maps, checked before ``dlopen``: for a file on disk the bundle beside it
    (``deploy.so.sig``, from ``modpack sign --oms``), for a registry artifact the bundle that
    refers to its manifest; otherwise :class:`~modpack.SignatureError`. It combines with
    ``trusted_keys`` (both must hold).

    What a device compiles from the library's code at its first launch (an OpenCL program, the
    cubin the CUDA driver makes from PTX) is kept in the kernel cache (``$MODPACK_KERNEL_CACHE``,
    by default ``~/.cache/modpack/kernels``) under a key of that code's SHA-256, the device and
    its driver, so the next process on that device loads it instead of compiling; a damaged or
    foreign entry is ignored and built anew. ``kernel_cache=False`` (or the environment variable
    set empty) neither reads nor writes it for this tree. ``modpack cache`` lists and prunes it;
    docs/trust.md says what a writer of its folder can do.
    """
    if trusted_oms is not None or (type(path) is str and path.startswith("oci://")):
        return _load_checked(path, trusted_oms, weights, dict(
            verify_checksums=verify_checksums, allow_unsealed=allow_unsealed,
            trusted_keys=trusted_keys, private_copy=private_copy,
            verify_on_first_use=verify_on_first_use, overlays=overlays,
            kernel_cache=kernel_cache))
    # A str, not a Path, and no helper that a plain str does not need: on a process's first
    # load each first call of a Python function costs microseconds (pathlib's: 40 us).
    name = path if type(path) is str else os.fsdecode(os.fspath(path))
    # private_copy and verify_on_first_use without trusted_keys: the runtime refuses them.
    flags = _flags(verify_checksums, allow_unsealed, kernel_cache) | (
        lib.MP_LOAD_PRIVATE_COPY if private_copy else 0) | (
        lib.MP_LOAD_VERIFY_ON_FIRST_USE if verify_on_first_use else 0)
    if name.endswith(".tar"):
        tar = Path(name)
        _check_file(tar)  # a FIFO would block the archive reader
        if overlays is not None:
            raise ArgumentError(f"{tar}: overlays are for shared libraries (.so): export one")
        if trusted_keys is not None or private_copy or verify_on_first_use:
            raise ArgumentError(f"{tar}: signatures are for shared libraries (.so); export one "
                                "and sign it to load with trusted_keys (and private_copy, "
                                "verify_on_first_use)")
        return _load_relinked(tar, verify_checksums, allow_unsealed, weights, kernel_cache)
    options = load_options(flags, trusted_keys, weights, overlays)
    out = ffi.new(_MODULE_OUT)
    follow_logger()  # the load's phases to the modpack.load logger, if it logs DEBUG
    # The runtime resolves the path, and refuses what is not a regular file without blocking;
    # a failure is explained in Python terms only when it happens.
    if trusted_keys is None:
        status = lib.mp_module_load(name.encode(_FS_ENCODING, _FS_ERRORS), options.pointer, out)
    else:
        status = _load_signed(name, options.pointer, out)
    if status != 0:
        error = error_from_status(status)
        _check_file(Path(name))
        raise error
    return _root(out)


def _load_signed(name: str, options: Any, out: Any) -> int:
    """A signed load, whose runtime hashes the whole file (SHA-256) before it maps any of it:
    seconds for a large library, so its start and end are said (:mod:`modpack.progress`, lines
    only: a load draws no bar) above ``MODPACK_PROGRESS_MIN_BYTES``. Returns its status."""
    try:
        size = os.stat(name).st_size
    except OSError:
        size = 0  # the load says why
    with Progress("load (signed)", name, size, bar=False) as progress:
        status: int = lib.mp_module_load(name.encode(_FS_ENCODING, _FS_ERRORS), options, out)
        if status != 0:
            progress.failed()
    return status


def _load_checked(path: str | os.PathLike[str], trusted_oms: Any, weights: Any,
                  options: dict[str, Any]) -> LoadedModule:
    """load_module of a registry reference, or with an OMS bundle to check first."""
    name = os.fspath(path)
    if isinstance(name, str) and name.startswith("oci://"):
        from .oci.load import load_reference

        loaded: LoadedModule = load_reference(name, trusted_oms=trusted_oms, weights=weights,
                                              load=load_module, options=options)
        return loaded
    from .oci.oms import bundle_path, public_keys, verify_files

    keys = public_keys(trusted_oms)
    library = Path(os.fsdecode(name))
    _check_file(library)
    adapters = [Path(p) for p in options.get("overlays") or []]  # covered by the bundle too
    verify_files([library, *_weight_files(library, weights), *adapters], bundle_path(library),
                 keys)
    return load_module(library, weights=weights, **options)


def _weight_files(library: Path, weights: WeightsLocation | None) -> list[Path]:
    """The weight files a load of |library| maps, found as the runtime finds them: by the
    names the library records, beside it, in a folder, or where |weights| maps them."""
    from .tools.inspection import inspect_library

    report = inspect_library(library)
    names = sorted({f["file"] for m in report.get("modules", [])
                    if isinstance(m.get("contents"), dict)
                    for f in m["contents"].get("files") or [m["contents"]]
                    if isinstance(f, dict) and "file" in f})
    found = []
    for name in names:
        if weights is None:
            found.append(library.parent / name)
        elif isinstance(weights, (str, os.PathLike)):
            where = Path(os.fsdecode(os.fspath(weights)))
            found.append(where / name if where.is_dir() else where)
        else:
            mapped = dict(weights).get(name)
            found.append(Path(os.fsdecode(os.fspath(mapped))) if mapped is not None
                         else library.parent / name)
    return found


def _root(out: Any) -> LoadedModule:
    """The root of the tree the runtime put in |out| (whose reference this releases).

    Typed as a :class:`LoadedModule`, which it is unless the root module is of a kind
    registered from Python (a library with no host code whose root is such a module): the
    object that kind's loader made is returned as it is, and is a :class:`~modpack.Module`."""
    root = wrap_module(out[0])
    lib.mp_module_release(out[0])  # wrap_module took its own reference
    return cast(LoadedModule, root)  # see above: a Python kind at the root is the exception


def _check_file(path: Path) -> None:
    """MissingFileError for a path that does not exist, ArgumentError for one that is not a
    regular file."""
    if not path.exists():
        raise MissingFileError(f"no such library: {path}")
    if not path.is_file():
        raise ArgumentError(f"{path} is not a regular file: give the path of an exported "
                            ".so or .tar")


def _flags(verify_checksums: bool, allow_unsealed: bool, kernel_cache: bool) -> int:
    return (0 if verify_checksums else lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS) | (
        lib.MP_LOAD_ALLOW_UNSEALED if allow_unsealed else 0) | (
        0 if kernel_cache else lib.MP_LOAD_NO_KERNEL_CACHE)


def load_module_from_bytes(data: bytes | bytearray | memoryview | mmap.mmap, *,
                           verify_checksums: bool = True,
                           allow_unsealed: bool = False,
                           weights: WeightsLocation | None = None,
                           kernel_cache: bool = True) -> LoadedModule:
    """Load a library from its bytes (decrypted, downloaded or embedded, never written to a
    path), with the checks :func:`load_module` makes. The bytes are copied once into a sealed
    memfd, which is what is mapped and what the payloads are zero-copy views of: ``data`` may
    be changed or freed as soon as this returns. Each call gives a tree of its own, even for
    the same bytes. Takes anything with the buffer protocol that is contiguous (``bytes``,
    ``bytearray``, ``memoryview``, ``mmap``, a numpy ``uint8`` array). A library that refers to
    weight files finds them only where ``weights`` says (there is no folder to look in).
    ``kernel_cache=False``: as for :func:`load_module`.
    """
    if isinstance(data, str):
        raise ArgumentError("load_module_from_bytes takes the library's bytes, not a str; for a "
                            "path, use load_module")
    try:
        buffer = ffi.from_buffer(data)
    except (TypeError, BufferError, ValueError) as exc:
        raise ArgumentError(f"load_module_from_bytes takes the library's bytes as one contiguous "
                            f"buffer (bytes, bytearray, memoryview, mmap), not "
                            f"{type(data).__name__}: {exc}") from None
    if len(buffer) >= 263 and bytes(ffi.buffer(buffer)[257:262]) == b"ustar":
        ffi.release(buffer)
        raise ArgumentError("these are the bytes of a tar archive (a .tar export): "
                            "load_module_from_bytes takes a shared library's bytes; write the "
                            ".tar to a file and load it with load_module, which links it")
    options = load_options(_flags(verify_checksums, allow_unsealed, kernel_cache), None, weights)
    out = ffi.new("mp_module_t**")
    follow_logger()
    try:
        status = lib.mp_module_load_memory(buffer, len(buffer), options.pointer, out)
    finally:
        ffi.release(buffer)  # the runtime has its own copy: the caller may free |data| now
    if status != 0:
        raise error_from_status(status)
    return _root(out)


def load_system_lib(name: str) -> LoadedModule:
    """Load the system library ``name`` linked into the running process (an
    ``export_library(..., system_lib=name)`` object linked into the program, or into a shared
    library loaded with ``RTLD_GLOBAL``): its ``modpack_system_lib_<name>()`` describes it and
    the runtime builds the tree from that, with no ``dlopen`` of its own. Loading it again
    while the tree lives returns that tree."""
    if not isinstance(name, str) or not _C_IDENTIFIER.fullmatch(name):
        raise ArgumentError(f"a system library's name is a C identifier, not {name!r}")
    symbol = f"modpack_system_lib_{name}"
    try:
        describe = getattr(ctypes.CDLL(None), symbol)
    except AttributeError:
        raise NotFoundError(
            f"no system library {name!r} in this process: nothing defines {symbol}; link "
            f"{name}.o (or .a) into the program, or load a shared library holding it with "
            f"ctypes.CDLL(path, mode=os.RTLD_GLOBAL) first") from None
    describe.restype = ctypes.c_void_p
    describe.argtypes = []
    _refuse_twins(symbol, ctypes.cast(describe, ctypes.c_void_p).value)
    description = describe()
    if description is None:
        raise FormatError(f"{symbol}() returned NULL: the system library {name!r} is damaged "
                          "(export it again)")
    out = ffi.new("mp_module_t**")
    follow_logger()
    status = lib.mp_module_load_system_lib(ffi.cast("const mp_system_lib_t*", description), out)
    if status != 0:
        raise error_from_status(status)
    return _root(out)


def _refuse_twins(symbol: str, found: int | None) -> None:
    """Two shared objects of this process that define |symbol| (two system libraries given
    one NAME): the dynamic loader would silently hand out the first. Refused, naming both."""
    holders: dict[int, str] = {}
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if len(line.split(None, 5)) == 6 and ".so" in line}
    except OSError:
        return  # no /proc: nothing to compare
    for path in sorted(paths):
        try:
            handle = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
        if address is not None:
            holders.setdefault(address, path)
    if len(holders) > 1:
        first = holders.get(found or 0, sorted(holders.values())[0])
        others = sorted(p for p in holders.values() if p != first)
        raise AlreadyExistsError(
            f"two system libraries in this process define {symbol}: {first} (which a lookup "
            f"finds) and {', '.join(others)}; give each system library its own name "
            "(export_library(..., system_lib=NAME))")


def _load_relinked(path: Path, verify_checksums: bool, allow_unsealed: bool,
                   weights: WeightsLocation | None, kernel_cache: bool) -> LoadedModule:
    """Link the objects of a ``.tar`` export into a private ``.so`` and load that.
    A ``.tar``'s seal is checked before anything is extracted; the library linked from it is
    sealed in turn. The file can be deleted once loaded: the mapping stays."""
    workspace = new_workspace("relink")  # named for this process: swept if it dies
    try:
        sealed = False
        try:
            check_tar_seal(path)
            sealed = True
        except FormatError:
            if not allow_unsealed or has_tar_seal(path):
                raise
        # Linking is the exporter's (its toolchain and blob placement): imported only when a
        # .tar is loaded, so that loading a shared library never imports the authoring side.
        from .exporter.tar_link import link_tar

        shared = link_tar(path, workspace, seal=sealed)
        # Its weight files are beside the .tar, not beside the library linked from it.
        return load_module(shared, verify_checksums=verify_checksums,
                           allow_unsealed=allow_unsealed,
                           weights=weights if weights is not None else path.parent,
                           kernel_cache=kernel_cache)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def register_loader(type_key: str) -> Callable[[Loader], Loader]:
    """Decorator registering ``loadbinary_<type_key>``: a function receiving the payload as a
    read-only memoryview (in place in the loaded library; a copy when ``modpack inspect`` runs
    the loader without loading the library) and returning a ``Module``. An exception it raises
    reaches the caller of ``load_module`` as itself, with the module it was loading in a note.

    >>> @modpack.register_loader("mykind")
    ... def load_mykind(payload: memoryview) -> modpack.Module:
    ...     return MyKind.from_bytes(payload)
    """

    def decorate(fn: Loader) -> Loader:
        register_python_loader(type_key, fn)
        return fn

    return decorate


def unregister_loader(type_key: str) -> None:
    """Remove a loader registered from Python."""
    unregister_python_loader(type_key)
