"""The C++ layer, modpack/modpack.hpp: a test program (tests/cpp/test_modpack_hpp.cpp) built
against the runtime installed by CMake, with g++ and with clang++ (whichever are present),
warnings as errors, then once more under AddressSanitizer and UndefinedBehaviorSanitizer; and
examples/cpp_embed built with CMake (find_package(modpack)) and run.

The program loads libraries exported here: host functions taking and returning every kind of
value, a const module, a signed copy, and a library whose weights live in a weight file kept
elsewhere (swapped for a second one while loaded)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run

import modpack

TEST = ROOT / "tests" / "cpp" / "test_modpack_hpp.cpp"
EXAMPLE = ROOT / "examples" / "cpp_embed"
WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wconversion", "-Wsign-conversion",
            "-Werror"]
COMPILERS = [c for c in ("g++", "clang++") if shutil.which(c)]

HOST = r"""
#include <stdio.h>
#include <string.h>
#include "modpack/backend.h"

static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
static double scale(double x, double k) { return x * k; }
MP_EXPORT_FUNC(scale, double, double, double)
static int64_t str_len(const char* s) { return (int64_t)strlen(s); }
MP_EXPORT_FUNC(str_len, int64_t, const char*)
static void fail(int64_t code) {
  mp_backend_errorf((mp_status_t)code, "failing with %d", (int)code);
}
MP_EXPORT_VOID_FUNC(fail, int64_t)

static void vadd(const DLTensor* a, const DLTensor* b, DLTensor* c) {
  const float* x = a->data; const float* y = b->data; float* z = c->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_TYPED_VOID_FUNC(vadd, "a: float32[n] cpu, b: float32[n] cpu, c: float32[n] cpu",
                          const DLTensor*, const DLTensor*, DLTensor*)

static double sum_w(void) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return 0;
  double s = 0;
  for (int64_t i = 0; i < w->shape[0]; ++i) s += ((const float*)w->data)[i];
  return s;
}
MP_EXPORT_FUNC0(sum_w, double)

/* The type of each argument ("array/r" for a read-only array), as one str. */
static char kinds_text[512];
MP_EXPORT_PACKED(kinds) {
  (void)self;
  kinds_text[0] = 0;
  for (int32_t i = 0; i < num_args; ++i) {
    if (i) strcat(kinds_text, " ");
    strcat(kinds_text, mp_type_code_name(args[i].type_code));
    if (args[i].type_code == MP_TYPE_DLTENSOR)
      strcat(kinds_text, args[i].flags & MP_VALUE_READ_ONLY ? "/r" : "/w");
  }
  out_ret->type_code = MP_TYPE_STR;
  out_ret->v_str = kinds_text;
  return MP_OK;
}

