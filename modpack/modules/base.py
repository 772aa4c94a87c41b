"""The one Module concept: a node of the import tree with a type key.

Two capabilities decide how a module travels in ``export_library``:

- *DSO-exportable* modules (``c``, ``llvm``) compile to object files and are merged into the
  host library itself (the ``_lib`` slot of the tree);
- *binary-serializable* modules (``const``, device kinds, user kinds) write their bytes into
  ``__dev_mblob`` and are rebuilt at load time by the loader registered for their type key.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, ModpackError
from ..log import export_log
from ..toolchain.cc import Toolchain
from .tree import walk

__all__ = ["BinaryModule", "HostModule", "Module"]


class Module:
    """A module in a tree of imports. Subclasses set ``type_key`` and a capability."""

    # Slots: a tree of 10,000 small modules holds no per-module __dict__ for the base's field
    # (subclasses without __slots__ of their own, users' among them, still get one).
    __slots__ = ("__weakref__", "_imports")

    type_key: str = ""

    def __init__(self) -> None:
        # No list until the first import: most modules of a large tree are leaves, and every
        # list is one more object for Python's cyclic garbage collector to track and walk.
        self._imports: list[Module] | tuple[Module, ...] = ()

    # ---- the tree ----------------------------------------------------------------------

    @property
    def imported_modules(self) -> list[Module]:
        """The modules this one imports, in import order."""
        return list(self._imports)

    def import_module(self, module: Module) -> None:
        """Import |module|; refuses an import that would make the tree cyclic."""
        if not isinstance(module, Module):
            raise ArgumentError(
                f"import_module expects a modpack.Module, got {type(module).__name__}")
        # A cycle is this module in the imported one's subtree: only a module with imports of
        # its own has one to walk.
        if module is self or (module._imports and any(m is self for m in walk(module))):
            raise ArgumentError(
                f"importing this {module.type_key} module into the {self.type_key} module "
                "would create a cycle in the import tree"
            )
        imports = self._imports
        if isinstance(imports, tuple):
            imports = self._imports = list(imports)
        imports.append(module)

    # ---- capabilities --------------------------------------------------------------------

    @property
    def is_dso_exportable(self) -> bool:
        """True if the module compiles into the host library's code."""
        return False

    @property
    def is_binary_serializable(self) -> bool:
        """True if the module can be written into the blob and loaded back by type key."""
        return False

    # ---- functions -----------------------------------------------------------------------

    def get_function(self, name: str, query_imports: bool = False) -> Callable[..., Any]:
        """The function |name|. Modules being built are not runnable: export and load first."""
        raise ModpackError(
            f"a {self.type_key or type(self).__name__} module being built cannot run functions; "
            "export it with export_library() and load it with modpack.load_module()"
        )

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if not isinstance(name, str):
            raise ArgumentError(f"function names are str, not {type(name).__name__}")
        return self.get_function(name)

    # ---- serialization -------------------------------------------------------------------

    def save_to_binary(self) -> bytes:
        """The payload this module stores in the blob."""
        if not self.is_binary_serializable:
            raise ModpackError(f"a {self.type_key} module is not binary-serializable")
        return b"".join(bytes(chunk) for chunk in self.payload_chunks())

    def payload_size(self) -> int:
        """Size of the payload, known before writing it (so the index can be planned)."""
        return sum(len(memoryview(c).cast("B")) for c in self.payload_chunks())

    def payload_chunks(self) -> Iterable[Any]:
        """The payload as buffers written one after another, so large payloads stream without
        being joined into one copy. Binary kinds override this or ``save_to_binary``."""
        raise ModpackError(f"a {self.type_key} module is not binary-serializable")

    def export_library(
        self,
        path: str | os.PathLike[str],
        fcompile: Callable[..., Any] | None = None,
        workspace_dir: str | os.PathLike[str] | None = None,
        *,
        system_lib: str | None = None,
        **options: Any,
    ) -> Path:
        """Write this tree as one deployable library (``.so``), object archive (``.tar``), or
        system library (``.o``/``.a`` with ``system_lib``).

        Parameters
        ----------
        path : the output; it appears atomically, complete or not at all.
        system_lib : ``"NAME"``: write a relocatable object (``.o``) or archive (``.a``) for
            linking into a program, described by ``modpack_system_lib_NAME()`` and loaded
            with ``mp_module_load_system_lib`` (Python: :func:`modpack.load_system_lib`);
            its other symbols are prefixed with ``NAME_``, so several link into one program.
        fcompile : ``fcompile(output, objects, options)`` links the compiled objects, the
            blob's object among them, into the output (another linker or file format); the
            default runs the C compiler with ``-shared``. A shared library it makes is sealed;
            anything else (``ld -r``'s relocatable object, an archive) is kept as made, for a
            later link. With ``fcompile.output_format = "so"`` the blob is written into its
            shared library after the link instead (faster for large blobs). It does not
            choose the target: that is ``cc``/``target`` below.
        workspace_dir : keep the intermediate files (sources, objects, blob) here.
        options : ``options`` (extra compiler flags), ``cc`` and ``cxx`` (the C and C++
            compilers; default ``$CC``/``cc`` and ``$CXX``/``c++``), ``target`` (a target
            triple such as ``"aarch64-linux-gnu"``: its ``-gcc``/``-g++`` unless ``cc``/``cxx``
            are given). The C compiler's target is the export's: it drives the compilers, the
            packer, the linker (a cross compiler keeps its own) and ``llvm`` modules' triple.
            ``packer`` (``"auto"``: a
            direct ELF object where the target allows, else ``"asm"``; or ``"elf"``,
            ``"asm"``, ``"llvm"``), ``fpack_imports`` (a custom blob packer taking the blob
            file and the workspace, returning an object file), ``payload_alignment``,
            ``compress_code`` (default False: device code as is, and the library reads with
            every modpack; True: each piece of device code — CUDA variants, OpenCL source and
            binaries, SPIR-V, ROCm code objects — compressed with Zstandard, level 19, or an
            int for another level from 1 to 22; decoded when a device first loads that piece,
            and such a library needs a modpack that reads format 1.1. Weights are never
            compressed: they stay zero-copy and aligned), ``metadata`` (a dict of JSON values:
            producer, compiler and driver versions, source revision, license, anything; stored
            with modpack's own version, C compiler and target under ``"modpack"``, in the
            blob's index, so the seal and signatures cover it; read back by
            ``LoadedModule.metadata``, ``modpack inspect`` and ``mp_module_metadata``; at most
            1 MiB as JSON, no times added, so the same tree and metadata give the same bytes),
            ``selftests`` (a list of :class:`modpack.SelfTest`: inputs, expected outputs and
            tolerances for named functions, stored in the library and run on request only, by
            ``modpack selftest FILE --device D`` or :func:`modpack.selftest`; a test of a
            function the library does not define fails the export). Either makes the blob
            format 1.2, which every modpack runtime of format 1 loads (older ones ignore both).
        """
        from ..exporter import export_library

        start = time.perf_counter()
        output = export_library(self, path, fcompile=fcompile, workspace_dir=workspace_dir,
                                system_lib=system_lib, **options)
        if export_log.isEnabledFor(logging.INFO):
            export_log.info("exported %s (%d bytes) in %.1f ms", output, output.stat().st_size,
                            (time.perf_counter() - start) * 1e3)
        return output

    def __repr__(self) -> str:
        return f"<modpack.Module type_key={self.type_key!r} imports={len(self._imports)}>"


