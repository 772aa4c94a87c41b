"""W1 through modpack: a tiny C host (add_one on an int64 scalar and on float32 vectors).

Modes:
  export  export the tiny library (or, with "same_c", only add_one over the loop both sides
          compile alike), report compile+export time
  call    load it, then time ``f = lib[name]`` and the first ``f(...)`` separately, then the
          steady-state time per call (best of several timeit rounds)
"""

from __future__ import annotations

import os
import timeit

import _common as c
import numpy as np

import modpack


def export(a: dict) -> dict:
    t0 = c.now()
    host = modpack.csource_module(c.SAME_C_MODPACK if a.get("same_c") else c.HOST_C)
    host.export_library(a["out"])
    return {"export_s": c.now() - t0, "file_size": os.path.getsize(a["out"])}


def call(a: dict) -> dict:
    t0 = c.now()
    root = modpack.load_module(a["path"])
    load_s = c.now() - t0
    if a["kind"] == "scalar":
        name, args = "add_one_scalar", (41,)
    else:
        x = np.arange(a.get("n", 1024), dtype=np.float32)
        name, args = "add_one", (x, np.empty_like(x))
    t0 = c.now()
    f = root[name]
    t1 = c.now()
    result = f(*args)
    t2 = c.now()
    ok = result == 42 if a["kind"] == "scalar" else bool((args[1] == args[0] + 1).all())
    number = a.get("number", 20000)
    rounds = timeit.repeat(lambda: f(*args), number=number, repeat=5)
    lookups = timeit.repeat(lambda: root[name], number=number // 10, repeat=5)
    return {"load_s": load_s, "lookup_s": t1 - t0, "first_call_s": t2 - t1,
            "lookup_and_first_call_s": t2 - t0, "steady_call_s": min(rounds) / number,
            "steady_lookup_s": min(lookups) / (number // 10), "ok": ok}


if __name__ == "__main__":
    args = c.args()
    c.emit({"export": export, "call": call}[args["mode"]](args))
