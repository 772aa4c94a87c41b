"""Recognising CUDA binaries by their bytes: cubins (ELF for EM_CUDA), fatbins (NVIDIA's
container of several cubins and PTX) and PTX text, and which architectures they are for."""

from __future__ import annotations

import struct

from ...errors import ArgumentError

__all__ = ["cubin_arch", "detect_kind", "fatbin_arches"]

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"
_EM_CUDA = 190


def detect_kind(data: bytes) -> str:
    """``"cubin"``, ``"fatbin"`` or ``"ptx"`` from the first bytes; ValueError otherwise."""
    if data[:4] == _ELF_MAGIC:
        return "cubin"
    if data[:4] == _FATBIN_MAGIC:
        return "fatbin"
    head = data[:4096].lstrip()
    if head.startswith((b"//", b".version", b"/*")) and b".target" in data[:65536]:
        return "ptx"
    raise ArgumentError(
        f"not a CUDA binary: starts with {data[:8].hex(' ')}; expected a cubin (ELF, 7f 45 4c "
        "46), a fatbin (50 ed 55 ba) or PTX text (.version / .target)"
    )


def cubin_arch(data: bytes) -> int:
    """The SM number a cubin was built for (80 for sm_80), from its ELF header."""
    if len(data) < 52 or data[:4] != _ELF_MAGIC or data[4] != 2:
        raise ArgumentError("not a 64-bit ELF cubin")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        raise ArgumentError(f"ELF file for machine {machine}, not a CUDA cubin (EM_CUDA = 190)")
    (flags,) = struct.unpack_from("<I", data, 48)
    return int((flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF)


def fatbin_arches(data: bytes) -> list[str]:
    """The variants inside a fatbin, in order: ``["sm_80", "sm_90a", "compute_90"]``.

    Reads the (undocumented, stable since CUDA 4) fatbin container: a 16-byte header
    ``<IHHQ`` magic, version, header size, payload size; then entries whose headers start
    ``<HHIQ`` kind (1 PTX, 2 ELF), version, header size, payload size, with the SM number at
    byte 28 and flags at byte 40 (0x100000: an 'a' target, 0x200000: an 'f' target).
    """
    if len(data) < 16 or data[:4] != _FATBIN_MAGIC:
        raise ArgumentError("not a fatbin (no 50 ed 55 ba magic)")
    _, _, header_size, size = struct.unpack_from("<IHHQ", data, 0)
    end = header_size + size
    if header_size < 16 or end > len(data):
        raise ArgumentError(f"fatbin header claims {end} bytes but the data has {len(data)}")
    arches, pos = [], header_size
    while pos < end:
        if pos + 48 > end:
            raise ArgumentError(f"fatbin entry at byte {pos} is truncated")
        kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, pos)
        (sm,) = struct.unpack_from("<I", data, pos + 28)
        (flags,) = struct.unpack_from("<Q", data, pos + 40)
        if kind not in (1, 2) or entry_header < 48 or sm < 10:
            raise ArgumentError(f"fatbin entry at byte {pos} is not PTX or ELF (kind {kind})")
        suffix = "a" if flags & 0x100000 else "f" if flags & 0x200000 else ""
        arches.append(f"{'compute' if kind == 1 else 'sm'}_{sm}{suffix}")
        pos += entry_header + entry_size
    if pos != end or not arches:
        raise ArgumentError("fatbin entries do not add up to its declared size")
    return arches
