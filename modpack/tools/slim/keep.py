"""Which device code ``slim`` keeps: for each kept device, the code its loader would choose and
the portable code it falls back on (PTX, a generic ROCm target), asked of the runtime's own
preflight, so that what slim keeps is exactly what a load on that device takes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...errors import ArgumentError, IncompatibleError, ModpackError
from ...format.payload_views import slimmed_kinds
from ..preflight import preflight

__all__ = ["device_strings", "kept_variants"]



def device_strings(keep: str | Iterable[str]) -> list[str]:
    """``"sm_90,gfx942"`` or ``["sm_90", "rocm:gfx90a:xnack-"]`` as preflight DEVICE strings
    (``cuda:sm_90``, ``rocm:gfx942``), in order, each once."""
    items = keep.split(",") if isinstance(keep, str) else list(keep)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise ArgumentError(f"keep= takes device names such as 'sm_90', not {raw!r}")
        item = raw.strip()
        if not item:
            continue
        if item.startswith(("cuda:", "rocm:")):
            device = item
        elif item.startswith("sm_"):
            device = f"cuda:{item}"
        elif item.startswith("gfx"):
            device = f"rocm:{item}"
        else:
            raise ArgumentError(f"--keep {item!r}: name a CUDA architecture (sm_90) or a ROCm "
                                "target ID (gfx942, gfx90a:xnack-), or cuda:/rocm: followed by "
                                "one")
        if device not in out:
            out.append(device)
    if not out:
        raise ArgumentError("--keep names no device: give e.g. --keep sm_90,gfx942")
    return out


def kept_variants(path: str | os.PathLike[str], devices: Sequence[str]
                  ) -> dict[int, set[str]]:
    """Per module of a slimmed kind (by index), the names of the variants to keep (CUDA arch
    names, ROCm target IDs); IncompatibleError naming the module when one has no code for a kept
    device of its type, or no kept device is of its type."""
    kept: dict[int, set[str]] = {}
    types: dict[int, str] = {}
    # Kinds whose code is per architecture (their views can cut a payload): the others (OpenCL
    # source and binaries keyed by the device's driver, Vulkan's SPIR-V) run on any device of
    # their type and are kept whole.
    slimmed = slimmed_kinds()
    for device in devices:
        answer = preflight(path, device)  # ArgumentError for a device string it cannot read
        kind = device.split(":", 1)[0]
        for module in answer["modules"]:
            key = module["type_key"]
            if key not in slimmed:
                continue
            types[module["index"]] = key
            if slimmed[key] != kind:
                continue
            names = kept.setdefault(module["index"], set())
            for reply in module["answers"]:
                kernels = reply.get("kernels")
                choices: list[Mapping[str, Any]] = list(kernels) if kernels else [reply]
                for choice in choices:
                    if not choice.get("fits"):
                        raise IncompatibleError(
                            f"{os.fspath(path)}: {_module_label(path, module['index'], key)} "
                            f"has no variant for {device}: {choice.get('reason')}; keep "
                            "another device, or add code for this one")
                    names.update(_needed(choice))
    for index, key in sorted(types.items()):
        if index not in kept:
            raise IncompatibleError(
                f"{os.fspath(path)}: {_module_label(path, index, key)} would keep no variant: "
                f"--keep names no {key.upper()} device ({', '.join(devices)}); name one of its "
                "devices")
    return kept


def _module_label(path: str | os.PathLike[str], index: int, key: str) -> str:
    """``module[1] (cuda)``, or with the module's own name (``cuda_module(..., name=)``)
    ``module[1] (cuda 'attention')``, so that a refusal says which module of several of a kind
    the author meant. Read only for a refusal: preflight's answer has no names."""
    from ..inspection import inspect_library  # a refusal's cost only

    try:
        contents = inspect_library(path)["modules"][index].get("contents") or {}
    except ModpackError:  # slim's own checks then say what is wrong with the file
        contents = {}
    name = contents.get("name")
    return f"module[{index}] ({key} {name!r})" if isinstance(name, str) else \
        f"module[{index}] ({key})"


def _needed(choice: Mapping[str, Any]) -> set[str]:
    """The variant a device is given, and the portable code its loader falls back on when
    the driver refuses it (PTX for CUDA, a generic target for ROCm)."""
    names = {choice["variant"]}
    for fallback in choice.get("fallbacks") or []:
        name = fallback if isinstance(fallback, str) else fallback.get("variant", "")
        if name.startswith("compute_") or "-generic" in name:
            names.add(name)
    return names
