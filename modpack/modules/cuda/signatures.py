"""Kernel records from CUDA C++ source: the ``__global__`` signatures, their parameter types
mapped to dtypes."""

from __future__ import annotations

import re
from collections.abc import Container

from ...errors import ArgumentError
from ...runtime.dtypes import ML_DTYPES_HINT, as_dtype
from ..kernel_info import BUFFER, SCALAR, UNTYPED_POINTER, KernelArg, KernelInfo
from .records import LAUNCH_TAGS

__all__ = ["parse_cuda_param", "parse_cuda_signatures"]

_CUDA_TYPES = {
    "float": "float32", "double": "float64", "half": "float16", "__half": "float16",
    "bool": "bool", "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "short int": "int16", "unsigned short": "uint16",
    "unsigned short int": "uint16", "int": "int32", "signed": "int32", "signed int": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "long": "int64", "long int": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64", "long long": "int64",
    "long long int": "int64", "unsigned long long": "uint64", "unsigned long long int": "uint64",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
    "size_t": "uint64", "ptrdiff_t": "int64", "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    # HIP's, and clang's own as demangled symbols spell them.
    "_Float16": "float16", "__fp16": "float16", "__hip_bfloat16": "bfloat16",
    "hip_bfloat16": "bfloat16", "__bf16": "bfloat16",
}
_CUDA_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict",
                    "__grid_constant__"}
_GLOBAL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(?P<name>\w+)\s*\((?P<params>[^)]*)\)", re.S)


def parse_cuda_signatures(source: str, names: Container[str] | None = None
                          ) -> list[KernelInfo]:
    """Records from the ``__global__`` kernels in CUDA C++ |source| (template kernels are
    skipped: they have no single signature); only those in |names| when given."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.S)
    infos: list[KernelInfo] = []
    for m in _GLOBAL.finditer(code):
        before = code[:m.start()]
        cut = max(before.rfind(";"), before.rfind("}"), before.rfind("{"))
        if re.search(r"\btemplate\s*<", before[cut + 1:]):
            continue
        if names is not None and m["name"] not in names:
            continue
        params = [p.strip() for p in m["params"].split(",")]
        params = [p for p in params if p and p != "void"]
        info = KernelInfo(m["name"], tuple(parse_cuda_param(m["name"], p) for p in params),
                          LAUNCH_TAGS)
        earlier = next((i for i in infos if i.name == info.name), None)
        if earlier is None:
            infos.append(info)
        elif earlier != info:  # a declaration and its definition must agree
            raise ArgumentError(f"kernel {info.name} is declared as {earlier.signature()} and as "
                                f"{info.signature()}")
    return infos


def parse_cuda_param(kernel: str, param: str, named: bool = True) -> KernelArg:
    """A parameter declaration (``"const float* __restrict__ x"``; without the name when not
    |named|, as in demangled signatures) as a record argument."""
    text = re.sub(r"=.*$", "", param)  # default arguments
    tokens = text.replace("*", " * ").replace("&", " & ").split()
    if "&" in tokens:
        raise ArgumentError(f"kernel {kernel}: parameter {param!r} is a reference; kernels take "
                            "pointers and numbers")
    stars = tokens.count("*")
    words = [t for t in tokens if t not in _CUDA_QUALIFIERS and t != "*"]
    words = [w.removeprefix("std::") for w in words]
    type_words = words[:-1] if named and len(words) > 1 else words
    base = " ".join(type_words)
    if stars > 1:
        raise ArgumentError(f"kernel {kernel}: parameter {param!r} is a pointer to a pointer, "
                            "which modpack cannot pass; pass functions= or change the kernel")
    if stars == 1 and base == "void":
        return UNTYPED_POINTER
    if base not in _CUDA_TYPES:
        raise ArgumentError(
            f"kernel {kernel}: cannot map parameter {param!r} (type {base!r}) to a dtype; "
            "pass functions= with explicit argument specs (e.g. 'float32*', 'int32', 'void*')"
        )
    try:
        dtype = as_dtype(_CUDA_TYPES[base])
    except TypeError:
        raise ArgumentError(f"kernel {kernel}: parameter {param!r} needs the ml_dtypes package "
                            f"for its dtype: {ML_DTYPES_HINT}") from None
    return KernelArg(BUFFER if stars else SCALAR, dtype)
