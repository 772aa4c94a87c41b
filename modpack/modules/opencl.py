"""The ``opencl`` kind: OpenCL C source plus a function-info record per kernel.

Stored as source (portable; programs are built lazily per device at the first call, and
PoCL/driver caches make rebuilds cheap), optionally with prebuilt program binaries keyed by
``"platform/device/driver"`` that the runtime uses when they match the device. Read by the C
runtime's ``loadbinary_opencl`` (csrc/src/kinds/opencl/); the payload's layout and numbers are
in csrc/include/modpack/kinds/opencl.h, read here through the runtime binding.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..format.layout import check_struct
from ..runtime.binding import lib
from .base import BinaryModule
from .kernel_info import BUFFER, SCALAR, KernelArg, KernelInfo, kernel_infos, launch_tags

__all__ = [
    "LAUNCH_TAGS",
    "OpenCLModule",
    "opencl_binaries",
    "opencl_module",
    "parse_kernel_signatures",
]

LAUNCH_TAGS = launch_tags("opencl")  # global x, y, z, local x, y, z
_HEADER = check_struct(struct.Struct("<IIQ"), "mp_opencl_header_v1_t")

_CL_TYPES = {
    "char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16",
    "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64",
    "float": "float32", "double": "float64", "half": "float16", "bool": "bool",
    "unsigned char": "uint8", "unsigned short": "uint16", "unsigned int": "uint32",
    "unsigned long": "uint64", "signed char": "int8", "unsigned": "uint32",
}
_QUALIFIERS = {"__global", "global", "const", "__const", "__constant", "constant", "restrict",
               "__restrict", "volatile", "__read_only", "__write_only"}
_KERNEL = re.compile(r"\b(?:__kernel|kernel)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+"
                     r"(?P<name>\w+)\s*\((?P<params>[^)]*)\)", re.S)


def parse_kernel_signatures(source: str) -> list[KernelInfo]:
    """Function-info records from the ``__kernel`` signatures in OpenCL C |source|."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.S)
    infos = []
    for m in _KERNEL.finditer(code):
        args = []
        params = [p.strip() for p in m["params"].split(",") if p.strip() and p.strip() != "void"]
        for param in params:
            args.append(_parse_param(m["name"], param))
        infos.append(KernelInfo(m["name"], tuple(args), LAUNCH_TAGS))
    return infos


def _parse_param(kernel: str, param: str) -> KernelArg:
    tokens = param.replace("*", " * ").split()
    if any(t in ("__local", "local") for t in tokens):
        raise ValueError(
            f"kernel {kernel}: parameter {param!r} is __local memory, which cannot be derived "
            "automatically; pass functions= for this module"
        )
    pointer = "*" in tokens
    words = [t for t in tokens if t not in _QUALIFIERS and t != "*"]
    type_words = words[:-1] if len(words) > 1 else words
    base = " ".join(type_words)
    if base not in _CL_TYPES:
        raise ValueError(
            f"kernel {kernel}: cannot map parameter {param!r} (type {base!r}) to a dtype; "
            "pass functions= with explicit argument specs"
        )
    return KernelArg(BUFFER if pointer else SCALAR, np.dtype(_CL_TYPES[base]))


class OpenCLModule(BinaryModule):
    """OpenCL kernels carried in the library and run through the runtime's OpenCL device."""

    type_key = "opencl"

    def __init__(self, source: str, functions: Mapping[str, Any] | Iterable[KernelInfo] | None,
                 binaries: Mapping[str, bytes] | None = None) -> None:
        super().__init__()
        if not isinstance(source, str):
            raise TypeError("opencl_module expects OpenCL C source as a str")
        self.source = source
        if functions is None:
            self.functions = parse_kernel_signatures(source)
            if not self.functions:
                raise ValueError("no __kernel functions found in the OpenCL source")
        else:
            self.functions = kernel_infos(functions, LAUNCH_TAGS)
        for info in self.functions:
            bad = [t for t in info.launch_tags if t not in LAUNCH_TAGS]
            if bad:
                raise ValueError(
                    f"kernel {info.name}: unknown launch tags {bad}; use {LAUNCH_TAGS}"
                )
        self.binaries = dict(binaries or {})

    def save_to_binary(self) -> bytes:
        source = self.source.encode()
        parts = [_HEADER.pack(lib.MP_OPENCL_PAYLOAD_VERSION, 0, len(source)), source,
                 struct.pack("<I", len(self.functions))]
        parts += [f.encode() for f in self.functions]
        parts.append(struct.pack("<I", len(self.binaries)))
        for key, data in self.binaries.items():
            k = key.encode()
            parts += [struct.pack("<I", len(k)), k, struct.pack("<Q", len(data)), bytes(data)]
        return b"".join(parts)


def opencl_module(source: str, functions: Mapping[str, Any] | Iterable[KernelInfo] | None = None,
                  binaries: Mapping[str, bytes] | None = None) -> OpenCLModule:
    """An OpenCL module. Each kernel is called with its arguments followed by six integers:
    global x, y, z and local x, y, z (local 0 lets the runtime choose).

    functions : per-kernel argument specs (``{"vadd": ["float32*", "float32*", "int32"]}``);
        derived from the ``__kernel`` signatures when omitted.
    binaries : prebuilt program binaries keyed by ``"platform/device/driver"``
        (see ``modpack.device_name``); used when they match the device, else the source.
    """
    return OpenCLModule(source, functions, binaries)


def opencl_binaries(source: str, devices: Iterable[str] = ("opencl:0",)) -> dict[str, bytes]:
    """Build |source| for each OpenCL device here and return ``{device key: program binary}``,
    ready for ``opencl_module(source, binaries=...)``. A library carrying them skips the
    compile on those devices; elsewhere the runtime builds the source."""
    from ..runtime.array import parse_device
    from ..runtime.binding import check, ffi, lib
    from ..runtime.devices import device_name

    code = source.encode()
    out: dict[str, bytes] = {}
    for device in devices:
        device_type, device_id = parse_device(device)
        if device_type != lib.kDLOpenCL:
            raise ValueError(f"{device!r} is not an OpenCL device")
        size = ffi.new("uint64_t*")
        check(lib.mp_opencl_build_binary(code, len(code), device_id, ffi.NULL, 0, size))
        buffer = ffi.new("uint8_t[]", size[0])
        check(lib.mp_opencl_build_binary(code, len(code), device_id, buffer, size[0], size))
        out[device_name(device)] = ffi.buffer(buffer, size[0])[:]
    return out
