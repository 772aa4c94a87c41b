"""The TVM side's shared pieces (run only with the TVM virtualenv's Python).

The host is the same as modpack's: ``add_one_scalar`` (int64 -> int64) and ``add_one`` on
float32 vectors, compiled for ``llvm``; payloads ride in ``const_loader`` modules, created with
``ffi.Module.create.const_loader`` exactly as the peer study did.
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.script import tirx as T


def build_host():
    """The compiled LLVM host library module (``tvm.compile(...).mod``)."""

    @T.prim_func
    def add_one_scalar(x: T.int64) -> T.int64:
        T.func_attr({"global_symbol": "add_one_scalar"})
        return x + T.int64(1)

    n = te.var("n")
    a = te.placeholder((n,), "float32", "A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    add_one = te.create_prim_func([a, b]).with_attr("global_symbol", "add_one")
    mod = tvm.IRModule({"add_one": add_one, "add_one_scalar": add_one_scalar})
    return tvm.compile(mod, target="llvm").mod


def const_loader(arrays: dict):
    """A const_loader module holding |arrays| (name -> tvm Tensor)."""
    return tvm.get_global_func("ffi.Module.create.const_loader")(arrays, {})


def const_tensors(module) -> dict:
    """The tensors of a loaded const_loader module (name -> tvm Tensor)."""
    return dict(module.get_function("get_const_var_tensor")())
