"""What the tools know of a device kind's stored payload, answered by the kind itself.

``extract`` and the checks that decode code (``verify``'s verdict) need the pieces of code a
payload holds; ``slim`` needs to rewrite a per-architecture payload's head with only some of
its variants. That knowledge belongs to each kind (its writer defines the layout), so each kind
registers a :class:`PayloadView` when its package is imported
(``modpack/modules/<kind>/payload_view.py``) and the tools ask for it by type key: a new kind
teaches the tools its payload in its own folder, and no tool reads a payload head itself.
Where each piece lies comes from the runtime's own parse (``mp_module_describe``), never from
a second reading of the bytes here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CodePiece",
    "PayloadView",
    "code_pieces",
    "payload_view",
    "register_payload_view",
    "slimmed_kinds",
    "variant_pieces",
]


@dataclass(frozen=True)
class CodePiece:
    """One piece of a device module's code, where its kind's loader places it in the payload:
    a frame when the entry says its code is in frames, else the code itself."""

    what: str  # "source", "binary 0", "shader 1", "variant sm_90": for messages
    suffix: str  # a file extension for it (extract): ".cl", ".ptx", ...
    offset: int  # in the payload
    size: int  # as stored
    nul: bool  # the code ends in a NUL that is not part of the file (PTX)
    index: int = 0  # among its kind's pieces of this sort (binaries, shaders, variants)
    tag: str = ""  # what tells it from the others: a device, an architecture


# slim_head(payload, description, kept, where): the payload's head keeping only the variants
# at the indices |kept| (their headers, the kernel records and whatever else the head holds),
# FormatError/IncompatibleError naming |where| when the head is inconsistent or the kept variants
# leave a kernel without code.
SlimHead = Callable[[memoryview, dict[str, Any], Sequence[int], str], bytes]


@dataclass(frozen=True)
class PayloadView:
    """One kind's answers about its stored payload.

    ``code_pieces`` lists the code in a payload from the kind's description of it. A kind whose
    code is per architecture also sets ``slim_head``, ``variant_alignment`` (where each kept
    variant's code starts, as its loader requires) and ``device_type`` (the preflight device
    prefix its variants are chosen for: ``cuda``, ``rocm``)."""

    code_pieces: Callable[[dict[str, Any]], list[CodePiece]]
    slim_head: SlimHead | None = None
    variant_alignment: int = 1
    device_type: str = ""


_VIEWS: dict[str, PayloadView] = {}


def register_payload_view(type_key: str, view: PayloadView) -> None:
    """Teaches the tools the payload of |type_key|'s modules (the last registration wins, so
    a reloaded kind replaces its view)."""
    _VIEWS[type_key] = view


def payload_view(type_key: str) -> PayloadView | None:
    """The view registered for |type_key|, or None for a kind the tools know no code in."""
    return _VIEWS.get(type_key)


def code_pieces(type_key: str, description: dict[str, Any]) -> list[CodePiece]:
    """The pieces of code of a device module of |type_key|, from its kind's description of it
    (``mp_module_describe``); none for kinds with no view (weights, user kinds)."""
    view = _VIEWS.get(type_key)
    return view.code_pieces(description) if view is not None else []


def slimmed_kinds() -> dict[str, str]:
    """Type key -> device type of each kind whose payload ``slim`` can cut by architecture."""
    return {key: view.device_type for key, view in _VIEWS.items() if view.slim_head is not None}


_VARIANT_SUFFIXES = {"ptx": ".ptx", "cubin": ".cubin", "fatbin": ".fatbin", "cuda": ".cu",
                     "hsaco": ".hsaco"}


def variant_pieces(description: dict[str, Any]) -> list[CodePiece]:
    """The code pieces of a per-architecture payload whose description lists ``variants``
    (``arch``, ``kind``, ``offset``, ``size``): the CUDA and ROCm kinds describe theirs alike."""
    return [CodePiece(f"variant {variant['arch']}", _VARIANT_SUFFIXES.get(variant["kind"], ".bin"),
                      variant["offset"], variant["size"], variant["kind"] == "ptx", k,
                      variant["arch"])
            for k, variant in enumerate(description.get("variants", []))]
