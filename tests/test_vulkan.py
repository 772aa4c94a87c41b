"""The vulkan kind: SPIR-V compute shaders (GLSL compiled at export), each kernel's record read from
the SPIR-V by reflection, run for real on this machine's Vulkan device (Mesa's lavapipe), from
Python and from C; the errors a wrong call, a wrong launch or a missing driver give; the tools;
and the runtime's own Vulkan declarations against Khronos' header."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run

import modpack
from modpack.modules.vulkan.glsl import compile_glsl
from modpack.modules.vulkan.spirv import reflect
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library

TOOLS = shutil.which("glslangValidator") and shutil.which("spirv-cross")
needs_tools = pytest.mark.skipif(not TOOLS, reason="needs glslang-tools and spirv-cross "
                                 "(apt-get install glslang-tools spirv-cross; scripts/dev.sh)")
needs_vulkan = pytest.mark.skipif(
    not TOOLS or modpack.device_count("vulkan") < 1,
    reason="no Vulkan device (apt-get install libvulkan1 mesa-vulkan-drivers for lavapipe)")

SCALE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float k; uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) y[i] = x[i] * p.k; }
"""
# Buffers declared out of binding order and in two sets, a vec4 buffer (float32 elements), a
# struct buffer (untyped), push constants of three types.
INTERFACE = """#version 450
layout(local_size_x = 8, local_size_y = 4, local_size_z = 2) in;
struct Pair { float a; int b; };
layout(std430, set = 1, binding = 0) buffer Q { Pair q[]; };
layout(std430, set = 0, binding = 3) buffer V { vec4 v[]; };
layout(std430, set = 0, binding = 1) buffer I { int i[]; };
layout(push_constant) uniform P { int a; uint b; float c; } p;
void main() {
  uint g = gl_LocalInvocationIndex;  // 0..63 in one 8x4x2 workgroup
  v[g] *= p.c; i[g] += p.a + int(p.b); q[g].b = 1;
}
"""
# No buffer: only push constants (a launch needs no array, so it reaches the driver).
NO_BUFFERS = """#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { int n; } p;
void main() { }
"""


def _export(tmp_path: Path, module: modpack.Module, name: str = "vk.so",
            compress_code: bool = False) -> Path:
    host = modpack.csource_module(
        '#include "modpack/backend.h"\n'
        "static int64_t one(int64_t x) { return x; }\n"
        "MP_EXPORT_FUNC(one, int64_t, int64_t)\n")
    host.import_module(module)
    return host.export_library(tmp_path / name, compress_code=compress_code)


# ---- writing: records by reflection ---------------------------------------------------------


@needs_tools
def test_records_come_from_the_spirv():
    m = modpack.vulkan_module({"interface": INTERFACE})
    (info,) = m.functions
    assert info.signature() == "interface(int32*, float32*, void*, int32, uint32, float32)"
    assert info.launch_tags == ("workgroups.x", "workgroups.y", "workgroups.z")
    assert info.symbol == "main"
    (kernel,) = m.kernels
    assert kernel.workgroup_size == (8, 4, 2)
    assert [(b.set, b.binding) for b in kernel.entry.buffers] == [(0, 1), (0, 3), (1, 0)]
    assert [(s.name, s.offset) for s in kernel.entry.scalars] == [("p.a", 0), ("p.b", 4),
                                                                  ("p.c", 8)]
    assert kernel.entry.push_constant_size == 12


@needs_tools
def test_spirv_bytes_and_a_shader_of_several_entry_points(tmp_path):
    """SPIR-V given as bytes; a single shader's every compute entry point is a kernel, and a
    dict picks the entry point named like the kernel."""
    spirv = _two_entry_points(tmp_path)
    assert [e.name for e in reflect(spirv, "x")] == ["main", "plus"]
    m = modpack.vulkan_module(spirv)
    assert m.kernel_names == ["main", "plus"]
    assert [k.info.symbol for k in m.kernels] == [None, None]  # named like their entry points
    picked = modpack.vulkan_module({"plus": spirv})
    assert picked.kernels[0].entry.name == "plus"
    with pytest.raises(modpack.ArgumentError, match=r"2 compute entry points .* none is called"):
        modpack.vulkan_module({"other": spirv})
    if modpack.device_count("vulkan") < 1:
        return
    kernels = modpack.load_module(_export(tmp_path, m)).imported_modules[0]
    x = np.arange(64, dtype=np.float32)
    a = modpack.array(x, device="vulkan:0")
    out = modpack.empty(64, "float32", device="vulkan:0")
    kernels["main"](a, out, 3.0, 64, 1, 1, 1)
    np.testing.assert_array_equal(out.numpy(), x * 3)
    kernels["plus"](a, out, 3.0, 64, 1, 1, 1)  # the copy adds: its own entry point ran
    np.testing.assert_array_equal(out.numpy(), x + 3)


def _two_entry_points(tmp_path: Path) -> bytes:
    """SCALE's function and a copy of it as two entry points, "main" and "plus" (whose copy
    adds k instead of multiplying), by editing its assembly."""
    if not shutil.which("spirv-dis") or not shutil.which("spirv-as"):
        pytest.skip("needs spirv-tools (apt-get install spirv-tools)")
    (tmp_path / "s.spv").write_bytes(compile_glsl(SCALE, "scale"))
    text = run("spirv-dis", tmp_path / "s.spv", "--raw-id")
    entry = re.search(r'^\s*OpEntryPoint GLCompute %(\d+) "main"(.*)$', text, re.M)
    mode = re.search(rf"^\s*OpExecutionMode %{entry[1]} (.*)$", text, re.M)
    body = re.search(rf"^\s*%{entry[1]} = OpFunction .*?OpFunctionEnd$", text, re.M | re.S)[0]
    bound = max(int(n) for n in re.findall(r"%(\d+)", text)) + 1
    defined = re.findall(r"^\s*%(\d+) =", body, re.M)
    renamed = {old: str(bound + i) for i, old in enumerate(defined)}
    copy = re.sub(r"%(\d+)\b", lambda m: f"%{renamed.get(m[1], m[1])}", body)
    assert "OpFMul" in copy
    copy = copy.replace("OpFMul", "OpFAdd", 1)
    new = renamed[entry[1]]
    text = text.replace(entry[0], f'{entry[0]}\nOpEntryPoint GLCompute %{new} "plus"{entry[2]}'
                        f"\nOpExecutionMode %{new} {mode[1]}")
    text = text.replace(body, body + "\n" + copy)
    (tmp_path / "two.spvasm").write_text(text)
    run("spirv-as", "--target-env", "vulkan1.0", tmp_path / "two.spvasm", "-o",
        tmp_path / "two.spv")
    run("spirv-val", "--target-env", "vulkan1.0", tmp_path / "two.spv")
    return (tmp_path / "two.spv").read_bytes()


