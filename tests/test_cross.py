"""Cross-compilation as one choice: a library exported for aarch64 (by target=, cc= or $CC) is
compiled, packed and linked for aarch64 throughout; the C runtime cross-builds with the
repository's CMake toolchain file; and a C program loads the library and calls host code that
reads const weights, under qemu-user."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run
from elftools.elf.elffile import ELFFile

import modpack
from modpack.tools.inspection import inspect_library

TARGET = "aarch64-linux-gnu"
SYSROOT = Path("/usr") / TARGET
QEMU = ["qemu-aarch64", "-L", str(SYSROOT)]

pytestmark = pytest.mark.skipif(
    shutil.which(f"{TARGET}-gcc") is None or shutil.which("qemu-aarch64") is None
    or shutil.which("cmake") is None,
    reason="needs the aarch64 cross compiler and qemu-user (apt-get install "
           "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; scripts/dev.sh installs them)",
)

sys.path.insert(0, str(ROOT / "examples" / "c_embed"))
from make_deploy import quickstart_host_code  # noqa: E402


def machine_of(path: Path) -> str:
    with open(path, "rb") as f:
        return ELFFile(f)["e_machine"]


def quickstart_tree() -> modpack.Module:
    host = modpack.csource_module(quickstart_host_code())
    host.import_module(modpack.const_module({
        "weights": np.arange(8, dtype=np.float32) / 4,
        "bias": np.full(8, 0.5, dtype=np.float32),
    }))
    return host


@pytest.fixture(scope="module")
def arm64_runtime(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("arm64-runtime")
    run("cmake", "-S", ROOT, "-B", build, "--toolchain", ROOT / "cmake" / f"{TARGET}.cmake",
        "-DMODPACK_WERROR=ON")
    run("cmake", "--build", build, "-j2")
    return build


def test_the_runtime_cross_builds_and_its_tests_pass_under_qemu(arm64_runtime):
    assert machine_of(arm64_runtime / "libmodpack_runtime.so") == "EM_AARCH64"
    out = run("ctest", "--test-dir", arm64_runtime, "--output-on-failure")
    assert "100% tests passed" in out, out


@pytest.mark.parametrize("how", ["target", "cc", "CC"])
def test_one_choice_of_target_drives_the_whole_export(tmp_path, monkeypatch, how):
    """With $CC a cross compiler, modpack used to force lld onto it ("cannot find 'ld'")."""
    kwargs = {"target": {"target": TARGET}, "cc": {"cc": f"{TARGET}-gcc"}, "CC": {}}[how]
    if how == "CC":
        monkeypatch.setenv("CC", f"{TARGET}-gcc")
    path = quickstart_tree().export_library(tmp_path / "deploy.so", **kwargs)
    assert machine_of(path) == "EM_AARCH64"
    report = inspect_library(path)  # the placed blob and the seal, as for this machine
    assert report["seal"]["state"] == "valid" and report["blob"]["section"] == ".modpack.blob"
    assert [m["type_key"] for m in report["modules"]] == ["_lib", "const"]
    with pytest.raises(modpack.IncompatibleError,
                       match=r"was built for aarch64 \(64-bit, little-endian\); this machine is"):
        modpack.load_module(path)


def test_the_tools_report_a_library_for_another_machine_as_sound(tmp_path):
    """`modpack inspect` exited 1 on a valid aarch64 library ("would not load", where its
    help says 1 is damage): the file is checked as on a machine of its kind and reported with
    its machine, exit 0, a note on stderr; verify holds; extract writes it; a damaged one is
    still refused (exit 1). A .tar export alike."""
    path = quickstart_tree().export_library(tmp_path / "deploy.so", target=TARGET)
    report = inspect_library(path)
    assert report["machine"] == "aarch64" and report["loads"]["stage"] == "machine"
    assert report["content_digest"] is not None  # sound: identified like any other
    shown = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(path)],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"machine +aarch64 \(not this machine, which is ", shown.stdout)
    assert "payload checksums: yes (verified)" in shown.stdout
    assert "is sound, but would not load on this machine" in shown.stderr
    assert "was built for aarch64" in shown.stderr
    verified = modpack.verify_library(path)
    assert verified["ok"], verified
    assert {c["check"]: c["ok"] for c in verified["checks"]}["machine"] is None
    from modpack.tools.extraction import extract_library

    assert extract_library(path, tmp_path / "out")["modules"]
    damaged = tmp_path / "damaged.so"
    data = bytearray(path.read_bytes())
    offset = report["blob"]["file_offset"] + report["modules"][1]["offset"]
    data[offset + 40] ^= 1  # a payload byte: its checksum fails, whatever the machine
    damaged.write_bytes(bytes(data))
    refused = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(damaged)],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "checksum" in refused.stderr, refused.stderr
    tar = quickstart_tree().export_library(tmp_path / "deploy.tar", target=TARGET)
    assert inspect_library(tar)["loads"]["stage"] == "machine"
    assert modpack.verify_library(tar)["ok"]


def test_an_llvm_module_follows_the_target(tmp_path):
    ir = "define i64 @__mp_func_seven(i8* %s, i8* %a, i32 %n, i8* %r) {\n  ret i64 0\n}\n"
    path = modpack.llvm_module(ir).export_library(tmp_path / "ir.so", target=TARGET)
    assert machine_of(path) == "EM_AARCH64"
    with pytest.raises(modpack.CompileError, match="LLVM cannot build for target 'nonsense'"):
        modpack.llvm_module(ir, triple="nonsense").export_library(tmp_path / "bad.so")


def test_what_llvm_cannot_assemble_for_the_target_is_refused_not_aborted(tmp_path):
    """llvmlite has the assembler of this machine's target only, and LLVM aborts the process
    (exit 134) on assembly for another: refused first, saying what to use. In a child
    process, so that a regression kills the child and not the test session."""
    code = f"""
