"""Host code (modpack/backend.h): the exported functions' argument checks (read-only arrays reach
only `const DLTensor*` parameters), and a failing kernel call inside any exported function
failing the call, even when the host code ignores the status and returns normally — from Python
and from a C program — unless host code clears a failure it handled on purpose."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import run

import modpack
from modpack.runtime.binding import lib

# Each function makes a kernel call that fails (a cuda kernel called with too few arguments:
# refused before any driver is needed, so it fails the same way on every machine), ignores the
# status, and goes on as if all went well.
HOST = r"""
#include "modpack/backend.h"

static void* kernel(void) {
  void* k = NULL;
  mp_backend_get_function("noop", &k);
  return k;
}

static void ignore_failure(DLTensor* out) {
  mp_value_t ret;
  mp_value_t args[1] = {mp_int(1)};
  mp_backend_call(kernel(), args, 1, &ret); /* wrong count: fails, status ignored */
  ((float*)out->data)[0] = 42.0f;
}
MP_EXPORT_VOID_FUNC(ignore_failure, DLTensor*)

static int64_t ignore_failure_value(int64_t x) {
  mp_value_t ret;
  mp_backend_call(kernel(), NULL, 0, &ret);
  return x + 1;
}
MP_EXPORT_FUNC(ignore_failure_value, int64_t, int64_t)

static void ignore_missing(void) {
  void* k;
  mp_backend_get_function("no_such_kernel", &k); /* NOT_FOUND, ignored */
}
MP_EXPORT_VOID_FUNC0(ignore_missing)

MP_EXPORT_PACKED(packed_ignores) {
  (void)self; (void)args; (void)num_args;
  mp_value_t ret;
  mp_backend_call(kernel(), NULL, 0, &ret);
  *out_ret = mp_int(7);
  return MP_OK;
}

/* Falls back when an optional kernel is missing, on purpose. */
static int64_t optional_kernel(int64_t x) {
  void* k;
  if (mp_backend_get_function("optional_fast_path", &k) != MP_OK) {
    mp_backend_clear_error();
    return x * 2;
  }
  return -1;
}
MP_EXPORT_FUNC(optional_kernel, int64_t, int64_t)
"""

PTX = rb"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry noop(
  .param .u32 noop_param_0
)
{
  ret;
}
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.cuda_module(binaries={"compute_80": PTX + b"\0"},
                                           functions={"noop": ["int32"]}))
    return host.export_library(tmp_path_factory.mktemp("host") / "host.so")


def test_a_failed_kernel_call_fails_a_void_function(library):
    root = modpack.load_module(library)
    out = np.zeros(1, np.float32)
    with pytest.raises(modpack.ArgumentError, match="noop: expected 7 arguments"):
        root["ignore_failure"](out)


def test_a_failed_kernel_call_fails_a_function_with_a_value(library):
    root = modpack.load_module(library)
    with pytest.raises(modpack.ArgumentError, match=r"noop: expected 7 arguments .*, got 0"):
        root["ignore_failure_value"](1)


def test_a_failed_lookup_fails_the_call(library):
    root = modpack.load_module(library)
    with pytest.raises(modpack.NotFoundError, match="no_such_kernel"):
        root["ignore_missing"]()


def test_a_packed_function_returning_ok_after_a_failure_fails(library):
    root = modpack.load_module(library)
    with pytest.raises(modpack.ArgumentError, match="noop"):
        root["packed_ignores"]()


def test_host_code_may_clear_a_failure_it_handled(library):
    root = modpack.load_module(library)
    assert root["optional_kernel"](21) == 42
    # The mark does not leak into the next call of the same thread.
    assert root["optional_kernel"](5) == 10


# Host code re-entered through the runtime: host function -> a Python module's function ->
# another host function of the same library. Each call has its own failure mark.
REENTER_HOST = r"""
#include "modpack/backend.h"

static void* python_side(void) {
  static void* f;
  if (!f && mp_backend_get_function("reenter", &f) != MP_OK) return NULL;
  return f;
}

static void fails_quietly(void) {
  void* k;
  mp_backend_get_function("no_such_kernel", &k); /* NOT_FOUND, ignored */
}
MP_EXPORT_VOID_FUNC0(fails_quietly)

