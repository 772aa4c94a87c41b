"""Self-tests inside the artifact: ``export_library(..., selftests=[...])`` bundles inputs,
expected outputs and tolerances for named functions; ``modpack.selftest`` and ``modpack
selftest FILE --device D`` run them on this machine and say pass or fail per test: host code on
the CPU, OpenCL kernels (PoCL here) called directly or through host code. A self-test that
names a function the library lacks, or cannot hold, is refused at export; self-tests are data,
run on request only."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from blobtools import read_blob, reseal, write_blob
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library
from modpack.tools.inspection import inspect_library

needs_opencl = pytest.mark.skipif(modpack.device_count("opencl") < 1,
                                  reason="no OpenCL device (PoCL: apt-get install pocl-opencl-icd)")

HOST = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "modpack/backend.h"

static void vadd(const DLTensor* a, const DLTensor* b, DLTensor* c) {
  const float* x = a->data; const float* y = b->data; float* z = c->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_TYPED_VOID_FUNC(vadd, "a: float32[n] cpu, b: float32[n] cpu, c: float32[n] cpu",
                          const DLTensor*, const DLTensor*, DLTensor*)

static void halve(DLTensor* x) {  /* in place; NaN stays NaN */
  double* v = x->data;
  for (int64_t i = 0; i < x->shape[0]; ++i) v[i] = v[i] / 2;
}
MP_EXPORT_TYPED_VOID_FUNC(halve, "x: float64[n] cpu", DLTensor*)

static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
static double tenth_sum(void) { return 0.1 + 0.2; }
MP_EXPORT_FUNC0(tenth_sum, double)

static int64_t mark(void) {  /* a side effect: proves when a test ran */
  const char* path = getenv("MODPACK_TEST_MARKER");
  FILE* f = path ? fopen(path, "a") : NULL;
  if (f) { fputs("ran\n", f); fclose(f); }
  return 1;
}
MP_EXPORT_FUNC0(mark, int64_t)

static void refuse(const DLTensor* x) {
  mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "refuse: %lld elements is too many",
                    (long long)x->shape[0]);
}
MP_EXPORT_TYPED_VOID_FUNC(refuse, "x: float32[n] cpu", const DLTensor*)

/* out = a + b on the arrays' OpenCL device, through the kernel. */
MP_EXPORT_PACKED(cl_add) {
  (void)self; (void)out_ret;
  static void* kernel;
  mp_status_t s = mp_backend_check_args(
      "cl_add", "a: float32[n] opencl, b: float32[n] opencl, out: float32[n] opencl", args,
      num_args);
  if (s != MP_OK) return s;
  if (!kernel && (s = mp_backend_get_function("vadd_k", &kernel)) != MP_OK) return s;
  int64_t n = args[0].v_tensor->shape[0];
  mp_value_t k[] = {args[0], args[1], args[2], mp_int(n), mp_int(n), mp_int(1), mp_int(1),
                    mp_int(0), mp_int(0), mp_int(0)};
  mp_value_t ret;
  return mp_backend_call(kernel, k, 10, &ret);
}
"""
KERNELS = r"""
__kernel void vadd_k(__global const float* a, __global const float* b, __global float* out,
                     int n) {
  int i = get_global_id(0);
  if (i < n) out[i] = a[i] + b[i];
}
"""
N = 16
A = np.linspace(-1, 1, N, dtype=np.float32)
B = np.arange(N, dtype=np.float32)
OUT = np.zeros(N, np.float32)
HALVES = np.array([1.0, np.nan, -3.0, np.inf], dtype=np.float64)
LAUNCH = [N, 1, 1, 0, 0, 0]


def tree() -> modpack.Module:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.opencl_module(KERNELS, name="cl"))
    return host


def cpu_tests() -> list:
    return [
        modpack.SelfTest("vadd", [A, B, OUT], expected={2: A + B}, name="vadd-small"),
        modpack.SelfTest("halve", [HALVES], expected={0: HALVES / 2}),  # NaN, inf as NaN, inf
        {"function": "add_int", "args": [40, True], "returns": 41},
        modpack.SelfTest("tenth_sum", returns=0.3),  # 0.30000000000000004, within rtol
    ]