@needs_tools
@pytest.mark.parametrize(("shader", "error", "match"), [
    (b"\x01\x02\x03\x04" * 8, modpack.ArgumentError, "not SPIR-V"),
    (3.5, modpack.ArgumentError, "SPIR-V bytes, GLSL compute source .a str., a file"),
    (("src", {}, 1), modpack.ArgumentError, r"a shader variant is a pair \(GLSL source or file, "
                                            r"defines\), not a tuple of 3"),
    ((b"\x03\x02\x23\x07" + bytes(16), {"A": 1}), modpack.ArgumentError,
     "defines are for GLSL source; this shader is SPIR-V"),
    (Path("/nonexistent.comp"), modpack.ArgumentError, "cannot read shader file "
                                                       "/nonexistent.comp: No such file"),
    ("#version 450\nvoid main() { undefined(); }\n", modpack.CompileError,
     "glslangValidator -V failed"),
    ("#version 450\nlayout(local_size_x = 1) in;\nlayout(binding = 0) uniform U { float u; };\n"
     "layout(std430, binding = 1) buffer B { float b[]; };\nvoid main() { b[0] = u; }\n",
     modpack.ArgumentError, "uses ubos; Vulkan kernels take storage buffers"),
    ("#version 450\nlayout(local_size_x = 1) in;\nstruct S { mat2 m; };\n"
     "layout(push_constant) uniform P { S s[2]; } p;\n"
     "layout(std430, binding = 0) buffer B { float b[]; };\n"
     "void main() { b[0] = p.s[1].m[0].x; }\n",
     modpack.ArgumentError, r"push-constant member p.s\[0\].m has type mat2: modpack passes"),
    ("#version 450\nlayout(local_size_x = 1) in;\nlayout(constant_id = 0) const uint N = 2;\n"
     "layout(push_constant) uniform P { float v[N]; } p;\n"
     "layout(std430, binding = 0) buffer B { float b[]; };\nvoid main() { b[0] = p.v[1]; }\n",
     modpack.ArgumentError, "push-constant member p.v is an array whose size is not a literal"),
])
def test_what_is_not_a_vulkan_kernel_is_refused_at_export(shader, error, match):
    with pytest.raises(error, match=match):
        modpack.vulkan_module({"k": shader})


# ---- running on the device ------------------------------------------------------------------


@pytest.fixture(scope="module")
def scale_kernel(tmp_path_factory):
    if not TOOLS or modpack.device_count("vulkan") < 1:
        pytest.skip("no Vulkan device")
    path = _export(tmp_path_factory.mktemp("vk"), modpack.vulkan_module(
        {"scale": SCALE, "interface": INTERFACE, "nothing": NO_BUFFERS}, name="vk"))
    lib = modpack.load_module(path)
    return lib.imported_modules[0]


@needs_vulkan
def test_a_kernel_runs_and_matches_numpy(scale_kernel):
    x = np.arange(1000, dtype=np.float32)
    a = modpack.array(x, device="vulkan:0")
    out = modpack.empty(1000, "float32", device="vulkan:0")
    scale_kernel["scale"](a, out, 2.5, 1000, 16, 1, 1)
    np.testing.assert_array_equal(out.numpy(), x * 2.5)
    assert a.__dlpack_device__() == (7, 0)  # kDLVulkan
    # Several push-constant types and buffers in two sets, one of vec4s, one of structs.
    v = np.ones((64, 4), np.float32)
    i = np.arange(64, dtype=np.int32)
    q = np.zeros(128, np.float32)  # 64 Pairs of (float, int)
    vd, id_, qd = (modpack.array(t, device="vulkan:0") for t in (v.ravel(), i, q))
    scale_kernel["interface"](id_, vd, qd, -3, 5, 0.5, 1, 1, 1)  # one 8x4x2 workgroup
    np.testing.assert_array_equal(vd.numpy(), 0.5 * v.ravel())
    np.testing.assert_array_equal(id_.numpy(), i + 2)
    assert (qd.numpy().view(np.int32)[1::2] == 1).all()
    assert scale_kernel["vk/scale"] is not None


@needs_vulkan
def test_compressed_shaders_run_and_match_numpy(tmp_path):
    """compress_code=True stores the SPIR-V in a zstd code frame, decoded when the device
    first loads the module; the kernel runs on the device as the uncompressed one does."""
    module = modpack.vulkan_module({"scale": SCALE}, name="vkz")
    path = _export(tmp_path, module, "vkz.so", compress_code=True)
    module_info = inspect_library(path)["modules"][1]
    assert module_info["type_key"] == "vulkan" and module_info["code"]["compressed"], module_info
    (shader,) = module_info["contents"]["shaders"]
    assert shader["encoding"] == "zstd" and shader["stored_bytes"] < shader["raw_bytes"], shader
    lib = modpack.load_module(path)
    x = np.arange(4096, dtype=np.float32)
    a = modpack.array(x, device="vulkan:0")
    out = modpack.empty(4096, "float32", device="vulkan:0")
    lib.imported_modules[0]["scale"](a, out, -1.5, 4096, 64, 1, 1)
    np.testing.assert_array_equal(out.numpy(), x * -1.5)


@needs_vulkan
def test_wrong_calls_are_refused_before_the_driver(scale_kernel):
    f = scale_kernel["scale"]
    x = modpack.array(np.zeros(8, np.float32), device="vulkan:0")
    cases = [
        ((x, x, 1.0, 8), "expected 7 arguments \\(4 kernel arguments \\+ 3 launch"),
        ((1, x, 1.0, 8, 1, 1, 1), "argument 0 must be an array"),
        ((x, modpack.array(np.zeros(8, np.int32), device="vulkan:0"), 1.0, 8, 1, 1, 1),
         "argument 1 must have dtype float32, got int32"),
        ((np.zeros(8, np.float32), x, 1.0, 8, 1, 1, 1),
         'argument 0 is an array on cpu:0, not on a Vulkan device; create it with '
         'modpack.array\\(x, device="vulkan:0"\\)'),
        ((None, x, 1.0, 8, 1, 1, 1), "not None \\(Vulkan has no NULL buffers\\)"),
        ((x, x, 1.0, 2.5, 1, 1, 1), "argument 3 must be an integer \\(uint32\\), got float"),
        ((x, x, 1.0, 8, -1, 1, 1), "launch argument 4 \\(workgroups.x\\) must be an int in"),
    ]
    for args, message in cases:
        with pytest.raises(modpack.ArgumentError, match=message):
            f(*args)


@needs_vulkan
def test_launch_limits_are_the_devices(scale_kernel):
    x = modpack.array(np.zeros(8, np.float32), device="vulkan:0")
    with pytest.raises(modpack.ArgumentError,
                       match=r"4294967295 workgroups along x, but Vulkan device 0 dispatches "
                             r"at most \d+ \(maxComputeWorkGroupCount\)"):
        scale_kernel["scale"](x, x, 1.0, 8, 2**32 - 1, 1, 1)
    scale_kernel["scale"](x, x, 1.0, 8, 0, 1, 1)  # no workgroup: nothing runs
    scale_kernel["nothing"](7, 1, 1, 1)  # push constants only


@needs_vulkan
def test_threads_share_a_kernel(scale_kernel):
    """Launches from several threads on one kernel (its descriptor sets rewritten per launch,
    under the device's lock) each get their own arrays' results."""
    errors = []

    def work(seed: int) -> None:
        try:
            x = np.random.default_rng(seed).standard_normal(4096).astype(np.float32)
            a = modpack.array(x, device="vulkan:0")
            out = modpack.empty(4096, "float32", device="vulkan:0")
            for k in range(10):
                scale_kernel["scale"](a, out, float(k), 4096, 64, 1, 1)
                np.testing.assert_array_equal(out.numpy(), x * np.float32(k))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


HOST_COPIES = r"""
#include "modpack/backend.h"
/* copies(x, y, z): x -> y on the device, y -> z on the host, then z's double into a workspace
 * and back into y: every copy host code has, through mp_backend_* calls. */
static void copies(const DLTensor* x, DLTensor* y, DLTensor* z) {
  if (mp_backend_copy(x, y) != MP_OK || mp_backend_copy(y, z) != MP_OK) return;
  float* host = z->data;
  for (int64_t i = 0; i < z->shape[0]; ++i) host[i] *= 2.0f;
  void* scratch;
  if (mp_backend_alloc_workspace(y->device, (uint64_t)z->shape[0] * 4, &scratch) != MP_OK) return;
  DLTensor w = *y;
  w.data = scratch;
  if (mp_backend_copy(z, &w) == MP_OK) mp_backend_copy(&w, y);
  mp_backend_free_workspace(y->device, scratch);
}
MP_EXPORT_TYPED_VOID_FUNC(copies, "x: float32[n] vulkan, y: float32[n] vulkan, z: float32[n] cpu",
                          const DLTensor*, DLTensor*, DLTensor*)
"""


