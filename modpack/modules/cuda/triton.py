"""Triton kernels as a ``cuda`` module: what ``triton.compile`` returns goes in as it is.

A compiled Triton kernel is a cubin (and its PTX) for one target, with metadata that Triton's
own launcher applies at every launch: the block is ``32 * num_warps`` threads, ``shared``
bytes of dynamic shared memory, and two trailing pointer parameters the kernel declares
beyond the user's (global and profiling scratch) are NULL when their sizes are 0. Here that
metadata becomes the kernel's record: the block size and shared memory are fixed values, the
hidden pointers ``null`` arguments, so a call passes the user's arguments and the grid, as
``kernel[grid](...)`` does. Each compiled kernel brings its own images; they become variants
that define that kernel only.

Triton itself is not imported: the compiled objects are read through what they carry
(``asm``, ``metadata``, ``src.signature``), so modpack works with or without it installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import ArgumentError
from ..kernel_info import UNTYPED_POINTER, KernelArg, KernelInfo
from .module import CUDAModule, PTXCheck
from .ptx import infos_from_ptx, ptx_entries, ptx_target
from .variants import CUDAVariant, variant_from_bytes

__all__ = ["from_triton"]

GRID = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_DTYPES = {
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u1": "bool", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz",
}


def from_triton(kernels: Any, *, name: str | None = None, ptx: bool = True) -> CUDAModule:
    """A ``cuda`` module from compiled Triton kernels (what ``triton.compile`` returns).

    kernels : one compiled kernel, several (the same kernel for several targets, and other
        kernels), or a mapping from the name to call a kernel by to one compiled kernel or
        several (one per target) — needed when two kernels share a Triton name, such as
        one ``@triton.jit`` function compiled with two ``BLOCK`` values.

    name : the module's name (kernels are then also found as ``"name/kernel"``).

    ptx : also carry each kernel's PTX, which the driver compiles for GPUs newer than the
        cubins' targets (not for architecture-specific targets such as sm_90a, whose PTX
        runs on that architecture only).

    Each kernel is called with its (non-constexpr) arguments followed by the grid x, y, z;
    the block size (``32 * num_warps``), the dynamic shared memory and the hidden scratch
    pointers come from the compiled kernel. Kernels that need what a plain launch cannot
    give (global scratch memory, thread-block clusters, cooperative launches, TMA
    descriptors) are refused with the reason.
    """
    variants: list[CUDAVariant] = []
    checks: list[PTXCheck] = []
    records: dict[str, KernelInfo] = {}
    seen: set[tuple[str, str]] = set()
    for given_name, compiled in _named(kernels):
        info, cubin_key, ptx_text = _read(given_name, compiled)
        record_name, where = info.name, f"Triton kernel {info.name}"
        if (record_name, cubin_key) in seen:
            raise ArgumentError(f"{where} is given twice for {cubin_key}: name the different "
                                "compilations, from_triton({'add_1024': k1, 'add_256': k2})")
        seen.add((record_name, cubin_key))
        earlier = records.get(record_name)
        if earlier is not None and (earlier.args, earlier.symbol) != (info.args, info.symbol):
            raise ArgumentError(f"{where}: the compilations disagree ({earlier.signature()} and "
                                f"{info.signature()}); name them apart with a mapping")
        if earlier is not None and earlier.fixed.get("threadIdx.x") != info.fixed["threadIdx.x"]:
            raise ArgumentError(f"{where}: the compilations use different num_warps; name them "
                                "apart with a mapping")
        if earlier is not None:  # the most shared memory any target's compilation needs
            shared = max(earlier.fixed.get("dyn_shared_memory", 0),
                         info.fixed.get("dyn_shared_memory", 0))
            info = KernelInfo(info.name, info.args, info.launch_tags, info.symbol,
                              {**info.fixed, **({"dyn_shared_memory": shared} if shared else {})})
        records[record_name] = info
        binary = variant_from_bytes(cubin_key, bytes(compiled.asm["cubin"]))
        variants.append(CUDAVariant(binary.kind, binary.arches, binary.data, (record_name,)))
        text = variant_from_bytes("ptx", ptx_text)
        if ptx and not text.arch.endswith("a"):  # PTX for sm_90a runs on 9.0 only: no gain
            variants.append(CUDAVariant("ptx", text.arches, text.data, (record_name,)))
        else:
            checks.append((f"{record_name} {cubin_key} PTX", ptx_text.encode(), (record_name,)))
    if not records:
        raise ArgumentError("from_triton needs at least one compiled kernel")
    return CUDAModule(variants, list(records.values()), checks, name=name)


def _named(kernels: Any) -> Iterable[tuple[str | None, Any]]:
    """(the name to call it by, or None for its Triton name; a compiled kernel) pairs."""
    if isinstance(kernels, Mapping):
        for key, value in kernels.items():
            if not isinstance(key, str):
                raise ArgumentError(f"from_triton: kernel names must be str, got {key!r}")
            for compiled in _many(value):
                yield key, compiled
        return
    for compiled in _many(kernels):
        yield None, compiled


def _many(value: Any) -> list[Any]:
    if hasattr(value, "asm"):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        items = list(value)
        bad = [v for v in items if not hasattr(v, "asm")]
        if not bad:
            return items
        value = bad[0]
    raise ArgumentError(f"from_triton takes compiled Triton kernels (what triton.compile returns), "
                        f"got {type(value).__name__}")


def _read(given_name: str | None, compiled: Any) -> tuple[KernelInfo, str, str]:
    """The record (named |given_name|, else by its Triton name), the cubin's arch key
    ("sm_90a") and the PTX of one compiled kernel."""
    md = compiled.metadata
    symbol = getattr(md, "name", None) or compiled.name
    record_name = given_name or symbol
    where = f"Triton kernel {record_name}"
    target = getattr(md, "target", None)
    backend = getattr(target, "backend", "cuda")
    if backend != "cuda":
        raise ArgumentError(f"{where} is compiled for {backend}, not CUDA")
    for field, what in (("global_scratch_size", "global scratch memory"),
                        ("profile_scratch_size", "profiling scratch memory")):
        if getattr(md, field, 0):
            raise ArgumentError(f"{where} needs {getattr(md, field)} bytes of {what} per program, "
                                "which Triton's launcher allocates at each launch; modpack "
                                "launches it with NULL and cannot package it")
    if getattr(md, "num_ctas", 1) != 1:
        raise ArgumentError(f"{where} uses thread-block clusters (num_ctas={md.num_ctas}), "
                            "which a plain launch cannot give; compile it with num_ctas=1")
    if getattr(md, "launch_cooperative_grid", False):
        raise ArgumentError(f"{where} needs a cooperative launch, which modpack does not make")
    if getattr(md, "tensordesc_meta", None):
        raise ArgumentError(f"{where} takes TMA tensor descriptors, which modpack cannot pass")
    asm = compiled.asm
    if "cubin" not in asm or "ptx" not in asm:
        raise ArgumentError(f"{where} has no cubin and PTX (asm keys: {sorted(asm)})")
    ptx_text = asm["ptx"] if isinstance(asm["ptx"], str) else bytes(asm["ptx"]).decode()
    params = ptx_entries(ptx_text).get(symbol)
    if params is None:
        raise ArgumentError(f"{where}: its PTX does not define {symbol}")
    visible = _visible_args(compiled, ptx_text, symbol, where)
    hidden = len(params) - len(visible)
    if hidden < 0 or any(p.size != 8 or p.array for p in params[len(visible):]):
        raise ArgumentError(f"{where}: its PTX has {len(params)} parameters, which do not "
                            f"match the {len(visible)} of its signature and pointers after them")
    fixed = {"threadIdx.x": 32 * int(md.num_warps)}
    if getattr(md, "shared", 0):
        fixed["dyn_shared_memory"] = int(md.shared)
    info = KernelInfo(record_name, (*visible, *(KernelArg.parse("null void*"),) * hidden), GRID,
                      symbol=symbol, fixed=fixed)
    return info, "sm" + ptx_target(ptx_text).removeprefix("compute"), ptx_text


def _visible_args(compiled: Any, ptx_text: str, symbol: str, where: str) -> list[KernelArg]:
    """The user's parameters, from the signature the kernel was compiled with (constexprs
    dropped), else from the PTX (pointers untyped)."""
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, Mapping):
        [info] = [i for i in infos_from_ptx(ptx_text, where) if i.name == symbol]
        hidden = int(hasattr(compiled.metadata, "global_scratch_size")) + int(
            hasattr(compiled.metadata, "profile_scratch_size"))
        return list(info.args[:len(info.args) - hidden])
    args = []
    for param, kind in signature.items():
        if kind == "constexpr":
            continue
        if not isinstance(kind, str):
            raise ArgumentError(f"{where}: parameter {param} has type {kind!r}; tuples and tensor "
                                "descriptors cannot be passed")
        pointer = kind.startswith("*")
        dtype = _DTYPES.get(kind.lstrip("*k"))
        if pointer:
            args.append(_typed_pointer(dtype))
        elif dtype is None:
            raise ArgumentError(f"{where}: parameter {param} has Triton type {kind!r}, which "
                                "modpack cannot pass")
        else:
            args.append(KernelArg.parse(dtype))
    return args


def _typed_pointer(dtype: str | None) -> KernelArg:
    """A buffer of |dtype|, or untyped when numpy has no such dtype (fp8 without ml_dtypes)."""
    if dtype is None:
        return UNTYPED_POINTER
    try:
        return KernelArg.parse(f"{dtype}*")
    except ValueError:
        return UNTYPED_POINTER
