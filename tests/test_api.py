"""The Python API's contract: capabilities, serialization, errors from host code, DLPack."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import VADD_C, consts, run_python

import modpack


def test_capabilities():
    c = modpack.csource_module(VADD_C)
    k = consts(1)
    ll = modpack.llvm_module("define void @f() {\n ret void\n}\n")
    assert (c.type_key, c.is_dso_exportable, c.is_binary_serializable) == ("c", True, False)
    assert (ll.type_key, ll.is_dso_exportable, ll.is_binary_serializable) == ("llvm", True, False)
    assert (k.type_key, k.is_dso_exportable, k.is_binary_serializable) == ("const", False, True)
    with pytest.raises(modpack.ModpackError, match="not binary-serializable"):
        c.save_to_binary()


def test_save_to_binary_matches_the_loaded_payload(tmp_path):
    arrays = {"x": np.arange(5, dtype=np.int16), "y": np.ones((2, 2))}
    k = modpack.const_module(arrays)
    payload = k.save_to_binary()
    assert len(payload) == k.payload_size()
    host = modpack.csource_module(VADD_C)
    host.import_module(k)
    path = host.export_library(tmp_path / "p.so")
    assert payload in path.read_bytes()
    loaded = modpack.load_module(path).imported_modules[0].arrays
    assert {n: a.tolist() for n, a in loaded.items()} == {n: a.tolist() for n, a in arrays.items()}


def test_building_modules_are_not_runnable():
    with pytest.raises(modpack.ModpackError, match="export it with export_library"):
        modpack.csource_module(VADD_C)["vadd"]


def test_export_refuses_a_cycle_through_merged_host_code(tmp_path):
    host = modpack.csource_module(VADD_C)
    weights = consts(1)
    more_host = modpack.llvm_module("define void @g() {\n ret void\n}\n")
    host.import_module(weights)
    weights.import_module(more_host)  # device -> host code: merging makes _lib -> const -> _lib
    with pytest.raises(modpack.ModpackError, match="cycle"):
        host.export_library(tmp_path / "cycle.so")
    assert not (tmp_path / "cycle.so").exists()


def test_host_code_errors_reach_python(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
MP_EXPORT_PACKED(fail) {
  (void)self; (void)args; (void)out_ret;
  return mp_backend_errorf(MP_ERR_RUNTIME, "fail got %d arguments", (int)num_args);
}
static double lookup_missing(double x) {
  void* f;
  if (mp_backend_get_function("not_there", &f) != MP_OK) return -1.0;
  return x;
}
MP_EXPORT_FUNC(lookup_missing, double, double)
static double lookup_missing_handled(double x) {
  void* f;
  if (mp_backend_get_function("not_there", &f) != MP_OK) {
    mp_backend_clear_error(); /* handled on purpose */
    return -1.0;
  }
  return x;
}
MP_EXPORT_FUNC(lookup_missing_handled, double, double)
""")
    root = modpack.load_module(host.export_library(tmp_path / "err.so"))
    with pytest.raises(modpack.ModpackError, match="fail got 3 arguments"):
        root["fail"](1, 2.0, "three")
    # A failed lookup fails the call even when the code returns a value of its own...
    with pytest.raises(modpack.NotFoundError, match="not_there"):
        root["lookup_missing"](2.0)
    # ...unless the code says it handled the failure.
    assert root["lookup_missing_handled"](2.0) == -1.0


class DLPackOnly:
    """An array type that is not numpy but speaks DLPack."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_objects_and_scalars(tmp_path):
    root = modpack.load_module(modpack.csource_module(VADD_C).export_library(tmp_path / "d.so"))
    a = np.arange(6, dtype=np.float32)
    out = np.zeros_like(a)
    root["vadd"](DLPackOnly(a), DLPackOnly(a), DLPackOnly(out))
    assert np.array_equal(out, 2 * a)
    assert root["add_int"](np.int32(5), True) == 6
    with pytest.raises(TypeError, match="expected a numpy array or an object"):
        root["vadd"](object(), a, out)


def test_strided_arrays_pass_strides(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static int64_t stride0(DLTensor* t) { return t->strides ? t->strides[0] : 0; }
MP_EXPORT_FUNC(stride0, int64_t, DLTensor*)
""")
    root = modpack.load_module(host.export_library(tmp_path / "s.so"))
    assert root["stride0"](np.arange(10, dtype=np.int64)[::3]) == 3
    assert root["stride0"](np.arange(10, dtype=np.int64)) == 0