@needs_vulkan
@pytest.mark.parametrize("staging", [False, True])
def test_host_code_copies_through_the_backend(tmp_path, staging):
    """Host <-> device and device <-> device copies and workspaces, from host code; with
    MODPACK_VULKAN_STAGING=1 (device memory the host cannot map) through staging buffers."""
    path = modpack.csource_module(HOST_COPIES).export_library(tmp_path / "copies.so")
    code = (
        "import sys, numpy as np, modpack\n"
        "lib = modpack.load_module(sys.argv[1])\n"
        "x = np.arange(1, 101, dtype=np.float32)\n"
        "xd = modpack.array(x, device='vulkan:0')\n"
        "yd = modpack.empty(100, 'float32', device='vulkan:0')\n"
        "z = np.zeros(100, np.float32)\n"
        "lib['copies'](xd, yd, z)\n"
        "assert (z == 2 * x).all() and (yd.numpy() == 2 * x).all(), (z, yd.numpy())\n"
        "print('copies OK')\n")
    env = {**os.environ, "MODPACK_VULKAN_STAGING": "1" if staging else "0"}
    out = run(sys.executable, "-c", code, path, env=env)
    assert "copies OK" in out


# ---- specialization constants ---------------------------------------------------------------
# Shaders in the style of real projects' softmax, row-sum and argmax kernels (written for these
# tests): each workgroup reduces one row, its size a specialization constant the host sets.

SOFTMAX = """#version 450
layout(constant_id = 0) const uint BLOCK_SIZE = 32;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint ncols; } p;
shared float partial[BLOCK_SIZE];
void main() {
  const uint base = gl_WorkGroupID.x * p.ncols, tid = gl_LocalInvocationID.x;
  float m = -1.0 / 0.0;
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) m = max(m, x[base + c]);
  partial[tid] = m;
  barrier();
  for (uint s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] = max(partial[tid], partial[tid + s]);
    barrier();
  }
  m = partial[0];
  barrier();
  float sum = 0.0;
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) sum += exp(x[base + c] - m);
  partial[tid] = sum;
  barrier();
  for (uint s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) y[base + c] = exp(x[base + c] - m) / partial[0];
}
"""
# The workgroup size by SpecId only (glslang names no constant), and a float constant.
ROW_SUM = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float SCALE = 1.0;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint ncols; } p;
shared float partial[gl_WorkGroupSize.x];
void main() {
  const uint base = gl_WorkGroupID.x * p.ncols, tid = gl_LocalInvocationID.x;
  const uint n = gl_WorkGroupSize.x;
  float s = 0.0;
  for (uint c = tid; c < p.ncols; c += n) s += x[base + c];
  partial[tid] = s;
  barrier();
  for (uint k = n / 2; k > 0; k >>= 1) {
    if (tid < k) partial[tid] += partial[tid + k];
    barrier();
  }
  if (tid == 0) y[gl_WorkGroupID.x] = SCALE * partial[0];
}
"""
# A bool and a signed int constant besides the workgroup size.
ARGMAX = """#version 450
layout(constant_id = 0) const uint BLOCK_SIZE = 1;
layout(constant_id = 1) const bool ABSOLUTE = false;
layout(constant_id = 2) const int OFFSET = 0;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer I { int index[]; };
layout(push_constant) uniform P { uint ncols; } p;
shared float best[BLOCK_SIZE];
shared uint at[BLOCK_SIZE];
void main() {
  const uint base = gl_WorkGroupID.x * p.ncols, tid = gl_LocalInvocationID.x;
  float b = -1.0 / 0.0;
  uint w = 0;
  for (uint c = tid; c < p.ncols; c += BLOCK_SIZE) {
    float v = ABSOLUTE ? abs(x[base + c]) : x[base + c];
    if (v > b) { b = v; w = c; }
  }
  best[tid] = b;
  at[tid] = w;
  barrier();
  for (uint k = BLOCK_SIZE / 2; k > 0; k >>= 1) {
    if (tid < k && (best[tid + k] > best[tid] ||
                    (best[tid + k] == best[tid] && at[tid + k] < at[tid]))) {
      best[tid] = best[tid + k];
      at[tid] = at[tid + k];
    }
    barrier();
  }
  if (tid == 0) index[gl_WorkGroupID.x] = int(at[0]) + OFFSET;
}
"""
REDUCTIONS = {"softmax": SOFTMAX, "row_sum": ROW_SUM, "argmax": ARGMAX}
# BLOCK_SIZE for every kernel that has it; row_sum's unnamed SpecId 0 and the others per kernel.
SPECIALIZATION = {"BLOCK_SIZE": 128, "row_sum": {0: 32, "SCALE": 0.5},
                  "argmax": {"ABSOLUTE": True, "OFFSET": -5, "BLOCK_SIZE": 64}}


@needs_tools
def test_specialization_sets_workgroup_sizes_and_constants():
    """Each kernel gets the values given for every kernel and its own (its own winning), typed
    by each constant's SPIR-V type; the workgroup size is the specialised one; a module with no
    constants keeps writing payload version 1 (older runtimes read it)."""
    m = modpack.vulkan_module(REDUCTIONS, specialization=SPECIALIZATION)
    kernels = {k.info.name: k for k in m.kernels}
    assert kernels["softmax"].workgroup_size == (128, 1, 1)
    assert kernels["row_sum"].workgroup_size == (32, 1, 1)
    assert kernels["argmax"].workgroup_size == (64, 1, 1)
    values = {name: {(c.constant.name, c.constant.id): (c.value, c.given) for c in k.constants}
              for name, k in kernels.items()}
    assert values["row_sum"] == {(None, 0): (32, True), ("SCALE", 1): (0.5, True)}
    assert values["argmax"] == {("BLOCK_SIZE", 0): (64, True), ("ABSOLUTE", 1): (True, True),
                                ("OFFSET", 2): (-5, True)}
    assert m.vulkan_payload_version == 2
    assert modpack.vulkan_module({"scale": SCALE}).vulkan_payload_version == 1
    # Left out, a constant other than the workgroup size keeps the shader's default.
    plain = modpack.vulkan_module({"argmax": ARGMAX}, specialization={"BLOCK_SIZE": 8})
    assert [(c.value, c.given) for c in plain.kernels[0].constants] == [
        (8, True), (False, False), (0, False)]


@needs_vulkan
def test_specialised_reductions_match_numpy(tmp_path):
    """Softmax, row sums and argmax with their workgroup sizes set by specialization run on the
    device and equal numpy's, and inspect shows the specialised sizes and the constants."""
    module = modpack.vulkan_module(REDUCTIONS, specialization=SPECIALIZATION, name="red")
    path = _export(tmp_path, module)
    kernels = modpack.load_module(path).imported_modules[0]
    rows, cols = 20, 1000
    x = np.random.default_rng(7).standard_normal((rows, cols)).astype(np.float32)
    xd = modpack.array(x.ravel(), device="vulkan:0")
    y = modpack.empty(x.size, "float32", device="vulkan:0")
    kernels["softmax"](xd, y, cols, rows, 1, 1)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y.numpy().reshape(rows, cols), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-7)
    sums = modpack.empty(rows, "float32", device="vulkan:0")
    kernels["row_sum"](xd, sums, cols, rows, 1, 1)
    np.testing.assert_allclose(sums.numpy(), 0.5 * x.sum(axis=1), rtol=1e-4, atol=1e-4)
    index = modpack.empty(rows, "int32", device="vulkan:0")
    kernels["argmax"](xd, index, cols, rows, 1, 1)
    np.testing.assert_array_equal(index.numpy(), np.abs(x).argmax(axis=1) - 5)
    faces = {f["kernel"]: f for f in inspect_library(path)["modules"][1]["contents"]["interfaces"]}
    assert [faces[k]["workgroup_size"] for k in REDUCTIONS] == [[128, 1, 1], [32, 1, 1],
                                                                [64, 1, 1]]
    assert faces["argmax"]["specialization"] == [
        {"id": 0, "name": "BLOCK_SIZE", "type": "uint32", "value": 64, "default": False},
        {"id": 1, "name": "ABSOLUTE", "type": "bool", "value": True, "default": False},
        {"id": 2, "name": "OFFSET", "type": "int32", "value": -5, "default": False}]
    text = run(Path(sys.executable).parent / "modpack", "inspect", path)
    assert "kernel row_sum: shader 1 entry point main, workgroup size 32x1x1" in text
    assert "specialization: SpecId 0 = 32 (uint32), SCALE = 0.5 (float32, SpecId 1)" in text


