"""PTX text: its target, its kernels (``.entry``) and their parameters, kernel records derived
from them, and records checked against them (PTX names no pointee types, but it does fix each
parameter's size)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...compat import zip_strict
from ...errors import ArgumentError
from ..kernel_info import BUFFER, NULL, SCALAR, UNTYPED_POINTER, KernelArg, KernelInfo
from .records import LAUNCH_TAGS

__all__ = ["PTXParam", "check_against_ptx", "infos_from_ptx", "ptx_entries", "ptx_target",
           "ptx_text"]


@dataclass(frozen=True)
class PTXParam:
    type: str  # "u64", "f32", "b8", ...
    size: int  # bytes
    array: bool  # declared as .b8 name[N] (a struct or half passed by value)


_PTX_ENTRY = re.compile(r"\.entry\s+(?P<name>[\w$%]+)\s*\((?P<params>[^)]*)\)", re.S)
_PTX_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?(?:\.ptr\s+(?:\.\w+\s+)*)?"
                        r"\.(?P<type>[a-z]+)(?P<bits>\d+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?"
                        r"[\w$%]+\s*(?:\[(?P<count>\d+)\])?")
_PTX_TARGET = re.compile(r"^\s*\.target\s+(?P<sm>sm_\d{2,3}[af]?)", re.M)


def ptx_text(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    return bytes(data).rstrip(b"\0").decode("utf-8", "replace")


def ptx_target(ptx: bytes | str) -> str:
    """The PTX's architecture as a ``compute_XY`` name, from its ``.target sm_XY``."""
    m = _PTX_TARGET.search(ptx_text(ptx))
    if m is None:
        raise ArgumentError("PTX text without a .target directive")
    return "compute_" + m["sm"][3:]


def ptx_entries(ptx: bytes | str) -> dict[str, list[PTXParam]]:
    """Each ``.entry`` (kernel) of the PTX with its parameters, in order."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", ptx_text(ptx), flags=re.S)
    entries = {}
    for m in _PTX_ENTRY.finditer(code):
        params = []
        for text in (p.strip() for p in m["params"].split(",")):
            if not text:
                continue
            p = _PTX_PARAM.match(text)
            if p is None:
                raise ArgumentError(f"PTX entry {m['name']}: cannot read parameter {text!r}")
            count = int(p["count"]) if p["count"] else 1
            params.append(PTXParam(p["type"] + p["bits"], int(p["bits"]) // 8 * count,
                                   p["count"] is not None))
        entries[m["name"]] = params
    return entries


_PTX_SCALARS = {
    "u8": "uint8", "s8": "int8", "b8": "uint8", "u16": "uint16", "s16": "int16",
    "b16": "uint16", "f16": "float16", "u32": "uint32", "s32": "int32", "b32": "uint32",
    "f32": "float32", "f64": "float64",
}


def infos_from_ptx(ptx: bytes | str, where: str) -> list[KernelInfo]:
    """Records derived from PTX alone: 64-bit parameters are pointers (``void*``: PTX records
    neither pointee types nor whether a 64-bit value is a pointer), the rest scalars of the
    PTX type."""
    infos = []
    for name, params in ptx_entries(ptx).items():
        args: list[KernelArg] = []
        for i, p in enumerate(params):
            if p.array:
                raise ArgumentError(
                    f"{where}: kernel {name} parameter {i} is passed by value as {p.size} bytes "
                    "(a struct or half), which cannot be derived from PTX; pass functions="
                )
            if p.size == 8 and p.type[0] in "usb":
                args.append(UNTYPED_POINTER)
            elif p.type in _PTX_SCALARS:
                args.append(KernelArg(SCALAR, np.dtype(_PTX_SCALARS[p.type])))
            else:
                raise ArgumentError(f"{where}: kernel {name} parameter {i} has PTX type .{p.type}; "
                                    "pass functions=")
        infos.append(KernelInfo(name, tuple(args), LAUNCH_TAGS))
    return infos


def check_against_ptx(info: KernelInfo, entries: Mapping[str, list[PTXParam]],
                      where: str) -> None:
    """Refuse a record whose parameters disagree with the compiled kernel's ``.entry``."""
    symbol = info.symbol or info.name
    params = entries.get(symbol)
    if params is None:
        mangled = [e for e in entries if info.name in e]
        hint = (f"; the PTX has {mangled[0]}, a C++-mangled name: declare the kernel "
                f"extern \"C\" or list it in name_expressions=['{info.name}']" if mangled
                else f"; the PTX defines {sorted(entries) or 'none'}")
        raise ArgumentError(f"{where}: kernel {info.name} ({symbol}) is not in the compiled "
                            f"PTX{hint}" if info.symbol else
                            f"{where}: kernel {info.name} is not in the compiled PTX{hint}")
    if len(params) != len(info.args):
        raise ArgumentError(
            f"{where}: kernel {info.name} has {len(info.args)} parameters in its record "
            f"({info.signature()}) but {len(params)} in the compiled PTX "
            f"({', '.join('.' + p.type for p in params)})"
        )
    for i, (arg, p) in enumerate(zip_strict(info.args, params)):
        want = 8 if arg.kind in (BUFFER, NULL) else arg.dtype.itemsize
        float_mismatch = (arg.kind == SCALAR and p.type.startswith("f")
                          and arg.dtype.kind != "f")
        if p.size != want or float_mismatch:
            raise ArgumentError(
                f"{where}: kernel {info.name} parameter {i} is {arg} ({want} bytes) in its "
                f"record but .{p.type}{f'[{p.size}]' if p.array else ''} ({p.size} bytes) in "
                "the compiled PTX; fix functions= or the kernel's signature"
            )
