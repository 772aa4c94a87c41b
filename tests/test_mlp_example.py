"""The MLP example (examples/mlp_opencl/): generated-style host code with workspaces, weights
fetched on the device, a kernel file with build options, a typedef, #if and __local
reductions, all unmodified; run on PoCL from Python and from C and checked against numpy (and
against a C forward pass)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run

import modpack

pytestmark = pytest.mark.skipif(modpack.device_count("opencl") < 1, reason="no OpenCL device")
EXAMPLE = ROOT / "examples" / "mlp_opencl"


@pytest.fixture(scope="module")
def mlp():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import mlp
    finally:
        sys.path.pop(0)
    return mlp


def test_the_kernel_file_goes_in_unchanged(mlp):
    module = modpack.opencl_module((EXAMPLE / "mlp_kernels.cl").read_text(),
                                   build_options=mlp.BUILD_OPTIONS)
    assert [f.signature() for f in module.functions] == [
        "dense(float32*, float32*, float32*, float32*, int32, int32, local float32*)",
        "activate(float32*, int32)",
        "softmax_rows(float32*, float32*, int32, local float32*)",
    ]


def test_from_python(tmp_path: Path):
    out = run(sys.executable, EXAMPLE / "mlp.py", tmp_path / "deploy.so")
    assert "mlp_opencl (Python): OK, 32x10 probabilities match numpy" in out


def test_errors_inside_the_host_code_reach_the_caller(mlp, tmp_path: Path):
    forward = modpack.load_module(mlp.build(tmp_path / "deploy.so"))["mlp_forward"]
    x = mlp.inputs(4)
    with pytest.raises(modpack.ArgumentError,
                       match=r"argument 0 \(x\) must be float32\[batch, 64\] cpu opencl: "
                             r"dimension 1 is 63 where the signature says 64"):
        forward(x[:, :63].copy(), np.empty((4, mlp.OUT), np.float32))
    probs = np.empty((4, mlp.OUT), np.float32)
    forward(x, probs)  # and the library still works
    np.testing.assert_allclose(probs, mlp.reference(x, mlp.weights()), atol=1e-5)


def test_from_c(tmp_path: Path, runtime_prefix: Path):
    build = tmp_path / "build"
    run("cmake", "-S", EXAMPLE, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    deploy = tmp_path / "deploy.so"
    run(sys.executable, EXAMPLE / "mlp.py", "build", deploy)
    out = run(build / "mlp_opencl", deploy)
    assert "mlp_opencl (C): OK, 16x10 probabilities match" in out
    assert "refused as it should be: mlp_forward: argument 0 (x) must be float32[batch, 64]" in out
