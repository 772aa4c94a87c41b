"""OpenCL device modules, executed for real on PoCL: device arrays, kernels from Python and from
host code, prebuilt binaries, and every error a user can cause."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import threading
from unittest import mock

import numpy as np
import pytest
from conftest import ROOT, run, run_python

import modpack
from modpack.modules.kernel_info import KernelArg, KernelInfo
from modpack.modules.opencl import LAUNCH_TAGS
from modpack.runtime.binding import error_from_status, ffi, lib

VADD = r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
__kernel void axpy(double alpha, __global const double* x, __global double* y, ulong n) {
  size_t i = get_global_id(0);
  if (i < n) y[i] += alpha * x[i];
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """A loaded library whose root imports an OpenCL module."""
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(VADD))
    path = host.export_library(tmp_path_factory.mktemp("ocl") / "k.so")
    return modpack.load_module(path)


def launch(n: int) -> tuple[int, ...]:
    return (n, 1, 1, 0, 0, 0)


def test_device_arrays_round_trip():
    assert modpack.device_count("opencl") >= 1
    for dtype in ("float32", "float64", "int8", "uint16", "int64", "bool"):
        host = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
        dev = modpack.array(host, device="opencl:0")
        assert dev.device == "opencl:0" and dev.shape == (2, 3, 4) and dev.dtype == host.dtype
        assert dev.__dlpack_device__() == (4, 0)
        assert np.array_equal(dev.numpy(), host)
    empty = modpack.empty((5,), "float32", device="opencl:0")
    assert empty.nbytes == 20
    with pytest.raises(ValueError, match="unknown device"):
        modpack.empty(3, "float32", device="tpu:0")
    with pytest.raises(modpack.ModpackError, match="opencl device 7 does not exist"):
        modpack.empty(3, "float32", device="opencl:7")


def test_cpu_arrays_speak_dlpack():
    a = modpack.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    view = np.from_dlpack(a)
    del a
    assert view.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_signatures_are_derived_from_the_source():
    mod = modpack.opencl_module(VADD)
    assert [f.signature() for f in mod.functions] == [
        "vadd(float32*, float32*, float32*, int32)",
        "axpy(float64, float64*, float64*, uint64)",
    ]
    local = modpack.opencl_module("__kernel void f(__local float* s) {}")
    assert local.functions[0].signature() == "f(local float32*)"
    with pytest.raises(ValueError, match="image2d_t"):
        modpack.opencl_module("__kernel void f(read_only image2d_t i) {}")
    explicit = modpack.opencl_module(VADD, functions={"vadd": ["float32*"] * 3 + ["int32"]})
    assert [f.name for f in explicit.functions] == ["vadd"]


def test_kernels_called_from_python(kernels):
    n = 1000
    a = modpack.array(np.arange(n, dtype=np.float32), device="opencl:0")
    b = modpack.array(np.full(n, 2, dtype=np.float32), device="opencl:0")
    c = modpack.empty(n, "float32", device="opencl:0")
    vadd = kernels.get_function("vadd", query_imports=True)
    vadd(a, b, c, n, *launch(n))
    assert np.array_equal(c.numpy(), np.arange(n, dtype=np.float32) + 2)
    x = modpack.array(np.ones(n), device="opencl:0")
    y = modpack.array(np.arange(n, dtype=np.float64), device="opencl:0")
    axpy = kernels.imported_modules[0]["axpy"]
    axpy(0.5, x, y, n, n, 1, 1, 50, 1, 1)  # an explicit local size
    assert np.array_equal(y.numpy(), np.arange(n) + 0.5)


def test_argument_errors_are_clear(kernels):
    n = 16
    vadd = kernels.get_function("vadd", query_imports=True)
    a = modpack.array(np.zeros(n, np.float32), device="opencl:0")
    with pytest.raises(modpack.ArgumentError, match=r"expected 10 arguments .* got 4"):
        vadd(a, a, a, n)
    wrong_dtype = "argument 2 must have dtype float32, got int32"
    with pytest.raises(modpack.ArgumentError, match=wrong_dtype):
        vadd(a, a, modpack.empty(n, "int32", device="opencl:0"), n, *launch(n))
    with pytest.raises(modpack.ArgumentError, match="not on an OpenCL device"):
        vadd(a, a, np.zeros(n, np.float32), n, *launch(n))
    with pytest.raises(modpack.ArgumentError, match="argument 3 must be an integer"):
        vadd(a, a, a, 1.5, *launch(n))
    with pytest.raises(modpack.ArgumentError, match="local sizes must be all 0"):
        vadd(a, a, a, n, n, 1, 1, 4, 0, 0)


@pytest.mark.parametrize(("source", "expected"), [
    ("__kernel void k(__global my_t* x, int n) {}",
     r"kernel k: parameter '__global my_t\* x' has type my_t, which the OpenCL source does not "
     r"declare \(after preprocessing with build options '-DN=1'\): declare it .*, or declare "
     r"the kernel's arguments with functions= instead: functions=\{'k': \[\.\.\.\]\}, one "
     r"spec per parameter: 'float32\*' for a buffer"),
    ("typedef float real;\n__kernel void a(__global real* x) {}\n"
     "__kernel void k(__global float* x,\n const foo_vec v, int n) {}",
     r"kernel k: parameter 'const foo_vec v' has type foo_vec, which"),
    ("typedef mystery_t elem;\n__kernel void k(__global elem* x) {}",
     r"uses type mystery_t without declaring it .*, in 'typedef mystery_t elem;'"),
])
def test_unknown_types_are_named_with_what_to_do(source, expected):
    """Not the parser's line and column (which counted modpack's own prelude): the type, the
    kernel and parameter, and how to declare the arguments instead."""
    with pytest.raises(modpack.ArgumentError, match=expected) as caught:
        modpack.opencl_module(source, build_options="-DN=1")
    assert "<opencl source>" not in str(caught.value)
    assert not re.search(r":\d+:\d+", str(caught.value))


def test_build_check_fails_the_export_not_the_first_launch(tmp_path):
    broken = "__kernel void f(__global float* x, int n) { x[0] = undefined_name; }"
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(broken, name="f32", build_check=True))
    with pytest.raises(modpack.CompileError,
                       match=r"(?s)opencl module 'f32' does not build, checked at export "
                             r"\(build_check=True\): OpenCL program failed to build.*"
                             r"undefined_name"):
        host.export_library(tmp_path / "broken.so")
    assert list(tmp_path.iterdir()) == []  # before any work
    good = modpack.csource_module("int placeholder;")
    good.import_module(modpack.opencl_module(VADD, build_check=True))
    assert good.export_library(tmp_path / "good.so").exists()
    with mock.patch("modpack.modules.opencl.build_check.device_count", return_value=0), \
            pytest.warns(modpack.ModpackWarning, match="no OpenCL device, so the source was not "
                                                      "built") as warned:
        good.export_library(tmp_path / "here.so")
    assert warned[0].filename == __file__  # the export_library call
    with pytest.raises(modpack.ArgumentError, match="build_check must be True or False"):
        modpack.opencl_module(VADD, build_check="yes")


def test_compile_errors_carry_the_build_log(tmp_path):
    broken = "__kernel void f(__global float* x, int n) { x[0] = undefined_name; }"
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(broken))
    lib = modpack.load_module(host.export_library(tmp_path / "broken.so"))  # loads fine
    x = modpack.empty(4, "float32", device="opencl:0")
    expected = r"(?s)failed to build.*build log.*undefined_name"
    with pytest.raises(modpack.ModpackError, match=expected):
        lib.get_function("f", query_imports=True)(x, 4, *launch(4))


def test_long_build_logs_are_kept(tmp_path):
    """OpenCL refuses a log buffer smaller than the log, so a long log (the one worth reading)
    must be sized first; the message keeps its start (the first errors) and says what is cut."""
    body = "\n".join(f"  x[{i}] = undefined_name_{i};" for i in range(200))
    broken = "__kernel void f(__global float* x, int n) {\n" + body + "\n}\n"
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(broken))
    loaded = modpack.load_module(host.export_library(tmp_path / "many_errors.so"))
    x = modpack.empty(4, "float32", device="opencl:0")
    with pytest.raises(modpack.ModpackError) as info:
        loaded.get_function("f", query_imports=True)(x, 4, *launch(4))
    message = str(info.value)
    log = message.split("build log:\n", 1)[1]
    assert "(empty)" not in log and "undefined_name_0" in log
    assert "more bytes)" in message and len(message) < 4096
    # Building a binary reports the same log.
    with pytest.raises(modpack.ModpackError, match=r"(?s)build log:\n.*undefined_name_0"):
        modpack.opencl_binaries(broken)


def test_prebuilt_binaries_are_used_when_they_match(tmp_path):
    # mp_opencl_build_binary picks the requested device's entry among the program's devices
    # (CL_PROGRAM_DEVICES); PoCL here has one device, so this covers the single-device case.
    binaries = modpack.opencl_binaries(VADD)
    (key,) = binaries
    assert key == modpack.device_name("opencl:0")
    # The source no longer compiles: only the binary can make the call work.
    functions = {"vadd": ["float32*"] * 3 + ["int32"]}
    mod = modpack.opencl_module("this is not OpenCL", functions=functions, binaries=binaries)
    host = modpack.csource_module("int placeholder;")
    host.import_module(mod)
    lib = modpack.load_module(host.export_library(tmp_path / "bin.so"))
    a = modpack.array(np.ones(8, np.float32), device="opencl:0")
    c = modpack.empty(8, "float32", device="opencl:0")
    lib.get_function("vadd", query_imports=True)(a, a, c, 8, *launch(8))
    assert np.array_equal(c.numpy(), np.full(8, 2, np.float32))


def test_stale_binaries_fall_back_to_source(tmp_path):
    key = modpack.device_name("opencl:0")
    mod = modpack.opencl_module(VADD, binaries={key: b"garbage", "other/device/1.0": b"x"})
    host = modpack.csource_module("int placeholder;")
    host.import_module(mod)
    lib = modpack.load_module(host.export_library(tmp_path / "stale.so"))
    a = modpack.array(np.ones(8, np.float32), device="opencl:0")
    c = modpack.empty(8, "float32", device="opencl:0")
    lib.get_function("vadd", query_imports=True)(a, a, c, 8, *launch(8))
    assert np.array_equal(c.numpy(), np.full(8, 2, np.float32))


def test_concurrent_calls_share_kernels(kernels):
    n = 4096
    vadd = kernels.get_function("vadd", query_imports=True)
    errors = []

    def work(seed: int) -> None:
        try:
            a_host = np.full(n, seed, np.float32)
            a = modpack.array(a_host, device="opencl:0")
            c = modpack.empty(n, "float32", device="opencl:0")
            for _ in range(25):
                vadd(a, a, c, n, *launch(n))
                assert np.array_equal(c.numpy(), 2 * a_host)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_kernel_info_limits_are_checked_when_written():
    """The writer refuses what the C reader would refuse, at construction."""
    with pytest.raises(ValueError, match="kernel name of 1025 bytes exceeds the limit of 1024"):
        KernelInfo("k" * 1025, (), LAUNCH_TAGS)
    with pytest.raises(ValueError, match="kernel name of 1026 bytes"):  # bytes, not characters
        KernelInfo("\u00e9" * 513, (), LAUNCH_TAGS)
    with pytest.raises(ValueError, match="kernel name is empty"):
        KernelInfo("", (), LAUNCH_TAGS)
    with pytest.raises(ValueError, match="NUL"):
        KernelInfo("a\0b", (), LAUNCH_TAGS)
    with pytest.raises(ValueError, match="257 arguments exceed the limit of 256"):
        modpack.opencl_module(VADD, functions={"vadd": ["int32"] * 257})
    with pytest.raises(ValueError, match="17 launch tags exceed the limit of 16"):
        modpack.opencl_module(VADD, functions={"vadd": {"args": [], "launch": ["global.x"] * 17}})
    with pytest.raises(ValueError, match="launch tag of 80 bytes exceeds the limit of 64"):
        KernelInfo("f", (), ("t" * 80,))
    with pytest.raises(ValueError, match="launch tag is empty"):
        KernelInfo("f", (), ("",))
    with pytest.raises(TypeError, match="list of tags"):
        modpack.opencl_module(VADD, functions={"vadd": {"args": [], "launch": "global.x"}})
    # At the limits, what is written loads.
    at_limits = KernelInfo("k" * 1024, (KernelArg.parse("int32"),) * 256, LAUNCH_TAGS)
    info = load_opencl_payload(opencl_payload(at_limits.encode()))
    assert info["kernels"][0]["name"] == "k" * 1024


def opencl_payload(*records: bytes) -> bytes:
    source = b"__kernel void f(void) {}"
    return b"".join([struct.pack("<IIQ", 1, 0, len(source)), source,
                     struct.pack("<I", len(records)), *records, struct.pack("<I", 0)])


def load_opencl_payload(payload: bytes) -> dict:
    """Run the C loader on raw payload bytes (no library, no driver) and return its
    description, or raise its error."""
    data = ffi.from_buffer(payload)
    span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(payload)})
    out = ffi.new("mp_module_t**")
    status = lib.mp_module_load_from_payload(b"opencl", span[0], out)
    if status != 0:
        raise error_from_status(status)
    try:
        buffer = ffi.new("char[]", 1 << 20)
        assert lib.mp_module_describe(out[0], buffer, 1 << 20, ffi.NULL) == 0
        return json.loads(ffi.string(buffer).decode())
    finally:
        lib.mp_module_release(out[0])


def _record(name: bytes, args: int = 0, tags: list[bytes] | None = None) -> bytes:
    """A function-info record written by hand (int32 scalars), to go past the writer's checks."""
    tags = [t.encode() for t in LAUNCH_TAGS] if tags is None else tags
    parts = [struct.pack("<I", len(name)), name, struct.pack("<I", args),
             bytes([1, 0, 32, 1]) * args, struct.pack("<I", len(tags))]
    for tag in tags:
        parts += [struct.pack("<I", len(tag)), tag]
    return b"".join(parts)