def opencl_tests() -> list:
    return [
        modpack.SelfTest("cl_add", [A, B, OUT], expected={2: A + B}, device="opencl"),
        modpack.SelfTest("vadd_k", [A, B, OUT, N, *LAUNCH], expected={2: A + B},
                         device="opencl", name="kernel"),
        modpack.SelfTest("cl/vadd_k", [A, B, OUT, N, *LAUNCH], expected={2: A + B},
                         device="opencl", name="kernel by qualified name"),
    ]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return tree().export_library(tmp_path_factory.mktemp("selftest") / "deploy.so",
                                 selftests=cpu_tests() + opencl_tests())


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modpack", "selftest", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@needs_opencl
def test_every_test_passes_on_its_own_device(library):
    """Host functions on the CPU (outputs written into arguments, returned values, NaN and
    infinities matching themselves, a float within its tolerance), and OpenCL through host
    code and as a kernel called directly, by its plain and qualified names."""
    results = modpack.selftest(library)
    assert [(r.name, r.status, r.device) for r in results] == [
        ("vadd-small", "pass", "cpu:0"), ("halve", "pass", "cpu:0"),
        ("add_int", "pass", "cpu:0"), ("tenth_sum", "pass", "cpu:0"),
        ("cl_add", "pass", "opencl:0"), ("kernel", "pass", "opencl:0"),
        ("kernel by qualified name", "pass", "opencl:0")]
    assert all(r.max_abs_error == r.max_rel_error == 0.0 for r in results
               if r.name in ("vadd-small", "halve", "kernel"))
    assert 0 < results[3].max_abs_error < 1e-15  # 0.1 + 0.2 - 0.3
    proc = cli(library)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS    cl_add (cl_add on opencl:0)" in proc.stdout
    assert proc.stdout.rstrip().endswith("PASSED: 7 passed, 0 failed, 0 could not run, 0 skipped")


@needs_opencl
def test_device_chooses_which_tests_run_where(library):
    """--device opencl:0 runs the OpenCL tests there and the CPU's too; --device cpu skips the
    OpenCL ones (exit 0: what ran passed); a device this machine lacks is each of its tests'
    error (exit 1); a name that is no device is a usage error (exit 2)."""
    on_cl = modpack.selftest(library, device="opencl:0")
    assert [r.status for r in on_cl] == ["pass"] * 7
    cpu = modpack.selftest(library, device="cpu")
    assert [r.status for r in cpu] == ["pass"] * 4 + ["skipped"] * 3
    assert cpu[4].message == "a test for opencl, and cpu:0 was asked for"
    proc = cli(library, "--device", "cpu")
    assert proc.returncode == 0 and "4 passed, 0 failed, 0 could not run, 3 skipped" in proc.stdout
    missing = modpack.selftest(library, device="opencl:7")
    assert [r.status for r in missing[4:]] == ["error"] * 3
    assert "no opencl:7 on this machine" in missing[4].message
    assert cli(library, "--device", "opencl:7").returncode == 1
    proc = cli(library, "--device", "tpu:0")
    assert proc.returncode == 2 and "unknown device 'tpu:0'" in proc.stderr


def test_a_wrong_output_fails_with_where_and_by_how_much(tmp_path):
    """A result outside the tolerances fails, naming the argument, how many elements differ,
    the first and the largest errors; a return value the same; the other tests still run;
    exit status 1."""
    wrong = A + B
    wrong[5] += 0.5
    tests = [modpack.SelfTest("vadd", [A, B, OUT], expected={2: wrong}, name="off by half"),
             modpack.SelfTest("tenth_sum", returns=0.3, rtol=0, atol=0, name="exact"),
             modpack.SelfTest("add_int", [2, 2], returns=5),
             modpack.SelfTest("add_int", [2, 2], returns=4),
             modpack.SelfTest("halve", [HALVES], expected={0: [0.5, 0.0, -1.5, np.inf]})]
    path = tree().export_library(tmp_path / "wrong.so", selftests=tests)
    results = modpack.selftest(path)
    assert [r.status for r in results] == ["fail", "fail", "fail", "pass", "fail"]
    assert results[4].message.endswith("1 of 4 elements differ beyond rtol 1e-05, atol 1e-06, "
                                       "first at [1]: nan where 0.0 was expected")
    assert results[4].max_abs_error == math.inf  # a NaN where a number was expected
    assert results[0].message == (
        f"argument 2: 1 of {N} elements differ beyond rtol 1e-05, atol 1e-06, first at [5]: "
        f"{(A + B)[5]} where {wrong[5]} was expected")
    assert results[0].max_abs_error == pytest.approx(0.5)
    assert results[1].message == "it returned 0.30000000000000004 where 0.3 was expected"
    assert results[2].message == "it returned 4 where 5 was expected"
    proc = cli(path, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout, parse_constant=lambda name: pytest.fail(name))  # strict
    assert report["passed"] is False and report["tests"][4]["max_abs_error"] == "inf"
    assert [t["status"] for t in report["tests"]] == ["fail", "fail", "fail", "pass", "fail"]
    text = cli(path).stdout
    assert "FAIL    off by half (vadd on cpu:0)  max abs error 0.5" in text
    assert text.rstrip().endswith("FAILED: 1 passed, 4 failed, 0 could not run, 0 skipped")


