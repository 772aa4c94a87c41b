"""SPIR-V for the ``vulkan`` kind: each compute entry point's interface read from the SPIR-V by
reflection with ``spirv-cross --reflect`` (Khronos' SPIRV-Cross, Debian's ``spirv-cross``
package): its storage buffers (set, binding, element type) and its push-constant block's
members (offset, type). Nothing is parsed here but the reflection's JSON and the SPIR-V
header's magic number; what reflection does not report or reports wrong (workgroup sizes,
specialization constants, capabilities) is read from the SPIR-V words by :mod:`.spirv_binary`.
"""

from __future__ import annotations

import json
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, CompileError
from ...runtime.binding import lib
from .glsl import tool

__all__ = ["SPIRV_MAGIC", "EntryPoint", "is_spirv", "reflect"]

SPIRV_MAGIC: int = lib.MP_VULKAN_SPIRV_MAGIC  # modpack/kinds/vulkan.h
# SPIRV-Cross's names of scalar types -> numpy dtype names.
_SCALARS = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
            "uint": "uint32", "int64_t": "int64", "uint64_t": "uint64", "short": "int16",
            "ushort": "uint16", "int16_t": "int16", "uint16_t": "uint16", "int8_t": "int8",
            "uint8_t": "uint8", "float16_t": "float16"}
_VECTOR_BASES = {"vec": "float", "dvec": "double", "ivec": "int", "uvec": "uint",
                 "f16vec": "half", "i64vec": "int64_t", "u64vec": "uint64_t",
                 "i16vec": "int16_t", "u16vec": "uint16_t", "i8vec": "int8_t",
                 "u8vec": "uint8_t"}


def is_spirv(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack_from("<I", data)[0] == SPIRV_MAGIC


@dataclass(frozen=True)
class Buffer:
    """A storage buffer: one descriptor (set, binding), which several blocks of the shader may
    declare (a matmul reads one buffer as floats and as vec4s). |name| joins their names
    (``"A|A4"``); |dtype| is their element type when they agree, else None (untyped)."""

    name: str
    set: int
    binding: int
    dtype: str | None  # None: an untyped buffer (its element is a struct, or the blocks differ)


@dataclass(frozen=True)
class Scalar:
    name: str
    offset: int
    dtype: str


@dataclass(frozen=True)
class EntryPoint:
    """A compute entry point's interface, as reflection reads it from the SPIR-V."""

    name: str
    buffers: tuple[Buffer, ...]  # in (set, binding) order
    scalars: tuple[Scalar, ...]  # the push-constant block's members, in offset order
    push_constant_size: int


def _run_reflect(spirv: bytes, entry: str | None, what: str) -> dict[str, Any]:
    spirv_cross = tool("spirv-cross", "spirv-cross")
    with tempfile.TemporaryDirectory(prefix="modpack-spirv-") as work:
        path = Path(work) / "shader.spv"
        path.write_bytes(spirv)
        command = [spirv_cross, str(path), "--reflect"]
        if entry is not None:
            command += ["--entry", entry, "--stage", "comp"]
        proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"{what}: spirv-cross --reflect cannot read the SPIR-V:\n"
                           f"{(proc.stdout + proc.stderr).strip()}")
    try:
        reflection: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise CompileError(f"{what}: spirv-cross --reflect printed no JSON") from None
    return reflection


def _scalar(type_name: str, where: str) -> str:
    if type_name in _SCALARS:
        return _SCALARS[type_name]
    raise ArgumentError(f"{where} has type {type_name}: modpack passes scalars by push constant "
                        f"(one of {', '.join(sorted(set(_SCALARS)))}); split vectors and "
                        "structs into scalar members")


def _element(types: dict[str, Any], block: dict[str, Any]) -> str | None:
    """A storage buffer's element dtype: that of its one runtime array member (a vector's
    component), else None (an untyped buffer)."""
    members = block.get("members", [])
    if len(members) != 1 or not members[0].get("array"):
        return None
    base = members[0]["type"]
    for prefix, scalar in _VECTOR_BASES.items():
        if base.startswith(prefix) and base[len(prefix):].isdigit():
            base = scalar
    return _SCALARS.get(base)


def reflect(spirv: bytes, what: str) -> list[EntryPoint]:
    """Every GLCompute entry point of |spirv| with its interface, in name order."""
    overview = _run_reflect(spirv, None, what)
    names = sorted(e["name"] for e in overview.get("entryPoints", []) if e.get("mode") == "comp")
    if not names:
        raise ArgumentError(f"{what}: the SPIR-V has no compute entry point (a compute shader: "
                            "`layout(local_size_x = ...) in;`)")
    return [_entry_point(_run_reflect(spirv, name, what), name, f"{what}, entry point {name}")
            for name in names]


def _entry_point(info: dict[str, Any], name: str, where: str) -> EntryPoint:
    types = info.get("types", {})
    unsupported = [kind for kind in ("ubos", "textures", "images", "separate_images",
                                     "separate_samplers", "acceleration_structures")
                   if info.get(kind)]
    if unsupported:
        raise ArgumentError(f"{where}: uses {', '.join(unsupported)}; Vulkan kernels take storage "
                            "buffers and push constants only")
    buffers = _buffers(info.get("ssbos", []), types, where)
    scalars: list[Scalar] = []
    size = 0
    for block in info.get("push_constants", []):
        block_type = types[block["type"]]
        for member in block_type.get("members", []):
            if member.get("array"):
                raise ArgumentError(f"{where}: push-constant member {member['name']} is an "
                                    "array; modpack passes scalars")
            dtype = _scalar(member["type"], f"{where}: push-constant member {member['name']}")
            scalars.append(Scalar(member["name"], member["offset"], dtype))
            size = max(size, member["offset"] + _itemsize(dtype))
    size = (size + 3) // 4 * 4
    return EntryPoint(name, tuple(buffers),
                      tuple(sorted(scalars, key=lambda s: s.offset)), size)


def _buffers(ssbos: list[dict[str, Any]], types: dict[str, Any], where: str
             ) -> tuple[Buffer, ...]:
    """The storage buffers in (set, binding) order, one per descriptor: blocks declared on one
    set and binding are one buffer, as the descriptor the host binds there is one."""
    by_slot: dict[tuple[int, int], list[tuple[str, str | None]]] = {}
    for b in ssbos:
        if b.get("array"):
            raise ArgumentError(f"{where}: storage buffer {b['name']} is an array of "
                                f"{b['array'][0] or 'a runtime number of'} descriptors; a Vulkan "
                                "kernel takes one buffer per binding")
        slot = (b.get("set", 0), b.get("binding", 0))
        by_slot.setdefault(slot, []).append((b["name"], _element(types, types[b["type"]])))
    buffers = []
    for (set_, binding), blocks in sorted(by_slot.items()):
        dtypes = {dtype for _, dtype in blocks}
        buffers.append(Buffer("|".join(sorted(name for name, _ in blocks)), set_, binding,
                              dtypes.pop() if len(dtypes) == 1 else None))
    return tuple(buffers)


def _itemsize(dtype: str) -> int:
    return int("".join(ch for ch in dtype if ch.isdigit())) // 8