MP_EXPORT_PACKED(echo) {
  (void)self;
  if (num_args > 0) *out_ret = args[0];
  return MP_OK;
}
"""

WEIGHTS_HOST = r"""
#include "modpack/backend.h"
static double sum_v(void) {
  const DLTensor* v;
  if (mp_backend_get_array("v", &v) != MP_OK) return 0;
  double s = 0;
  for (int64_t i = 0; i < v->shape[0]; ++i) s += ((const float*)v->data)[i];
  return s;
}
MP_EXPORT_FUNC0(sum_v, double)
"""


def _keys(folder: Path) -> tuple[Path, Path, Path]:
    """(private key, its public key, another public key), as PEM files."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    paths = []
    for name in ("key", "other"):
        key = Ed25519PrivateKey.generate()
        (folder / f"{name}.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (folder / f"{name}.pub.pem").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        paths.append(folder / f"{name}.pub.pem")
    return folder / "key.pem", paths[0], paths[1]


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The test program's arguments."""
    pytest.importorskip("cryptography", reason="signing needs pip install modpack[sign]")
    tmp = tmp_path_factory.mktemp("cpp")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": np.arange(4, dtype=np.float32) / 2}))
    lib = host.export_library(tmp / "lib.so", metadata={"revision": "4f2a9c1"})
    private, public, other = _keys(tmp)
    run(Path(sys.executable).parent / "modpack", "sign", lib, "--key", private)

    made = tmp / "made"
    made.mkdir()
    modpack.save_weights({"v": np.array([1, 2, 3], dtype=np.float32)}, made / "model.mpw")
    host = modpack.csource_module(WEIGHTS_HOST)
    host.import_module(modpack.weights_module(made / "model.mpw"))
    weights_lib = host.export_library(tmp / "weights_lib.so")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    model = (made / "model.mpw").rename(elsewhere / "model.mpw")
    model2 = modpack.save_weights({"v": np.array([10, 20, 30], dtype=np.float32)},
                                  elsewhere / "model2.mpw")
    bad = tmp / "bad.so"
    bad.write_bytes(b"this is not a library\n" * 10)
    return [lib, weights_lib, model, model2, public, other, bad]


def _compile(compiler: str, prefix: Path, exe: Path, *flags: str) -> Path:
    lib = prefix / "lib"
    run(compiler, "-std=c++17", *WARNINGS, *flags, f"-I{prefix / 'include'}", TEST,
        f"-L{lib}", "-lmodpack_runtime", f"-Wl,-rpath,{lib}", "-lpthread", "-ldl", "-o", exe)
    return exe


def _run(exe: Path, libraries: list[Path], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(exe), *map(str, libraries)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_modpack_hpp: OK" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.skipif(not COMPILERS, reason="no C++ compiler (apt-get install g++ or clang++)")
@pytest.mark.parametrize("compiler", COMPILERS)
def test_the_cpp_layer(compiler: str, runtime_prefix: Path, libraries: list[Path],
                       tmp_path: Path) -> None:
    exe = _compile(compiler, runtime_prefix, tmp_path / "test_modpack_hpp", "-O1")
    _run(exe, libraries)


@pytest.mark.skipif(not COMPILERS, reason="no C++ compiler (apt-get install g++ or clang++)")
def test_the_cpp_layer_under_sanitizers(runtime_prefix: Path, libraries: list[Path],
                                        tmp_path: Path) -> None:
    """ASan (leaks included) and UBSan over the header and the calls it makes; the runtime
    itself is the installed, uninstrumented one (tests/test_sanitizers.py covers it)."""
    exe = _compile(COMPILERS[0], runtime_prefix, tmp_path / "test_modpack_hpp_asan", "-O1", "-g",
                   "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1"}
    _run(exe, libraries, env)


@pytest.mark.skipif(not COMPILERS, reason="no C++ compiler (apt-get install g++ or clang++)")
def test_the_header_stands_alone() -> None:
    """modpack.hpp compiles on its own (it includes what it uses), as C++17 and C++20."""
    for std in ("c++17", "c++20"):
        proc = subprocess.run(
            [COMPILERS[-1], f"-std={std}", *WARNINGS, "-fsyntax-only", "-x", "c++",
             f"-I{ROOT / 'csrc' / 'include'}", "-"],
            input='#include "modpack/modpack.hpp"\nint main() { return 0; }\n',
            capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([COMPILERS[-1], "-std=c++14", "-fsyntax-only", "-x", "c++",
                           f"-I{ROOT / 'csrc' / 'include'}", "-"],
                          input='#include "modpack/modpack.hpp"\n', capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "needs C++17" in proc.stderr, proc.stderr


@pytest.mark.skipif(not COMPILERS, reason="no C++ compiler (apt-get install g++ or clang++)")
def test_the_cpp_example(runtime_prefix: Path, tmp_path: Path) -> None:
    deploy = tmp_path / "deploy.so"
    run(sys.executable, ROOT / "examples" / "c_embed" / "make_deploy.py", deploy)
    build = tmp_path / "build"
    run("cmake", "-S", EXAMPLE, "-B", build, f"-DCMAKE_PREFIX_PATH={runtime_prefix}",
        "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON")
    run("cmake", "--build", build, "-j2")
    out = run(build / "cpp_embed", deploy)
    assert "cpp_embed: OK" in out, out
    assert "refused (status 1, modpack::ArgumentError)" in out, out
