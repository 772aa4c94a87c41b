"""Reading AMD GPU code objects (``.hsaco``: ELF files for EM_AMDGPU): the target ID and each
kernel's metadata — its arguments' kinds, offsets and sizes, its argument segment, LDS and
scratch sizes — from the ``NT_AMDGPU_METADATA`` note, a MessagePack map (code object v4 and
later; LLVM's AMDGPUUsage documents it)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection

from ...errors import ArgumentError
from ...extras import import_extra

__all__ = ["CodeObject", "KernelMetadata", "MetadataArg", "read_code_object"]

_EM_AMDGPU = 224
_NT_AMDGPU_METADATA = 32
_TARGET_PREFIX = "amdgcn-amd-amdhsa--"
_FACTS = ("kernarg_segment_size", "group_segment_fixed_size", "private_segment_fixed_size",
          "max_flat_workgroup_size", "wavefront_size", "sgpr_count", "vgpr_count")


@dataclass(frozen=True)
class MetadataArg:
    """One argument of a kernel as its code object describes it."""

    value_kind: str  # "global_buffer", "by_value", "hidden_..." ...
    offset: int
    size: int
    type_name: str | None  # OpenCL C's type ("float*", "uint"); HIP records none

    @property
    def hidden(self) -> bool:
        return self.value_kind.startswith("hidden_")


@dataclass(frozen=True)
class KernelMetadata:
    name: str  # what hipModuleGetFunction finds it by
    args: tuple[MetadataArg, ...]
    facts: tuple[int, ...]  # _FACTS, in that order

    @property
    def explicit_args(self) -> tuple[MetadataArg, ...]:
        return tuple(a for a in self.args if not a.hidden)


@dataclass(frozen=True)
class CodeObject:
    target: str  # "gfx90a:xnack-"
    data: bytes
    kernels: tuple[KernelMetadata, ...]


def read_code_object(data: bytes, where: str) -> CodeObject:
    """The target ID and kernels of the code object |data| (named |where| in messages)."""
    msgpack = import_extra("msgpack", "build", "reading ROCm code objects' metadata")
    if data[:4] != b"\x7fELF":
        raise ArgumentError(f"{where} is not an AMD GPU code object: it does not start with the "
                            f"ELF magic (it starts {data[:8].hex(' ')})")
    try:
        elf = ELFFile(io.BytesIO(data))
        machine = elf.header["e_machine"]
        abi_version = elf.header["e_ident"]["EI_ABIVERSION"]
        notes = [note for section in elf.iter_sections() if isinstance(section, NoteSection)
                 for note in section.iter_notes()]
    except Exception as exc:  # pyelftools raises its own errors for damaged files
        raise ArgumentError(f"{where} is not a readable ELF file: {exc}") from None
    if machine not in ("EM_AMDGPU", _EM_AMDGPU):
        raise ArgumentError(f"{where} is an ELF file for {machine}, not an AMD GPU code object "
                            "(EM_AMDGPU)")
    if abi_version < 2:
        raise ArgumentError(f"{where} is code object version {abi_version + 2}; modpack reads "
                            "version 4 and later: rebuild with -mcode-object-version=4 (or 5)")
    blobs = [note.get("n_descdata", note["n_desc"]) for note in notes
             if note["n_name"] == "AMDGPU" and _note_type(note) == _NT_AMDGPU_METADATA]
    if not blobs or not isinstance(blobs[0], (bytes, bytearray)):
        raise ArgumentError(f"{where} has no NT_AMDGPU_METADATA note (its kernels' arguments)")
    try:
        meta = msgpack.unpackb(bytes(blobs[0]), raw=False, strict_map_key=False)
    except Exception as exc:
        raise ArgumentError(f"{where}: its metadata note is not MessagePack: {exc}") from None
    if not isinstance(meta, Mapping):
        raise ArgumentError(f"{where}: its metadata note is not a map")
    target = meta.get("amdhsa.target")
    if not isinstance(target, str) or not target.startswith(_TARGET_PREFIX):
        raise ArgumentError(f"{where}: its metadata names no amdhsa.target "
                            f"({target!r}); is it an amdgcn-amd-amdhsa code object?")
    kernels = tuple(_kernel(k, where) for k in meta.get("amdhsa.kernels", ()))
    return CodeObject(target[len(_TARGET_PREFIX):], bytes(data), kernels)


def _note_type(note: Any) -> int | str:
    """A note's type: pyelftools names the types it knows, and gives the others (the vendor
    notes, NT_AMDGPU_METADATA among them) as numbers."""
    n_type: int | str = note["n_type"]
    return n_type


def _kernel(entry: Any, where: str) -> KernelMetadata:
    if not isinstance(entry, Mapping) or not isinstance(entry.get(".name"), str):
        raise ArgumentError(f"{where}: a kernel's metadata has no .name")
    name = entry[".name"]
    args = []
    for i, arg in enumerate(entry.get(".args", ())):
        try:
            args.append(MetadataArg(str(arg[".value_kind"]), int(arg[".offset"]),
                                    int(arg[".size"]), arg.get(".type_name")))
        except (KeyError, TypeError, ValueError):
            raise ArgumentError(f"{where}: kernel {name} argument {i} lacks .value_kind, "
                                ".offset or .size in its metadata") from None
    facts = tuple(int(entry.get("." + fact, 0)) for fact in _FACTS)
    return KernelMetadata(name, tuple(args), facts)
