"""``load_module("oci://HOST/REPO:TAG")``: pull what this machine's devices need into the
store (nothing, when the store has it and the tag names the same manifest; no registry at
all for a digest reference already pulled), then load the library straight from the store:
no unpacking, the weight files mapped in place (one copy in memory for every library and
process naming the same layer), and nothing hashed again that the store's stamps vouch for."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ArgumentError

__all__ = ["load_reference"]


def load_reference(reference: str, *, trusted_oms: Any, weights: Any,
                   load: Any, options: dict[str, Any]) -> Any:
    """Pull |reference| for the host's devices (verifying its OMS bundle with |trusted_oms|
    when given) and return ``load(library_path, weights=..., **options)``."""
    from .pull import pull

    if weights is not None:
        raise ArgumentError(f"{reference}: weights= is for libraries on disk; a registry "
                            "artifact brings its own weight files")
    pulled = pull(reference, device=os.environ.get("MODPACK_OCI_DEVICE", "host"),
                  trusted_oms=trusted_oms)
    located = {name: str(path) for name, path in pulled.weights.items()}
    return load(str(pulled.library), weights=located or None, **options)
