"""The kernel cache: what a device compiled from a library's code, kept for the next process.

OpenCL runs for real on PoCL (with PoCL's own cache off, POCL_KERNEL_CACHE=0, so that what a
second process skips is modpack's doing); CUDA runs against the stub driver
(tests/data/stub_libcuda.c), whose linker makes a fake cubin from PTX and logs what is linked
and loaded. Every process here is a fresh one with a cache folder of the test's, and what it
found is read from its counters (mp_kernel_cache_stats) and its log lines, never from timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash
from conftest import build_c_program, run
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

import modpack
from modpack.cli.main import main as cli
from modpack.format.signatures import sign_library
from modpack.runtime.binding import ffi, lib
from modpack.tools.inspection import inspect_library

VADD = r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
"""
# Another program: its entry must never serve VADD's.
VSUB = VADD.replace("a[i] + b[i]", "a[i] - b[i]")

OPENCL_CHILD = r"""
import json, sys, time
import numpy as np
import modpack
from modpack import kernel_cache_stats
path, cache, *keys = sys.argv[1:]
root = modpack.load_module(path, kernel_cache=cache == "on", trusted_keys=keys or None)
vadd = root.get_function("vadd", query_imports=True)
x = np.arange(64, dtype=np.float32)
a = modpack.array(x, device="opencl:0")
c = modpack.empty(64, "float32", device="opencl:0")
start = time.perf_counter()
vadd(a, a, c, 64, 64, 1, 1, 0, 0, 0)
out = c.numpy()
ms = (time.perf_counter() - start) * 1e3
print(json.dumps({"ok": out.tolist() == (2 * x).tolist(), "ms": ms, **kernel_cache_stats()}))
"""


def opencl_library(folder: Path, source: str = VADD, name: str = "k.so") -> Path:
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.opencl_module(source))
    return host.export_library(folder / name)


def child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def opencl_run(path: Path, cache: Path | str, *keys: Path, option: str = "on",
               expect_ok: bool = True) -> tuple[dict, str]:
    """One fresh process calling vadd once: (its result and counters, its stderr)."""
    proc = child(OPENCL_CHILD, str(path), option, *map(str, keys),
                 MODPACK_KERNEL_CACHE=str(cache), POCL_KERNEL_CACHE="0", MODPACK_LOG_LOADING="1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] is expect_ok, result
    return result, proc.stderr


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if len(p.name) == 64) if cache.exists() else []


def cache_lines(stderr: str) -> list[str]:
    """What the cache said (MODPACK_LOG_LOADING: "modpack: load PATH: kernel cache  N ms  WHAT")."""
    return [line.split(" ms  ", 1)[1] for line in stderr.splitlines()
            if ": kernel cache " in line]


# ---- the entry format, from docs/format.md ----------------------------------------------------


def offset(field: str) -> int:
    return ffi.offsetof("mp_kernel_cache_entry_v1_t", field)


def cache_key(kind: str, code: bytes, options: str, device: str, driver: str) -> str:
    """The key as docs/format.md gives it, computed here independently of the runtime."""
    h = hashlib.sha256(ffi.string(lib.MP_KERNEL_CACHE_KEY_CONTEXT))
    h.update(struct.pack("<I", lib.MP_KERNEL_CACHE_VERSION))
    for field in (modpack.__version__.encode(), kind.encode(), hashlib.sha256(code).digest(),
                  options.encode(), device.encode(), driver.encode()):
        h.update(struct.pack("<Q", len(field)) + field)
    return h.hexdigest()


def entry_bytes(key: str, kind: str, data: bytes) -> bytes:
    """A valid entry holding |data| under |key|."""
    header = bytearray(lib.MP_KERNEL_CACHE_HEADER_SIZE)
    header[0:8] = ffi.string(lib.MP_KERNEL_CACHE_MAGIC)
    struct.pack_into("<II", header, offset("version"), lib.MP_KERNEL_CACHE_VERSION, len(header))
    header[offset("key"):offset("key") + 32] = bytes.fromhex(key)
    header[offset("kind"):offset("kind") + len(kind)] = kind.encode()
    struct.pack_into("<QQ", header, offset("data_size"), len(data), xxhash.xxh3_64_intdigest(data))
    reseal(header)
    return bytes(header) + data


def reseal(header: bytearray) -> None:
    """Recompute the header's checksum (so only the change made is wrong)."""
    end = offset("header_checksum")
    struct.pack_into("<Q", header, end, xxhash.xxh3_64_intdigest(bytes(header[:end])))


def opencl_key(path: Path) -> str:
    """The key a build of |path|'s OpenCL source on opencl:0 is stored under, from the bytes in
    the file."""
    report = inspect_library(path)
    (module,) = [m for m in report["modules"] if m["type_key"] == "opencl"]
    contents = module["contents"]
    assert contents["source_code"]["encoding"] == "raw"  # not in a code frame
    start = report["blob"]["file_offset"] + module["offset"] + contents["source_offset"]
    source = path.read_bytes()[start:start + contents["source_bytes"]]
    device = modpack.device_name("opencl:0")  # "platform/device/driver version"
    return cache_key("opencl", source, contents["build_options"], device,
                     device.rsplit("/", 1)[1])