@needs_tools
@pytest.mark.parametrize(("kernel", "constant"), [
    ("softmax", "BLOCK_SIZE \\(SpecId 0\\)"), ("row_sum", "SpecId 0"),
    ("argmax", "BLOCK_SIZE \\(SpecId 0\\)")])
def test_a_workgroup_size_left_to_its_default_is_refused(kernel, constant):
    """Without a value for the constant its workgroup size comes from, a kernel is refused at
    vulkan_module, naming the kernel and the constant: its default would run it with the wrong
    number of invocations and a wrong answer, silently."""
    with pytest.raises(modpack.ArgumentError,
                       match=rf"kernel {kernel}: its workgroup size along x is specialization "
                             rf"constant {constant}, and no value is given for it"):
        modpack.vulkan_module({kernel: REDUCTIONS[kernel]})
    # Given for another kernel only, it is still missing.
    with pytest.raises(modpack.ArgumentError, match=f"kernel {kernel}: its workgroup size"):
        modpack.vulkan_module({kernel: REDUCTIONS[kernel], "scale": SCALE},
                              specialization={"scale": {}})


@needs_tools
@pytest.mark.parametrize(("specialization", "match"), [
    ({"BLOCK_SIZE": 2.5}, r"BLOCK_SIZE \(SpecId 0\) is a uint32, and 2.5 is not one"),
    ({"BLOCK_SIZE": -1}, r"out of its range \[0, 4294967295\]"),
    ({"BLOCK_SIZE": 2**32}, r"out of its range"),
    ({"BLOCK_SIZE": True}, r"give a number"),
    ({"BLOCK_SIZE": "64"}, r"give an integer"),
    ({"BLOCK_SIZE": 0}, r"must be a positive integer, not 0"),
    ({"BLOCK_SIZE": 64, "OFFSET": 2**31}, r"OFFSET \(SpecId 2\) is an int32.*out of its range"),
    ({"BLOCK_SIZE": 64, "ABSOLUTE": 2}, r"ABSOLUTE \(SpecId 1\) is a bool.*give True or False"),
    ({"BLOCK_SIZE": 64, "WIDTH": 3}, r"constant 'WIDTH' is in no kernel's shader \(theirs: "
                                     r"ABSOLUTE \(SpecId 1\), BLOCK_SIZE"),
    ({"argmax": {"BLOCK_SIZE": 64, 9: 1}}, r"kernel argmax: specialization constant 9 is not "
                                           r"one of its shader's \(BLOCK_SIZE \(SpecId 0\): "
                                           r"uint32, ABSOLUTE"),
    ({"argmax": {"BLOCK_SIZE": 64, 0: 32}}, r"BLOCK_SIZE \(SpecId 0\) is given twice, as "
                                            r"'BLOCK_SIZE' and as 0"),
    ({"softmax": {"BLOCK_SIZE": 64}}, r"names kernel 'softmax', which the module does not have"),
    ({1.5: 3}, r"1.5 is no constant; name one by its name in the shader"),
    ([("BLOCK_SIZE", 64)], r"specialization maps constants"),
])
def test_specialization_values_are_checked(specialization, match):
    """A value of the wrong type or out of range, a constant or kernel that is not there, a
    constant given twice: each an ArgumentError naming it, at vulkan_module."""
    with pytest.raises(modpack.ArgumentError, match=match):
        modpack.vulkan_module({"argmax": ARGMAX}, specialization=specialization)


@needs_vulkan
def test_a_workgroup_larger_than_the_device_allows_is_refused_at_the_call(tmp_path):
    """A specialised workgroup size past the device's limits is refused at the first call,
    before the driver, naming the kernel, the size and the device's limits."""
    module = modpack.vulkan_module({"softmax": SOFTMAX}, specialization={"BLOCK_SIZE": 4096})
    kernels = modpack.load_module(_export(tmp_path, module)).imported_modules[0]
    x = modpack.empty(4096, "float32", device="vulkan:0")
    with pytest.raises(modpack.UnavailableError,
                       match=r"softmax runs workgroups of 4096x1x1 invocations; Vulkan device 0 "
                             r"\(.*\) allows at most \d+x\d+x\d+ and \d+ in all"):
        kernels["softmax"](x, x, 4096, 1, 1, 1)


# ---- buffers read through several blocks ---------------------------------------------------
# A matmul in the style of real projects' (written for these tests): A read as floats and as
# vec4s through two blocks on one binding, as those projects read one buffer as scalars, vec2
# and vec4.
MATMUL = """#version 450
layout(local_size_x = 8, local_size_y = 8) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform P { uint M; uint N; uint K; } p;
void main() {
  const uint row = gl_GlobalInvocationID.y, col = gl_GlobalInvocationID.x;
  if (row >= p.M || col >= p.N) return;
  float acc = 0.0;
  if (p.K % 4 == 0) {
    for (uint k = 0; k < p.K; k += 4) {
      vec4 v = a4[(row * p.K + k) / 4];
      acc += v.x * b[k * p.N + col] + v.y * b[(k + 1) * p.N + col] +
             v.z * b[(k + 2) * p.N + col] + v.w * b[(k + 3) * p.N + col];
    }
  } else {
    for (uint k = 0; k < p.K; ++k) acc += a[row * p.K + k] * b[k * p.N + col];
  }
  c[row * p.N + col] = acc;
}
"""


@needs_tools
def test_blocks_on_one_binding_are_one_argument():
    """Blocks declared on one set and binding are one buffer argument (one descriptor, as the
    projects' hosts bind it), typed when their elements agree (float and vec4: float32),
    untyped when they do not; descriptor arrays are refused at vulkan_module."""
    (k,) = modpack.vulkan_module({"matmul": MATMUL}).kernels
    assert k.info.signature() == "matmul(float32*, float32*, float32*, uint32, uint32, uint32)"
    assert [(b.name, b.set, b.binding) for b in k.entry.buffers] == [
        ("A|A4", 0, 0), ("B", 0, 1), ("C", 0, 2)]
    mixed = MATMUL.replace("vec4 a4[]", "f16vec4 a4[]").replace(
        "#version 450", "#version 450\n#extension GL_EXT_shader_16bit_storage : require\n"
        "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require").replace(
        "vec4 v = a4", "vec4 v = vec4(a4")
    mixed = mixed.replace("/ 4];", "/ 4]);")
    (k,) = modpack.vulkan_module({"matmul": mixed}).kernels
    assert k.info.signature().startswith("matmul(void*, float32*, float32*")
    with pytest.raises(modpack.ArgumentError, match="storage buffer B is an array of 2 "
                                                    "descriptors; a Vulkan kernel takes one"):
        modpack.vulkan_module({"k": "#version 450\nlayout(local_size_x = 1) in;\n"
                               "layout(std430, binding = 0) buffer B { float b[]; } bs[2];\n"
                               "void main() { bs[1].b[0] = bs[0].b[0]; }\n"})