def test_a_call_that_fails_is_an_error_not_a_crash(tmp_path):
    """A function that reports a failure is that test's error (its message kept); the tests
    after it run."""
    tests = [modpack.SelfTest("refuse", [A], returns=0),
             modpack.SelfTest("add_int", [1, 2], returns=3)]
    path = tree().export_library(tmp_path / "refuse.so", selftests=tests)
    first, second = modpack.selftest(path)
    assert first.status == "error" and "refuse: 16 elements is too many" in first.message
    assert second.passed


def test_self_tests_run_on_request_only(tmp_path):
    """Loading, inspecting, verifying and extracting never run a self-test (its function writes
    a marker); modpack selftest does, once per test."""
    path = tree().export_library(tmp_path / "mark.so",
                                 selftests=[modpack.SelfTest("mark", returns=1)])
    marker = tmp_path / "marker"
    env = {**os.environ, "MODPACK_TEST_MARKER": str(marker)}
    load = "import sys, modpack; modpack.load_module(sys.argv[1])"
    subprocess.run([sys.executable, "-c", load, str(path)], env=env, check=True)
    for command in (["inspect", path], ["verify", path], ["extract", path, tmp_path / "x"]):
        subprocess.run([sys.executable, "-m", "modpack", *map(str, command)], env=env,
                       check=True, capture_output=True)
    assert not marker.exists()
    proc = subprocess.run([sys.executable, "-m", "modpack", "selftest", str(path)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    assert marker.read_text() == "ran\n"


def test_a_missing_function_is_refused_at_export(tmp_path):
    """A self-test of a function neither the host code nor a device module defines fails the
    export, naming it and what the library has; nothing is written."""
    out = tmp_path / "missing.so"
    with pytest.raises(modpack.ArgumentError, match=(
            r"selftests\[1\] \('vsub'\) calls 'vsub', which the library does not define: its "
            r"host functions are \['add_int', 'cl_add', .*'vadd'\], its kernels "
            r"\['cl/vadd_k', 'vadd_k'\]")):
        tree().export_library(out, selftests=[cpu_tests()[0],
                                               modpack.SelfTest("vsub", [1], returns=0)])
    assert not out.exists()
    with pytest.raises(modpack.ArgumentError, match="calls 'other/vadd_k'"):
        tree().export_library(out, selftests=[modpack.SelfTest("other/vadd_k", [1], returns=0)])


def test_a_bundle_over_the_limit_is_refused(tmp_path):
    """Self-tests are read with the index at every load: more than 4 MiB is refused at export,
    saying so."""
    big = np.zeros(1 << 19, np.float32)  # 2 MiB: three of them are over the limit
    out = tmp_path / "big.so"
    with pytest.raises(modpack.ArgumentError, match=r"selftests take \d+ bytes, more than the "
                       r"4194304 a library holds \(every load reads them with the index\)"):
        tree().export_library(out, selftests=[
            modpack.SelfTest("vadd", [big, big, big], expected={2: big})])
    assert not out.exists()


@pytest.mark.parametrize("selftests, message", [
    (modpack.SelfTest("vadd"), "selftests must be a list of modpack.SelfTest"),
    ([{"function": "vadd", "inputs": []}], r"unknown keys \['inputs'\]"),
    ([{"args": [1]}], "names no function"),
    ([7], r"selftests\[0\] is a int"),
    ([modpack.SelfTest("vadd", [A, B, OUT])], "checks nothing"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={3: A})], r"expected\[3\]: no such argument"),
    ([modpack.SelfTest("add_int", [1, 2], expected={0: A})], "argument 0 is not an array"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={2: A[:4]})],
     r"expected\[2\] has shape \(4,\), but argument 2 has \(16,\)"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={2: A.astype(np.float64)})],
     "expected\\[2\\] is float64, but argument 2 is float32: give it as float32"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={"2": A})], "keyed by argument index"),
    ([modpack.SelfTest("vadd", [A, [1.0], OUT], expected={2: A})],
     r"args\[1\] is a list: .* \(np.asarray\(x\) for an array\)"),
    ([modpack.SelfTest("vadd", [A, B, np.array([object()])], expected={0: A})],
     r"args\[2\] is an array of object"),
    ([modpack.SelfTest("add_int", [1 << 70, 1], returns=0)], "does not fit in 64 bits"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={2: A}, device="opencl:0")],
     "device must be a device type such as 'cpu' or 'opencl', not 'opencl:0'"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={2: A}, device="tpu")], "tpu"),
    ([modpack.SelfTest("vadd", [A, B, OUT], expected={2: A}, rtol=-1)], "rtol must be finite"),
    ([modpack.SelfTest("add_int", [1, 2], returns=3, name="x"),
      modpack.SelfTest("add_int", [1, 2], returns=3, name="x")],
     r"the names \['x'\] are given to more than one test"),
    ([modpack.SelfTest("add_int", [1, 2], returns=[3])], r"returns is a list"),
])
def test_bad_self_tests_are_refused_before_any_work(tmp_path, selftests, message):
    """ArgumentError naming the test and what is wrong, before anything is compiled or
    written."""
    out = tmp_path / "bad.so"
    with pytest.raises(modpack.ArgumentError, match=message):
        tree().export_library(out, selftests=selftests)
    assert not out.exists()