class HostModule(Module):
    """Base class for kinds compiled into the library's own code (``c``, ``llvm``, prebuilt
    objects): they merge into the tree's ``_lib`` node."""

    language = "c"  # "c++" when linking the library needs the C++ driver (and its runtime)

    @property
    def is_dso_exportable(self) -> bool:
        return True

    def compile_objects(self, workspace: Path, stem: str, toolchain: Toolchain,
                        options: Sequence[str]) -> list[Path]:
        """Compile into object files in |workspace| (names starting with |stem|) with
        |toolchain|'s compilers and extra |options|; returns the objects."""
        raise NotImplementedError(f"{type(self).__name__} must implement compile_objects()")


class BinaryModule(Module):
    """Base class for binary-serializable kinds, including user-registered ones.

    Subclasses set ``type_key`` and implement ``save_to_binary()`` (or ``payload_chunks()``
    for large payloads); a loader registered with ``modpack.register_loader(type_key)``
    rebuilds them at load time.
    """

    __slots__ = ()

    @property
    def is_binary_serializable(self) -> bool:
        return True

    def payload_chunks(self) -> Iterable[Any]:
        if type(self).save_to_binary is Module.save_to_binary:
            raise NotImplementedError(f"{type(self).__name__} must implement save_to_binary()")
        return [self.save_to_binary()]
