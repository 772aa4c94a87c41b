"""System libraries: export_library(..., system_lib=NAME) writes a relocatable object (or an
archive) that a program links in and loads with mp_module_load_system_lib — no dlopen of it,
no constructors, no --whole-archive, several in one program."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import build_c_program, run
from elftools.elf.elffile import ELFFile

import modpack

KERNELS = r"""
__kernel void scale(__global const float* x, __global float* out, float k, int n) {
  int i = get_global_id(0);
  if (i < n) out[i] = x[i] * k;
}
"""

# The same host code in both libraries (a global helper of the same name too): it reads its
# library's weight and runs its library's OpenCL kernel, through its own module context.
HOST = r"""
#include "modpack/backend.h"

int shared_helper_name(void) { return 1; }

static double first_weight(void) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0] * shared_helper_name();
}
MP_EXPORT_FUNC0(first_weight, double)

static void scale_by_weight(const DLTensor* x, DLTensor* out) {
  static void* scale;
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return;
  if (!scale && mp_backend_get_function("scale", &scale) != MP_OK) return;
  const DLDevice dev = {kDLOpenCL, 0};
  int64_t n = x->shape[0];
  void *dx, *dout;
  if (mp_backend_alloc_workspace(dev, (uint64_t)n * 4, &dx) != MP_OK) return;
  if (mp_backend_alloc_workspace(dev, (uint64_t)n * 4, &dout) == MP_OK) {
    DLTensor tx = {dx, dev, 1, x->dtype, x->shape, NULL, 0};
    DLTensor tout = {dout, dev, 1, x->dtype, x->shape, NULL, 0};
    mp_value_t args[10] = {mp_tensor(&tx), mp_tensor(&tout), mp_float(((const float*)w->data)[0]),
                           mp_int(n), mp_int(n), mp_int(1), mp_int(1), mp_int(0), mp_int(0),
                           mp_int(0)};
    mp_value_t ret;
    if (mp_backend_copy(x, &tx) == MP_OK && mp_backend_call(scale, args, 10, &ret) == MP_OK)
      mp_backend_copy(&tout, out);
    mp_backend_free_workspace(dev, dout);
  }
  mp_backend_free_workspace(dev, dx);
}
MP_EXPORT_TYPED_VOID_FUNC(scale_by_weight, "x: float32[n] cpu, out: float32[n] cpu",
                          const DLTensor*, DLTensor*)
"""

PROGRAM = r"""
#include <stdio.h>
#include "modpack/modpack.h"

const mp_system_lib_t* modpack_system_lib_first(void);
const mp_system_lib_t* modpack_system_lib_second(void);

