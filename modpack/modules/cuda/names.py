"""C++ kernels by name expression: ``"gemm<float, 128>"`` or ``"ops::softmax"`` for kernels
that are templates or lack ``extern "C"``, as CUDA C++ libraries write them.

A record keeps the expression as its name (what callers look up) and the lowered, mangled
symbol the compiled code defines. NVRTC lowers expressions itself (``nvrtcAddNameExpression``);
for nvcc the expressions are instantiated by taking their addresses in host code, and matched
to the PTX ``.entry`` symbols by their demangled names. Demangled signatures also give the
parameter types, so template kernels need no ``functions=``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ...compat import zip_strict
from ...errors import ArgumentError, ModpackError
from ...toolchain.demangle import demangle
from ..kernel_info import KernelInfo
from .records import LAUNCH_TAGS
from .signatures import parse_cuda_param

__all__ = ["check_name_expressions", "instantiation_source", "lower_from_ptx",
           "records_from_symbols", "split_signature"]


def check_name_expressions(expressions: Iterable[str]) -> list[str]:
    """The expressions, stripped, each a non-empty str and given once."""
    if isinstance(expressions, (str, bytes)):
        raise ArgumentError("name_expressions must be a list such as ['gemm<float, 128>'], not a "
                            "str")
    out = []
    for expr in expressions:
        if not isinstance(expr, str) or not expr.strip():
            raise ArgumentError(f"name_expressions: {expr!r} is not a C++ name expression such as "
                                "'gemm<float, 128>'")
        out.append(expr.strip().removeprefix("&").strip())
    twice = sorted({e for e in out if out.count(e) > 1})
    if twice:
        raise ArgumentError(f"name_expressions has duplicates: {twice}")
    return out


def instantiation_source(source: str, expressions: Sequence[str]) -> str:
    """|source| with the address of each expression taken in host code, which makes nvcc
    instantiate (and emit) every listed kernel."""
    refs = ", ".join(f"(const void*)&{e}" for e in expressions)
    return (f"{source}\n\n/* added by modpack: instantiate the name expressions */\n"
            f"static const void* const modpack_name_expressions[] __attribute__((unused)) = "
            f"{{{refs}}};\n")


def split_signature(demangled: str) -> tuple[str, list[str]]:
    """``"void ns::k<float, 2>(float*, int)"`` -> ``("ns::k<float, 2>", ["float*", "int"])``."""
    text = demangled.strip()
    if not text.endswith(")"):
        raise ArgumentError(f"{demangled!r} is not a function signature")
    depth, start = 0, -1
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            start = i
            break
    if start <= 0:
        raise ArgumentError(f"{demangled!r} is not a function signature")
    name, params = text[:start].strip(), _split_top_level(text[start + 1:-1])
    # Template functions demangle with their return type; kernels return void.
    if "<" in name and name.startswith("void "):
        name = name.removeprefix("void ").strip()
    return name, [] if params == ["void"] else params


def records_from_symbols(symbols: Mapping[str, str]) -> list[KernelInfo]:
    """A record per expression -> lowered symbol, its arguments from the demangled
    signature."""
    records = []
    lowered = list(symbols.values())
    for (expr, symbol), text in zip_strict(symbols.items(), demangle(lowered)):
        try:
            _, params = split_signature(text)
            args = tuple(parse_cuda_param(expr, p, named=False) for p in params)
        except ValueError as exc:
            raise ModpackError(f"cuda_module: kernel {expr} ({symbol}): {exc}") from None
        records.append(KernelInfo(expr, args, LAUNCH_TAGS, symbol=symbol))
    return records


def lower_from_ptx(expressions: Sequence[str], entries: Iterable[str]) -> dict[str, str]:
    """Each expression's symbol among the PTX |entries|, matched by demangled name (spaces
    ignored: ``"k<float,2>"`` is ``"k<float, 2>"``)."""
    entries = list(entries)
    by_name: dict[str, str] = {}
    names = []
    for symbol, text in zip_strict(entries, demangle(entries)):
        name = split_signature(text)[0] if text.endswith(")") else text  # extern "C": as is
        by_name.setdefault(_compact(name), symbol)
        names.append(name)
    lowered = {}
    for expr in expressions:
        symbol = by_name.get(_compact(expr))
        if symbol is None:
            shown = sorted(names)
            raise ModpackError(
                f"name expression {expr!r} matches no kernel nvcc compiled (it has {shown}); "
                "write it as nvcc spells it, or compile with compiler='nvrtc', which lowers "
                "any expression that names the kernel")
        lowered[expr] = symbol
    return lowered


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _split_top_level(text: str) -> list[str]:
    """|text| split at the commas outside <>, () and []."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    last = "".join(current).strip()
    return [*parts, last] if last or parts else []