import modpack, numpy as np
host = modpack.csource_module("int x;")
host.import_module(modpack.const_module({{"w": np.arange(4, dtype=np.float32)}}))
try:
    host.export_library({str(tmp_path / "arm.so")!r}, target={TARGET!r}, packer="llvm")
except modpack.ArgumentError as e:
    print("packer:", e)
ir = 'define void @f() {{\\n  call void asm sideeffect "nop", ""()\\n  ret void\\n}}\\n'
try:
    modpack.llvm_module(ir).export_library({str(tmp_path / "ir.so")!r}, target={TARGET!r})
except modpack.CompileError as e:
    print("ir:", e)
"""
    out = run(sys.executable, "-c", code)
    assert re.search(r"packer: packer='llvm' cannot make objects for aarch64-linux-gnu: llvmlite "
                     r"assembles for this machine's target only \(.*\); use packer='elf'", out)
    assert re.search(r"ir: an llvm module's IR holds assembly .* not for aarch64.*object_module",
                     out)
    assert not (tmp_path / "arm.so").exists() and not (tmp_path / "ir.so").exists()
    # For this machine, both still work.
    host = modpack.csource_module("int x;")
    host.import_module(modpack.const_module({"w": np.arange(4, dtype=np.float32)}))
    lib = modpack.load_module(host.export_library(tmp_path / "here.so", packer="llvm"))
    assert lib.imported_modules[0].arrays["w"].tolist() == [0, 1, 2, 3]


def test_a_wrong_compiler_for_the_target_is_refused(tmp_path):
    with pytest.raises(modpack.CompileError, match=r"cc='cc' builds for .*, not 'aarch64"):
        quickstart_tree().export_library(tmp_path / "x.so", target=TARGET, cc="cc")
    with pytest.raises(modpack.CompileError, match=r"no C compiler for target 'sparc64-linux-gnu'"):
        quickstart_tree().export_library(tmp_path / "x.so", target="sparc64-linux-gnu")


def test_a_c_program_runs_the_aarch64_library_under_qemu(arm64_runtime, tmp_path):
    deploy = quickstart_tree().export_library(tmp_path / "deploy.so", target=TARGET)
    program = tmp_path / "c_embed"
    run(f"{TARGET}-gcc", "-std=c11", "-O2", ROOT / "examples" / "c_embed" / "main.c",
        f"-I{ROOT / 'csrc' / 'include'}", arm64_runtime / "libmodpack_runtime.a",
        "-lpthread", "-ldl", "-lm", "-o", program)
    assert machine_of(program) == "EM_AARCH64"
    proc = subprocess.run([*QEMU, str(program), str(deploy)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "QEMU_LD_PREFIX": str(SYSROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Host code for aarch64 read the weights from the blob: out = x * w + b.
    assert "affine(x) = 0.500 0.536 0.643 0.821 1.071 1.393 1.786 2.250" in proc.stdout
    assert "c_embed: OK" in proc.stdout


def test_a_system_library_for_aarch64(arm64_runtime, tmp_path):
    obj = quickstart_tree().export_library(tmp_path / "model.o", system_lib="model",
                                           target=TARGET)
    assert machine_of(obj) == "EM_AARCH64"
    source = tmp_path / "main.c"
    source.write_text(r"""
#include <stdio.h>
#include "modpack/modpack.h"
const mp_system_lib_t* modpack_system_lib_model(void);
int main(void) {
  mp_module_t* root;
  const DLTensor* w;
  if (mp_module_load_system_lib(modpack_system_lib_model(), &root) != MP_OK ||
      mp_module_get_array(root, "weights", 1, &w) != MP_OK) {
    printf("failed: %s\n", mp_error_message());
    return 1;
  }
  printf("weights[7] = %g\n", ((const float*)w->data)[7]);
  mp_module_release(root);
  return 0;
}
""")
    program = tmp_path / "static_model"
    run(f"{TARGET}-gcc", "-std=c11", source, obj, f"-I{ROOT / 'csrc' / 'include'}",
        arm64_runtime / "libmodpack_runtime.a", "-lpthread", "-ldl", "-lm", "-o", program)
    proc = subprocess.run([*QEMU, str(program)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "weights[7] = 1.75" in proc.stdout, proc.stdout + proc.stderr
