"""Write the seed corpus of fuzz_payloads.c into a folder: the golden blob, each of its
payloads, and small valid payloads of every built-in kind made by modpack's own writers. Each
seed starts with the selector byte the fuzz target reads (0 blob, 1 weight file, 2 weights
payload, then one per built-in kind in the runtime's list, ``mp_builtin_kind``, then one per
built-in kind again for a payload whose code is in code frames, ``KIND+frames``); the golden
weight file and a written one are seeds too, and so are the device kinds' payloads with their
code compressed (as ``export_library(compress_code=...)`` writes them) and a blob of them, and a
blob of format 1.2 (metadata and self-tests in its index).
Every built-in kind must have writer seeds here (``writer_modules``): tests/test_kind_recipe.py
checks it.

    python csrc/tests/make_fuzz_corpus.py CORPUS_DIR

``python csrc/tests/make_fuzz_corpus.py CORPUS_DIR tools`` writes the seeds of fuzz_tools.c
instead (``tools_seeds``): whole files, blobs, safetensors files (written by the safetensors
library, and by hand for what its writers cannot make) and each device kind's payloads.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import warnings
from pathlib import Path

import numpy as np

import modpack
from modpack.modules.kernel_info import builtin_kinds
from modpack.runtime.binding import check, ffi, lib

ROOT = Path(__file__).resolve().parents[2]
# The selector byte of each kind of seed, as fuzz_payloads.c reads it.
SELECTOR = {"blob": 0, "weightfile": 1, "weights": 2,
            **{kind: 3 + i for i, kind in enumerate(builtin_kinds())},
            **{f"{kind}+frames": 3 + len(builtin_kinds()) + i
               for i, kind in enumerate(builtin_kinds())}}

OPENCL = """
kernel void scale(global float* x, float k, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] *= k;
}
kernel void copy_any(global const uchar* a, global uchar* b) {
  b[get_global_id(0)] = a[get_global_id(0)];
}
"""
PTX = b""".version 8.0
.target sm_80
.address_size 64
.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u32 n)
{
  ret;
}
"""
VULKAN_SCALE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { float k; uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) x[i] *= p.k; }
"""
VULKAN_MIX = """#version 450
layout(local_size_x = 8, local_size_y = 8) in;
struct Pair { float a; int b; };
layout(std430, set = 0, binding = 1) readonly buffer A { Pair a[]; };
layout(std430, set = 1, binding = 0) buffer B { ivec2 b[]; };
layout(push_constant) uniform P { int n; uint m; float f; } p;
void main() { uint i = gl_GlobalInvocationID.x; b[i] = ivec2(a[i].b * p.n, int(p.m * p.f)); }
"""
# Payload version 2: specialization constants of four types (the workgroup size one of them),
# two blocks on one binding, a push-constant struct of arrays and a vector, float16 storage and
# arithmetic with subgroup operations in SPIR-V 1.5 (the shaders' requirements).
VULKAN_V2 = """#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 0) const uint BLOCK = 32;
layout(constant_id = 1) const float SCALE = 1.0;
layout(constant_id = 2) const int OFFSET = 0;
layout(constant_id = 3) const bool FLIP = false;
layout(local_size_x_id = 0) in;
struct Shape { uint ne[4]; vec2 affine; };
layout(push_constant) uniform P { Shape shape; float16_t bias; } pc;
layout(std430, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, binding = 0) readonly buffer A4 { f16vec4 a4[]; };
layout(std430, binding = 1) writeonly buffer B { float b[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  float v = float(a[i] + a4[i / 4].y + pc.bias) * SCALE * pc.shape.affine.x;
  v = subgroupAdd(FLIP ? -v : v);
  b[i + uint(OFFSET) + pc.shape.ne[3]] = v;
}
"""


def golden_seeds() -> dict[str, bytes]:
    """The golden blob and each of its payloads, located by the runtime's own reader."""
    blob = (ROOT / "tests" / "data" / "golden_v1" / "devc.bin").read_bytes()
    seeds = {"blob-golden": bytes([SELECTOR["blob"]]) + blob}
    data = ffi.from_buffer(blob)
    parsed = ffi.new("mp_blob_t**")
    check(lib.mp_blob_parse({"data": data, "size": len(blob)}, 0, parsed))
    info = ffi.new("mp_blob_info_t*")
    lib.mp_blob_info(parsed[0], info)
    entry = ffi.new("mp_blob_module_t*")
    for i in range(info.module_count):
        check(lib.mp_blob_module(parsed[0], i, entry))
        kind = ffi.string(entry.type_key).decode()
        if kind in SELECTOR:
            payload = blob[entry.payload_offset:entry.payload_offset + entry.payload_size]
            seeds[f"{kind}-golden-{i}"] = bytes([SELECTOR[kind]]) + payload
    lib.mp_blob_free(parsed[0])
    return seeds