@pytest.mark.parametrize(("record", "expected"), [
    (_record(b"k" * 2000), "opencl payload: kernel name of 2000 bytes exceeds 1024"),
    (_record(b""), "opencl payload: kernel name is empty"),
    (_record(b"k", args=300), "opencl payload: kernel k: argument count of 300 exceeds 256"),
    (_record(b"k", tags=[b"global.x"] * 17),
     "opencl payload: kernel k: launch tag count of 17 exceeds 16"),
    (_record(b"k", tags=[b"t" * 80]),
     "opencl payload: kernel k: launch tag of 80 bytes exceeds 64"),
    (_record(b"k", tags=[b""]), "opencl payload: kernel k: launch tag is empty"),
], ids=["long-name", "empty-name", "many-args", "many-tags", "long-tag", "empty-tag"])
def test_kernel_info_limits_are_named_when_read(record, expected):
    """A record over a limit says which limit, not that the payload is truncated."""
    with pytest.raises(modpack.FormatError) as info:
        load_opencl_payload(opencl_payload(record))
    assert expected in str(info.value) and "truncated" not in str(info.value)


def _child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_no_platform_is_a_clear_error(tmp_path):
    """A machine whose ICD loader finds no driver: loading works, using OpenCL says why."""
    empty = tmp_path / "vendors"
    empty.mkdir()
    proc = _child(
        "import modpack\n"
        "try:\n    modpack.empty(4, 'float32', device='opencl:0')\n"
        "except modpack.UnavailableError as e:\n    print('Unavailable:', e)\n",
        OCL_ICD_VENDORS=str(empty),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Unavailable: no OpenCL platform found" in proc.stdout
    assert "pocl-opencl-icd" in proc.stdout


def test_missing_opencl_library_is_a_clear_error(kernels):
    proc = _child(
        "import sys, modpack\n"
        "lib = modpack.load_module(sys.argv[1])\n"  # loading needs no OpenCL
        "print('count', modpack.device_count('opencl'))\n"  # none, as users count them
        "try:\n    modpack.empty(4, 'float32', device='opencl:0')\n"
        "except modpack.UnavailableError as e:\n    print('Unavailable:', e)\n",
        kernels.library_path,
        MODPACK_OPENCL_LIBRARY="/nonexistent/libOpenCL.so.1",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("count 0\n")
    assert "OpenCL is not available: cannot load /nonexistent/libOpenCL.so.1" in proc.stdout


def test_inspect_lists_the_kernels(kernels):
    from modpack.tools.inspection import inspect_library

    (ocl,) = [m for m in inspect_library(kernels.library_path)["modules"]
              if m["type_key"] == "opencl"]
    assert ocl["contents"]["functions"] == ["vadd", "axpy"]
    assert ocl["contents"]["kernels"][1]["args"] == ["float64", "float64*", "float64*", "uint64"]


def test_example_from_python(tmp_path):
    out = run(sys.executable, ROOT / "examples" / "opencl_vadd" / "pipeline.py",
              tmp_path / "deploy.so")
    assert "opencl_vadd (Python): OK" in out and "first call (program build)" in out


def test_example_from_c(tmp_path, runtime_prefix):
    example = ROOT / "examples" / "opencl_vadd"
    build = tmp_path / "build"
    run("cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    deploy = tmp_path / "deploy.so"
    run(sys.executable, example / "pipeline.py", "build", deploy)
    out = run(build / "opencl_vadd", deploy)
    assert "opencl_vadd (C): OK, 4096 elements match" in out


def test_fresh_process_runs_the_pipeline(tmp_path):
    sys.path.insert(0, str(ROOT / "examples" / "opencl_vadd"))
    try:
        import pipeline
    finally:
        sys.path.pop(0)
    path = pipeline.build(tmp_path / "p.so")
    out = run_python(
        "import sys; sys.path.insert(0, sys.argv[2]); import pipeline\n"
        "pipeline.run(__import__('pathlib').Path(sys.argv[1]), n=1000)",
        str(path), str(ROOT / "examples" / "opencl_vadd"),
    )
    assert "OK, matches numpy" in out
