"""W3 through modpack: a C host importing N const modules of 1 KiB each (flat).

Modes: ``export`` (build the tree and export it) and ``load`` (load it and count the imports).
With ``prebuilt``, the export's host is an object compiled before the clock starts, as TVM's
host is (``tvm.compile`` runs before its timer): the row then compares the packing and linking,
not gcc compiling C against a host that is already machine code.
"""

from __future__ import annotations

from pathlib import Path

import _common as c
import numpy as np

import modpack
from modpack.toolchain.cc import compile_c


def host_module(a: dict) -> modpack.Module:
    """The C host: as source (compiled by the export), or compiled now (``prebuilt``)."""
    if not a.get("prebuilt"):
        return modpack.csource_module(c.HOST_C)
    source = Path(a["out"]).with_suffix(".host.c")
    source.write_text(c.HOST_C)
    return modpack.object_module(compile_c(source, source.with_suffix(".o")))


def export(a: dict) -> dict:
    count, each = a["count"], a["each"]
    rng = np.random.default_rng(a["seed"])
    arrays = [rng.integers(0, 256, each, dtype=np.uint8) for _ in range(count)]
    host = host_module(a)
    before = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    for i, array in enumerate(arrays):
        host.import_module(modpack.const_module({f"w{i}": array}))
    build_s = c.now() - t0
    t0 = c.now()
    host.export_library(a["out"])
    export_s = c.now() - t0
    return {"build_s": build_s, "export_s": export_s,
            "python_peak_increase": c.peak_rss() - before,
            **c.toolchain_peak(c.tool_log(a.get("tool_log")))}


def load(a: dict) -> dict:
    before = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    root = modpack.load_module(a["path"], verify_checksums=a.get("verify", True))
    load_s = c.now() - t0
    after, peak = c.rss(), c.peak_rss()
    imports = root.imported_modules
    ok = len(imports) == a["count"] and all(m.type_key == "const" for m in imports)
    return {"load_s": load_s, "rss_increase": after - before, "peak_increase": peak - before,
            "imports": len(imports), "roundtrip_ok": ok}


if __name__ == "__main__":
    args = c.args()
    c.emit({"export": export, "load": load}[args["mode"]](args))
