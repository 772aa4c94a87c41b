"""What kernel records (version 2) add so that compiler output goes in as it is: pointers that
may be NULL (None), hidden pointers the launch passes as NULL, launch values fixed at build
time, and named device modules, so that one source built twice can share a library and each
kernel is found as "name/kernel" — from Python, from host code and in `modpack inspect`. Run
for real on PoCL."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import modpack
from modpack.cli.main import main as cli_main
from modpack.modules.kernel_info import NULL, KernelArg, KernelInfo
from modpack.tools.inspection import inspect_library

needs_opencl = pytest.mark.skipif(modpack.device_count("opencl") < 1,
                                  reason="no OpenCL device")

# y = x + bias, where bias may be NULL (a compiler's optional input).
BIAS_ADD = r"""
__kernel void bias_add(__global const float* x, __global const float* bias, __global float* y,
                       int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = x[i] + (bias ? bias[i] : 0.0f);
}
"""

# One source, two builds: FACTOR comes from the build options.
MUL = r"""
__kernel void mul(__global float* x, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] *= FACTOR;
}
"""

# |scratch| is a pointer the caller never sees (as compilers add for profiling or scratch).
HIDDEN = r"""
__kernel void twice(__global float* x, __global int* scratch, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] = scratch ? -1.0f : 2.0f * x[i];
}
"""


def test_arg_specs() -> None:
    hidden = KernelArg.parse("null void*")
    assert hidden.kind == NULL and hidden.dtype is None and str(hidden) == "null void*"
    assert str(KernelArg.parse("null float32 *")) == "null float32*"
    assert KernelArg.parse("null*") == KernelArg.parse("null void *")
    for bad in ("null thing*", "nullable*", "null int32"):  # not a pointer, not a dtype
        with pytest.raises(ValueError, match="numpy dtype name"):
            KernelArg.parse(bad)


def test_record_versions() -> None:
    plain = KernelInfo("k", ("float32*",), ("global.x",))
    assert plain.record_version == 1
    assert KernelInfo("k", ("float32*", "null void*"), ()).record_version == 2
    assert KernelInfo("k", (), (), fixed={"local.x": 64}).record_version == 2
    assert KernelInfo("k<1>", (), (), symbol="_Z1kILi1EEvv").record_version == 2
    assert KernelInfo("k", (), (), symbol="k").record_version == 1  # the same name
    with pytest.raises(ValueError, match="needs record version 2"):
        KernelInfo("k", (), (), fixed={"local.x": 1}).encode(1)
    with pytest.raises(ValueError, match="non-negative int"):
        KernelInfo("k", (), (), fixed={"local.x": -1})
    with pytest.raises(ValueError, match="non-negative int"):
        KernelInfo("k", (), (), fixed={"local.x": True})


def test_payload_version_only_rises_when_needed() -> None:
    """Modules that need nothing new keep payload version 1, so older runtimes read them."""
    def version(module: modpack.Module) -> int:
        return struct.unpack_from("<I", module.save_to_binary())[0]

    assert version(modpack.opencl_module(MUL, build_options="")) == 1
    assert version(modpack.opencl_module(MUL, name="x2")) == 2
    hidden = modpack.opencl_module(HIDDEN, functions={"twice": ["float32*", "null*", "int32"]})
    assert version(hidden) == 2


def test_launch_tags_checked_when_made() -> None:
    with pytest.raises(ValueError, match="given twice"):
        modpack.opencl_module(MUL, functions={"mul": {
            "args": ["float32*", "int32"], "launch": ["global.x"], "fixed": {"global.x": 4}}})
    with pytest.raises(ValueError, match="unknown launch tags"):
        modpack.opencl_module(MUL, functions={"mul": {
            "args": ["float32*", "int32"], "fixed": {"warp.x": 4}}})
    with pytest.raises(ValueError, match="unknown keys"):
        modpack.opencl_module(MUL, functions={"mul": {"args": [], "fixd": {}}})
    for bad in ("", "a/b", "x" * 256):
        with pytest.raises(ValueError, match="module name"):
            modpack.opencl_module(MUL, name=bad)


@needs_opencl
def test_none_is_a_null_pointer(tmp_path: Path) -> None:
    path = modpack.opencl_module(BIAS_ADD).export_library(tmp_path / "bias.so")
    kernel = modpack.load_module(path)["bias_add"]
    n = 64
    x = np.arange(n, dtype=np.float32)
    xd = modpack.array(x, device="opencl:0")
    bias = modpack.array(np.full(n, 10, np.float32), device="opencl:0")
    y = modpack.empty(n, "float32", device="opencl:0")
    kernel(xd, None, y, n, n, 1, 1, 0, 0, 0)
    np.testing.assert_array_equal(y.numpy(), x)
    kernel(xd, bias, y, n, n, 1, 1, 0, 0, 0)
    np.testing.assert_array_equal(y.numpy(), x + 10)
    with pytest.raises(modpack.ArgumentError, match=r"must be an array .* or None, got int"):
        kernel(xd, 3, y, n, n, 1, 1, 0, 0, 0)


@needs_opencl
def test_hidden_pointers_and_fixed_launch_values(tmp_path: Path) -> None:
    """The call passes the visible arguments and global x only: the hidden pointer is NULL
    and the rest of the launch is fixed by the record."""
    spec = {"twice": {"args": ["float32*", "null void*", "int32"], "launch": ["global.x"],
                      "fixed": {"local.x": 8, "local.y": 1, "local.z": 1}}}
    path = modpack.opencl_module(HIDDEN, functions=spec).export_library(tmp_path / "hidden.so")
    [opencl] = [m for m in inspect_library(path)["modules"] if m["type_key"] == "opencl"]
    described = opencl["contents"]["kernels"][0]
    assert described["args"] == ["float32*", "null void*", "int32"]
    assert described["launch"] == ["global.x"]
    assert described["fixed"] == {"local.x": 8, "local.y": 1, "local.z": 1}
    twice = modpack.load_module(path)["twice"]
    x = np.arange(32, dtype=np.float32)
    xd = modpack.array(x, device="opencl:0")
    twice(xd, 32, 32)
    np.testing.assert_array_equal(xd.numpy(), 2 * x)  # not -1: scratch was NULL
    with pytest.raises(modpack.ArgumentError, match=r"expected 3 arguments \(2 kernel"):
        twice(xd, None, 32, 32)


def _two_builds(name_a: str | None, name_b: str | None) -> modpack.Module:
    root = modpack.csource_module(HOST)
    root.import_module(modpack.opencl_module(MUL, build_options="-DFACTOR=2", name=name_a))
    root.import_module(modpack.opencl_module(MUL, build_options="-DFACTOR=3", name=name_b))
    return root


HOST = r"""
#include "modpack/backend.h"
/* Multiply a device array by 3 through the module named "x3". */
static void by_three(DLTensor* x) {
  void* mul = NULL;
  if (mp_backend_get_function("x3/mul", &mul) != MP_OK) return;
  mp_value_t args[] = {mp_tensor(x), mp_int(x->shape[0]), mp_int(x->shape[0]), mp_int(1),
                       mp_int(1), mp_int(0), mp_int(0), mp_int(0)};
  mp_value_t ret;
  mp_backend_call(mul, args, 8, &ret);
}
MP_EXPORT_VOID_FUNC(by_three, DLTensor*)
"""


@needs_opencl
def test_named_modules_share_kernel_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named modules: nothing is shadowed
        path = _two_builds("x2", "x3").export_library(tmp_path / "two.so")
    mod = modpack.load_module(path)
    assert [m.name for m in mod.imported_modules] == ["x2", "x3"]
    assert "name='x3'" in repr(mod.imported_modules[1])
    n = 16
    x = np.arange(n, dtype=np.float32)
    for qualified, factor in (("x2/mul", 2), ("x3/mul", 3), ("mul", 2)):
        xd = modpack.array(x, device="opencl:0")
        mod.get_function(qualified, query_imports=True)(xd, n, n, 1, 1, 0, 0, 0)
        np.testing.assert_array_equal(xd.numpy(), factor * x, err_msg=qualified)
    xd = modpack.array(x, device="opencl:0")
    mod["by_three"](xd)  # host code finds "x3/mul"
    np.testing.assert_array_equal(xd.numpy(), 3 * x)
    with pytest.raises(modpack.NotFoundError, match="x4/mul"):
        mod.get_function("x4/mul", query_imports=True)
    assert cli_main(["inspect", str(path)]) == 0
    assert "module 2 (opencl, named 'x3')" in capsys.readouterr().out


@needs_opencl
def test_a_qualified_name_is_found_from_the_root(tmp_path: Path) -> None:
    """lib["x3/mul"] on the root, without query_imports, as host code finds it: the module
    name says where to look (it was NotFoundError from Python only)."""
    mod = modpack.load_module(_two_builds("x2", "x3").export_library(tmp_path / "two.so"))
    n = 8
    x = np.arange(n, dtype=np.float32)
    for qualified, factor in (("x2/mul", 2), ("x3/mul", 3)):
        xd = modpack.array(x, device="opencl:0")
        mod[qualified](xd, n, n, 1, 1, 0, 0, 0)
        np.testing.assert_array_equal(xd.numpy(), factor * x, err_msg=qualified)
        assert mod.get_function(qualified) is mod[qualified]
    with pytest.raises(modpack.NotFoundError, match="no function named 'x4/mul'"):
        mod["x4/mul"]
    with pytest.raises(modpack.NotFoundError, match="no function named 'mul' in the library"):
        mod["mul"]  # a plain name on the root is still the root's own
    x2 = mod.imported_modules[0]
    assert x2["x2/mul"] is not None
    with pytest.raises(modpack.NotFoundError, match="x3/mul"):
        x2["x3/mul"]  # only the tree below the module it is asked of


def test_shadowed_kernels_warn_and_shared_names_fail(tmp_path: Path) -> None:
    with pytest.warns(modpack.ModpackWarning, match=r"\['mul'\] are defined by more than one"):
        _two_builds(None, "x3").export_library(tmp_path / "shadowed.so")
    with pytest.raises(modpack.ModpackError, match=r"share the names \['x'\]"):
        _two_builds("x", "x").export_library(tmp_path / "same.so")
    assert not (tmp_path / "same.so").exists()