static int64_t handles_a_failure(int64_t x) {
  void* k;
  if (mp_backend_get_function("optional_fast_path", &k) != MP_OK) mp_backend_clear_error();
  return x;
}
MP_EXPORT_FUNC(handles_a_failure, int64_t, int64_t)

/* The nested call failed (and Python handled it): not this call's failure. */
static int64_t after_a_nested_failure(int64_t x) {
  mp_value_t ret;
  if (mp_backend_call(python_side(), NULL, 0, &ret) != MP_OK) return -1;
  return x + 1;
}
MP_EXPORT_FUNC(after_a_nested_failure, int64_t, int64_t)

/* This call went on from a failure; a nested call that clears its own mark keeps this one. */
static int64_t failure_then_nested_success(int64_t x) {
  void* k;
  mp_backend_get_function("no_such_kernel", &k); /* NOT_FOUND, ignored */
  mp_value_t ret;
  mp_backend_call(python_side(), NULL, 0, &ret);
  return x;
}
MP_EXPORT_FUNC(failure_then_nested_success, int64_t, int64_t)
"""

NESTED: dict = {}


class Reenter(modpack.BinaryModule):
    """A Python-loaded kind whose one function runs NESTED["call"]()."""

    type_key = "test.reenter"

    def save_to_binary(self) -> bytes:
        return b"reenter"

    def get_function(self, name, query_imports=False):
        if name == "reenter":
            return lambda: NESTED["call"]()
        raise KeyError(name)


@pytest.fixture(scope="module")
def reentrant_root(tmp_path_factory: pytest.TempPathFactory):
    modpack.register_loader("test.reenter")(lambda payload: Reenter())
    try:
        host = modpack.csource_module(REENTER_HOST)
        host.import_module(Reenter())
        yield modpack.load_module(host.export_library(tmp_path_factory.mktemp("re") / "re.so"))
    finally:
        modpack.unregister_loader("test.reenter")


def test_a_nested_calls_failure_is_its_own(reentrant_root):
    root = reentrant_root
    seen = []

    def nested():
        with pytest.raises(modpack.NotFoundError, match="no_such_kernel") as caught:
            root["fails_quietly"]()
        seen.append(caught.value)

    NESTED["call"] = nested
    assert root["after_a_nested_failure"](1) == 2
    assert len(seen) == 1


def test_a_nested_call_keeps_the_enclosing_failure_and_its_message(reentrant_root):
    root = reentrant_root
    NESTED["call"] = lambda: root["handles_a_failure"](3)
    # The nested call succeeded and cleared its own mark: this call still fails, and says why.
    with pytest.raises(modpack.NotFoundError, match="no_such_kernel"):
        root["failure_then_nested_success"](1)
    assert root["handles_a_failure"](4) == 4


def test_without_a_runtime_the_library_keeps_the_mark(library, tmp_path):
    """Host code called by hand (no runtime filled its context): a helper fails with
    MP_ERR_UNAVAILABLE, and the wrapper fails the call although the code ignored it."""
    alone = tmp_path / "alone.so"  # another file, so not the copy the runtime loaded
    shutil.copyfile(library, alone)
    handle = ctypes.CDLL(str(alone))
    packed = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                              ctypes.c_void_p)
    ignore_missing = packed(("__mp_func_ignore_missing", handle))
    ret = (ctypes.c_uint8 * 16)()
    assert ignore_missing(None, None, 0, ret) == lib.MP_ERR_UNAVAILABLE
    optional_kernel = packed(("__mp_func_optional_kernel", handle))
    arg = (ctypes.c_uint8 * 16)()
    ctypes.memmove(arg, (ctypes.c_int64 * 2)(lib.MP_TYPE_INT, 21), 16)  # type_code, v_int64
    assert optional_kernel(None, arg, 1, ret) == lib.MP_OK  # the failure was cleared on purpose
    assert ctypes.c_int64.from_buffer(ret, 8).value == 42


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", ctypes.c_int32 * 2),
                ("ndim", ctypes.c_int32), ("dtype", ctypes.c_uint8 * 4),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


def test_under_a_runtime_without_the_describe_slot_an_array_is_refused_by_its_rule(library,
                                                                                 tmp_path):
    """A runtime older than the __mp_ctx_describe_span slot (one that reports errors, here a
    callback, but fills no describe slot) still hears why an array is refused, by the rule it
    breaks; the runtime's own slot adds the numbers (test_signatures' C callers)."""
    alone = tmp_path / "older.so"
    shutil.copyfile(library, alone)
    handle = ctypes.CDLL(str(alone))
    heard: list[tuple[int, bytes]] = []
    set_error = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)(
        lambda code, message: heard.append((code, message)))
    ctypes.c_void_p.in_dll(handle, "__mp_ctx_set_error").value = ctypes.cast(
        set_error, ctypes.c_void_p).value
    assert ctypes.c_void_p.in_dll(handle, "__mp_ctx_describe_span").value is None
    shape = (ctypes.c_int64 * 1)(-3)
    tensor = _DLTensor(data=ctypes.addressof(shape), ndim=1, shape=shape)
    tensor.device[:] = [1, 0]
    tensor.dtype[:] = [2, 32, 1, 0]  # float32
    arg = (ctypes.c_uint8 * 16)()
    ctypes.memmove(arg, (ctypes.c_int64 * 2)(lib.MP_TYPE_DLTENSOR, ctypes.addressof(tensor)), 16)
    packed = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                              ctypes.c_void_p)
    ignore_failure = packed(("__mp_func_ignore_failure", handle))
    ret = (ctypes.c_uint8 * 16)()
    assert ignore_failure(None, arg, 1, ret) == lib.MP_ERR_INVALID_ARGUMENT
    assert heard == [(lib.MP_ERR_INVALID_ARGUMENT,
                      b"ignore_failure: argument 0 is an array whose bytes cannot be addressed: "
                      b"a dimension is negative")]


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "modpack/modpack.h"

int main(int argc, char** argv) {
  (void)argc;
  mp_module_t* root;
  if (mp_module_load_from_file(argv[1], 0, &root) != MP_OK) return 2;
  const char* names[] = {"ignore_failure_value", "ignore_missing", "packed_ignores"};
  for (int i = 0; i < 3; ++i) {
    mp_function_t* f;
    if (mp_module_get_function(root, names[i], 0, &f) != MP_OK) return 3;
    mp_value_t args[1] = {mp_int(1)}, ret;
    mp_status_t status = mp_function_call(f, args, i == 0 ? 1 : 0, &ret);
    printf("%s: status %d: %s\n", names[i], (int)status, mp_error_message());
    mp_function_release(f);
    if (status == MP_OK) return 4;
  }
  mp_module_release(root);
  return 0;
}
"""


