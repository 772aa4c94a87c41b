"""W2 through modpack: one large const payload under a small C host.

Modes (the JSON argument's ``mode``):
  export     create the payload here, export host + const module, report time, phases and peaks
  load       load the exported library (checksums on or off), report time and RSS growth
  mmap_hash  hash the whole file through a fresh read-only mapping (page cache -> XXH3)
"""

from __future__ import annotations

import mmap
import os

import _common as c
import numpy as np
import xxhash

import modpack
from modpack.runtime.binding import ffi, lib


def checksum(view: memoryview | np.ndarray) -> tuple[int, float]:
    """The runtime's own XXH3 (mp_checksum) over |view|; returns (digest, seconds)."""
    buf = ffi.from_buffer(view)
    span = ffi.new("mp_const_byte_span_t*")
    span.data = ffi.cast("uint8_t*", buf)
    span.size = len(buf)
    t0 = c.now()
    digest = lib.mp_checksum(span[0])
    return digest, c.now() - t0


def xxhash_seconds(view: np.ndarray) -> float:
    """The xxhash package's XXH3-64 (a reference build of the same hash) over |view|."""
    t0 = c.now()
    xxhash.xxh3_64_intdigest(view)
    return c.now() - t0


def payload(size: int, seed: int) -> np.ndarray:
    """|size| bytes of float32 noise (size is a multiple of 4)."""
    return np.random.default_rng(seed).random(size // 4, dtype=np.float32)


def export(a: dict) -> dict:
    import modpack.exporter.export as export_module
    from modpack.serializer import ModuleSerializer

    base = c.rss()
    t0 = c.now()
    weights = payload(a["size"], a["seed"])
    create_s = c.now() - t0
    after_arrays = c.rss()
    c.reset_peak_rss()

    # Time the in-process packing phase without changing what it does: the blob object
    # writer (modpack.exporter.export._pack) where present, else the blob file writer.
    phases: dict[str, float] = {}
    owner, name = (export_module, "_pack") if hasattr(export_module, "_pack") else (
        ModuleSerializer, "write_blob")
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        t = c.now()
        try:
            return original(*args, **kwargs)
        finally:
            phases["pack_s"] = phases.get("pack_s", 0.0) + c.now() - t

    setattr(owner, name, timed)  # (a plain function: as a class attribute it binds self)

    t0 = c.now()
    host = modpack.csource_module(c.HOST_C)
    host.import_module(modpack.const_module({"weights": weights}))
    build_s = c.now() - t0
    with c.ShmemSampler() as shm:
        t0 = c.now()
        host.export_library(a["out"])
        export_s = c.now() - t0
    python_peak = c.peak_rss()

    tools = c.tool_log(a.get("tool_log"))
    for kind in ("compile", "assemble", "link"):  # tool time; "assemble" is inside pack_s
        phases[f"{kind}_s"] = sum(t["seconds"] for t in tools if t["tool"] == kind)
    digest = f"{checksum(weights.view(np.uint8))[0]:016x}"
    return {
        "export_s": export_s, "build_s": build_s, "create_s": create_s,
        "rss_base": base, "rss_after_arrays": after_arrays,
        "python_peak": python_peak, "python_peak_above_arrays": python_peak - after_arrays,
        **c.toolchain_peak(tools),
        "shmem_peak_increase": shm.peak_increase, "children_maxrss_raw": c.children_peak_rss(),
        "tools": tools, "phases": phases,
        "file_size": os.path.getsize(a["out"]), "digest": digest,
    }


def load(a: dict) -> dict:
    before = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    root = modpack.load_module(a["path"], verify_checksums=a["verify"])
    load_s = c.now() - t0
    after = c.rss()
    peak = c.peak_rss()

    # Not timed: check what came back, and measure XXH3 on the pages now resident.
    const = root.imported_modules[0]
    weights = const.arrays["weights"]
    raw = weights.view(np.uint8).reshape(-1)
    ok = raw.nbytes == a["size"]
    resident_bw = resident_bw_xxhash = None
    if a["verify"]:  # the checksum pass faulted the payload in: hash it again, resident
        best = min(checksum(raw)[1] for _ in range(3))
        resident_bw = raw.nbytes / best
        resident_bw_xxhash = raw.nbytes / min(xxhash_seconds(raw) for _ in range(3))
    digest = f"{checksum(raw)[0]:016x}"
    ok = ok and (a.get("digest") is None or digest == a["digest"])
    return {
        "load_s": load_s, "rss_before": before, "rss_increase": after - before,
        "peak_increase": peak - before, "verify": a["verify"], "roundtrip_ok": ok,
        "hash_bw_resident": resident_bw, "hash_bw_resident_xxhash": resident_bw_xxhash,
        "imports": len(root.imported_modules),
    }


def mmap_hash(a: dict) -> dict:
    with open(a["path"], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        view = memoryview(m)
        try:
            _, cold = checksum(view)
            _, warm = checksum(view)
        finally:
            view.release()
        size = len(m)
    return {"bytes": size, "mmap_hash_s": cold, "resident_hash_s": warm,
            "hash_bw_mmap": size / cold, "hash_bw_resident": size / warm}


if __name__ == "__main__":
    args = c.args()
    c.emit({"export": export, "load": load, "mmap_hash": mmap_hash}[args["mode"]](args))
