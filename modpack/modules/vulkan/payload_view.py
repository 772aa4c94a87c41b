"""The tools' view of a ``vulkan`` payload (:mod:`modpack.format.payload_views`): its SPIR-V
shaders. Shaders run on any Vulkan device, so slim keeps them whole."""

from __future__ import annotations

from typing import Any

from ...format.payload_views import CodePiece, PayloadView, register_payload_view


def code_pieces(description: dict[str, Any]) -> list[CodePiece]:
    """Each shader's SPIR-V (as stored: a frame when compressed)."""
    return [CodePiece(f"shader {k}", ".spv", shader["offset"], shader["size"], False, k)
            for k, shader in enumerate(description.get("shaders", []))]


register_payload_view("vulkan", PayloadView(code_pieces))
