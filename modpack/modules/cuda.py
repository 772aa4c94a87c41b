"""The ``cuda`` kind: CUDA kernels as one or several binary variants plus a function-info
record per kernel.

A module holds variants of the same kernels — SASS (``cubin``) for given architectures, PTX
text, or ``fatbin`` files holding several — built here from CUDA C++ source (with NVRTC from
NVIDIA's PyPI wheels, or with ``nvcc``) or taken as bytes. Read by the C runtime's
``loadbinary_cuda`` (csrc/src/cuda_module.c), which needs no GPU to load the library and picks
the variant for each device at its first launch (the rule is in ``modpack/cuda.h``).

Kernel functions take their arguments — arrays on a CUDA device for pointer parameters,
numbers for scalars — followed by six integers: grid x, y, z (``blockIdx``) and block x, y, z
(``threadIdx``), and, when the record asks for it, the bytes of dynamic shared memory.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CompileError, ModpackError
from .base import BinaryModule
from .kernel_info import BUFFER, SCALAR, UNTYPED_POINTER, KernelArg, KernelInfo, kernel_infos

__all__ = [
    "DEFAULT_TARGETS",
    "LAUNCH_TAGS",
    "SHARED_MEMORY_TAG",
    "UNTYPED_POINTER",
    "CUDAModule",
    "CUDAVariant",
    "cuda_module",
    "detect_kind",
    "fatbin_arches",
    "parse_cuda_signatures",
    "ptx_entries",
    "ptx_target",
]

LAUNCH_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")
SHARED_MEMORY_TAG = "dyn_shared_memory"
# SASS for the common data-center and desktop GPUs, plus PTX that every GPU since Turing can
# JIT-compile (CUDA 13 supports nothing older than sm_75).
DEFAULT_TARGETS = ("sm_80", "sm_90", "compute_75")
INSTALL_HINT = "pip install modpack[cuda]"

_VERSION = 1
_ALIGNMENT = 64
_KINDS = {"cubin": 0, "ptx": 1, "fatbin": 2}
_ARCH = re.compile(r"^(?P<kind>sm|compute)_(?P<number>\d{2,3})(?P<suffix>[af]?)$")
_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"
_EM_CUDA = 190


# ---- arch names and binary kinds ----------------------------------------------------------------


def _check_arch(name: str, what: str) -> re.Match:
    m = _ARCH.match(name) if isinstance(name, str) else None
    if m is None or int(m["number"]) < 10:
        raise ValueError(
            f"{what}: {name!r} is not a CUDA architecture; use sm_XY (SASS, e.g. 'sm_80', "
            "'sm_90a') or compute_XY (PTX, e.g. 'compute_80')"
        )
    return m


def detect_kind(data: bytes) -> str:
    """``"cubin"``, ``"fatbin"`` or ``"ptx"`` from the first bytes; ValueError otherwise."""
    if data[:4] == _ELF_MAGIC:
        return "cubin"
    if data[:4] == _FATBIN_MAGIC:
        return "fatbin"
    head = data[:4096].lstrip()
    if head.startswith((b"//", b".version", b"/*")) and b".target" in data[:65536]:
        return "ptx"
    raise ValueError(
        f"not a CUDA binary: starts with {data[:8].hex(' ')}; expected a cubin (ELF, 7f 45 4c "
        "46), a fatbin (50 ed 55 ba) or PTX text (.version / .target)"
    )


def cubin_arch(data: bytes) -> int:
    """The SM number a cubin was built for (80 for sm_80), from its ELF header."""
    if len(data) < 52 or data[:4] != _ELF_MAGIC or data[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        raise ValueError(f"ELF file for machine {machine}, not a CUDA cubin (EM_CUDA = 190)")
    (flags,) = struct.unpack_from("<I", data, 48)
    return (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF


def fatbin_arches(data: bytes) -> list[str]:
    """The variants inside a fatbin, in order: ``["sm_80", "sm_90a", "compute_90"]``.

    Reads the (undocumented, stable since CUDA 4) fatbin container: a 16-byte header
    ``<IHHQ`` magic, version, header size, payload size; then entries whose headers start
    ``<HHIQ`` kind (1 PTX, 2 ELF), version, header size, payload size, with the SM number at
    byte 28 and flags at byte 40 (0x100000: an 'a' target, 0x200000: an 'f' target).
    """
    if len(data) < 16 or data[:4] != _FATBIN_MAGIC:
        raise ValueError("not a fatbin (no 50 ed 55 ba magic)")
    _, _, header_size, size = struct.unpack_from("<IHHQ", data, 0)
    end = header_size + size
    if header_size < 16 or end > len(data):
        raise ValueError(f"fatbin header claims {end} bytes but the data has {len(data)}")
    arches, pos = [], header_size
    while pos < end:
        if pos + 48 > end:
            raise ValueError(f"fatbin entry at byte {pos} is truncated")
        kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, pos)
        (sm,) = struct.unpack_from("<I", data, pos + 28)
        (flags,) = struct.unpack_from("<Q", data, pos + 40)
        if kind not in (1, 2) or entry_header < 48 or sm < 10:
            raise ValueError(f"fatbin entry at byte {pos} is not PTX or ELF (kind {kind})")
        suffix = "a" if flags & 0x100000 else "f" if flags & 0x200000 else ""
        arches.append(f"{'compute' if kind == 1 else 'sm'}_{sm}{suffix}")
        pos += entry_header + entry_size
    if pos != end or not arches:
        raise ValueError("fatbin entries do not add up to its declared size")
    return arches


# ---- PTX ----------------------------------------------------------------------------------------


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
        raise ValueError("PTX text without a .target directive")
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
                raise ValueError(f"PTX entry {m['name']}: cannot read parameter {text!r}")
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


def _infos_from_ptx(ptx: bytes | str, where: str) -> list[KernelInfo]:
    """Records derived from PTX alone: 64-bit parameters are pointers (``void*``: PTX records
    neither pointee types nor whether a 64-bit value is a pointer), the rest scalars of the
    PTX type."""
    infos = []
    for name, params in ptx_entries(ptx).items():
        args: list[KernelArg] = []
        for i, p in enumerate(params):
            if p.array:
                raise ValueError(
                    f"{where}: kernel {name} parameter {i} is passed by value as {p.size} bytes "
                    "(a struct or half), which cannot be derived from PTX; pass functions="
                )
            if p.size == 8 and p.type[0] in "usb":
                args.append(UNTYPED_POINTER)
            elif p.type in _PTX_SCALARS:
                args.append(KernelArg(SCALAR, np.dtype(_PTX_SCALARS[p.type])))
            else:
                raise ValueError(f"{where}: kernel {name} parameter {i} has PTX type .{p.type}; "
                                 "pass functions=")
        infos.append(KernelInfo(name, tuple(args), LAUNCH_TAGS))
    return infos


def check_against_ptx(info: KernelInfo, entries: Mapping[str, list[PTXParam]],
                      where: str) -> None:
    """Refuse a record whose parameters disagree with the compiled kernel's ``.entry``."""
    params = entries.get(info.name)
    if params is None:
        mangled = [e for e in entries if info.name in e]
        hint = (f"; the PTX has {mangled[0]}, a C++-mangled name: declare the kernel "
                "extern \"C\"" if mangled else f"; the PTX defines {sorted(entries) or 'none'}")
        raise ModpackError(f"{where}: kernel {info.name} is not in the compiled PTX{hint}")
    if len(params) != len(info.args):
        raise ModpackError(
            f"{where}: kernel {info.name} has {len(info.args)} parameters in its record "
            f"({info.signature()}) but {len(params)} in the compiled PTX "
            f"({', '.join('.' + p.type for p in params)})"
        )
    for i, (arg, p) in enumerate(zip(info.args, params, strict=True)):
        want = 8 if arg.kind == BUFFER else arg.dtype.itemsize
        float_mismatch = (arg.kind == SCALAR and p.type.startswith("f")
                          and arg.dtype.kind != "f")
        if p.size != want or float_mismatch:
            raise ModpackError(
                f"{where}: kernel {info.name} parameter {i} is {arg} ({want} bytes) in its "
                f"record but .{p.type}{f'[{p.size}]' if p.array else ''} ({p.size} bytes) in "
                "the compiled PTX; fix functions= or the kernel's signature"
            )