@pytest.fixture(scope="module")
def vadd_library(tmp_path_factory) -> Path:
    return opencl_library(tmp_path_factory.mktemp("vadd"))


# ---- OpenCL on PoCL --------------------------------------------------------------------------


def test_a_second_process_loads_the_program_binary_instead_of_building(vadd_library, tmp_path):
    """The first process builds and stores (folder 0700, entry 0600, named by the key of the
    file's own source bytes); the second loads the entry and builds nothing; both compute."""
    cache = tmp_path / "made" / "kernels"
    first, log = opencl_run(vadd_library, cache)
    assert (first["misses"], first["stores"], first["hits"]) == (1, 1, 0)
    assert any(line.startswith("miss: no opencl program binary") for line in cache_lines(log))
    assert any(line.startswith("stored the opencl program binary") for line in cache_lines(log))
    (entry,) = entries(cache)
    assert entry.name == opencl_key(vadd_library)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700  # made with its parents
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    second, log = opencl_run(vadd_library, cache)
    assert (second["hits"], second["misses"], second["stores"]) == (1, 0, 0)
    assert cache_lines(log) == [line for line in cache_lines(log) if line.startswith("hit: ")]
    print(f"first call: cold {first['ms']:.1f} ms, cached {second['ms']:.1f} ms")


def test_the_cache_is_off_by_option_and_by_an_empty_variable(vadd_library, tmp_path):
    """kernel_cache=False and MODPACK_KERNEL_CACHE="" each build without reading or writing."""
    cache = tmp_path / "kernels"
    result, log = opencl_run(vadd_library, cache, option="off")
    assert (result["off"], result["hits"], result["misses"]) == (1, 0, 0)
    assert "kernel_cache=False" in log and not cache.exists()
    result, log = opencl_run(vadd_library, "")
    assert result["off"] == 1 and "MODPACK_KERNEL_CACHE is set empty" in log


def test_a_driver_that_refuses_an_entry_gets_the_source_built(vadd_library, tmp_path):
    """A well-formed entry under the right key whose bytes PoCL does not take is counted as
    refused, the source is built, and the entry replaced by the good one."""
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    key = opencl_key(vadd_library)
    (cache / key).write_bytes(entry_bytes(key, "opencl", b"not a program binary"))
    (cache / key).chmod(0o600)
    result, log = opencl_run(vadd_library, cache)
    assert (result["refused"], result["stores"]) == (1, 1)
    assert any("the driver refused entry" in line for line in cache_lines(log))
    assert opencl_run(vadd_library, cache)[0]["hits"] == 1