# OpenCL C for AMD GPUs without ROCm's device libraries (built by clang for two target IDs).
ROCM = """
__kernel void scale(__global float* x, float s, uint n) {
  size_t i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) x[i] *= s;
}
"""

def writer_modules() -> dict[str, modpack.BinaryModule]:
    """Small modules of every built-in kind made by modpack's writers, by seed name (the kind,
    then what the seed shows)."""
    const = modpack.const_module({
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "scalar": np.array(7, dtype=np.int64),
        "flags": np.array([True, False]),
    })
    opencl = modpack.opencl_module(OPENCL, binaries={"p/d/v": b"\x01\x02\x03"})
    cuda = modpack.cuda_module(binaries={"ptx": PTX})
    # Version 2 payloads: build options, a module name, a hidden NULL pointer, fixed launch
    # values and a symbol differing from the name.
    opencl_v2 = modpack.opencl_module(OPENCL, build_options="-DN=4", name="v2", functions={
        "scale": {"args": ["float32*", "float32", "int32"], "fixed": {"local.x": 64}},
        "copy_any": ["void*", "null void*"]})
    cuda_v2 = modpack.cuda_module(binaries={"ptx": PTX}, name="v2", functions={
        "vadd": {"args": ["void*", "null void*", "int32"], "launch": ["blockIdx.x"],
                 "fixed": {"threadIdx.x": 128}}})
    # Images of one kernel each (as from_triton makes them).
    per_kernel = modpack.modules.cuda.CUDAModule(
        [dataclasses.replace(v, kernels=("vadd",)) for v in cuda_v2.variants] * 2,
        cuda_v2.functions)
    # Two shaders (GLSL compiled, interfaces reflected), named; buffers in two sets, an untyped
    # one, push constants of three scalars.
    vulkan = modpack.vulkan_module({"scale": VULKAN_SCALE, "mix": VULKAN_MIX}, name="vk")
    vulkan_v2 = modpack.vulkan_module(
        {"mixed": VULKAN_V2, "scale": VULKAN_SCALE}, name="vk2", target_env="vulkan1.2",
        specialization={"mixed": {"BLOCK": 64, "SCALE": 0.5, "OFFSET": -3}})
    # Two code objects (one for a target with xnack off), named.
    rocm = modpack.rocm_module(ROCM, targets=["gfx90a:xnack-", "gfx906"], name="amd")
    return {"const": const, "opencl": opencl, "cuda": cuda, "opencl-v2": opencl_v2,
            "cuda-v2": cuda_v2, "cuda-per-kernel": per_kernel, "vulkan": vulkan,
            "vulkan-v2": vulkan_v2, "rocm": rocm}


def writer_seeds() -> dict[str, bytes]:
    return {f"{name}-writer": bytes([SELECTOR[module.type_key]]) + module.save_to_binary()
            for name, module in writer_modules().items()}


def framed_seeds() -> dict[str, bytes]:
    """The device modules' payloads with their code in code frames (zstd level 19, and level 1
    for the CUDA one; a piece compression does not shrink is a stored frame), and a blob of
    them as an export with compress_code writes it (format 1.1, entry flags set)."""
    from modpack.exporter.serializer import ModuleSerializer
    from modpack.format.code_frames import CodeFrames

    seeds: dict[str, bytes] = {}
    modules = writer_modules()
    framed = {name: m for name, m in modules.items() if getattr(m, "frames_code", False)}
    assert {m.type_key for m in framed.values()} >= {"cuda", "opencl", "vulkan", "rocm"}
    for level in (19, 1):
        frames = CodeFrames(level)
        for name, module in framed.items():
            if level == 1 and module.type_key != "cuda":
                continue
            payload = b"".join(bytes(memoryview(c).cast("B"))
                               for c in module.payload_chunks(code=frames))
            seeds[f"{name}-frames{level}-writer"] = (
                bytes([SELECTOR[f"{module.type_key}+frames"]]) + payload)
    root = modules["const"]
    for key in ("cuda", "opencl", "vulkan", "rocm"):
        root.import_module(modules[key])
    out = io.BytesIO()
    ModuleSerializer(root, 19).write_blob_to(out, 0, 64)
    seeds["blob-frames-writer"] = bytes([SELECTOR["blob"]]) + out.getvalue()
    return seeds