@needs_vulkan
@pytest.mark.parametrize("K", [64, 30])
def test_a_matmul_reading_one_buffer_as_floats_and_vec4s_matches_numpy(tmp_path, K):
    """The matmul runs on the device through its vec4 path (K a multiple of 4) and its float
    path, both blocks reading the one array bound at binding 0."""
    lib = modpack.load_module(_export(tmp_path, modpack.vulkan_module({"matmul": MATMUL})))
    rng = np.random.default_rng(K)
    M, N = 24, 40
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = modpack.empty(M * N, "float32", device="vulkan:0")
    lib.imported_modules[0]["matmul"](modpack.array(a.ravel(), device="vulkan:0"),
                                      modpack.array(b.ravel(), device="vulkan:0"), c, M, N, K,
                                      N // 8, M // 8, 1)
    np.testing.assert_allclose(c.numpy().reshape(M, N), a @ b, rtol=1e-4, atol=1e-4)


@needs_vulkan
def test_a_library_written_with_a_block_per_argument_still_loads(tmp_path):
    """A library whose writer made each block on a binding its own argument (modpack before
    payload version 2; the runtime once refused the whole library at load_module, taking its
    other kernels down) loads: its other kernels run, and the matmul runs when one array is
    passed for both blocks, refused naming them when two are."""
    from modpack.modules.vulkan.module import VulkanModule, _kernel
    from modpack.modules.vulkan.spirv import Buffer

    new = modpack.vulkan_module({"matmul": MATMUL, "scale": SCALE})
    (matmul, scale) = new.kernels
    buffers = (Buffer("A", 0, 0, "float32"), Buffer("A4", 0, 0, "float32"),
               *matmul.entry.buffers[1:])
    old = _kernel("matmul", 0, dataclasses.replace(matmul.entry, buffers=buffers), "matmul")
    old = dataclasses.replace(old, workgroup_size=matmul.workgroup_size)
    module = VulkanModule(new.shaders, [old, scale])
    assert module.vulkan_payload_version == 1
    kernels = modpack.load_module(_export(tmp_path, module)).imported_modules[0]
    x = np.arange(64, dtype=np.float32)
    xd, out = modpack.array(x, device="vulkan:0"), modpack.empty(64, "float32", device="vulkan:0")
    kernels["scale"](xd, out, 2.0, 64, 1, 1, 1)
    np.testing.assert_array_equal(out.numpy(), 2 * x)
    a = np.ones((8, 8), np.float32)
    ad = modpack.array(a.ravel(), device="vulkan:0")
    c = modpack.empty(64, "float32", device="vulkan:0")
    kernels["matmul"](ad, ad, ad, c, 8, 8, 8, 1, 1, 1)
    np.testing.assert_array_equal(c.numpy(), np.full(64, 8.0))
    with pytest.raises(modpack.ArgumentError, match=r"matmul: arguments 0 and 1 are one storage "
                                                    r"buffer \(set 0, binding 0\): pass the same"):
        kernels["matmul"](ad, xd, ad, c, 8, 8, 8, 1, 1, 1)


# ---- push constants of structs and arrays -----------------------------------------------------
# A strided copy in the style of real projects' (written for these tests): a tensor's shape and
# strides as a struct of arrays in the push-constant block, a vector and a signed scalar.
STRIDED_COPY = """#version 450
layout(local_size_x = 64) in;
struct Tensor { uint ne[4]; uint nb[4]; };
layout(push_constant) uniform Params { Tensor src; uint dst_nb[2]; vec2 affine; int bias; } pc;
layout(std430, binding = 0) readonly buffer S { float s[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };
void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= pc.src.ne[0] * pc.src.ne[1]) return;
  const uint i0 = i % pc.src.ne[0], i1 = i / pc.src.ne[0];
  const float v = s[i0 * pc.src.nb[0] + i1 * pc.src.nb[1]];
  d[i0 * pc.dst_nb[0] + i1 * pc.dst_nb[1]] = pc.affine.x * v + pc.affine.y + float(pc.bias);
}
"""


@needs_tools
def test_push_constant_structs_arrays_and_vectors_are_scalars_at_their_offsets(tmp_path):
    """A push-constant block with a struct of arrays, an array, a vector and an int is passed
    as scalars named by their path in the source, each at its offset; the copy runs on the
    device (a transpose, through the strides) and equals numpy's."""
    (k,) = modpack.vulkan_module({"copy": STRIDED_COPY}).kernels
    names = [(s.name, s.offset, s.dtype) for s in k.entry.scalars]
    assert names[:2] == [("pc.src.ne[0]", 0, "uint32"), ("pc.src.ne[1]", 4, "uint32")]
    assert names[4:] == [("pc.src.nb[0]", 16, "uint32"), ("pc.src.nb[1]", 20, "uint32"),
                         ("pc.src.nb[2]", 24, "uint32"), ("pc.src.nb[3]", 28, "uint32"),
                         ("pc.dst_nb[0]", 32, "uint32"), ("pc.dst_nb[1]", 36, "uint32"),
                         ("pc.affine.x", 40, "float32"), ("pc.affine.y", 44, "float32"),
                         ("pc.bias", 48, "int32")]
    assert k.entry.push_constant_size == 52
    if modpack.device_count("vulkan") < 1:
        return
    kernels = modpack.load_module(_export(tmp_path, modpack.vulkan_module(
        {"copy": STRIDED_COPY}))).imported_modules[0]
    rows, cols = 6, 10
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    out = modpack.empty(rows * cols, "float32", device="vulkan:0")
    # x's transpose: element (i0, i1) of the view is x[i0, i1] read with strides (cols, 1) as a
    # cols x rows tensor; written packed, i0 fastest.
    kernels["copy"](modpack.array(x.ravel(), device="vulkan:0"), out,
                    rows, cols, 1, 1, cols, 1, 0, 0, 1, rows, 2.0, 0.5, -3, 1, 1, 1)
    np.testing.assert_array_equal(out.numpy().reshape(cols, rows), 2.0 * x.T + 0.5 - 3)


# ---- GLSL built like real projects build it ---------------------------------------------------
# One file compiled into variants with -D macros, #include from the file's folder and from
# include_dirs, and a target environment, as those projects' build scripts do.
TYPES_GLSL = """#ifdef FLOAT16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define T float16_t
#else
#define T float
#endif
"""
OPS_GLSL = "T apply(T x, T y) { return x OP y; }\n"
BINARY_OP = """#version 450
#include "types.glsl"
#include "ops.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { T a[]; };
layout(std430, binding = 1) readonly buffer B { T b[]; };
layout(std430, binding = 2) writeonly buffer C { T c[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) c[i] = apply(a[i], b[i]); }
"""


def _binary_op_files(tmp_path: Path) -> tuple[Path, Path]:
    """binary_op.comp beside ops.glsl, and types.glsl in a folder of its own."""
    (tmp_path / "src").mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "src" / "binary_op.comp").write_text(BINARY_OP)
    (tmp_path / "src" / "ops.glsl").write_text(OPS_GLSL)
    (tmp_path / "include" / "types.glsl").write_text(TYPES_GLSL)
    return tmp_path / "src" / "binary_op.comp", tmp_path / "include"


