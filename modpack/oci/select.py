"""Which manifest of an image index a device needs, chosen before anything large is
downloaded: each manifest is annotated with the device its variant was slimmed for
(``dev.modpack.device``: ``cuda:sm_90``, ``rocm:gfx942``), and the choice follows the
loader's rule for a device's code (preflight's): the variant for exactly that device, else
for the same CUDA major version with the highest minor not above the device's (a cubin runs
on later minors of its major), else for the same ROCm processor. ``host`` means this
machine's devices as the runtime reports them; with none of a variant's type (no GPU), the
variant without device code if there is one, else the first."""

from __future__ import annotations

import json
import logging
import os
import re
import sys

from ..errors import ArgumentError, IncompatibleError
from ..runtime.binding import error_from_status, ffi, lib

__all__ = ["choose_variant", "host_devices", "normalise_device"]

log = logging.getLogger("modpack.oci")
_SM = re.compile(r"^cuda:sm_(\d+?)(\d)$")
Entry = tuple[str, int, "str | None"]


def normalise_device(device: str) -> str:
    """``sm_90`` -> ``cuda:sm_90``, ``gfx942`` -> ``rocm:gfx942``; other forms unchanged."""
    if not isinstance(device, str) or not device:
        raise ArgumentError(f"device must be a str such as 'cuda:sm_90' or 'host', not "
                            f"{device!r}")
    if device.startswith("sm_"):
        return f"cuda:{device}"
    if device.startswith("gfx"):
        return f"rocm:{device}"
    return device


def host_devices() -> list[str]:
    """This machine's CUDA and ROCm devices as ``cuda:sm_XY`` / ``rocm:TARGET_ID``, in the
    runtime's order: its preflight's list of the host's devices (asked of no blob, so no
    library is needed)."""
    result = ffi.new("mp_preflight_result_t*")
    result.struct_size = ffi.sizeof("mp_preflight_result_t")
    needed = ffi.new("uint64_t*")
    capacity = 1 << 16
    probe = sys.executable if os.path.isfile(sys.executable) else os.__file__
    while True:
        buffer = ffi.new("char[]", capacity)
        status = lib.mp_preflight_blob(probe.encode(), 0, 0, b"host", buffer, capacity, needed,
                                       result)
        if status != 0:
            raise error_from_status(status)
        if needed[0] < capacity:
            break
        capacity = needed[0] + 1
    report = json.loads(ffi.string(buffer).decode())
    return [f"{d['type']}:{d['arch']}" for d in report.get("devices", [])
            if d.get("type") in ("cuda", "rocm") and d.get("arch")]


def _rank(wanted: str, offered: str) -> int | None:
    """How well a variant for |offered| serves |wanted| (higher is better; None: not at all)."""
    if wanted == offered:
        return 1000
    w, o = _SM.match(wanted), _SM.match(offered)
    if w and o and w[1] == o[1] and int(o[2]) <= int(w[2]):
        return int(o[2])
    if wanted.startswith("rocm:") and offered.startswith("rocm:"):
        if wanted.split(":")[1] == offered.split(":")[1]:
            return 500
    return None


def choose_variant(entries: list[Entry], device: str, where: str) -> Entry:
    """The entry of |entries| (digest, size, device) that |device| needs; IncompatibleError
    naming the variants when an explicit device has none."""
    device = normalise_device(device)
    wanted = host_devices() if device == "host" else [device]
    for target in wanted:
        ranked = [(rank, i) for i, e in enumerate(entries)
                  if e[2] is not None and (rank := _rank(target, e[2])) is not None]
        if ranked:
            return entries[max(ranked)[1]]
    offered = ", ".join(e[2] or "(every device)" for e in entries)
    if device != "host":
        plain = [e for e in entries if e[2] is None]
        if plain:
            return plain[0]
        raise IncompatibleError(f"{where} has no variant for {device} (it has: {offered}): "
                                "pull one of those with --device, or push a variant for it")
    plain = [e for e in entries if e[2] is None]
    choice = plain[0] if plain else entries[0]
    log.info("%s: no variant matches this machine's devices (%s); taking %s", where,
             ", ".join(wanted) or "no GPU", choice[2] or "the one without device code")
    return choice
