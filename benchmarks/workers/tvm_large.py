"""W2 through TVM: one large const_loader payload under the LLVM host, default LLVM packer.

Modes: ``export`` (payload created here, turned into a tvm Tensor, exported with
``export_library``) and ``load`` (``tvm.runtime.load_module`` with the full ``import tvm``).
The payload is the same float32 noise as modpack's (same seed); CRC-32 checks the round trip.
"""

from __future__ import annotations

import os
import zlib

import _common as c
import numpy as np

t0 = c.now()
import _tvm  # noqa: E402
import tvm  # noqa: E402

IMPORT_S = c.now() - t0


def export(a: dict) -> dict:
    t0 = c.now()
    host = _tvm.build_host()
    compile_s = c.now() - t0
    base = c.rss()
    t0 = c.now()
    data = np.random.default_rng(a["seed"]).random(a["size"] // 4, dtype=np.float32)
    crc = zlib.crc32(data.view(np.uint8))
    tensor = tvm.runtime.tensor(data)  # the caller's array, in the form TVM takes
    del data
    create_s = c.now() - t0
    after_arrays = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    host.import_module(_tvm.const_loader({"weights": tensor}))
    build_s = c.now() - t0
    with c.ShmemSampler() as shm:
        t0 = c.now()
        host.export_library(a["out"])
        export_s = c.now() - t0
    python_peak = c.peak_rss()
    tools = c.tool_log(a.get("tool_log"))
    link_s = sum(t["seconds"] for t in tools if t["tool"] == "link")
    return {
        "export_s": export_s, "build_s": build_s, "create_s": create_s, "compile_s": compile_s,
        "import_s": IMPORT_S, "rss_base": base, "rss_after_arrays": after_arrays,
        "python_peak": python_peak, "python_peak_above_arrays": python_peak - after_arrays,
        **c.toolchain_peak(tools),
        "shmem_peak_increase": shm.peak_increase, "children_maxrss_raw": c.children_peak_rss(),
        "tools": tools,
        "phases": {"in_process_s": export_s - link_s, "link_s": link_s},
        "file_size": os.path.getsize(a["out"]), "digest": f"{crc:08x}",
    }


def load(a: dict) -> dict:
    before = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    root = tvm.runtime.load_module(a["path"])
    load_s = c.now() - t0
    after, peak = c.rss(), c.peak_rss()
    tensor = _tvm.const_tensors(root.imports[0])["weights"]
    data = np.from_dlpack(tensor)
    ok = data.nbytes == a["size"] and (
        a.get("digest") is None or f"{zlib.crc32(data.view(np.uint8)):08x}" == a["digest"])
    return {"load_s": load_s, "rss_before": before, "rss_increase": after - before,
            "peak_increase": peak - before, "roundtrip_ok": ok, "import_s": IMPORT_S}


if __name__ == "__main__":
    args = c.args()
    c.emit({"export": export, "load": load}[args["mode"]](args))
