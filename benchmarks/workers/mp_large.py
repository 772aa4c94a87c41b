"""W2 through modpack: one large const payload under a small C host.

Modes (the JSON argument's ``mode``):
  export     create the payload here, export host + const module, report time, phases and peaks
  load       load the exported library (checksums on or off), report time and RSS growth
  mmap_hash  hash the whole file through a fresh read-only mapping (page cache -> XXH3)
  seq_read   read the whole file with read() in 8 MiB pieces: the disk's sequential speed when
             the file is not cached (run.py drops it first), the yardstick of cold loads
  write      create the payload here, write it to a new file with write() in 8 MiB pieces and
             fdatasync it: the floor of an export, one sequential write of the payload to disk
             (the export, too, returns with its payload on disk)
  seal       export a host library of about 1 MiB (code and data, no blob) and time the
             runtime's seal check of it (mp_seal_check_file), warm
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
    import modpack.exporter.finish as finish_module

    base = c.rss()
    t0 = c.now()
    weights = payload(a["size"], a["seed"])
    create_s = c.now() - t0
    after_arrays = c.rss()
    c.reset_peak_rss()

    # Time the in-process phases without changing what they do: writing the blob into the
    # linked library (place_blob) or the blob object (blob_object), and the seal.
    phases: dict[str, float] = {}
    for phase, owner, name in (("place_s", finish_module, "place_blob_into"),
                               ("pack_s", finish_module, "blob_object"),
                               ("seal_s", finish_module, "seal_file")):
        if hasattr(owner, name):
            _time_calls(owner, name, phase, phases)

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


def _time_calls(owner: object, name: str, phase: str, phases: dict[str, float]) -> None:
    """Replace owner.name by a wrapper adding its time to phases[phase]."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        t = c.now()
        try:
            return original(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + c.now() - t

    setattr(owner, name, timed)  # (a plain function: as a class attribute it binds self)


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


def write(a: dict) -> dict:
    view = memoryview(payload(a["size"], a["seed"])).cast("B")
    t0 = c.now()
    with open(a["out"], "wb") as f:
        for start in range(0, len(view), 8 << 20):
            f.write(view[start : start + (8 << 20)])
        f.flush()
        os.fdatasync(f.fileno())
    return {"write_s": c.now() - t0}


def seq_read(a: dict) -> dict:
    fd = os.open(a["path"], os.O_RDONLY)
    try:
        t0 = c.now()
        total = 0
        while chunk := os.read(fd, 8 << 20):
            total += len(chunk)
        seconds = c.now() - t0
    finally:
        os.close(fd)
    return {"bytes": total, "seq_read_s": seconds, "seq_read_bw": total / seconds}


# About 1 MiB of host library: 768 KiB of read-only data and a few hundred functions.
SEAL_HOST_C = "\n".join([
    '#include "modpack/backend.h"',
    "static const unsigned char table[768 * 1024] = {1};",
    *(f"int64_t f{i}(int64_t x) {{ return x * {i} + table[x & 1023]; }}" for i in range(3000)),
    "static int64_t first(int64_t x) { return f0(x); }",
    "MP_EXPORT_FUNC(first, int64_t, int64_t)",
])


def seal(a: dict) -> dict:
    path = a["out"]
    modpack.csource_module(SEAL_HOST_C).export_library(path)
    out = ffi.new("mp_seal_v1_t*")
    times = []
    for _ in range(a.get("repeats", 50)):
        t0 = c.now()
        status = lib.mp_seal_check_file(os.fsencode(path), out)
        times.append(c.now() - t0)
        if status != 0:
            raise SystemExit(f"seal check failed with status {status}")
    times.sort()
    return {"file_size": os.path.getsize(path), "seal_check_s": times[len(times) // 2],
            "seal_check_min_s": times[0]}


if __name__ == "__main__":
    args = c.args()
    modes = {"export": export, "load": load, "mmap_hash": mmap_hash, "seq_read": seq_read,
             "write": write, "seal": seal}
    c.emit(modes[args["mode"]](args))