def extras_seeds() -> dict[str, bytes]:
    """A blob of format 1.2: metadata and a self-test bundle in its index, after the keys."""
    from modpack.exporter.serializer import ModuleSerializer
    from modpack.format import IndexExtras
    from modpack.metadata import encode_metadata
    from modpack.selftests.bundle import encode_bundle
    from modpack.selftests.spec import check_selftests

    tests = check_selftests([modpack.SelfTest("f", [np.arange(4, dtype=np.float32), 2],
                                              expected={0: np.zeros(4, np.float32)})])
    extras = IndexExtras(encode_metadata({"revision": "4f2a9c1"}, {"version": "0.1.0"}),
                         encode_bundle(tests))
    out = io.BytesIO()
    ModuleSerializer(writer_modules()["const"], 0, extras).write_blob_to(out, 0, 64)
    return {"blob-extras-writer": bytes([SELECTOR["blob"]]) + out.getvalue()}


def weight_seeds(scratch: Path) -> dict[str, bytes]:
    """The golden weight file, one written here (with a duplicate array and alignment 4096),
    and a weights payload referring to it."""
    golden = ROOT / "tests" / "data" / "golden_weights_v1" / "weights.mpw"
    path = modpack.save_weights({"a": np.arange(6, dtype=np.int16).reshape(2, 3),
                                 "b": np.ones(3), "a2": np.arange(6, dtype=np.int16)},
                                scratch / "seed.mpw", alignment=4096)
    reference = modpack.weights_module(path)
    return {"weightfile-golden": bytes([SELECTOR["weightfile"]]) + golden.read_bytes(),
            "weightfile-writer": bytes([SELECTOR["weightfile"]]) + path.read_bytes(),
            "weights-writer": bytes([SELECTOR["weights"]]) + reference.save_to_binary()}


# ---- the seeds of fuzz_tools.c ------------------------------------------------------------------

# Its selectors: 0 a whole file, 1 a blob, 2 a safetensors file, 3 a GGUF file, then one per
# built-in kind (a payload for its preflight head parser).
TOOLS_SELECTOR = {"file": 0, "blob": 1, "safetensors": 2, "gguf": 3,
                  **{kind: 4 + i for i, kind in enumerate(builtin_kinds())}}


def tools_seeds(scratch: Path) -> dict[str, bytes]:
    """Whole files as the tools meet them (a library of every device kind sealed by its note,
    the same with compressed code, one without a blob, a signed one, a weight file, a TVM
    library, a library sealed by a trailer), their blobs, and each device kind's payloads."""
    from modpack.exporter.serializer import ModuleSerializer
    from modpack.format.signatures import sign_library

    modules = writer_modules()
    root = modpack.csource_module("int placeholder;")
    for key in ("const", "opencl", "cuda", "vulkan", "rocm"):
        root.import_module(modules[key])
    with warnings.catch_warnings():  # kernels of one name in several modules: as intended
        warnings.simplefilter("ignore", modpack.ModpackWarning)
        library = root.export_library(scratch / "library.so")
        compressed = root.export_library(scratch / "compressed.so", compress_code=True)
    files = {
        "library": library,
        "library-compressed": compressed,
        "host-only": modpack.csource_module("int x;").export_library(scratch / "host.so"),
        "weightfile": modpack.save_weights({"a": np.arange(6, dtype=np.int16)},
                                           scratch / "w.mpw"),
        "tvm": ROOT / "tests" / "data" / "tvm" / "opencl_add_tvm0.27.so",
        "golden-v1": ROOT / "tests" / "data" / "golden_v1_sealed" / "deploy.so",
    }
    key = scratch / "key.pem"
    key.write_bytes(_private_pem())
    signed = scratch / "signed.so"
    signed.write_bytes(files["library"].read_bytes())
    sign_library(signed, key)
    files["signed"] = signed
    seeds = {f"file-{name}": bytes([TOOLS_SELECTOR["file"]]) + path.read_bytes()
             for name, path in files.items() if path.exists()}
    for level in (0, 19):
        out = io.BytesIO()
        ModuleSerializer(root, level).write_blob_to(out, 0, 64)
        seeds[f"blob-{level}"] = bytes([TOOLS_SELECTOR["blob"]]) + out.getvalue()
    for name, module in modules.items():
        if module.type_key in ("cuda", "opencl", "vulkan", "rocm"):
            seeds[f"head-{name}"] = (bytes([TOOLS_SELECTOR[module.type_key]]) +
                                     module.save_to_binary())
    for name, data in safetensors_files(scratch).items():
        seeds[f"safetensors-{name}"] = bytes([TOOLS_SELECTOR["safetensors"]]) + data
    for name, data in gguf_files(scratch).items():
        seeds[f"gguf-{name}"] = bytes([TOOLS_SELECTOR["gguf"]]) + data
    return seeds