@needs_tools
def test_glsl_variants_with_defines_includes_and_a_target_environment(tmp_path):
    """Several variants of one file in one module, each with its macros on top of the module's
    (a variant's winning), its includes found in its own folder and in include_dirs, compiled
    for the target environment given (SPIR-V 1.5 for vulkan1.2); the same source as a str and
    the defines as a list."""
    path, include = _binary_op_files(tmp_path)
    module = modpack.vulkan_module(
        {"sub": path, "add": (path, {"OP": "+"}), "mul": (path, ["OP=*"]),
         "add_f16": (path, {"OP": "+", "FLOAT16": None}),
         "text": (BINARY_OP, ["OP=/"])},
        defines={"OP": "-"}, include_dirs=[include, tmp_path / "src"], target_env="vulkan1.2")
    signatures = [k.info.signature() for k in module.kernels]
    assert signatures[0] == "sub(float32*, float32*, float32*, uint32)"
    assert signatures[3] == "add_f16(float16*, float16*, float16*, uint32)"
    assert {struct.unpack_from("<I", s, 4)[0] for s in module.shaders} == {0x00010500}
    if modpack.device_count("vulkan") < 1:
        return
    kernels = modpack.load_module(_export(tmp_path, module)).imported_modules[0]
    rng = np.random.default_rng(3)
    for name, op, dtype in [("sub", np.subtract, np.float32), ("add", np.add, np.float32),
                            ("mul", np.multiply, np.float32), ("add_f16", np.add, np.float16),
                            ("text", np.divide, np.float32)]:
        a, b = (rng.uniform(1, 2, 100).astype(dtype) for _ in range(2))
        c = modpack.empty(100, np.dtype(dtype).name, device="vulkan:0")
        kernels[name](modpack.array(a, device="vulkan:0"), modpack.array(b, device="vulkan:0"),
                      c, 100, 2, 1, 1)
        np.testing.assert_allclose(c.numpy(), op(a, b), rtol=1e-3 if dtype == np.float16 else
                                   1e-6, err_msg=name)


@needs_tools
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"defines": {"1BAD": 1}}, modpack.ArgumentError, "define '1BAD' is not a macro name"),
    ({"defines": "OP=+"}, modpack.ArgumentError, "defines are a dict"),
    ({"defines": {"OP": "+\n"}}, modpack.ArgumentError, "define OP's value spans lines"),
    ({"defines": {"OP": [1]}}, modpack.ArgumentError, r"define OP = \[1\]: a value is a str"),
    ({"include_dirs": ["/nonexistent"]}, modpack.ArgumentError,
     "include_dirs holds '/nonexistent', which is not a folder"),
    ({"target_env": "vulkan2"}, modpack.ArgumentError, "target_env 'vulkan2' is not a target"),
    ({"options": ["-o", "x.spv"]}, modpack.ArgumentError, "options holds '-o', which modpack "
                                                           "sets itself"),
    ({"options": "-g"}, modpack.ArgumentError, "options must be a list of compiler flags"),
    ({}, modpack.CompileError, r"Could not process include directive for header name: "
                               r"types.glsl"),
    ({"defines": {"OP": "+"}, "include_dirs": ["INCLUDE"], "target_env": "vulkan1.3"},
     modpack.CompileError, r"glslangValidator -V -I\S+ --target-env vulkan1.3 -I\S+ -DOP=\+ "
                           r"failed:\n.*binary_op.comp:9: 'undefined_thing' : undeclared"),
])
def test_glsl_options_are_checked_and_compile_errors_name_the_file(tmp_path, kwargs, error,
                                                                  match):
    """Bad macros, folders, targets and flags are ArgumentErrors at vulkan_module; a compile
    error shows glslang's log with the flags used, the file's name and its own line numbers
    (kept where #include is enabled for it)."""
    path, include = _binary_op_files(tmp_path)
    if "include_dirs" in kwargs and kwargs["include_dirs"] == ["INCLUDE"]:
        kwargs["include_dirs"] = [include]
        path.write_text(BINARY_OP.replace("c[i] = apply(a[i], b[i]);",
                                          "c[i] = undefined_thing;"))
    with pytest.raises(error, match=re.compile(match, re.S)):
        modpack.vulkan_module({"k": path}, **kwargs)


# ---- what shaders need of a device ------------------------------------------------------------
needs_validation = pytest.mark.skipif(
    os.environ.get("MODPACK_VULKAN_VALIDATION") != "1",
    reason="Khronos' validation layer is not installed (apt-get install vulkan-validationlayers; "
           "scripts/dev.sh): tests/conftest.py turns it on where it is")
# 16-bit storage, float16 arithmetic, a float16 push constant and subgroup arithmetic, as
# quantized and half-precision shaders use them (written for these tests).
HALF_AXPB = """#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { float16_t y[]; };
layout(std430, binding = 2) writeonly buffer S { float partial[]; };
layout(push_constant) uniform P { uint n; float16_t scale; } p;
void main() {
  const uint i = gl_GlobalInvocationID.x;
  const float16_t v = i < p.n ? x[i] * p.scale + float16_t(1.0) : float16_t(0.0);
  if (i < p.n) y[i] = v;
  const float s = subgroupAdd(float(v));
  if (subgroupElect()) partial[gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID] = s;
}
"""
# Clustered subgroup operations, which lavapipe does not offer.
CLUSTERED = """#version 450
#extension GL_KHR_shader_subgroup_clustered : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
void main() { x[gl_GlobalInvocationID.x] = subgroupClusteredAdd(x[gl_GlobalInvocationID.x], 4); }
"""


@needs_vulkan
@needs_validation
def test_a_half_precision_shader_runs_clean_under_the_validation_layer(tmp_path):
    """A SPIR-V 1.5 shader with 16-bit storage, float16 arithmetic and push constant, and
    subgroup arithmetic records what it needs (inspect shows it) and runs under Khronos'
    validation layer without an error, equal to numpy: the instance asks for the loader's API
    version and the device is made with the features those capabilities need (once API 1.0
    and no features: "Invalid SPIR-V binary version 1.5", "storageBuffer16BitAccess is not
    enabled")."""
    module = modpack.vulkan_module({"axpb": HALF_AXPB}, target_env="vulkan1.2")
    assert module.vulkan_payload_version == 2
    path = _export(tmp_path, module)
    (shader,) = inspect_library(path)["modules"][1]["contents"]["shaders"]
    assert (shader["spirv"], shader["vulkan"]) == ("1.5", "1.2")
    assert set(shader["capabilities"]) == {
        "Shader", "Float16", "GroupNonUniform", "GroupNonUniformArithmetic",
        "StorageBuffer16BitAccess", "StoragePushConstant16"}
    text = run(Path(sys.executable).parent / "modpack", "inspect", path)
    assert re.search(r"shader 0: SPIR-V, \d+ bytes .*, SPIR-V 1.5 for Vulkan 1.2 with Float16, ",
                     text), text
    kernels = modpack.load_module(path).imported_modules[0]
    n = 1000
    x = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float16)
    y = modpack.empty(n, "float16", device="vulkan:0")
    partial = modpack.array(np.zeros(16 * 64, np.float32), device="vulkan:0")
    kernels["axpb"](modpack.array(x, device="vulkan:0"), y, partial, n, 0.5, 16, 1, 1)
    expected = x * np.float16(0.5) + np.float16(1)
    np.testing.assert_array_equal(y.numpy(), expected)
    assert partial.numpy().sum() == pytest.approx(expected.astype(np.float64).sum(), rel=1e-5)


