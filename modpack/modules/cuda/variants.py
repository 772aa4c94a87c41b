"""A cuda module's binaries: one variant per cubin, PTX text or fatbin, with the architectures
it serves, checked against what the bytes say they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ArgumentError
from .arch import ARCH, check_arch
from .binaries import cubin_arch, detect_kind, fatbin_arches
from .ptx import ptx_target

__all__ = ["CUDAVariant", "variant_from_bytes"]


@dataclass(frozen=True)
class CUDAVariant:
    """One binary of the module: its kind, the architectures it serves and its bytes (PTX
    includes the terminating NUL the driver needs), and the kernels its image defines when not
    all of the module's (images compiled one kernel at a time, as Triton's are)."""

    kind: str  # "cubin", "ptx" or "fatbin"
    arches: tuple[str, ...]
    data: bytes
    kernels: tuple[str, ...] = ()  # by record name; () for every kernel

    @property
    def arch(self) -> str:
        return "+".join(self.arches)


def variant_from_bytes(key: str, data: Any) -> CUDAVariant:
    where = f"binaries[{key!r}]"
    if isinstance(data, str):
        data = data.encode()
    try:
        data = bytes(memoryview(data).cast("B"))
    except TypeError:
        raise ArgumentError(f"{where} must be bytes (a cubin, fatbin or PTX) or PTX text, not "
                            f"{type(data).__name__}") from None
    try:
        kind = detect_kind(data)
    except ValueError as exc:
        raise ArgumentError(f"{where}: {exc}") from None
    key_arch = ARCH.match(key)
    if kind == "cubin":
        m = check_arch(key, f"{where} (a cubin is keyed by its SASS architecture)")
        if m["kind"] != "sm":
            raise ArgumentError(f"{where} is a cubin (SASS); key it by its architecture, "
                                f"e.g. 'sm_{m['number']}'")
        try:
            built = cubin_arch(data)
        except ValueError as exc:
            raise ArgumentError(f"{where}: {exc}") from None
        if built != int(m["number"]):
            raise ArgumentError(f"{where} is a cubin built for sm_{built}, not {key}")
        return CUDAVariant("cubin", (key,), data)
    if kind == "ptx":
        try:
            arch = ptx_target(data)
        except ValueError as exc:
            raise ArgumentError(f"{where}: {exc}") from None
        if key != "ptx" and key != arch:
            raise ArgumentError(f"{where} is PTX for {arch} (.target sm_{arch[8:]}); key it "
                                f"'ptx' or {arch!r}")
        if b"\0" in data.rstrip(b"\0"):
            raise ArgumentError(f"{where}: PTX text contains a NUL byte")
        return CUDAVariant("ptx", (arch,), data if data.endswith(b"\0") else data + b"\0")
    try:
        arches = tuple(fatbin_arches(data))
    except ValueError as exc:
        raise ArgumentError(f"{where}: {exc}") from None
    if key_arch and key not in arches:
        raise ArgumentError(f"{where} is a fatbin holding {list(arches)}, not {key}")
    return CUDAVariant("fatbin", arches, data)
