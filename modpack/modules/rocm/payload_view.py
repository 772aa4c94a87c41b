"""The tools' view of a ``rocm`` payload (:mod:`modpack.format.payload_views`; layout:
csrc/include/modpack/kinds/rocm.h): its code objects as code pieces, and its head rewritten
with only some of them for ``slim``. Where the head ends and each code object lies come from
the runtime's own parse (the module's description)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ...format.payload_views import PayloadView, register_payload_view, variant_pieces
from ...runtime.binding import lib


def _u32(data: memoryview, at: int) -> int:
    value: int = struct.unpack_from("<I", data, at)[0]
    return value


def slim_head(payload: memoryview, description: dict[str, Any], kept: Sequence[int],
              where: str) -> bytes:
    """The head with the module's name, the kept code objects' entries, the kernel records and
    argument layouts, and the kept code objects' kernel facts (every code object defines
    every kernel, so any kept one covers them all)."""
    del where  # nothing here can be inconsistent: the runtime's parse checked the head
    head_end: int = description["head_bytes"]
    kernel_count = len(description["kernels"])
    version, _reserved, count = struct.unpack_from("<III", payload, 0)
    at = 12
    at += 4 + _u32(payload, at)
    name_end = at
    entries = []
    for _ in range(count):
        start = at
        at += 4 + _u32(payload, at) + 8
        entries.append((start, at))
    facts_size = lib.MP_ROCM_FACTS_SIZE * kernel_count
    facts_at = head_end - count * facts_size
    middle = bytes(payload[at:facts_at])  # records, argument layouts
    facts = b"".join(bytes(payload[facts_at + i * facts_size:facts_at + (i + 1) * facts_size])
                     for i in kept)
    return (struct.pack("<III", version, 0, len(kept)) + bytes(payload[12:name_end])
            + b"".join(bytes(payload[s:e]) for s, e in (entries[i] for i in kept))
            + middle + facts)


register_payload_view("rocm", PayloadView(variant_pieces, slim_head, lib.MP_ROCM_CODE_ALIGNMENT,
                                          "rocm"))