def test_names_and_the_bundle_are_reproducible(tmp_path):
    """Unnamed tests take their function's name, repeats numbered; the same tests give the
    same bytes; inspect and extract show them (arrays as .npy equal to what was given)."""
    tests = [modpack.SelfTest("add_int", [1, 2], returns=3),
             modpack.SelfTest("add_int", [2, 2], returns=4),
             modpack.SelfTest("vadd", [A, B, OUT], expected={2: A + B})]
    a = tree().export_library(tmp_path / "a.so", selftests=tests)
    b = tree().export_library(tmp_path / "b.so", selftests=list(tests))
    assert a.read_bytes() == b.read_bytes()
    report = inspect_library(a)
    assert [t["name"] for t in report["selftests"]] == ["add_int", "add_int#2", "vadd"]
    assert report["selftests"][2]["args"] == [{"dtype": "float32", "shape": [N]}] * 3
    assert report["selftests"][2]["checks"] == [2] and report["metadata"] is None
    text = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(a)],
                          capture_output=True, text=True, check=True).stdout
    assert "  add_int#2: add_int(2, 2) on cpu, checks returns 4, rtol 1e-05, atol 1e-06" in text
    assert "  vadd: vadd(float32[16], float32[16], float32[16]) on cpu, checks argument 2" in text
    out = tmp_path / "x"
    subprocess.run([sys.executable, "-m", "modpack", "extract", str(a), str(out)], check=True,
                   capture_output=True)
    listed = json.loads((out / "selftests.json").read_text())["tests"]
    assert listed[0]["args"] == [{"value": 1}, {"value": 2}] and listed[0]["returns"] == 3
    assert np.array_equal(np.load(out / listed[2]["args"][1]["file"]), B)
    assert np.array_equal(np.load(out / listed[2]["expected"]["2"]["file"]), A + B)


def test_a_library_without_self_tests(tmp_path):
    """Says so, and how to add them (NotFoundError; the command exits 1)."""
    path = tree().export_library(tmp_path / "none.so")
    with pytest.raises(modpack.NotFoundError, match="carries no self-tests: export it with"):
        modpack.selftest(path)
    proc = cli(path)
    assert proc.returncode == 1 and "carries no self-tests" in proc.stderr