# ---- CUDA C++ signatures ------------------------------------------------------------------------

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
}
_CUDA_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict",
                    "__grid_constant__"}
_GLOBAL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(?P<name>\w+)\s*\((?P<params>[^)]*)\)", re.S)


def parse_cuda_signatures(source: str) -> list[KernelInfo]:
    """Records from the ``__global__`` kernels in CUDA C++ |source| (template kernels are
    skipped: they have no single signature)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.S)
    infos = []
    for m in _GLOBAL.finditer(code):
        before = code[:m.start()]
        cut = max(before.rfind(";"), before.rfind("}"), before.rfind("{"))
        if re.search(r"\btemplate\s*<", before[cut + 1:]):
            continue
        params = [p.strip() for p in m["params"].split(",")]
        params = [p for p in params if p and p != "void"]
        info = KernelInfo(m["name"], tuple(_parse_cuda_param(m["name"], p) for p in params),
                          LAUNCH_TAGS)
        earlier = next((i for i in infos if i.name == info.name), None)
        if earlier is None:
            infos.append(info)
        elif earlier != info:  # a declaration and its definition must agree
            raise ValueError(f"kernel {info.name} is declared as {earlier.signature()} and as "
                             f"{info.signature()}")
    return infos


def _parse_cuda_param(kernel: str, param: str) -> KernelArg:
    text = re.sub(r"=.*$", "", param)  # default arguments
    tokens = text.replace("*", " * ").replace("&", " & ").split()
    if "&" in tokens:
        raise ValueError(f"kernel {kernel}: parameter {param!r} is a reference; kernels take "
                         "pointers and numbers")
    stars = tokens.count("*")
    words = [t for t in tokens if t not in _CUDA_QUALIFIERS and t != "*"]
    words = [w.removeprefix("std::") for w in words]
    type_words = words[:-1] if len(words) > 1 else words
    base = " ".join(type_words)
    if stars > 1:
        raise ValueError(f"kernel {kernel}: parameter {param!r} is a pointer to a pointer, "
                         "which modpack cannot pass; pass functions= or change the kernel")
    if stars == 1 and base == "void":
        return UNTYPED_POINTER
    if base not in _CUDA_TYPES:
        raise ValueError(
            f"kernel {kernel}: cannot map parameter {param!r} (type {base!r}) to a dtype; "
            "pass functions= with explicit argument specs (e.g. 'float32*', 'int32', 'void*')"
        )
    try:
        dtype = np.dtype(_CUDA_TYPES[base])
    except TypeError:
        raise ValueError(f"kernel {kernel}: parameter {param!r} needs the ml_dtypes package "
                         "for its dtype") from None
    return KernelArg(BUFFER if stars else SCALAR, dtype)


# ---- functions= ---------------------------------------------------------------------------------


def _records(functions: Mapping[str, Any] | Iterable[KernelInfo]) -> list[KernelInfo]:
    infos = kernel_infos(functions, LAUNCH_TAGS)
    for info in infos:
        _check_launch_tags(info)
    return infos


def _check_launch_tags(info: KernelInfo) -> None:
    tags = list(info.launch_tags)
    allowed = (*LAUNCH_TAGS, SHARED_MEMORY_TAG)
    bad = [t for t in tags if t not in allowed]
    if bad or len(set(tags)) != len(tags):
        raise ValueError(f"kernel {info.name}: launch tags {tags} must be distinct names from "
                         f"{list(allowed)}")
    if SHARED_MEMORY_TAG in tags and tags[-1] != SHARED_MEMORY_TAG:
        raise ValueError(f"kernel {info.name}: {SHARED_MEMORY_TAG!r} must be the last launch tag")


# ---- variants -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CUDAVariant:
    """One binary of the module: its kind, the architectures it serves and its bytes (PTX
    includes the terminating NUL the driver needs)."""

    kind: str  # "cubin", "ptx" or "fatbin"
    arches: tuple[str, ...]
    data: bytes

    @property
    def arch(self) -> str:
        return "+".join(self.arches)


def _variant_from_bytes(key: str, data: Any) -> CUDAVariant:
    where = f"binaries[{key!r}]"
    if isinstance(data, str):
        data = data.encode()
    try:
        data = bytes(memoryview(data).cast("B"))
    except TypeError:
        raise TypeError(f"{where} must be bytes (a cubin, fatbin or PTX) or PTX text, not "
                        f"{type(data).__name__}") from None
    try:
        kind = detect_kind(data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    key_arch = _ARCH.match(key)
    if kind == "cubin":
        m = _check_arch(key, f"{where} (a cubin is keyed by its SASS architecture)")
        if m["kind"] != "sm":
            raise ValueError(f"{where} is a cubin (SASS); key it by its architecture, "
                             f"e.g. 'sm_{m['number']}'")
        try:
            built = cubin_arch(data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if built != int(m["number"]):
            raise ValueError(f"{where} is a cubin built for sm_{built}, not {key}")
        return CUDAVariant("cubin", (key,), data)
    if kind == "ptx":
        try:
            arch = ptx_target(data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if key != "ptx" and key != arch:
            raise ValueError(f"{where} is PTX for {arch} (.target sm_{arch[8:]}); key it "
                             f"'ptx' or {arch!r}")
        if b"\0" in data.rstrip(b"\0"):
            raise ValueError(f"{where}: PTX text contains a NUL byte")
        return CUDAVariant("ptx", (arch,), data if data.endswith(b"\0") else data + b"\0")
    try:
        arches = tuple(fatbin_arches(data))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if key_arch and key not in arches:
        raise ValueError(f"{where} is a fatbin holding {list(arches)}, not {key}")
    return CUDAVariant("fatbin", arches, data)


# ---- compiling ----------------------------------------------------------------------------------


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise ModpackError(
            "compiling CUDA source with NVRTC needs cuda-python and NVIDIA's NVRTC wheel: "
            f"{INSTALL_HINT}; or pass compiler='nvcc' to use an installed CUDA toolkit"
        ) from None
    try:
        nvrtc.nvrtcVersion()
    except Exception as exc:  # cuda.pathfinder raises its own RuntimeError subclasses
        raise ModpackError(
            f"NVRTC's library (libnvrtc) cannot be loaded ({exc}): {INSTALL_HINT} installs "
            "nvidia-cuda-nvrtc; or pass compiler='nvcc'"
        ) from None
    return nvrtc


def _nvrtc_compile(source: str, target: str, options: Sequence[str]) -> tuple[bytes, bytes]:
    """(PTX with its NUL, cubin or b"") for one target."""
    nvrtc = _nvrtc()

    def check(result: Any, what: str) -> Any:
        err, *values = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed: {err.name}")
        return values[0] if len(values) == 1 else values

    program = check(nvrtc.nvrtcCreateProgram(source.encode(), b"module.cu", 0, [], []),
                    "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={target}".encode(), *(o.encode() for o in options)]
        (err,) = nvrtc.nvrtcCompileProgram(program, len(opts), opts)
        size = check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
        log = b" " * size
        check(nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            text = log.rstrip(b"\0").decode("utf-8", "replace").strip()
            raise CompileError(f"NVRTC failed to compile the CUDA source for {target} "
                               f"({err.name}):\n{text}")
        size = check(nvrtc.nvrtcGetPTXSize(program), "nvrtcGetPTXSize")
        ptx = b" " * size
        check(nvrtc.nvrtcGetPTX(program, ptx), "nvrtcGetPTX")
        cubin = b""
        if target.startswith("sm_"):
            size = check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
            cubin = b" " * size
            check(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return (ptx if ptx.endswith(b"\0") else ptx + b"\0"), cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def find_nvcc() -> str:
    """``$NVCC``, else nvcc on PATH, else under ``$CUDA_HOME`` or /usr/local/cuda."""
    explicit = os.environ.get("NVCC")
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").exists():
            return str(Path(home, "bin", "nvcc"))
    raise CompileError(
        "nvcc was not found (not on PATH, $NVCC, $CUDA_HOME): install the CUDA toolkit, or "
        f"compile with NVRTC instead (compiler='nvrtc', {INSTALL_HINT})"
    )


def _nvcc_compile(source: str, target: str, options: Sequence[str], ptx_only: bool = False
                  ) -> bytes:
    """The cubin (sm_XY) or PTX with its NUL (compute_XY, or |ptx_only|) for one target."""
    from ..exporter.toolchain import run_tool

    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="modpack-nvcc-") as tmp:
        src = Path(tmp, "module.cu")
        src.write_text(source)
        if target.startswith("sm_") and not ptx_only:
            out = Path(tmp, "module.cubin")
            cmd = [nvcc, "-cubin", f"-arch={target}", *options, "-o", str(out), str(src)]
        else:
            out = Path(tmp, "module.ptx")
            arch = "compute_" + target.split("_", 1)[1]
            cmd = [nvcc, "-ptx", f"-arch={arch}", *options, "-o", str(out), str(src)]
        run_tool(cmd, f"nvcc for {target}")
        data = out.read_bytes()
    return data if out.suffix == ".cubin" or data.endswith(b"\0") else data + b"\0"


# ---- the module ---------------------------------------------------------------------------------


class CUDAModule(BinaryModule):
    """CUDA kernels carried in the library and launched through the runtime's CUDA device.

    ``variants`` are the binaries (``CUDAVariant``), ``functions`` the kernel records.
    """

    type_key = "cuda"

    def __init__(self, variants: Sequence[CUDAVariant], functions: Sequence[KernelInfo],
                 ptx_checks: Sequence[tuple[str, bytes]] = (), source: str | None = None,
                 compiler: str | None = None) -> None:
        super().__init__()
        if not variants:
            raise ValueError("a CUDA module needs at least one binary variant")
        self.variants = list(variants)
        self.functions = list(functions)
        self.source = source
        self.compiler = compiler
        # (label, PTX) pairs the records are checked against at export.
        self._ptx_checks = list(ptx_checks)
        self.validate()

    @property
    def arches(self) -> list[str]:
        """Every architecture of every variant, in order."""
        return [a for v in self.variants for a in v.arches]

    def validate(self) -> None:
        """Check the records: names unique, launch tags valid, and parameters matching every
        PTX the module was built with or carries. Raises ModpackError on a mismatch."""
        names = [f.name for f in self.functions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ModpackError(f"kernels declared more than once: {dupes}")
        for info in self.functions:
            _check_launch_tags(info)
        checks = list(self._ptx_checks)
        checks += [(f"{v.arch} PTX", v.data) for v in self.variants if v.kind == "ptx"]
        for label, ptx in checks:
            entries = ptx_entries(ptx)
            for info in self.functions:
                check_against_ptx(info, entries, f"cuda_module ({label})")

    def save_to_binary(self) -> bytes:
        return b"".join(bytes(c) for c in self.payload_chunks())

    def payload_chunks(self) -> list[bytes]:
        self.validate()  # refuse a record that disagrees with the compiled code at export
        head = [struct.pack("<III", _VERSION, 0, len(self.variants))]
        for v in self.variants:
            head.append(struct.pack("<II", _KINDS[v.kind], len(v.arches)))
            for arch in v.arches:
                head += [struct.pack("<I", len(arch)), arch.encode()]
            head.append(struct.pack("<Q", len(v.data)))
        head.append(struct.pack("<I", len(self.functions)))
        head += [f.encode() for f in self.functions]
        chunks = [b"".join(head)]
        offset = len(chunks[0])
        for v in self.variants:
            pad = -offset % _ALIGNMENT
            chunks += [b"\0" * pad, v.data]
            offset += pad + len(v.data)
        return chunks

    def __repr__(self) -> str:
        kernels = ", ".join(f.name for f in self.functions)
        variants = ", ".join(f"{v.arch} ({v.kind})" for v in self.variants)
        return f"<modpack.CUDAModule kernels=[{kernels}] variants=[{variants}]>"


def cuda_module(
    source: str | None = None,
    targets: Sequence[str] | None = None,
    functions: Mapping[str, Any] | Iterable[KernelInfo] | None = None,
    compiler: str = "nvrtc",
    *,
    binaries: Mapping[str, Any] | None = None,
    options: Sequence[str] = (),
) -> CUDAModule:
    """A CUDA module, from CUDA C++ source or from existing binaries.

    ``cuda_module(source, targets=["sm_80", "sm_90", "compute_90"])`` compiles |source| once
    per target: ``sm_XY`` (also ``sm_XYa``, ``sm_XYf``) to a cubin, ``compute_XY`` to PTX that
    the driver JIT-compiles for newer GPUs. |compiler| is ``"nvrtc"`` (NVIDIA's runtime
    compiler from PyPI, no toolkit needed: ``pip install modpack[cuda]``) or ``"nvcc"``.
    |options| are extra compiler flags. Kernels need ``extern "C"`` so their names are not
    mangled. Default targets: ``DEFAULT_TARGETS``.

    ``cuda_module(binaries={"sm_80": cubin, "sm_90": cubin, "ptx": text})`` takes existing
    binaries: cubins keyed by their ``sm_XY`` (checked against the cubin's ELF header), PTX
    keyed ``"ptx"`` or its ``compute_XY`` (from its ``.target``), fatbins under any key (their
    architectures are read from the container).

    functions : per-kernel argument specs, ``{"vadd": ["float32*", "float32*", "float32*",
        "int32"]}`` (``"void*"`` for an untyped pointer), optionally with launch tags:
        ``{"k": {"args": [...], "launch": [*LAUNCH_TAGS, "dyn_shared_memory"]}}``. When
        omitted, records come from the ``__global__`` signatures of the source (checked
        against the compiled PTX), or, for binaries, from a PTX variant's ``.entry``
        signatures, where 64-bit parameters are taken as ``void*`` pointers and other
        parameters as scalars of the PTX type (a kernel with a 64-bit integer scalar needs
        functions=). Binaries without PTX (cubins, fatbins) need functions=.

    Every kernel is called with its arguments followed by grid x, y, z and block x, y, z
    (and the dynamic shared memory bytes when its launch tags end with
    ``"dyn_shared_memory"``).
    """
    if (source is None) == (binaries is None):
        raise TypeError("cuda_module takes CUDA source or binaries=, exactly one of them")
    if binaries is not None:
        if targets is not None:
            raise TypeError("targets= is for compiling source; binaries are used as given")
        return _from_binaries(binaries, functions)
    if not isinstance(source, str):
        raise TypeError("cuda_module expects CUDA C++ source as a str")
    if compiler not in ("nvrtc", "nvcc"):
        raise ValueError(f"compiler must be 'nvrtc' or 'nvcc', not {compiler!r}")
    if isinstance(targets, str | bytes):
        raise TypeError("targets must be a list such as ['sm_80', 'compute_80'], not a str")
    targets = list(DEFAULT_TARGETS if targets is None else targets)
    if not targets:
        raise ValueError("targets must be a non-empty list such as ['sm_80', 'compute_80']")
    for t in targets:
        _check_arch(t, "targets")
    if len(set(targets)) != len(targets):
        raise ValueError(f"targets has duplicates: {targets}")
    return _from_source(source, targets, functions, compiler, list(options))


def _from_source(source: str, targets: list[str], functions: Any, compiler: str,
                 options: list[str]) -> CUDAModule:
    variants, checks = [], []
    for target in targets:
        if compiler == "nvrtc":
            ptx, cubin = _nvrtc_compile(source, target, options)
        else:
            cubin = _nvcc_compile(source, target, options) if target.startswith("sm_") else b""
            ptx = b"" if cubin else _nvcc_compile(source, target, options)
        if cubin:
            variants.append(CUDAVariant("cubin", (target,), cubin))
            if ptx:
                checks.append((f"{target} build", ptx))
        else:
            variants.append(CUDAVariant("ptx", (ptx_target(ptx),), ptx))
    if not checks and not any(v.kind == "ptx" for v in variants):
        # nvcc made only cubins: compile PTX once so the records can be checked against it.
        first = targets[0]
        checks.append((f"{first} build", _nvcc_compile(source, first, options, ptx_only=True)))
    if functions is None:
        try:
            infos = parse_cuda_signatures(source)
        except ValueError as exc:
            raise ModpackError(f"cuda_module: {exc}") from None
        if not infos:
            raise ModpackError("no __global__ kernels found in the CUDA source (template "
                               "kernels need functions= and extern \"C\" instantiations)")
    else:
        infos = _records(functions)
    return CUDAModule(variants, infos, checks, source=source, compiler=compiler)


def _from_binaries(binaries: Mapping[str, Any], functions: Any) -> CUDAModule:
    if not isinstance(binaries, Mapping) or not binaries:
        raise ValueError("binaries must map keys ('sm_80', 'ptx', 'fatbin', ...) to bytes")
    variants = [_variant_from_bytes(str(key), data) for key, data in binaries.items()]
    if functions is not None:
        return CUDAModule(variants, _records(functions))
    ptx = [v for v in variants if v.kind == "ptx"]
    if not ptx:
        raise ModpackError(
            "cuda_module(binaries=...) without PTX needs functions=: cubins and fatbins do not "
            "record parameter types (e.g. functions={'vadd': ['float32*', 'float32*', "
            "'float32*', 'int32']})"
        )
    try:
        infos = _infos_from_ptx(ptx[0].data, f"PTX {ptx[0].arch}")
    except ValueError as exc:
        raise ModpackError(f"cuda_module: {exc}") from None
    if not infos:
        raise ModpackError(f"the {ptx[0].arch} PTX defines no kernel (.entry)")
    return CUDAModule(variants, infos)
