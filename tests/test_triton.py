"""Triton kernels, compiled here by Triton for sm_80 and sm_90 (no GPU needed to compile), go in
through modpack.from_triton as they are: records with the user's parameters, the hidden
trailing pointers passed NULL, the block size from num_warps and the shared memory; one image
per kernel and target. What reaches the driver at a launch is checked with the stub driver;
the launches themselves run where a GPU is."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import modpack
from modpack.tools.inspection import inspect_library

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default; silences its notice
triton = pytest.importorskip("triton", reason="Triton is not installed (pip install "
                                              "modpack[triton])")
tl = pytest.importorskip("triton.language")
from triton.backends.compiler import GPUTarget  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x.to(tl.float32))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(tl.float16), mask=cols < n_cols)


ADD = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32",
       "BLOCK_SIZE": "constexpr"}
SOFTMAX = {"out_ptr": "*fp16", "in_ptr": "*fp16", "in_row_stride": "i32",
           "out_row_stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}


def compile_add(arch: int, block: int = 1024):
    source = triton.compiler.ASTSource(fn=add_kernel, signature=ADD,
                                       constexprs={"BLOCK_SIZE": block})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32))


def compile_softmax(arch: int):
    source = triton.compiler.ASTSource(fn=softmax_kernel, signature=SOFTMAX,
                                       constexprs={"BLOCK": 1024})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": 8})


@pytest.fixture(scope="module")
def compiled() -> dict[str, object]:
    return {"add80": compile_add(80), "add90": compile_add(90), "add80_256": compile_add(80, 256),
            "softmax80": compile_softmax(80), "softmax90": compile_softmax(90)}


@pytest.fixture(scope="module")
def module(compiled) -> modpack.Module:
    return modpack.from_triton([compiled["add80"], compiled["add90"], compiled["softmax80"],
                                compiled["softmax90"]], name="tri")


def test_records_carry_what_the_launcher_would(module, compiled):
    add, softmax = module.functions
    assert add.signature() == ("add_kernel(float32*, float32*, float32*, int32, null void*, "
                               "null void*)")
    assert add.launch_tags == ("blockIdx.x", "blockIdx.y", "blockIdx.z")
    assert add.fixed == {"threadIdx.x": 32 * compiled["add80"].metadata.num_warps}
    shared = max(compiled["softmax80"].metadata.shared, compiled["softmax90"].metadata.shared)
    assert softmax.fixed == {"threadIdx.x": 256, **({"dyn_shared_memory": shared} if shared
                                                     else {})}
    assert softmax.args[0] == modpack.KernelArg.parse("float16*")
    # One cubin per kernel and target, PTX beside the sm_80 one (sm_90a PTX adds nothing).
    assert [(v.kind, v.arch, v.kernels) for v in module.variants] == [
        ("cubin", "sm_80", ("add_kernel",)), ("ptx", "compute_80", ("add_kernel",)),
        ("cubin", "sm_90a", ("add_kernel",)),
        ("cubin", "sm_80", ("softmax_kernel",)), ("ptx", "compute_80", ("softmax_kernel",)),
        ("cubin", "sm_90a", ("softmax_kernel",))]
    assert module.variants[0].data == compiled["add80"].asm["cubin"]


def test_export_load_and_inspect(module, tmp_path: Path):
    path = module.export_library(tmp_path / "tri.so")
    mod = modpack.load_module(path)
    assert mod.name == "tri" and mod["add_kernel"] is not None and mod["tri/softmax_kernel"]
    (contents,) = [m["contents"] for m in inspect_library(path)["modules"]]
    assert [(v["arch"], v["kernels"]) for v in contents["variants"]][:3] == [
        ("sm_80", ["add_kernel"]), ("compute_80", ["add_kernel"]), ("sm_90a", ["add_kernel"])]
    assert contents["kernels"][1]["args"][-2:] == ["null void*", "null void*"]


LAUNCH = r"""
import sys, modpack
mod = modpack.load_module(sys.argv[1])
mod["add_kernel"](None, None, None, 1000, 4, 1, 1)  # pointers NULL: the stub has no memory
mod["softmax_kernel"](None, None, 64, 64, 50, 50, 1, 1)
"""


def stub_launch(path: Path, stub: Path, log: Path, cc: str, params: int) -> list[str]:
    env = {**os.environ, "MODPACK_CUDA_LIBRARY": str(stub), "STUB_CUINIT_RESULT": "0",
           "STUB_CC": cc, "STUB_ACCEPT": "1", "STUB_PARAMS": str(params), "STUB_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-c", LAUNCH, str(path)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()


def test_launches_pass_the_grid_the_block_and_null_hidden_pointers(module, compiled, stub_driver,
                                                                   tmp_path: Path):
    path = module.export_library(tmp_path / "tri.so")
    shared = module.functions[1].fixed.get("dyn_shared_memory", 0)
    assert stub_launch(path, stub_driver, tmp_path / "90.log", "9.0", 6) == [
        "cubin sm_90", "function add_kernel",
        "launch grid 4 1 1 block 128 1 1 shared 0 params 0 0 0 1000 0 0",
        "cubin sm_90", "function softmax_kernel",  # its own image
        f"launch grid 50 1 1 block 256 1 1 shared {shared} params 0 0 64 64 50 0"]
    # A GPU newer than every cubin: the sm_80 PTX, linked by the driver's JIT (cuLink*: the
    # kernel cache keeps the cubin).
    assert stub_launch(path, stub_driver, tmp_path / "100.log", "10.0", 0)[:4] == [
        "link ptx sm_80", "linked cubin sm_100 from ptx sm_80",
        "cubin sm_100 linked from ptx sm_80", "function add_kernel"]


def test_one_kernel_compiled_twice_is_named_apart(compiled, stub_driver, tmp_path: Path):
    with pytest.raises(modpack.ModpackError, match="given twice for sm_80: name the different"):
        modpack.from_triton([compiled["add80"], compiled["add80_256"]])
    module = modpack.from_triton({"add_1024": compiled["add80"], "add_256": compiled["add80_256"]})
    assert [(f.name, f.symbol) for f in module.functions] == [("add_1024", "add_kernel"),
                                                              ("add_256", "add_kernel")]
    path = module.export_library(tmp_path / "two.so")
    log = tmp_path / "two.log"
    code = ("import sys, modpack; m = modpack.load_module(sys.argv[1]); "
            "m['add_256'](None, None, None, 10, 1, 1, 1); "
            "m['add_1024'](None, None, None, 10, 1, 1, 1)")
    env = {**os.environ, "MODPACK_CUDA_LIBRARY": str(stub_driver), "STUB_CUINIT_RESULT": "0",
           "STUB_CC": "8.0", "STUB_ACCEPT": "1", "STUB_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # Each record loads the image it was compiled into.
    assert [line for line in log.read_text().splitlines() if line.startswith("cubin")] == [
        "cubin sm_80", "cubin sm_80"]


def test_what_a_plain_launch_cannot_give_is_refused(compiled):
    add = compiled["add80"]

    def variant(**changes):
        return types.SimpleNamespace(asm=add.asm, metadata=add.metadata._replace(**changes),
                                     src=add.src, name=add.name)

    with pytest.raises(modpack.ModpackError, match="needs 64 bytes of global scratch memory"):
        modpack.from_triton(variant(global_scratch_size=64))
    with pytest.raises(modpack.ModpackError, match="thread-block clusters"):
        modpack.from_triton(variant(num_ctas=2))
    with pytest.raises(modpack.ModpackError, match="cooperative launch"):
        modpack.from_triton(variant(launch_cooperative_grid=True))
    with pytest.raises(TypeError, match="compiled Triton kernels"):
        modpack.from_triton([add, "add_kernel"])
    with pytest.raises(ValueError, match="at least one"):
        modpack.from_triton([])


def test_without_the_signature_the_ptx_gives_the_parameters(compiled):
    add = compiled["add80"]
    bare = types.SimpleNamespace(asm=add.asm, metadata=add.metadata, src=None, name=add.name)
    (info,) = modpack.from_triton(bare).functions
    # PTX knows sizes, not pointee types or signedness.
    assert [str(a) for a in info.args] == ["void*", "void*", "void*", "uint32", "null void*",
                                           "null void*"]


def _gpu_count() -> int:
    try:
        return modpack.device_count("cuda")
    except modpack.ModpackError:
        return 0


@pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU on this machine (launch needs a GPU)")
def test_triton_kernels_run(tmp_path: Path):
    name = modpack.device_name("cuda:0")
    arch = int("".join(c for c in name.split("compute capability ")[1][:4] if c.isdigit()))
    module = modpack.from_triton([compile_add(arch), compile_softmax(arch)])
    mod = modpack.load_module(module.export_library(tmp_path / "run.so"))
    n = 5000
    x, y = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    out = modpack.empty(n, "float32", device="cuda:0")
    mod["add_kernel"](modpack.array(x, device="cuda:0"), modpack.array(y, device="cuda:0"), out,
                      n, (n + 1023) // 1024, 1, 1)
    assert np.array_equal(out.numpy(), x + y)
    rows = np.random.default_rng(0).standard_normal((8, 300)).astype(np.float16)
    probs = modpack.empty(rows.shape, "float16", device="cuda:0")
    mod["softmax_kernel"](probs, modpack.array(rows, device="cuda:0"), 300, 300, 300, 8, 1, 1)
    e = np.exp(rows.astype(np.float64) - rows.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probs.numpy(), e / e.sum(axis=1, keepdims=True), atol=2e-3)
