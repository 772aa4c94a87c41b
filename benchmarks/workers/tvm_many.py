"""W3 through TVM: the LLVM host importing N const_loader modules of 1 KiB each (flat),
exported with the default LLVM packer. Modes: ``export`` and ``load``."""

from __future__ import annotations

import _common as c
import _tvm
import numpy as np
import tvm


def export(a: dict) -> dict:
    count, each = a["count"], a["each"]
    host = _tvm.build_host()
    rng = np.random.default_rng(a["seed"])
    tensors = [tvm.runtime.tensor(rng.integers(0, 256, each, dtype=np.uint8))
               for _ in range(count)]
    before = c.rss()
    c.reset_peak_rss()
    t0 = c.now()
    for i, tensor in enumerate(tensors):
        host.import_module(_tvm.const_loader({f"w{i}": tensor}))
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
    root = tvm.runtime.load_module(a["path"])
    load_s = c.now() - t0
    after, peak = c.rss(), c.peak_rss()
    imports = root.imports
    ok = len(imports) == a["count"] and all(m.kind == "const_loader" for m in imports)
    return {"load_s": load_s, "rss_increase": after - before, "peak_increase": peak - before,
            "imports": len(imports), "roundtrip_ok": ok}


if __name__ == "__main__":
    args = c.args()
    c.emit({"export": export, "load": load}[args["mode"]](args))