def test_eight_processes_at_once_build_once(vadd_library, tmp_path):
    """Eight processes started together on an empty cache: every one computes, one builds (the
    others wait on its build lock and load its entry), and the entry is valid.

    PoCL's own cache is on here, in an empty folder of the test's: with it off
    (POCL_KERNEL_CACHE=0) a PoCL program binary names the temporary folder of the process that
    built it, and processes loading the same binary at once compile their kernels into that one
    folder, which fails in PoCL 3.1 ("Final linking of kernel vadd failed"; prebuilt binaries,
    binaries=, meet the same)."""
    cache = tmp_path / "kernels"
    env = {**os.environ, "MODPACK_KERNEL_CACHE": str(cache),
           "POCL_CACHE_DIR": str(tmp_path / "pocl")}
    env.pop("POCL_KERNEL_CACHE", None)
    procs = [subprocess.Popen([sys.executable, "-c", OPENCL_CHILD, str(vadd_library), "on"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(8)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert all(r["ok"] for r in results)
    assert sum(r["stores"] for r in results) == 1
    assert sum(r["misses"] for r in results) == 1 and sum(r["hits"] for r in results) == 7
    assert sum(r["ignored"] for r in results) == 0
    (entry,) = entries(cache)
    assert [p.name for p in cache.iterdir()] == [entry.name]  # no lock or temporary file left
    listing = json.loads(run(sys.executable, "-m", "modpack", "cache", "list", "--json",
                             env={**env}))
    assert [e["valid"] for e in listing["kernels"]["entries"]] == [True]


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("key")
    key = Ed25519PrivateKey.generate()
    private, public = folder / "k.pem", folder / "k.pub.pem"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM,
                                                     PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_a_signed_tree_uses_only_the_entry_of_its_own_verified_code(signing_key, tmp_path):
    """A signed load keys its build by the SHA-256 of the signed source it verified: its entry
    is the one computed from the file's bytes, and the entry of another program, put under its
    key, is ignored (the header names the other key) and the signed source built."""
    private, public = signing_key
    signed = opencl_library(tmp_path, name="signed.so")
    sign_library(signed, private)
    other = opencl_library(tmp_path, VSUB, name="other.so")
    cache = tmp_path / "kernels"
    result, _ = opencl_run(signed, cache, public)
    assert (result["misses"], result["stores"]) == (1, 1)
    (entry,) = entries(cache)
    assert entry.name == opencl_key(signed)
    # The other program's entry, renamed to the signed program's key.
    proc = child(OPENCL_CHILD.replace("2 * x", "0 * x"), str(other), "on",
                 MODPACK_KERNEL_CACHE=str(cache), POCL_KERNEL_CACHE="0")
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr
    (other_entry,) = [p for p in entries(cache) if p.name != entry.name]
    os.replace(other_entry, entry)
    result, log = opencl_run(signed, cache, public)
    assert (result["ignored"], result["hits"], result["stores"]) == (1, 0, 1)
    assert any("it holds the entry of another key" in line for line in cache_lines(log))


def test_preflight_says_hit_or_miss_for_this_machine_s_devices(vadd_library, tmp_path):
    """modpack preflight --device host answers whether the cache holds each module's build;
    a named device (no driver asked) gets no such answer."""
    env = {**os.environ, "MODPACK_KERNEL_CACHE": str(tmp_path / "kernels"),
           "POCL_KERNEL_CACHE": "0"}

    def state() -> dict:
        report = json.loads(run(sys.executable, "-m", "modpack", "preflight", vadd_library,
                                "--device", "host", "--json", env=env))
        (module,) = [m for m in report["modules"] if m["type_key"] == "opencl"]
        return module["answers"][0]["kernel_cache"]

    assert state()["state"] == "miss"
    opencl_run(vadd_library, tmp_path / "kernels")
    found = state()
    assert found["state"] == "hit" and opencl_key(vadd_library) in found["detail"]
    text = run(sys.executable, "-m", "modpack", "preflight", vadd_library, "--device", "host",
               env=env)
    assert "[kernel cache: hit: opencl program binary" in text
    named = json.loads(run(sys.executable, "-m", "modpack", "preflight", vadd_library,
                           "--device", "opencl", "--json", env=env))
    assert all("kernel_cache" not in a for m in named["modules"] for a in m["answers"])


# ---- CUDA through the stub driver -------------------------------------------------------------

TICK_PTX = """\
.version 7.0
.target sm_80
.address_size 64
.visible .entry tick(
	.param .u32 tick_param_0
)
{
	ret;
}
"""

CUDA_CHILD = r"""
import json, sys
import modpack
from modpack import kernel_cache_stats
root = modpack.load_module(sys.argv[1], kernel_cache=sys.argv[2] == "on")
root.get_function("tick", query_imports=True)(5, 1, 1, 1, 1, 1, 1)
print(json.dumps(kernel_cache_stats()))
"""


@pytest.fixture(scope="module")
def ptx_library(tmp_path_factory) -> Path:
    """A PTX-only CUDA library: every device compiles it at its first launch."""
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.cuda_module(binaries={"ptx": TICK_PTX.encode()},
                                           functions={"tick": ["int32"]}))
    return host.export_library(tmp_path_factory.mktemp("ptx") / "ptx.so")


def cuda_env(stub: Path, cache: Path | str, log: Path) -> dict[str, str]:
    return {"MODPACK_CUDA_LIBRARY": str(stub), "STUB_CUINIT_RESULT": "0", "STUB_CC": "9.0",
            "STUB_ACCEPT": "1", "STUB_LOG": str(log), "MODPACK_KERNEL_CACHE": str(cache),
            "MODPACK_LOG_LOADING": "1"}


def cuda_run(path: Path, stub: Path, cache: Path | str, log: Path,
             option: str = "on") -> tuple[dict, list[str], str]:
    """One fresh process launching tick once: (its counters, what the stub logged, stderr)."""
    log.unlink(missing_ok=True)
    proc = child(CUDA_CHILD, str(path), option, **cuda_env(stub, cache, log))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), log.read_text().splitlines(), proc.stderr


LINKED = ["link ptx sm_80", "linked cubin sm_90 from ptx sm_80",
          "cubin sm_90 linked from ptx sm_80", "function tick"]
LOADED = ["cubin sm_90 linked from ptx sm_80", "function tick"]


def test_cuda_ptx_is_linked_once_then_the_cubin_is_loaded(ptx_library, stub_driver, tmp_path):
    """The first process links the PTX (cuLink*) and stores the cubin; the second loads the
    stored cubin with cuModuleLoadData and links nothing. The entry's data is the driver's
    cubin, byte for byte what it linked."""
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    stats, calls, _ = cuda_run(ptx_library, stub_driver, cache, log)
    assert (stats["misses"], stats["stores"]) == (1, 1)
    assert calls[:4] == LINKED and calls[4].startswith("launch grid 1 1 1 block 1 1 1")
    (entry,) = entries(cache)
    data = entry.read_bytes()[lib.MP_KERNEL_CACHE_HEADER_SIZE:]
    assert data.startswith(b"\x7fELF") and b"stub cubin from ptx sm_80, fnv1a " in data
    # The stub's device, its compute capability, CUDA 12.4.
    assert entry.name == cache_key("cuda", TICK_PTX.encode() + b"\0", "", "Stub GPU/sm_90",
                                   "12040")
    stats, calls, _ = cuda_run(ptx_library, stub_driver, cache, log)
    assert (stats["hits"], stats["misses"]) == (1, 0)
    assert calls[:2] == LOADED and not any(c.startswith("link") for c in calls)


def test_cuda_with_the_cache_off_jit_compiles_the_ptx_as_before(ptx_library, stub_driver,
                                                                tmp_path):
    """Cache off: PTX goes to cuModuleLoadData (the driver's JIT), nothing is linked or kept."""
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    stats, calls, _ = cuda_run(ptx_library, stub_driver, cache, log, option="off")
    assert stats["off"] == 1 and calls[:2] == ["ptx sm_80", "function tick"]
    assert not cache.exists()


def _flip(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    data[-3] ^= 0x40
    entry.write_bytes(bytes(data))


def _truncate(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:-10])


def _short(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:100])


