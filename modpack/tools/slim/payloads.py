"""A per-architecture payload (cuda, rocm) with some of its variants left out: the head its
kind rewrites with the kept variants (:class:`modpack.format.payload_views.PayloadView`'s
``slim_head``), then the kept variants' code as stored (compressed code stays compressed,
byte for byte), each at its kind's alignment. Where the head ends and each variant lies come
from the runtime's own parse (the module's description)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import InternalError
from ...format.payload_views import payload_view

__all__ = ["FileRange", "slim_payload"]


@dataclass(frozen=True)
class FileRange:
    """Bytes of the payload kept as they are (a variant's code), by offset in the payload:
    copied by the kernel, never read into memory."""

    offset: int
    size: int


def slim_payload(type_key: str, payload: memoryview, description: dict[str, Any],
                 keep: set[str], where: str) -> list[Any] | None:
    """The payload's chunks keeping the variants any of whose architectures is in |keep|, or
    None when it keeps every variant (the payload is then copied as is)."""
    view = payload_view(type_key)
    if view is None or view.slim_head is None:
        raise InternalError(f"{where}: slim cannot cut a {type_key} payload by architecture")
    variants = description["variants"]
    kept = [i for i, v in enumerate(variants) if set(v["arch"].split("+")) & keep]
    if len(kept) == len(variants):
        return None
    if not kept:
        raise InternalError(f"{where} would keep no variant")
    head = view.slim_head(payload, description, kept, where)
    chunks: list[Any] = [head]
    offset = len(head)
    for i in kept:
        v = variants[i]
        pad = -offset % view.variant_alignment
        chunks += [bytes(pad), FileRange(v["offset"], v["size"])]
        offset += pad + v["size"]
    return chunks
