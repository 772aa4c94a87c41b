"""The tools' view of an ``opencl`` payload (:mod:`modpack.format.payload_views`): its source
and its prebuilt program binaries, one per device they were built for."""

from __future__ import annotations

from typing import Any

from ...format.payload_views import CodePiece, PayloadView, register_payload_view


def code_pieces(description: dict[str, Any]) -> list[CodePiece]:
    """The source (as stored: a frame when compressed) and each prebuilt binary."""
    if "source_offset" not in description:
        return []
    stored = description.get("source_code", {}).get("stored_bytes", description["source_bytes"])
    pieces = [CodePiece("source", ".cl", description["source_offset"], stored, False)]
    for k, binary in enumerate(description.get("binaries", [])):
        pieces.append(CodePiece(f"binary {k}", ".bin", binary["offset"], binary["size"], False, k,
                                binary["device"]))
    return pieces


register_payload_view("opencl", PayloadView(code_pieces))