def _header(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    data[offset("data_size")] ^= 1  # the header's checksum no longer holds
    entry.write_bytes(bytes(data))


def _other_key(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    data[offset("key")] ^= 0xFF
    reseal(data)
    entry.write_bytes(bytes(data))


def _newer(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    struct.pack_into("<I", data, offset("version"), lib.MP_KERNEL_CACHE_VERSION + 1)
    reseal(data)
    entry.write_bytes(bytes(data))


def _symlink(entry: Path) -> None:
    target = entry.parent.parent / "elsewhere"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(target)


def _fifo(entry: Path) -> None:
    entry.unlink()
    os.mkfifo(entry)


def _group_writable(entry: Path) -> None:
    entry.chmod(0o620)


def _another_user(entry: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(entry, 65534, 65534)


DAMAGE = {
    "a flipped data byte": (_flip, "its data is damaged (checksum mismatch)"),
    "truncated": (_truncate, "truncated: its header says"),
    "shorter than a header": (_short, "truncated: 100 bytes, shorter than an entry's header"),
    "a damaged header": (_header, "its header is damaged (checksum mismatch)"),
    "another key in its header": (_other_key, "it holds the entry of another key"),
    "a newer entry version": (_newer, "entry version 2 with a 128-byte header"),
    "a symbolic link": (_symlink, "a symbolic link, never followed"),
    "a FIFO": (_fifo, "not a regular file"),
    "writable by its group": (_group_writable, "it is writable by others (mode 620)"),
    "another user's": (_another_user, "it belongs to uid 65534, not to this user"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_bad_entry_is_ignored_and_built_anew(ptx_library, stub_driver, tmp_path, case):
    """Whatever is wrong with an entry, the process says why on the modpack.load log, builds
    (links) anew, runs, and leaves a valid entry in its place; a link is replaced, never
    followed, and its target is left as it was."""
    damage, why = DAMAGE[case]
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    cuda_run(ptx_library, stub_driver, cache, log)
    (entry,) = entries(cache)
    good = entry.read_bytes()
    damage(entry)
    target = tmp_path / "elsewhere"
    before = target.read_bytes() if target.exists() else None
    stats, calls, stderr = cuda_run(ptx_library, stub_driver, cache, log)
    assert (stats["ignored"], stats["hits"], stats["stores"]) == (1, 0, 1)
    assert calls[:4] == LINKED
    assert any(why in line for line in cache_lines(stderr)), cache_lines(stderr)
    assert entry.is_file() and not entry.is_symlink() and entry.read_bytes() == good
    if before is not None:
        assert target.read_bytes() == before
    assert cuda_run(ptx_library, stub_driver, cache, log)[0]["hits"] == 1


def test_a_folder_others_can_write_is_never_used(ptx_library, stub_driver, tmp_path):
    """A cache folder writable by others: nothing is read from it or written to it, and the
    process builds; `modpack cache list` says why the cache is off."""
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    cuda_run(ptx_library, stub_driver, cache, log)
    cache.chmod(0o777)
    stats, calls, stderr = cuda_run(ptx_library, stub_driver, cache, log)
    assert (stats["off"], stats["hits"], stats["stores"]) == (1, 0, 0)
    assert calls[:4] == LINKED
    assert any("writable by others (mode 777)" in line for line in cache_lines(stderr))
    listing = json.loads(run(sys.executable, "-m", "modpack", "cache", "list", "--json",
                             env={**os.environ, "MODPACK_KERNEL_CACHE": str(cache)}))
    assert listing["kernels"]["enabled"] is False
    assert "chmod 700" in listing["kernels"]["reason"]


# ---- Vulkan on lavapipe ------------------------------------------------------------------------
# A pipeline's VkPipelineCache data, keyed by its SPIR-V, entry point and specialization; the
# entry's VkPipelineCacheHeaderVersionOne is checked against the device before the driver sees
# it. (lavapipe in Mesa 22.3 keeps a 32-byte header and no compiled code: what a hit saves there
# is nothing, but what is stored, found and refused is the same on every driver.)

needs_vulkan = pytest.mark.skipif(
    not shutil.which("glslangValidator") or not shutil.which("spirv-cross")
    or modpack.device_count("vulkan") < 1,
    reason="no Vulkan device or no glslang-tools (scripts/dev.sh installs lavapipe and both)")

SPEC_SCALE = """#version 450
layout(local_size_x = 64) in;
layout(constant_id = 0) const float K = 1.0;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) y[i] = x[i] * K; }
"""

# Calls scale once per variant (after writing that variant's bytes over the entry: the fuzz
# test's), each time from a fresh copy of the library (a process loads a path once), so that
# each call makes its pipeline through the cache.
VULKAN_CHILD = r"""
import json, shutil, sys
from pathlib import Path
import numpy as np
import modpack
from modpack import kernel_cache_stats
path, option, factor, entry, *variants = sys.argv[1:]
x = np.arange(256, dtype=np.float32)
each = []
for variant in variants or [None]:
    load = path
    if variant:
        Path(entry).write_bytes(Path(variant).read_bytes())
        load = shutil.copyfile(path, variant + ".so")
    root = modpack.load_module(load, kernel_cache=option == "on")
    a = modpack.array(x, device="vulkan:0")
    y = modpack.empty(256, "float32", device="vulkan:0")
    root.get_function("scale", query_imports=True)(a, y, 256, 4, 1, 1)
    each.append(y.numpy().tolist() == (float(factor) * x).tolist())
print(json.dumps({"ok": all(each), "each": each, **kernel_cache_stats()}))
"""


def vulkan_library(folder: Path, k: float = 3.0, name: str = "vk.so") -> Path:
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.vulkan_module({"scale": SPEC_SCALE}, specialization={"K": k}))
    return host.export_library(folder / name)


def vulkan_run(path: Path, cache: Path | str, k: float = 3.0, option: str = "on",
               entry: Path | None = None, variants: tuple[Path, ...] = ()) -> tuple[dict, str]:
    """One fresh process calling scale (once, or once per variant): (its result and counters,
    its stderr)."""
    proc = child(VULKAN_CHILD, str(path), option, str(k), str(entry or ""), *map(str, variants),
                 MODPACK_KERNEL_CACHE=str(cache), MODPACK_LOG_LOADING="1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"], result
    return result, proc.stderr


@pytest.fixture(scope="module")
def vk_library(tmp_path_factory) -> Path:
    if modpack.device_count("vulkan") < 1 or not shutil.which("glslangValidator"):
        pytest.skip("no Vulkan device or no glslang-tools")
    return vulkan_library(tmp_path_factory.mktemp("vk"))


def pipeline_cache_header(data: bytes) -> tuple[int, int, int, int, bytes]:
    """VkPipelineCacheHeaderVersionOne: header size, version, vendorID, deviceID, UUID."""
    return (*struct.unpack_from("<4I", data), data[16:32])


@needs_vulkan
def test_vulkan_a_second_process_seeds_its_pipeline_from_the_entry(vk_library, tmp_path):
    """The first process makes the pipeline and stores the driver's pipeline cache data (kind
    "vulkan", a version 1 header naming this device); the second finds it (a hit, nothing
    stored) and computes the same result; `modpack cache list` labels the entry vulkan."""
    cache = tmp_path / "kernels"
    first, log = vulkan_run(vk_library, cache)
    assert (first["misses"], first["stores"], first["hits"]) == (1, 1, 0)
    assert any(line.startswith("stored the vulkan pipeline cache") for line in cache_lines(log))
    (entry,) = entries(cache)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    data = entry.read_bytes()
    assert data[offset("kind"):offset("kind") + 7] == b"vulkan\0"
    size, version, _, _, _ = pipeline_cache_header(data[lib.MP_KERNEL_CACHE_HEADER_SIZE:])
    assert size >= 32 and version == 1
    second, log = vulkan_run(vk_library, cache)
    assert (second["hits"], second["misses"], second["stores"], second["ignored"]) == (1, 0, 0, 0)
    assert any(line.startswith("hit: vulkan pipeline cache") for line in cache_lines(log))
    listing = json.loads(run(sys.executable, "-m", "modpack", "cache", "list", "--json",
                             env={**os.environ, "MODPACK_KERNEL_CACHE": str(cache)}))
    assert [(e["kind"], e["valid"]) for e in listing["kernels"]["entries"]] == [("vulkan", True)]


@needs_vulkan
def test_vulkan_a_specialization_value_is_part_of_the_key(vk_library, tmp_path):
    """The same SPIR-V specialised K=3 and K=5 is two entries; each library hits its own and
    computes with its own constant."""
    cache = tmp_path / "kernels"
    five = vulkan_library(tmp_path, 5.0, "five.so")
    vulkan_run(vk_library, cache)
    result, _ = vulkan_run(five, cache, 5.0)
    assert (result["misses"], result["stores"]) == (1, 1)
    assert len(entries(cache)) == 2
    assert vulkan_run(five, cache, 5.0)[0]["hits"] == 1
    assert vulkan_run(vk_library, cache)[0]["hits"] == 1


@needs_vulkan
def test_vulkan_preflight_says_whether_the_pipelines_are_kept(vk_library, tmp_path):
    """modpack preflight --device host asks the cache, for this machine's Vulkan device, for
    the key a first launch stores under (SPIR-V, entry point, specialization, device, driver):
    a miss, then after a run a hit naming the kernel; another specialization of the same
    shader is still a miss."""
    cache = tmp_path / "kernels"
    env = {**os.environ, "MODPACK_KERNEL_CACHE": str(cache)}

    def answer(library: Path) -> dict:
        report = json.loads(run(sys.executable, "-m", "modpack", "preflight", library,
                                "--device", "host", "--json", env=env))
        (module,) = [m for m in report["modules"] if m["type_key"] == "vulkan"]
        return module["answers"][0]["kernel_cache"]

    assert answer(vk_library)["state"] == "miss"
    vulkan_run(vk_library, cache)
    found = answer(vk_library)
    assert found["state"] == "hit" and found["detail"].startswith("scale: "), found
    five = vulkan_library(tmp_path, 5.0, "five.so")
    assert answer(five)["state"] == "miss"
    assert answer(vk_library)["state"] == "hit"  # asking used nothing up
    (entry,) = entries(cache)  # preflight stores nothing: five's pipeline was never made
    _vk_wrong_vendor(entry)  # sealed, but not this device's header: a launch would ignore it
    found = answer(vk_library)
    assert found["state"] == "miss" and "would be ignored" in found["detail"], found
    assert run(sys.executable, "-m", "modpack", "preflight", vk_library, "--device", "host",
               env={**env, "MODPACK_KERNEL_CACHE": ""}).count("[kernel cache: off") == 1


@needs_vulkan
def test_vulkan_the_cache_is_off_by_option_and_by_an_empty_variable(vk_library, tmp_path):
    """kernel_cache=False and MODPACK_KERNEL_CACHE="" make the pipeline without a cache and
    write nothing."""
    cache = tmp_path / "kernels"
    result, log = vulkan_run(vk_library, cache, option="off")
    assert (result["off"], result["hits"], result["misses"], result["stores"]) == (1, 0, 0, 0)
    assert "kernel_cache=False" in log and not cache.exists()
    result, log = vulkan_run(vk_library, "")
    assert (result["off"], result["stores"]) == (1, 0)
    assert "MODPACK_KERNEL_CACHE is set empty" in log


def _vk_wrong_vendor(entry: Path) -> None:
    data = bytearray(entry.read_bytes()[lib.MP_KERNEL_CACHE_HEADER_SIZE:])
    data[8] ^= 0x01  # vendorID; the entry resealed
    entry.write_bytes(entry_bytes(entry.name, "vulkan", bytes(data)))


def _vk_rewrite(offset_in_data: int, value: int) -> Callable[[Path], None]:
    def damage(entry: Path) -> None:
        data = bytearray(entry.read_bytes()[lib.MP_KERNEL_CACHE_HEADER_SIZE:])
        struct.pack_into("<I", data, offset_in_data, value)
        entry.write_bytes(entry_bytes(entry.name, "vulkan", bytes(data)))
    return damage


def _vk_short(entry: Path) -> None:
    data = entry.read_bytes()[lib.MP_KERNEL_CACHE_HEADER_SIZE:][:20]
    entry.write_bytes(entry_bytes(entry.name, "vulkan", data))


VULKAN_DAMAGE = {
    "a flipped byte": (_flip, "its data is damaged (checksum mismatch)"),
    "truncated": (_truncate, "truncated: its header says"),
    "another vendor's header": (_vk_wrong_vendor, "another device's or driver's (vendor"),
    "a header of version 2": (_vk_rewrite(4, 2), "pipeline cache header is version 2, not 1"),
    "a 16-byte header size": (_vk_rewrite(0, 16), "pipeline cache header says 16 bytes"),
    "shorter than its header": (_vk_short, "20 bytes, shorter than the 32-byte"),
}


@needs_vulkan
@pytest.mark.parametrize("case", list(VULKAN_DAMAGE))
def test_vulkan_a_damaged_or_foreign_entry_is_a_miss(vk_library, tmp_path, case):
    """A damaged entry, or a sealed one whose pipeline cache header is not this device's (or not
    a version 1 header), never reaches the driver: it is ignored (said why), counted a miss, the
    pipeline made from the SPIR-V with the right result, and a good entry stored in its place."""
    damage, why = VULKAN_DAMAGE[case]
    cache = tmp_path / "kernels"
    vulkan_run(vk_library, cache)
    (entry,) = entries(cache)
    good = entry.read_bytes()
    damage(entry)
    result, log = vulkan_run(vk_library, cache)
    assert (result["ignored"], result["hits"], result["misses"], result["stores"]) == (1, 0, 1, 1)
    assert any(why in line for line in cache_lines(log)), cache_lines(log)
    assert entry.read_bytes() == good
    assert vulkan_run(vk_library, cache)[0]["hits"] == 1


@needs_vulkan
def test_vulkan_random_and_truncated_pipeline_caches_never_crash(vk_library, tmp_path):
    """Fuzz the header check: 120 sealed entries of random bytes, of the good data cut short at
    every length, of the good header with one random byte changed, and of the good header with
    random bytes after it, each written over the entry before a fresh load. Every call computes
    the right result; every entry without a header naming this device is ignored, never given
    to the driver."""
    cache = tmp_path / "kernels"
    vulkan_run(vk_library, cache)
    (entry,) = entries(cache)
    good = entry.read_bytes()[lib.MP_KERNEL_CACHE_HEADER_SIZE:]
    rng = random.Random(32)
    datas = [rng.randbytes(rng.randrange(1, 200)) for _ in range(40)]
    datas += [good[:n] for n in range(1, 32)]
    for _ in range(34):
        changed = bytearray(good)
        at = rng.randrange(32)
        changed[at] ^= rng.randrange(1, 256)
        datas.append(bytes(changed))
    foreign = len(datas)
    datas += [good[:32] + rng.randbytes(rng.randrange(1, 200)) for _ in range(15)]
    folder = tmp_path / "variants"
    folder.mkdir()
    variants = []
    for i, data in enumerate(datas):
        variants.append(folder / f"{i:03}")
        variants[-1].write_bytes(entry_bytes(entry.name, "vulkan", data))
    result, _ = vulkan_run(vk_library, cache, entry=entry, variants=tuple(variants))
    assert len(result["each"]) == len(datas) == 120
    assert result["ignored"] == foreign and result["hits"] == len(datas) - foreign


# ---- listing, pruning, the size bound ---------------------------------------------------------


def plant(cache: Path, name: str, age_s: int, size: int = 1000) -> Path:
    """A valid entry under key |name| (64 hex digits), last used |age_s| seconds ago."""
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cache / name
    path.write_bytes(entry_bytes(name, "cuda", os.urandom(size)))
    path.chmod(0o600)
    when = os.stat(cache).st_mtime - age_s
    os.utime(path, (when, when))
    return path


def test_list_and_prune_least_recently_used_first(tmp_path, monkeypatch, capsys):
    """`modpack cache list` shows each entry (kind, size, whether a lookup would use it and why
    not); `prune --max-size` removes the least recently used first and every bad entry;
    `prune --all` empties the store."""
    cache = tmp_path / "kernels"
    monkeypatch.setenv("MODPACK_KERNEL_CACHE", str(cache))
    old, middle, new = (plant(cache, c * 64, age, 1000 - 128) for c, age in
                        (("a", 300), ("b", 200), ("c", 100)))
    bad = plant(cache, "d" * 64, 50)
    _flip(bad)
    assert cli(["cache", "list", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["kernels"]
    assert report["folder"] == str(cache) and report["enabled"] is True
    by_name = {e["name"]: e for e in report["entries"]}
    assert by_name["a" * 64]["valid"] and by_name["a" * 64]["kind"] == "cuda"
    assert by_name["a" * 64]["size"] == 1000
    assert by_name["d" * 64]["problem"] == "its data is damaged (checksum mismatch)"
    assert cli(["cache", "list"]) == 0
    text = capsys.readouterr().out
    assert "4 entries" in text and "IGNORED: its data is damaged" in text
    assert cli(["cache", "prune", "--max-size", "2000", "--store", "kernels"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert sorted(p.name for p in entries(cache)) == [middle.name, new.name]
    assert not old.exists() and not bad.exists()
    assert cli(["cache", "prune", "--all", "--store", "kernels"]) == 0
    assert entries(cache) == []
    assert cli(["cache", "prune", "--max-size", "lots"]) == 2
    assert cli(["cache", "prune", "--store", "kernels", "oci://host/repo:tag"]) == 2


def test_a_store_keeps_the_folder_within_its_bound(ptx_library, stub_driver, tmp_path):
    """$MODPACK_KERNEL_CACHE_MAX: a store past it removes the entries least recently used, never
    the one it stored."""
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    plant(cache, "a" * 64, 300, 4000)
    plant(cache, "b" * 64, 200, 4000)
    proc = child(CUDA_CHILD, str(ptx_library), "on", MODPACK_KERNEL_CACHE_MAX="8K",
                 **cuda_env(stub_driver, cache, log))
    assert proc.returncode == 0, proc.stderr
    names = [p.name for p in entries(cache)]
    assert "a" * 64 not in names and "b" * 64 in names and len(names) == 2
    assert any("over its bound: removed 1 entries" in line for line in cache_lines(proc.stderr))


# ---- C -----------------------------------------------------------------------------------------

C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modpack/modpack.h"
/* argv: library, "on" or "off", and optionally the kernel's name and its argument count (the
 * first argument 5, the others 1). */
int main(int argc, char** argv) {
  const char* name = argc > 3 ? argv[3] : "tick";
  int count = argc > 4 ? atoi(argv[4]) : 7;
  mp_load_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.flags = strcmp(argv[2], "off") == 0 ? MP_LOAD_NO_KERNEL_CACHE : 0;
  mp_module_t* root = NULL;
  mp_function_t* tick = NULL;
  mp_value_t args[7], ret;
  for (int i = 0; i < 7; ++i) args[i] = mp_int(i == 0 ? 5 : 1);
  ret = mp_none();
  if (mp_module_load(argv[1], &options, &root) != MP_OK ||
      mp_module_get_function(root, name, 1, &tick) != MP_OK ||
      mp_function_call(tick, args, count, &ret) != MP_OK) {
    fprintf(stderr, "%s\n", mp_error_message());
    return 1;
  }
  mp_kernel_cache_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  mp_kernel_cache_stats(&stats);
  printf("hits %llu misses %llu stores %llu off %llu\n", (unsigned long long)stats.hits,
         (unsigned long long)stats.misses, (unsigned long long)stats.stores,
         (unsigned long long)stats.off);
  mp_function_release(tick);
  mp_module_release(root);
  return 0;
}
"""


def test_the_c_api_has_the_same_switch(runtime_prefix, ptx_library, stub_driver, tmp_path):
    """From C: MP_LOAD_NO_KERNEL_CACHE in mp_load_options_t.flags keeps the cache out; without
    it the first program stores and the second loads; mp_kernel_cache_stats says which."""
    exe = build_c_program(runtime_prefix, C_PROGRAM, tmp_path / "tick")
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    env = {**os.environ, **cuda_env(stub_driver, cache, log)}
    assert run(exe, ptx_library, "off", env=env) == "hits 0 misses 0 stores 0 off 1\n"
    assert not cache.exists() and log.read_text().splitlines()[:1] == ["ptx sm_80"]
    assert run(exe, ptx_library, "on", env=env) == "hits 0 misses 1 stores 1 off 0\n"
    log.unlink()
    assert run(exe, ptx_library, "on", env=env) == "hits 1 misses 0 stores 0 off 0\n"
    assert log.read_text().splitlines()[:2] == LOADED


@needs_vulkan
def test_the_c_api_switch_covers_vulkan_pipelines(runtime_prefix, tmp_path):
    """From C, a Vulkan kernel (push constants only, so no arrays): MP_LOAD_NO_KERNEL_CACHE
    makes its pipeline without the cache and writes nothing; without it the first program
    stores and the second hits."""
    exe = build_c_program(runtime_prefix, C_PROGRAM, tmp_path / "tick")
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.vulkan_module({"tick": """#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { int n; } p;
void main() { }
"""}))
    library = host.export_library(tmp_path / "tick.so")
    cache = tmp_path / "kernels"
    env = {**os.environ, "MODPACK_KERNEL_CACHE": str(cache)}
    assert run(exe, library, "off", "tick", "4", env=env) == "hits 0 misses 0 stores 0 off 1\n"
    assert not cache.exists()
    assert run(exe, library, "on", "tick", "4", env=env) == "hits 0 misses 1 stores 1 off 0\n"
    assert run(exe, library, "on", "tick", "4", env=env) == "hits 1 misses 0 stores 0 off 0\n"
    assert len(entries(cache)) == 1


def test_the_load_logger_says_hit_or_miss(ptx_library, stub_driver, tmp_path):
    """The modpack.load logger (DEBUG) carries the cache's lines, naming the library."""
    cache, log = tmp_path / "kernels", tmp_path / "driver.log"
    code = (
        "import logging, sys, modpack\n"
        "logging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s')\n"
        "root = modpack.load_module(sys.argv[1])\n"
        "root.get_function('tick', query_imports=True)(5, 1, 1, 1, 1, 1, 1)\n")
    env = {**cuda_env(stub_driver, cache, log), "MODPACK_LOG_LOADING": ""}
    first = child(code, str(ptx_library), **env)
    second = child(code, str(ptx_library), **env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert f"modpack.load load {ptx_library}: kernel cache" in first.stderr
    assert "miss: no cuda cubin under" in first.stderr
    assert "hit: cuda cubin from" in second.stderr


def test_the_cache_folder_default_is_the_user_cache_folder(tmp_path):
    """Unset, the folder is $XDG_CACHE_HOME/modpack/kernels, else ~/.cache/modpack/kernels;
    a relative MODPACK_KERNEL_CACHE is refused rather than taken against the working folder."""
    code = ("import json; from modpack import kernel_cache_entries as e; "
            "r = e(); print(json.dumps([r['folder'], r['reason']]))")
    env = {k: v for k, v in os.environ.items() if k not in ("MODPACK_KERNEL_CACHE",
                                                            "XDG_CACHE_HOME")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "HOME": str(tmp_path)})
    assert json.loads(proc.stdout)[0] == str(tmp_path / ".cache" / "modpack" / "kernels")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert json.loads(proc.stdout)[0] == str(tmp_path / "xdg" / "modpack" / "kernels")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "MODPACK_KERNEL_CACHE": "relative/folder"})
    assert json.loads(proc.stdout) == [None, "MODPACK_KERNEL_CACHE='relative/folder' is not an "
                                       "absolute path"]