@needs_vulkan
@needs_validation
def test_invalid_use_of_vulkan_fails_the_call_under_the_validation_layer(tmp_path):
    """With MODPACK_VULKAN_VALIDATION=1 (the suite's setting) an error the layer reports fails
    the call that caused it, with the layer's message: here a kernel whose recorded push-constant
    block is smaller than its shader's (a record modpack's writer never makes)."""
    from modpack.modules.vulkan.module import VulkanModule, _kernel

    good = modpack.vulkan_module({"scale": SCALE})
    (k,) = good.kernels
    entry = dataclasses.replace(k.entry, scalars=k.entry.scalars[:1], push_constant_size=4)
    short = dataclasses.replace(_kernel("scale", 0, entry, "scale"),
                                workgroup_size=k.workgroup_size)
    kernels = modpack.load_module(_export(tmp_path, VulkanModule(good.shaders, [short])))
    x = modpack.array(np.ones(64, np.float32), device="vulkan:0")
    with pytest.raises(modpack.CallError,
                       match=r"Vulkan's validation layer \(MODPACK_VULKAN_VALIDATION=1\) reports "
                             r"invalid use in scale: .*Push constant"):
        kernels.imported_modules[0]["scale"](x, x, 2.0, 1, 1, 1)


@needs_vulkan
def test_a_capability_the_device_lacks_is_refused_at_the_first_call(tmp_path):
    """A kernel whose shader uses what the device does not offer (clustered subgroup operations
    on lavapipe) is refused at its first call, naming the capability and the device, before the
    driver sees it; the module's other kernels run. preflight says so of vulkan:0, and lists
    what any device needs."""
    module = modpack.vulkan_module({"clustered": CLUSTERED, "scale": SCALE},
                                   target_env="vulkan1.1")
    path = _export(tmp_path, module)
    report = modpack.preflight(path, "vulkan:0")
    (answer,) = report["modules"][1]["answers"]
    if answer["fits"]:
        pytest.skip(f"this device offers clustered subgroup operations: {answer['reason']}")
    assert "uses the SPIR-V capability GroupNonUniformClustered, which needs subgroup clustered " \
           "operations in compute shaders of Vulkan 1.1" in answer["reason"]
    assert report["modules"][1]["status"] == "no-code" and not report["fits"]
    (anyone,) = modpack.preflight(path, "vulkan")["modules"][1]["answers"]
    assert anyone["fits"] and "SPIR-V 1.3, for a Vulkan 1.1 device with GroupNonUniform, " \
                              "GroupNonUniformClustered" in anyone["reason"]
    kernels = modpack.load_module(path).imported_modules[0]
    x = modpack.array(np.ones(64, np.float32), device="vulkan:0")
    for _ in range(2):  # the first call, and every one after it
        with pytest.raises(modpack.UnavailableError,
                           match=r"clustered cannot run on Vulkan device 0 \(.+\): it uses the "
                                 r"SPIR-V capability GroupNonUniformClustered"):
            kernels["clustered"](x, 1, 1, 1)
    kernels["scale"](x, x, 3.0, 64, 1, 1, 1)
    np.testing.assert_array_equal(x.numpy(), np.full(64, 3.0, np.float32))


@needs_vulkan
def test_a_device_of_an_older_api_version_refuses_what_it_lacks(tmp_path):
    """With the API version lowered (MODPACK_VULKAN_API_VERSION, as on an older driver), a
    kernel needing Vulkan 1.2's float16 or SPIR-V 1.3 is refused at its first call naming why;
    a SPIR-V 1.0 kernel runs; a value that is no version is refused."""
    half = ("#version 450\n#extension GL_EXT_shader_16bit_storage : require\n"
            "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
            "layout(local_size_x = 64) in;\n"
            "layout(std430, binding = 0) buffer X { float16_t x[]; };\n"
            "void main() { x[gl_GlobalInvocationID.x] *= float16_t(2.0); }\n")
    module = modpack.vulkan_module({"twice": half, "scale": SCALE})
    newer = modpack.vulkan_module({"scale13": SCALE}, target_env="vulkan1.1", name="v11")
    host = modpack.csource_module("int placeholder;")
    host.import_module(module)
    host.import_module(newer)
    path = host.export_library(tmp_path / "old.so")
    code = (
        "import sys, numpy as np, modpack\n"
        "first, second = modpack.load_module(sys.argv[1]).imported_modules\n"
        "x = modpack.array(np.ones(64, np.float32), device='vulkan:0')\n"
        "h = modpack.array(np.ones(64, np.float16), device='vulkan:0')\n"
        "first['scale'](x, x, 2.0, 64, 1, 1, 1)\n"
        "print('scale', x.numpy()[0])\n"
        "for m, name, args in [(first, 'twice', (h,)), (second, 'scale13', (x, x, 2.0, 64))]:\n"
        "    try:\n        m[name](*args, 1, 1, 1)\n"
        "    except modpack.ModpackError as e:\n        print(name, type(e).__name__, e)\n")
    env = {**os.environ, "MODPACK_VULKAN_API_VERSION": "1.0"}
    out = run(sys.executable, "-c", code, path, env=env)
    assert "scale 2.0" in out
    assert re.search(r"twice UnavailableError twice cannot run on Vulkan device 0 \(.+\): it uses "
                     r"the SPIR-V capability Float16, which needs the feature shaderFloat16 of "
                     r"Vulkan 1.2, and the device \(Vulkan 1.0\) does not offer it "
                     r"\(MODPACK_VULKAN_API_VERSION lowers", out), out
    assert "scale13 UnavailableError" in out and "it is SPIR-V 1.3, which needs Vulkan 1.1, " \
                                                 "and the device offers 1.0" in out, out
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, env={**os.environ, "MODPACK_VULKAN_API_VERSION": "2"})
    assert "MODPACK_VULKAN_API_VERSION='2' is not a Vulkan API version such as 1.2" in (
        proc.stdout + proc.stderr)


@needs_tools
def test_what_no_core_vulkan_version_has_is_refused_at_vulkan_module(tmp_path):
    """A capability the runtime does not check and enable, and a SPIR-V extension that needs a
    device extension, are refused when the module is made, named."""
    float_atomics = ("#version 450\n#extension GL_EXT_shader_atomic_float : require\n"
                     "layout(local_size_x = 64) in;\n"
                     "layout(std430, binding = 0) buffer X { float x[]; };\n"
                     "void main() { atomicAdd(x[0], 1.0); }\n")
    with pytest.raises(modpack.ArgumentError,
                       match="it declares the SPIR-V capability AtomicFloat32AddEXT, which "
                             "modpack's Vulkan runtime does not check and enable"):
        modpack.vulkan_module({"k": float_atomics})
    if not shutil.which("spirv-dis") or not shutil.which("spirv-as"):
        pytest.skip("needs spirv-tools (apt-get install spirv-tools)")
    (tmp_path / "s.spv").write_bytes(compile_glsl(SCALE, "scale"))
    text = run("spirv-dis", tmp_path / "s.spv")
    text = text.replace("OpCapability Shader",
                        'OpCapability Shader\nOpExtension "SPV_AMD_gcn_shader"')
    (tmp_path / "x.spvasm").write_text(text)
    run("spirv-as", "--target-env", "vulkan1.0", tmp_path / "x.spvasm", "-o", tmp_path / "x.spv")
    with pytest.raises(modpack.ArgumentError,
                       match="it declares the SPIR-V extension SPV_AMD_gcn_shader, which no core "
                             "Vulkan version has"):
        modpack.vulkan_module({"k": (tmp_path / "x.spv").read_bytes()})