def safetensors_files(scratch: Path) -> dict[str, bytes]:
    """Small safetensors files: written by the safetensors library (every dtype its numpy
    writer takes, bfloat16 and float8 from ml_dtypes, metadata; packed float4), and by hand
    what its writers cannot make (float6, tensors out of the order of their offsets, empty
    tensors sharing an offset, escaped names, null metadata)."""
    import json
    import struct

    import ml_dtypes
    from safetensors import TensorSpec, serialize_file
    from safetensors.numpy import save_file

    arrays: dict[str, np.ndarray] = {
        name: np.arange(3).astype(name) for name in
        ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
         "float16", "float32", "float64", "complex64")}
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e8m0fnu"):
        arrays[name] = np.ones((2, 2), dtype=np.float32).astype(getattr(ml_dtypes, name))
    arrays["scalar"] = np.array(1.5, dtype=np.float32)
    arrays["empty"] = np.zeros((0, 3), dtype=np.int32)
    save_file(arrays, scratch / "every.safetensors", metadata={"format": "np", "k\"ey": "v\n"})
    packed = np.arange(4, dtype=np.uint8).reshape(2, 2)
    serialize_file({"w": TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 2],
                                    data_ptr=packed.ctypes.data, data_len=packed.nbytes)},
                   scratch / "fp4.safetensors")
    header = {"z\u00e9\U0001F600": {"dtype": "F6_E3M2", "shape": [1, 4], "data_offsets": [2, 5]},
              "a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]},
              "e": {"dtype": "F4", "shape": [0, 2], "data_offsets": [5, 5]},
              "f": {"dtype": "U8", "shape": [0], "data_offsets": [5, 5]},
              "__metadata__": None}
    text = json.dumps(header).encode()  # ASCII: the names' characters as \u escapes
    text += b" " * (-len(text) % 8)
    crafted = struct.pack("<Q", len(text)) + text + bytes(range(5))
    return {"every": (scratch / "every.safetensors").read_bytes(),
            "fp4": (scratch / "fp4.safetensors").read_bytes(), "crafted": crafted}


def gguf_files(scratch: Path) -> dict[str, bytes]:
    """Small GGUF files written by the format's own package (none without it): metadata of
    every value type (a summarized array, arrays of arrays), tensors unblocked and
    block-quantized, and one with its own alignment and an empty tensor."""
    try:
        import gguf
    except ImportError:
        return {}
    rng = np.random.default_rng(0)

    def write(name: str, fill) -> bytes:
        path = scratch / f"{name}.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        fill(writer)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()

    def metadata(writer) -> None:
        writer.add_uint8("a.u8", 7)
        writer.add_int8("a.i8", -7)
        writer.add_uint16("a.u16", 700)
        writer.add_int16("a.i16", -700)
        writer.add_uint32("llama.context_length", 2048)
        writer.add_int32("a.i32", -70000)
        writer.add_float32("a.f32", 1e-5)
        writer.add_bool("a.bool", True)
        writer.add_string("general.name", 'tiny "model"\n')
        writer.add_uint64("a.u64", 2**40)
        writer.add_int64("a.i64", -2**40)
        writer.add_float64("a.f64", 0.1)
        writer.add_array("a.ints", list(range(70)))
        writer.add_array("a.words", ["a", "bc", "é"])
        writer.add_key_value("a.nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY)

    def tensors(writer) -> None:
        metadata(writer)
        q8 = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor("f32", rng.standard_normal((2, 3)).astype(np.float32))
        writer.add_tensor("f16", np.arange(5, dtype=np.float16))
        writer.add_tensor("q8_0", rng.integers(0, 256, (2, 34), dtype=np.uint8), raw_dtype=q8)

    def aligned(writer) -> None:
        writer.add_custom_alignment(64)
        q4k = gguf.GGMLQuantizationType.Q4_K
        writer.add_tensor("q4_k", rng.integers(0, 256, (1, 144), dtype=np.uint8), raw_dtype=q4k)
        writer.add_tensor("i32", np.arange(3, dtype=np.int32))

    return {"metadata": write("metadata", metadata), "tensors": write("tensors", tensors),
            "aligned": write("aligned", aligned)}


def _private_pem() -> bytes:
    """A throwaway Ed25519 key, PEM (a seed file signed by it has a filled signature slot)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def main(folder: str, target: str = "payloads") -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / ".scratch"
    scratch.mkdir()
    if target == "tools":
        seeds = tools_seeds(scratch)
    else:
        seeds = {**golden_seeds(), **writer_seeds(), **framed_seeds(), **extras_seeds(),
                 **weight_seeds(scratch)}
    for path in sorted(scratch.iterdir()):
        path.unlink()
    scratch.rmdir()
    for name, data in seeds.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:3])