def test_signed_loads_and_loaded_modules(tmp_path):
    """With --key the library loads only if a trusted signature holds (the bundle is covered by
    it); a loaded module can be given instead of a path."""
    path = tree().export_library(tmp_path / "signed.so", selftests=cpu_tests())
    private, public = write_key(tmp_path, "k")
    proc = cli(path, "--key", public)
    assert proc.returncode == 1 and "not signed" in proc.stderr, proc.stderr
    sign_library(path, private)
    assert cli(path, "--key", public).returncode == 0
    root = modpack.load_module(path, trusted_keys=[public])
    assert all(r.passed for r in modpack.selftest(root))

    forged = tmp_path / "forged.so"  # an expected value changed, the blob resealed
    shutil.copyfile(path, forged)
    blob = read_blob(forged)
    report = inspect_library(path)["blob"]
    start = report["selftests_offset"]
    blob[start + report["selftests_size"] - 1] ^= 0x40  # halve's expected inf becomes 1.0
    write_blob(forged, bytes(reseal(blob)))
    results = modpack.selftest(forged)  # unsigned: the forgery loads, and its test fails
    assert [r.status for r in results] == ["pass", "fail", "pass", "pass"]
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.selftest(forged, trusted_keys=[public])


def test_a_damaged_or_newer_bundle_is_refused(tmp_path):
    """A bundle modpack did not write (resealed, so that only the bundle's own checks answer)
    is a FormatError saying what; one of a later version says to upgrade."""
    path = tree().export_library(tmp_path / "b.so", selftests=cpu_tests())
    start = inspect_library(path)["blob"]["selftests_offset"]
    for offset, value, error, message in [
            (0, b"XPTESTS\0", modpack.FormatError, "its self-tests are damaged: its magic"),
            (8, struct.pack("<I", 2), modpack.IncompatibleError,
             "its self-tests are of version 2; this modpack reads version 1: upgrade"),
            (16, struct.pack("<Q", 1 << 40), modpack.FormatError, "does not fit its"),
            (32, b"[", modpack.FormatError, "its manifest does not hold")]:
        copy = tmp_path / "copy.so"
        shutil.copyfile(path, copy)
        blob = read_blob(copy)
        blob[start + offset:start + offset + len(value)] = value
        write_blob(copy, bytes(reseal(blob)))
        with pytest.raises(error, match=message):
            modpack.selftest(copy)
        assert cli(copy).returncode == 1


def test_from_a_registry(tmp_path, monkeypatch):
    """``modpack selftest oci://...`` pulls the library for this machine's devices into the
    store, as load_module does, and runs its tests there (on each device of a fleet, the same
    command); the pushed artifact's config holds the metadata and the self-tests, in the
    library's inspect report."""
    pytest.importorskip("oras")
    import registry as registry_helper

    if not registry_helper.available():
        pytest.skip("docker-registry is not installed (scripts/dev.sh installs it)")
    monkeypatch.setenv("MODPACK_CACHE", str(tmp_path / "store"))
    monkeypatch.setenv("MODPACK_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    (tmp_path / "src").mkdir()
    path = tree().export_library(tmp_path / "src" / "deploy.so",
                                 metadata={"revision": "4f2a9c1"}, selftests=cpu_tests())
    with registry_helper.Registry(tmp_path / "registry") as registry:
        reference = f"{registry.url}/team/model:v1"
        modpack.push(path, reference)
        results = modpack.selftest(reference)
        assert [r.status for r in results] == ["pass"] * 4
        proc = cli(reference, "--device", "cpu")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "PASSED: 4 passed" in proc.stdout
        manifest = json.loads(urlopen(f"http://{registry.host}/v2/team/model/manifests/v1",
                                      "application/vnd.oci.image.manifest.v1+json"))
        config = json.loads(urlopen(f"http://{registry.host}/v2/team/model/blobs/"
                                    f"{manifest['config']['digest']}"))
    assert config["modpack"]["metadata"]["revision"] == "4f2a9c1"
    assert [t["name"] for t in config["modpack"]["selftests"]] == [
        "vadd-small", "halve", "add_int", "tenth_sum"]


def urlopen(url: str, accept: str = "*/*") -> bytes:
    from urllib.request import Request
    from urllib.request import urlopen as fetch

    with fetch(Request(url, headers={"Accept": accept}), timeout=30) as response:
        data: bytes = response.read()
    return data


def test_slim_keeps_metadata_and_self_tests(tmp_path):
    """slim rewrites the index: what it carries besides modules comes out as it went in."""
    from modpack.tools.slim import slim_library

    path = tree().export_library(tmp_path / "in.so", metadata={"k": "v"},
                                 selftests=cpu_tests())
    out = tmp_path / "out.so"
    slim_library(path, out, "sm_90")
    before, after = inspect_library(path), inspect_library(out)
    assert after["metadata"] == before["metadata"] and after["format_version"] == "1.2"
    assert after["selftests"] == before["selftests"]
    assert all(r.passed for r in modpack.selftest(out))
