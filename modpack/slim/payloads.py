"""A cuda or rocm payload with some of its variants left out, rewritten from its bytes: the
kept variants' headers and code (as stored: compressed code stays compressed, byte for
byte), the kernel records, and for ROCm each kept code object's kernel facts. Layouts:
csrc/include/modpack/kinds/cuda.h and rocm.h; where the head ends and each variant lies comes
from the runtime's own parse (the module's description)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError, ModpackError

__all__ = ["FileRange", "slim_payload"]


@dataclass(frozen=True)
class FileRange:
    """Bytes of the payload kept as they are (a variant's code), by offset in the payload:
    copied by the kernel, never read into memory."""

    offset: int
    size: int

_ALIGNMENT = 64  # MP_CUDA_VARIANT_ALIGNMENT, MP_ROCM_CODE_ALIGNMENT


def slim_payload(type_key: str, payload: memoryview, description: dict[str, Any],
                 keep: set[str], where: str) -> list[Any] | None:
    """The payload's chunks keeping the variants any of whose architectures is in |keep|, or
    None when it keeps every variant (the payload is then copied as is)."""
    variants = description["variants"]
    kept = [i for i, v in enumerate(variants) if set(v["arch"].split("+")) & keep]
    if len(kept) == len(variants):
        return None
    if not kept:
        raise ModpackError(f"{where} would keep no variant")
    head_end = description["head_bytes"]
    if type_key == "cuda":
        head = _cuda_head(payload, head_end, kept, len(description["kernels"]), where)
    else:
        head = _rocm_head(payload, head_end, kept, len(description["kernels"]))
    chunks: list[Any] = [head]
    offset = len(head)
    for i in kept:
        v = variants[i]
        pad = -offset % _ALIGNMENT
        chunks += [bytes(pad), FileRange(v["offset"], v["size"])]
        offset += pad + v["size"]
    return chunks


def _u32(data: memoryview, at: int) -> int:
    value: int = struct.unpack_from("<I", data, at)[0]
    return value


def _cuda_head(payload: memoryview, head_end: int, kept: Sequence[int], kernel_count: int,
               where: str) -> bytes:
    version, _reserved, count = struct.unpack_from("<III", payload, 0)
    at = 12
    if version >= 2:
        at += 4 + _u32(payload, at)
    starts, defines = [], []
    for _ in range(count):
        start = at
        arch_count = _u32(payload, at + 4)
        at += 8
        for _ in range(arch_count):
            at += 4 + _u32(payload, at)
        at += 8  # the stored size
        kernels: set[int] = set()
        if version >= 2:
            n = _u32(payload, at)
            kernels = set(struct.unpack_from(f"<{n}I", payload, at + 4))
            at += 4 + 4 * n
        starts.append((start, at))
        defines.append(kernels)
    if at > head_end:
        raise FormatError(f"{where}: its variant headers run past its head")
    covered: set[int] = set()
    for i in kept:
        covered |= defines[i] or set(range(kernel_count))
    if len(covered) < kernel_count:
        missing = sorted(set(range(kernel_count)) - covered)
        raise ModpackError(f"{where}: the kept variants leave kernels {missing} without code")
    name = bytes(payload[12:starts[0][0]]) if count else b""
    kept_headers = b"".join(bytes(payload[starts[i][0]:starts[i][1]]) for i in kept)
    records = bytes(payload[at:head_end])
    return struct.pack("<III", version, 0, len(kept)) + name + kept_headers + records


def _rocm_head(payload: memoryview, head_end: int, kept: Sequence[int],
               kernel_count: int) -> bytes:
    version, _reserved, count = struct.unpack_from("<III", payload, 0)
    at = 12
    at += 4 + _u32(payload, at)
    name_end = at
    entries = []
    for _ in range(count):
        start = at
        at += 4 + _u32(payload, at) + 8
        entries.append((start, at))
    facts_size = 32 * kernel_count
    middle = bytes(payload[at:head_end - count * facts_size])  # records, argument layouts
    facts_at = head_end - count * facts_size
    facts = b"".join(bytes(payload[facts_at + i * facts_size:facts_at + (i + 1) * facts_size])
                     for i in kept)
    return (struct.pack("<III", version, 0, len(kept)) + bytes(payload[12:name_end])
            + b"".join(bytes(payload[s:e]) for s, e in (entries[i] for i in kept))
            + middle + facts)