def test_loading_log_names_each_phase(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(consts(1))
    path = host.export_library(tmp_path / "log.so")
    import os
    import subprocess
    import sys

    code = "import sys, modpack; modpack.load_module(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          check=True, env={**os.environ, "MODPACK_LOG_LOADING": "1"})
    phases = [line.split(": ")[2].split()[0] for line in proc.stderr.splitlines()
              if line.startswith("modpack: load ")]
    assert phases == ["file", "dlopen", "index", "checksums", "loaders"], proc.stderr
    assert "GB/s" in proc.stderr


def test_functions_without_parameters(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static int calls;
static int64_t answer(void) { return 42; }
MP_EXPORT_FUNC0(answer, int64_t)
static void bump(void) { ++calls; }
MP_EXPORT_VOID_FUNC0(bump)
static int64_t count(int64_t unused) { (void)unused; return calls; }
MP_EXPORT_FUNC(count, int64_t, int64_t)
""")
    root = modpack.load_module(host.export_library(tmp_path / "zero.so"))
    assert root["answer"]() == 42
    root["bump"]()
    root["bump"]()
    assert root["count"](0) == 2
    with pytest.raises(modpack.ArgumentError, match="answer: expected 0 arguments, got 1"):
        root["answer"](1)


def test_arrays_past_the_dimension_limit_are_named(tmp_path):
    """numpy 2 makes arrays of up to 64 dimensions; calls pass up to 32 (calls.c). Past that,
    the argument and the limit are named (it was "normalize() returned an unusable tuple")."""
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static int64_t ndim_of(const DLTensor* x) { return x->ndim; }
MP_EXPORT_FUNC(ndim_of, int64_t, const DLTensor*)
""")
    ndim_of = modpack.load_module(host.export_library(tmp_path / "nd.so"))["ndim_of"]
    assert modpack.runtime.values.MAX_NDIM == 32
    assert ndim_of(np.zeros((1,) * 32, np.float32)) == 32
    for ndim in (33, 64):
        strided = np.zeros((1,) * (ndim - 1) + (2,), np.float16)[..., ::-1]
        for array in (np.zeros((1,) * ndim, np.float32), strided):
            with pytest.raises(modpack.ArgumentError,
                               match=rf"argument 0: the array has {ndim} dimensions, but modpack "
                                     r"passes arrays of at most 32: reshape it"):
                ndim_of(array)


def test_dtype_names_need_no_earlier_import_of_ml_dtypes():
    """numpy knows "bfloat16" only once ml_dtypes is imported; modpack imports it when a name
    needs it (a fresh interpreter, where nothing else has)."""
    out = run_python(
        "import sys, modpack\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "from modpack.modules.kernel_info import KernelArg\n"
        "print(KernelArg.parse('bfloat16*'), modpack.empty(2, 'bfloat16').dtype)\n")
    assert out.split() == ["bfloat16*", "bfloat16"]
    out = run_python(
        "import sys; sys.modules['ml_dtypes'] = None\n"  # as if it were not installed
        "import modpack\n"
        "try:\n    modpack.empty(2, 'float8_e4m3fn')\n"
        "except modpack.ArgumentError as e:\n    print(e)\n")
    assert "float8_e4m3fn needs the ml_dtypes package: pip install ml_dtypes" in out
    with pytest.raises(modpack.ArgumentError, match="'float128x' is not a dtype"):
        modpack.empty(2, "float128x")


def test_dlpack_copy_gives_a_copy():
    a = modpack.array(np.arange(4, dtype=np.float32))

    class Copied:  # hands numpy the capsule of __dlpack__(copy=True)
        def __dlpack__(self, **kwargs):
            return a.__dlpack__(copy=True)

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    copied = np.from_dlpack(Copied())
    a.copy_from(np.zeros(4, np.float32))
    assert np.array_equal(copied, np.arange(4, dtype=np.float32))  # not the zeros


MISSPELT_C = VADD_C + r"""
static double read_weight(void) {
  const DLTensor* w;
  if (mp_backend_get_array("wieght", &w) != MP_OK) return -1.0;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(read_weight, double)
"""


def test_a_misspelt_name_is_offered_the_closest_one(tmp_path):
    """A misspelt function or array name got a bare "no function named ...": the not-found
    error offers the closest name the lookup searched (by edit distance, as the runtime's
    check of weight file names does), from Python's lookups, the mappings of arrays and host
    code's mp_backend_get_array alike; a name close to none gets no suggestion."""
    host = modpack.csource_module(MISSPELT_C)
    host.import_module(modpack.const_module({"weight": np.ones(4, np.float32),
                                             "bias": np.zeros(4, np.float32)}))
    root = modpack.load_module(host.export_library(tmp_path / "names.so"))
    with pytest.raises(modpack.NotFoundError,
                       match=r"^no function named 'vad' in the library module "
                             r"\(did you mean 'vadd'\?\)$"):
        root["vad"]
    with pytest.raises(modpack.NotFoundError, match=r"\(did you mean 'add_int'\?\)$"):
        root.get_function("add_itn", query_imports=True)
    with pytest.raises(modpack.NotFoundError) as caught:
        root["convolution"]
    assert "did you mean" not in str(caught.value)
    arrays = root.imported_modules[0].arrays
    with pytest.raises(modpack.NotFoundError,
                       match=r"^no array named 'wieght' in the const module "
                             r"\(did you mean 'weight'\?\)$"):
        arrays["wieght"]
    assert "weight" in arrays and "wieght" not in arrays and arrays.get("wieght") is None
    with pytest.raises(modpack.NotFoundError,
                       match=r"no array named 'wieght' in the library module or its imports "
                             r"\(did you mean 'weight'\?\)"):
        root["read_weight"]()
    weights = modpack.load_weights(modpack.save_weights({"weight": np.ones(2)},
                                                        tmp_path / "w.mpw"))
    with pytest.raises(modpack.NotFoundError, match=r"\(did you mean 'weight'\?\)$"):
        weights["Weight"]
    assert weights.get("wieght") is None


def test_the_closest_name_rule():
    """Within a third of the longer name's length in edits (one for short names), the first
    of equally close names, never the name itself: an unrelated name is not offered."""
    from modpack.runtime.names import closest

    assert closest("vad", ["vadd", "add_int"]) == "vadd"
    assert closest("ab", ["xy"]) is None
    assert closest("weights_0", ["weights_1", "weights_2"]) == "weights_1"
    assert closest("x", ["x"]) is None
    assert closest("layer.attn.q_proj", ["layer.attn.k_proj", "layer.mlp.up"]) == \
        "layer.attn.k_proj"
    assert closest("a" * 300, ["a" * 299]) is None  # too long to compare, as in C