static int use(const mp_system_lib_t* lib, int with_kernel) {
  mp_module_t *root = NULL, *again = NULL;
  mp_function_t *weight = NULL, *scale = NULL;
  mp_value_t ret;
  if (mp_module_load_system_lib(lib, &root) != MP_OK ||
      mp_module_load_system_lib(lib, &again) != MP_OK ||
      mp_module_get_function(root, "first_weight", 0, &weight) != MP_OK ||
      mp_function_call(weight, NULL, 0, &ret) != MP_OK) {
    printf("%s: %s\n", lib->name, mp_error_message());
    return 1;
  }
  printf("%s: weight %g, same tree again: %s\n", lib->name, ret.v_float64,
         root == again ? "yes" : "no");
  if (with_kernel) {
    float x[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    int64_t n = 5;
    DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
    DLTensor tout = {out, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
    mp_value_t args[2] = {mp_tensor(&tx), mp_tensor(&tout)};
    if (mp_module_get_function(root, "scale_by_weight", 0, &scale) != MP_OK ||
        mp_function_call(scale, args, 2, &ret) != MP_OK) {
      printf("%s: %s\n", lib->name, mp_error_message());
      return 1;
    }
    printf("%s: kernel %g %g %g %g %g\n", lib->name, out[0], out[1], out[2], out[3], out[4]);
  }
  mp_function_release(scale);
  mp_function_release(weight);
  mp_module_release(again);
  mp_module_release(root);
  return 0;
}

int main(int argc, char** argv) {
  (void)argv;
  int with_kernel = argc > 1;
  int failed = use(modpack_system_lib_first(), with_kernel);
  return failed | use(modpack_system_lib_second(), with_kernel);
}
"""


def export(tmp: Path, name: str, suffix: str, weight: float) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": np.full(1000, weight, np.float32)}))
    host.import_module(modpack.opencl_module(KERNELS))
    return host.export_library(tmp / f"{name}{suffix}", system_lib=name)


@pytest.fixture(scope="module")
def system_libs(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("system-libs")
    return export(tmp, "first", ".o", 2.0), export(tmp, "second", ".a", 3.0)


def test_two_system_libraries_and_the_static_runtime_in_one_program(
        system_libs, runtime_prefix, tmp_path):
    exe = build_c_program(runtime_prefix, PROGRAM, tmp_path / "program", *system_libs,
                          static=True)
    with open(exe, "rb") as f:  # no shared library of modpack's or of the exports
        dynamic = ELFFile(f).get_section_by_name(".dynamic")
        needed = [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert not [n for n in needed if "modpack" in n or "first" in n or "second" in n], needed
    with_kernel = modpack.device_count("opencl") > 0
    out = run(exe, *(["kernel"] if with_kernel else []))
    assert "first: weight 2, same tree again: yes" in out, out
    assert "second: weight 3, same tree again: yes" in out, out
    if with_kernel:  # host code in each runs its own kernel on its own weight
        assert "first: kernel 2 4 6 8 10" in out and "second: kernel 3 6 9 12 15" in out, out


def test_the_object_exposes_one_symbol(system_libs):
    """Everything but modpack_system_lib_NAME carries the NAME_ prefix: the blob, the host
    functions, the module context, the host code's own globals."""
    first, _ = system_libs
    with open(first, "rb") as f:
        elf = ELFFile(f)
        assert elf["e_type"] == "ET_REL"
        symtab = elf.get_section_by_name(".symtab")
        defined = {s.name for s in symtab.iter_symbols()
                   if s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                   and s["st_shndx"] != "SHN_UNDEF"}
    assert "modpack_system_lib_first" in defined
    assert {"first___dev_mblob", "first___mp_func_first_weight", "first___mp_library_ctx",
            "first_shared_helper_name"} <= defined
    assert not [s for s in defined - {"modpack_system_lib_first"} if not s.startswith("first_")]


def test_inspect_reads_a_system_library(system_libs):
    from modpack.tools.inspection import inspect_library
    report = inspect_library(system_libs[0])
    assert [m["type_key"] for m in report["modules"]] == ["_lib", "const", "opencl"]
    assert report["functions"] == ["first_weight", "scale_by_weight"]
    assert report["signatures"]["scale_by_weight"] == "x: float32[n] cpu, out: float32[n] cpu"


def test_load_system_lib_from_python(system_libs, tmp_path):
    """A system library linked into a shared object the process loaded with RTLD_GLOBAL."""
    holder = tmp_path / "holder.so"
    run("cc", "-shared", "-o", holder, system_libs[0])
    ctypes.CDLL(os.fspath(holder), mode=os.RTLD_GLOBAL)
    root = modpack.load_system_lib("first")
    assert root["first_weight"]() == 2.0
    assert np.array_equal(root.imported_modules[0].arrays["w"], np.full(1000, 2, np.float32))
    assert modpack.load_system_lib("first") is root  # its tree, while it lives
    with pytest.raises(modpack.NotFoundError, match=r"no system library 'absent' in this process: "
                                                    r"nothing defines modpack_system_lib_absent"):
        modpack.load_system_lib("absent")
    with pytest.raises(modpack.ArgumentError, match="C identifier"):
        modpack.load_system_lib("no-dashes")


@pytest.mark.parametrize("name, path, message", [
    ("first", "x.so", r"a system library is a relocatable object \(.o\) or an archive \(.a\), "
                      r"not .so"),
    ("not an identifier", "x.o", r"system_lib must be a C identifier"),
])
def test_bad_system_lib_arguments_are_refused_before_any_work(tmp_path, name, path, message):
    with pytest.raises(modpack.ModpackError, match=message):
        modpack.csource_module("#error never compiled").export_library(tmp_path / path,
                                                                        system_lib=name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["plain", "lib0", "anchor"])  # names of workspace files too
def test_host_code_only(tmp_path, runtime_prefix, name):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static int64_t answer(void) { return 42; }
MP_EXPORT_FUNC0(answer, int64_t)
""")
    obj = host.export_library(tmp_path / f"{name}.o", system_lib=name)
    holder = tmp_path / f"{name}_holder.so"
    run("cc", "-shared", "-o", holder, obj)
    ctypes.CDLL(os.fspath(holder), mode=os.RTLD_GLOBAL)
    root = modpack.load_system_lib(name)
    assert root["answer"]() == 42 and root.imported_modules == []


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_wrong_description_is_refused(runtime_prefix, tmp_path):
    exe = build_c_program(runtime_prefix, r"""
#include <stdio.h>
#include "modpack/modpack.h"
int main(void) {
  mp_module_t* root;
  mp_system_lib_t lib = {0};
  printf("%d %s\n", (int)mp_module_load_system_lib(NULL, &root), mp_error_message());
  printf("%d %s\n", (int)mp_module_load_system_lib(&lib, &root), mp_error_message());
  lib.magic = MP_SYSTEM_LIB_MAGIC;
  lib.version = 99;
  printf("%d %s\n", (int)mp_module_load_system_lib(&lib, &root), mp_error_message());
  return 0;
}
""", tmp_path / "wrong", static=True)
    lines = run(exe).splitlines()
    assert lines[0].startswith("1 mp_module_load_system_lib: NULL library")
    assert lines[1].startswith("1 mp_module_load_system_lib: not a system library description")
    assert lines[2].startswith("4 system library description version 99")


def test_two_system_libraries_of_one_name_are_refused(system_libs, tmp_path):
    """Two shared objects each holding a system library named 'first': the dynamic loader
    would hand out whichever it meets first; load_system_lib names both instead."""
    holders = []
    for k in range(2):
        holders.append(tmp_path / f"twin{k}.so")
        run("cc", "-shared", "-o", holders[-1], system_libs[0])
        ctypes.CDLL(os.fspath(holders[-1]), mode=os.RTLD_GLOBAL)
    with pytest.raises(modpack.AlreadyExistsError, match=r"two system libraries in this process "
                       r"define modpack_system_lib_first: .*twin0\.so.*twin1\.so"):
        modpack.load_system_lib("first")


def test_a_null_description_is_a_clear_error(tmp_path):
    source = tmp_path / "null.c"
    source.write_text("void* modpack_system_lib_nulled(void) { return 0; }\n")
    holder = tmp_path / "null.so"
    run("cc", "-shared", "-fPIC", "-o", holder, source)
    ctypes.CDLL(os.fspath(holder), mode=os.RTLD_GLOBAL)
    with pytest.raises(modpack.FormatError, match=r"modpack_system_lib_nulled\(\) returned NULL"):
        modpack.load_system_lib("nulled")
