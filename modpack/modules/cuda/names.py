"""C++ kernels by name expression: ``"gemm<float, 128>"`` or ``"ops::softmax"`` for kernels
that are templates or lack ``extern "C"``, as CUDA C++ libraries write them (how an expression
finds its symbol, with NVRTC, nvcc, or in binaries: :mod:`modpack.modules.cxx_names`).

A record keeps the expression as its name (what callers look up) and the lowered, mangled
symbol the compiled code defines. NVRTC lowers expressions itself (``nvrtcAddNameExpression``);
nvcc instantiates them by their addresses taken in host code and names their symbols in a probe
compile. Demangled signatures also give the parameter types, so template kernels need no
``functions=``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...compat import zip_strict
from ...errors import ArgumentError
from ...toolchain.demangle import demangle
from ..cxx_names import (
    check_name_expressions,
    instantiation_source,
    lower_by_demangled,
    split_signature,
)
from ..kernel_info import KernelInfo
from .records import LAUNCH_TAGS
from .signatures import parse_cuda_param

__all__ = ["check_name_expressions", "instantiation_source", "lower_from_ptx",
           "records_from_symbols", "split_signature"]


def records_from_symbols(symbols: Mapping[str, str], launch_tags: Sequence[str] = LAUNCH_TAGS,
                         what: str = "cuda_module") -> list[KernelInfo]:
    """A record per name -> C++ symbol, its arguments from the demangled signature (whose
    types the compiler resolved: ``floatX`` reads ``__nv_bfloat16``)."""
    records = []
    lowered = list(symbols.values())
    for (expr, symbol), text in zip_strict(symbols.items(), demangle(lowered)):
        try:
            _, params = split_signature(text)
            args = tuple(parse_cuda_param(expr, p, named=False) for p in params)
        except ValueError as exc:
            raise ArgumentError(f"{what}: kernel {expr} ({symbol}): {exc}") from None
        records.append(KernelInfo(expr, args, tuple(launch_tags), symbol=symbol))
    return records


def lower_from_ptx(expressions: Sequence[str], entries: Iterable[str]) -> dict[str, str]:
    """Each expression's symbol among the PTX |entries| of binaries compiled elsewhere, matched
    by demangled name (spaces ignored: ``"k<float,2>"`` is ``"k<float, 2>"``), or by signature
    for one of several overloads."""
    return lower_by_demangled(expressions, entries, "the PTX")
