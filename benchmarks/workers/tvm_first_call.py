"""W1 through TVM: the LLVM host (add_one_scalar, add_one), same measurements as
mp_first_call.py. Arrays are passed as numpy arrays (tvm_ffi takes them through DLPack)."""

from __future__ import annotations

import os
import subprocess
import timeit

import _common as c
import _tvm
import numpy as np
import tvm


def export(a: dict) -> dict:
    if a.get("same_c"):
        return export_same_c(a)
    t0 = c.now()
    host = _tvm.build_host()
    compile_s = c.now() - t0
    t0 = c.now()
    host.export_library(a["out"])
    return {"compile_s": compile_s, "export_s": c.now() - t0,
            "file_size": os.path.getsize(a["out"])}


def export_same_c(a: dict) -> dict:
    """add_one over the shared C loop, a tvm-ffi typed export built by c++ -O2."""
    import tvm_ffi

    home = os.path.dirname(tvm_ffi.__file__)
    source = a["out"] + ".cc"
    with open(source, "w") as f:
        f.write(c.SAME_C_TVM)
    t0 = c.now()
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", "-shared", "-fPIC",
                    f"-I{home}/include", source, f"-L{home}/lib", "-ltvm_ffi",
                    f"-Wl,-rpath,{home}/lib", "-o", a["out"]], check=True)
    return {"export_s": c.now() - t0, "file_size": os.path.getsize(a["out"])}


def call(a: dict) -> dict:
    t0 = c.now()
    root = tvm.runtime.load_module(a["path"])
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
