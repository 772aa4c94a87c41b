"""The tools' view of a ``cuda`` payload (:mod:`modpack.format.payload_views`; layout:
csrc/include/modpack/kinds/cuda.h): its variants as code pieces, and its head rewritten with
only some variants for ``slim``. Where the head ends and each variant lies come from the
runtime's own parse (the module's description)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ...errors import FormatError, IncompatibleError
from ...format.payload_views import PayloadView, register_payload_view, variant_pieces
from ...runtime.binding import lib


def _u32(data: memoryview, at: int) -> int:
    value: int = struct.unpack_from("<I", data, at)[0]
    return value


def slim_head(payload: memoryview, description: dict[str, Any], kept: Sequence[int],
              where: str) -> bytes:
    """The head with the kept variants' headers (version 2 and later: each with the kernels it
    defines), the module's name and the kernel records; refused when the kept variants leave a
    kernel without code."""
    head_end: int = description["head_bytes"]
    kernel_count = len(description["kernels"])
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
        raise IncompatibleError(f"{where}: the kept variants leave kernels {missing} without code")
    name = bytes(payload[12:starts[0][0]]) if count else b""
    kept_headers = b"".join(bytes(payload[starts[i][0]:starts[i][1]]) for i in kept)
    records = bytes(payload[at:head_end])
    return struct.pack("<III", version, 0, len(kept)) + name + kept_headers + records


register_payload_view("cuda", PayloadView(variant_pieces, slim_head,
                                          lib.MP_CUDA_VARIANT_ALIGNMENT, "cuda"))