def test_the_same_from_a_c_program(library, runtime_prefix: Path, tmp_path: Path):
    source = tmp_path / "host_errors.c"
    source.write_text(C_PROGRAM)
    exe = tmp_path / "host_errors"
    lib = next(runtime_prefix.glob("lib*/libmodpack_runtime.a"))
    cc = os.environ.get("CC", "cc")
    run(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{runtime_prefix / 'include'}",
        source, lib, "-ldl", "-lpthread", "-o", exe)
    proc = subprocess.run([exe, library], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ignore_failure_value: status 1: noop: expected 7 arguments")
    assert "ignore_missing: status 3:" in lines[1] and "no_such_kernel" in lines[1]
    assert "packed_ignores: status 1:" in lines[2]


def test_read_only_arrays_only_reach_const_parameters(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static void fill(DLTensor* x) { ((int64_t*)x->data)[0] = 42; }
MP_EXPORT_VOID_FUNC(fill, DLTensor*)
static int64_t first(const DLTensor* x) { return ((const int64_t*)x->data)[0]; }
MP_EXPORT_FUNC(first, int64_t, const DLTensor*)
""")
    host.import_module(modpack.const_module({"w": np.arange(4, dtype=np.int64) + 7}))
    root = modpack.load_module(host.export_library(tmp_path / "ro.so"))
    weights = root.imported_modules[0].arrays["w"]
    frozen = np.zeros(4, np.int64)
    frozen.flags.writeable = False
    for array in (weights, frozen, frozen[::2]):
        with pytest.raises(modpack.ArgumentError, match="read-only array"):
            root["fill"](array)
        assert root["first"](array) == array[0]
    assert weights[0] == 7 and frozen[0] == 0
    writable = np.zeros(4, np.int64)
    root["fill"](writable)
    assert writable[0] == 42


CXX_HOST = r"""
#include <dlpack/dlpack.h>   // generated code includes DLPack itself, before modpack
#include <numeric>
#include <string>
#include <vector>
#include "modpack/backend.h"

namespace {
template <typename T>
T total(const DLTensor* x) {
  const T* p = static_cast<const T*>(x->data);
  return std::accumulate(p, p + x->shape[0], T(0));
}
double sum(const DLTensor* x) { return total<double>(x); }
unsigned long long length(const char* s) { return std::string(s).size(); }
void iota(DLTensor* x) {
  std::vector<float> values(x->shape[0]);
  std::iota(values.begin(), values.end(), 1.0f);
  std::copy(values.begin(), values.end(), static_cast<float*>(x->data));
}
}  // namespace
MP_EXPORT_TYPED_FUNC(sum, double, "x: float64[n] cpu", const DLTensor*)
MP_EXPORT_FUNC(length, unsigned long long, const char*)
MP_EXPORT_VOID_FUNC(iota, DLTensor*)
"""


@pytest.mark.parametrize("cxx", [None, "clang++"])
def test_host_code_in_cpp(cxx, tmp_path):
    if cxx and shutil.which(cxx) is None:
        pytest.skip(f"{cxx} is not installed")
    host = modpack.csource_module(CXX_HOST, language="c++")
    root = modpack.load_module(host.export_library(tmp_path / "cpp.so", cxx=cxx))
    assert root["sum"](np.arange(5, dtype=np.float64)) == 10.0
    with pytest.raises(modpack.ArgumentError, match=r"argument 0 \(x\) must be float64\[n\]"):
        root["sum"](np.arange(5, dtype=np.float32))  # the typed export, from C++ too
    assert root["length"]("modpack") == 7
    out = np.zeros(4, np.float32)
    root["iota"](out)
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="language must be"):
        modpack.csource_module("", language="fortran")


OBJECT_SOURCE = r"""
#include "modpack/backend.h"
static int64_t triple(int64_t x) { return 3 * x; }
MP_EXPORT_FUNC(triple, int64_t, int64_t)
"""
ARCHIVE_SOURCES = {
    "first.c": '#include "modpack/backend.h"\n'
               "static int64_t plus_one(int64_t x) { return x + 1; }\n"
               "MP_EXPORT_FUNC(plus_one, int64_t, int64_t)\n",
    "second.c": '#include "modpack/backend.h"\n'
                "static int64_t minus_one(int64_t x) { return x - 1; }\n"
                "MP_EXPORT_FUNC(minus_one, int64_t, int64_t)\n",
}


def compile_object(source: Path, output: Path) -> Path:
    from modpack.toolchain import include_dir

    run("cc", "-c", "-fPIC", "-fvisibility=hidden", f"-I{include_dir()}", source, "-o", output)
    return output


@pytest.mark.parametrize("suffix", [".so", ".tar"])
def test_prebuilt_objects_and_archives(suffix, tmp_path):
    (tmp_path / "triple.c").write_text(OBJECT_SOURCE)
    obj = compile_object(tmp_path / "triple.c", tmp_path / "triple.o")
    members = []
    for name, text in ARCHIVE_SOURCES.items():
        (tmp_path / name).write_text(text)
        members.append(compile_object(tmp_path / name, tmp_path / name.replace(".c", ".o")))
    archive = tmp_path / "libops.a"
    run("ar", "rcs", archive, *members)
    host = modpack.csource_module(VADD_C_MINIMAL)
    host.import_module(modpack.const_module({"w": np.ones(2)}))
    root_module = modpack.object_module(obj)
    root_module.import_module(host)
    root_module.import_module(modpack.object_module(archive))
    root = modpack.load_module(root_module.export_library(tmp_path / f"prebuilt{suffix}"))
    assert root["triple"](14) == 42
    assert root["plus_one"](1) == 2 and root["minus_one"](1) == 0  # every archive member
    assert root["add_int"](2, 3) == 5
    with pytest.raises(ValueError, match="neither an ELF relocatable object"):
        modpack.object_module(tmp_path / "triple.c")
    with pytest.raises(FileNotFoundError):
        modpack.object_module(tmp_path / "absent.o")


VADD_C_MINIMAL = r"""
#include "modpack/backend.h"
static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
"""