@needs_tools
def test_validation_without_the_layer_says_how_to_install_it(tmp_path):
    """MODPACK_VULKAN_VALIDATION=1 where the layer is missing makes Vulkan unavailable, saying
    which package has it: never a run that looks validated and was not."""
    path = _export(tmp_path, modpack.vulkan_module({"nothing": NO_BUFFERS}))
    (tmp_path / "layers").mkdir()
    code = ("import sys, modpack\n"
            "k = modpack.load_module(sys.argv[1]).imported_modules[0]['nothing']\n"
            "try:\n    k(1, 1, 1, 1)\n"
            "except modpack.UnavailableError as e:\n    print('Unavailable:', e)\n")
    env = {**os.environ, "MODPACK_VULKAN_VALIDATION": "1", "VK_LAYER_PATH": str(tmp_path /
                                                                                  "layers")}
    out = run(sys.executable, "-c", code, path, env=env)
    assert "MODPACK_VULKAN_VALIDATION=1 asks for Khronos' validation layer" in out, out
    assert "apt-get install vulkan-validationlayers" in out, out


def test_the_runtimes_capability_table_matches_khronos_registry(tmp_path):
    """Each SPIR-V capability the runtime enables is one the Vulkan registry (vk.xml's
    <spirvcapabilities>) lists, with the feature or subgroup operation the runtime requires
    among those it names; the capability numbers are SPIR-V's (assembled by spirv-as); each
    SPIR-V extension the writer accepts is core in the Vulkan version the registry says."""
    from modpack.modules.vulkan.requirements import SPIRV_EXTENSIONS, capability

    registry = Path("/usr/share/vulkan/registry/vk.xml")
    if not registry.exists():
        pytest.skip("no Vulkan registry (apt-get install libvulkan-dev)")
    import xml.etree.ElementTree as ET

    root = ET.parse(registry).getroot()
    enables = {c.get("name"): [e.attrib for e in c] for c in root.find("spirvcapabilities")}
    known = {n: capability(n) for n in range(7000) if capability(n) is not None}
    assert len(known) >= 30
    bits = ["BASIC", "VOTE", "ARITHMETIC", "BALLOT", "SHUFFLE", "SHUFFLE_RELATIVE", "CLUSTERED",
            "QUAD"]
    for number, (name, requirement, minor) in known.items():
        listed = enables.get(name) or enables.get(name + "KHR")
        assert listed, f"{name} is not in vk.xml"
        if requirement.startswith("the feature "):
            wanted = set(requirement.removeprefix("the feature ").split(" or "))
            assert wanted <= {e.get("feature") for e in listed}, (name, requirement, listed)
        elif requirement.startswith("subgroup "):
            bit = bits[number - 61]
            assert {e.get("value") for e in listed} == {f"VK_SUBGROUP_FEATURE_{bit}_BIT"}, name
        else:
            assert listed == [{"version": "VK_VERSION_1_0"}] and minor == 0, name
    spirv_extensions = {c.get("name"): [e.attrib for e in c]
                        for c in root.find("spirvextensions")}
    for extension, minor in SPIRV_EXTENSIONS.items():
        versions = {e.get("version") for e in spirv_extensions[extension]} - {None}
        assert versions & {f"VK_VERSION_1_{minor}", f"VK_API_VERSION_1_{minor}"}, extension
    if not shutil.which("spirv-as"):
        return
    for number, (name, _, _) in known.items():
        (tmp_path / "c.spvasm").write_text(f"OpCapability {name}\nOpMemoryModel Logical GLSL450\n")
        run("spirv-as", tmp_path / "c.spvasm", "-o", tmp_path / "c.spv")
        assert struct.unpack_from("<I", (tmp_path / "c.spv").read_bytes(), 24)[0] == number, name


# ---- without a driver -----------------------------------------------------------------------


@needs_tools
@pytest.mark.parametrize(("env", "message"), [
    ({"VK_ICD_FILENAMES": "/nonexistent/icd.json"}, "no Vulkan driver found"),
    ({"MODPACK_VULKAN_LIBRARY": "/nonexistent/libvulkan.so.1"},
     "Vulkan is not available: cannot load /nonexistent/libvulkan.so.1"),
])
def test_without_a_driver_loading_works_and_a_launch_says_what_is_missing(tmp_path, env,
                                                                          message):
    path = _export(tmp_path, modpack.vulkan_module({"nothing": NO_BUFFERS}))
    code = (
        "import sys, modpack\n"
        "print('count', modpack.device_count('vulkan'))\n"
        "lib = modpack.load_module(sys.argv[1])\n"
        "k = lib.imported_modules[0]['nothing']\n"
        "for what, call in [('launch', lambda: k(1, 1, 1, 1)),\n"
        "                   ('array', lambda: modpack.empty(4, 'float32', device='vulkan:0'))]:\n"
        "    try:\n        call()\n"
        "    except modpack.UnavailableError as e:\n        print(what, 'Unavailable:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "count 0" in proc.stdout
    for what in ("launch", "array"):
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(what))
        assert message in line and "mesa-vulkan-drivers" in line, proc.stdout


# ---- tools ----------------------------------------------------------------------------------


@needs_tools
def test_inspect_shows_the_kernels_and_extract_writes_each_shader(tmp_path):
    module = modpack.vulkan_module({"scale": SCALE, "interface": INTERFACE})
    path = _export(tmp_path, module)
    report = inspect_library(path)
    (vk,) = [m for m in report["modules"] if m["type_key"] == "vulkan"]
    kernels = {k["name"]: k for k in vk["contents"]["kernels"]}
    assert kernels["scale"]["args"] == ["float32*", "float32*", "float32", "uint32"]
    assert [i["workgroup_size"] for i in vk["contents"]["interfaces"]] == [[64, 1, 1], [8, 4, 2]]
    text = run(Path(sys.executable).parent / "modpack", "inspect", path)
    assert "kernel scale(float32*, float32*, float32, uint32)  launch: workgroups.x" in text
    assert "kernel interface: shader 1 entry point main, workgroup size 8x4x2, 12 bytes" in text
    manifest = extract_library(path, tmp_path / "out")
    (entry,) = [m for m in manifest["modules"] if m["type_key"] == "vulkan"]
    files = [tmp_path / "out" / f for f in entry["code_files"]]
    assert [f.suffix for f in files] == [".spv", ".spv"]
    assert [f.read_bytes() for f in files] == module.shaders


# ---- the example, from Python and from C ----------------------------------------------------


@needs_vulkan
def test_example_from_python(tmp_path):
    out = run(sys.executable, ROOT / "examples" / "vulkan_pipeline" / "pipeline.py",
              tmp_path / "deploy.so")
    assert "vulkan_pipeline (Python): OK" in out and "first call" in out
    print(out)


@needs_vulkan
def test_example_from_c(tmp_path, runtime_prefix):
    example = ROOT / "examples" / "vulkan_pipeline"
    build = tmp_path / "build"
    run("cmake", "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}")
    run("cmake", "--build", build)
    deploy = tmp_path / "deploy.so"
    run(sys.executable, example / "pipeline.py", "build", deploy)
    out = run(build / "vulkan_pipeline", deploy)
    assert "vulkan_pipeline (C): OK, 4096 elements match" in out


# ---- the runtime's Vulkan declarations ------------------------------------------------------


def test_the_runtimes_vulkan_declarations_match_khronos_header(tmp_path):
    if not Path("/usr/include/vulkan/vulkan_core.h").exists():
        pytest.skip("no Vulkan header (apt-get install libvulkan-dev)")
    source = ROOT / "csrc" / "tests" / "vulkan_abi_check.c"
    outputs = []
    for name, flags in (("real", ["-DMP_REAL_VULKAN"]),
                        ("ours", [f"-I{ROOT / 'csrc' / 'src'}", f"-I{ROOT / 'csrc' / 'include'}"])):
        exe = tmp_path / name
        run("cc", "-std=c11", "-Wall", "-Werror", *flags, source, "-o", exe)
        outputs.append(run(exe))
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) > 70
