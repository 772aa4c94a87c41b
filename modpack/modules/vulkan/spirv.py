"""SPIR-V for the ``vulkan`` kind: each compute entry point's interface read from the SPIR-V by
reflection with ``spirv-cross --reflect`` (Khronos' SPIRV-Cross, Debian's ``spirv-cross``
package): its storage buffers (set, binding, element type) and its push-constant block's
members (offset, type). Nothing is parsed here but the reflection's JSON and the SPIR-V
header's magic number; what reflection does not report or reports wrong (workgroup sizes,
specialization constants, capabilities) is read from the SPIR-V words by :mod:`.spirv_binary`.
"""

from __future__ import annotations

import itertools
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
    raise ArgumentError(f"{where} has type {type_name}: modpack passes push constants as "
                        f"scalars (one of {', '.join(sorted(set(_SCALARS)))}), flattening "
                        "structs, arrays and vectors into them; make it scalars, vectors, "
                        "structs or arrays of these")


def _vector(type_name: str) -> tuple[str, int] | None:
    """A vector type's component type and count (``"uvec3"``: ``("uint", 3)``), else None."""
    for prefix, scalar in _VECTOR_BASES.items():
        count = type_name[len(prefix):]
        if type_name.startswith(prefix) and count.isdigit():
            return scalar, int(count)
    return None


def _flatten(types: dict[str, Any], type_key: str, offset: int, prefix: str, where: str,
             out: list[Scalar]) -> None:
    """The members of struct |type_key| at |offset| as scalars named by their path in the
    source (``pc.inner.dims[1]``, a vector's components ``.x`` to ``.w``), into |out|."""
    for member in types[type_key].get("members", []):
        name = f"{prefix}.{member['name']}" if prefix else member["name"]
        sizes = list(reversed(member.get("array", [])))  # outermost first
        if not all(member.get("array_size_is_literal", [True] * len(sizes))) or 0 in sizes:
            raise ArgumentError(f"{where}: push-constant member {name} is an array whose size "
                                "is not a literal (a specialization constant, or runtime-sized); "
                                "give it a fixed size")
        # Each dimension's stride, from the outermost one's: an array's size is count x stride.
        strides = [member.get("array_stride", 0)] if sizes else []
        for count in sizes[1:]:
            strides.append(strides[-1] // count)
        for index in itertools.product(*(range(n) for n in sizes)):
            at = offset + member["offset"] + sum(i * st for i, st in zip(index, strides))
            _flatten_value(types, member, at, name + "".join(f"[{i}]" for i in index), where, out)


def _flatten_value(types: dict[str, Any], member: dict[str, Any], at: int, name: str,
                   where: str, out: list[Scalar]) -> None:
    type_name = member["type"]
    if type_name in types:  # a struct, named by SPIRV-Cross's id for it: never shown
        _flatten(types, type_name, at, name, where, out)
        return
    vector = _vector(type_name)
    if vector is not None and vector[1] <= 4 and "matrix_stride" not in member:
        dtype = _scalar(vector[0], f"{where}: push-constant member {name}")
        for i in range(vector[1]):
            out.append(Scalar(f"{name}.{'xyzw'[i]}", at + i * _itemsize(dtype), dtype))
        return
    out.append(Scalar(name, at, _scalar(type_name, f"{where}: push-constant member {name}")))


def _element(types: dict[str, Any], block: dict[str, Any]) -> str | None:
    """A storage buffer's element dtype: that of its one runtime array member (a vector's
    component), else None (an untyped buffer)."""
    members = block.get("members", [])
    if len(members) != 1 or not members[0].get("array"):
        return None
    base = members[0]["type"]
    vector = _vector(base)
    return _SCALARS.get(vector[0] if vector else base)


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
    for block in info.get("push_constants", []):
        _flatten(types, block["type"], 0, block.get("name") or "", where, scalars)
    size = max((s.offset + _itemsize(s.dtype) for s in scalars), default=0)
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
