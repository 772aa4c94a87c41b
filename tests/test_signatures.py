"""Typed array parameters (MP_EXPORT_TYPED_*, mp_backend_check_args): every call is checked
against the declared dtype, rank, extents, devices, layout and alignment before host code
runs, and a wrong call changes nothing. Arrays whose bytes cannot be addressed (sizes, strides
or byte_offset overflowing, data that wraps: modpack/tensor_span.h) are refused by typed and
untyped functions alike, and by copies."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from typing import ClassVar

import numpy as np
import pytest

import modpack

HOST = r"""
#include "modpack/backend.h"

/* The quickstart's affine, reading as many floats as x has. */
static void affine(const DLTensor* x, DLTensor* out) {
  const float* xv = x->data;
  float* ov = out->data;
  for (int64_t i = 0; i < x->shape[0]; ++i) ov[i] = 2.0f * xv[i] + 1.0f;
}
MP_EXPORT_TYPED_VOID_FUNC(affine, "x: float32[n] cpu, out: float32[n] cpu",
                          const DLTensor*, DLTensor*)

/* Sums a strided column of a matrix: declared `strided`, so it honours strides itself. */
static double column_sum(const DLTensor* m, int64_t column) {
  const double* p = (const double*)((const char*)m->data + m->byte_offset);
  int64_t rows = m->shape[0];
  int64_t row_stride = m->strides ? m->strides[0] : m->shape[1];
  int64_t col_stride = m->strides ? m->strides[1] : 1;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += p[r * row_stride + column * col_stride];
  return total;
}
MP_EXPORT_TYPED_FUNC(column_sum, double, "m: float64[rows, cols] strided, column",
                     const DLTensor*, int64_t)

/* Fixed extents, `*`, a rank-0 array, any dtype and any shape. */
static int64_t shapes(const DLTensor* rgb, const DLTensor* scalar, const DLTensor* anything) {
  return rgb->shape[0] * 1000 + (int64_t)((const float*)scalar->data)[0] + anything->ndim;
}
MP_EXPORT_TYPED_FUNC(shapes, int64_t, "rgb: uint8[*, 3], scalar: float32[], anything: any[...]",
                     const DLTensor*, const DLTensor*, const DLTensor*)

/* Matrix product: the inner extent shared, the output's from both. */
static void matmul(const DLTensor* a, const DLTensor* b, DLTensor* c) {
  int64_t n = a->shape[0], k = a->shape[1], m = b->shape[1];
  const float* av = a->data; const float* bv = b->data; float* cv = c->data;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float s = 0;
      for (int64_t l = 0; l < k; ++l) s += av[i * k + l] * bv[l * m + j];
      cv[i * m + j] = s;
    }
}
MP_EXPORT_TYPED_VOID_FUNC(matmul, "a: float32[n, k], b: float32[k, m], c: float32[n, m]",
                          const DLTensor*, const DLTensor*, DLTensor*)

/* Written in the packed ABI, checking its arguments itself. */
MP_EXPORT_PACKED(first) {
  (void)self;
  mp_status_t s = mp_backend_check_args("first", "x: int64[n] cpu", args, num_args);
  if (s != MP_OK) return s;
  const DLTensor* x = args[0].v_tensor;
  *out_ret = mp_int(x->shape[0] ? ((const int64_t*)x->data)[0] : -1);
  return MP_OK;
}

/* Any signature, given as the first argument, over the arguments after it. */
MP_EXPORT_PACKED(check) {
  (void)self;
  (void)out_ret;
  if (num_args < 1 || args[0].type_code != MP_TYPE_STR)
    return mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "check(signature, ...)");
  return mp_backend_check_args("check", args[0].v_str, args + 1, num_args - 1);
}

/* Count their runs, so a test sees that a refused call never reached the code. */
static int64_t runs = 0;
static int64_t touch(const DLTensor* x) { (void)x; return ++runs; }
MP_EXPORT_TYPED_FUNC(touch, int64_t, "x: any[...] strided", const DLTensor*)
static int64_t touch_untyped(const DLTensor* x) { (void)x; return ++runs; }
MP_EXPORT_FUNC(touch_untyped, int64_t, const DLTensor*)
static int64_t run_count(void) { return runs; }
MP_EXPORT_FUNC0(run_count, int64_t)

/* DLPack 1.1's low-precision types, read as DLPack lays them out: the bits of value i of a
 * packed array (float4_e2m1fn_x2: pairs, n * k bytes; float4_e2m1fn, float6_e3m2fn: values
 * sharing bytes), the first value in the low bits; and where an fp8 array's bytes are (so a
 * test sees that a call took no copy). */
static int64_t packed_code(const DLTensor* t, int64_t bits, int64_t i) {
  const uint8_t* bytes = (const uint8_t*)t->data + t->byte_offset;
  mp_tensor_span_t span; /* (the typed wrapper checked it: it is OK) */
  if (mp_tensor_layout(t, &span) != MP_SPAN_OK || i < 0 ||
      (uint64_t)i >= span.elements * t->dtype.lanes)
    return -1;
  uint64_t at = (uint64_t)i * (uint64_t)bits, last = (at + (uint64_t)bits - 1) / 8;
  uint32_t word = bytes[at / 8] | (last > at / 8 ? (uint32_t)bytes[last] << 8 : 0u);
  return (int64_t)((word >> (at % 8)) & ((1u << bits) - 1));
}
static int64_t fp4_pair_code(const DLTensor* w, int64_t i) { return packed_code(w, 4, i); }
MP_EXPORT_TYPED_FUNC(fp4_pair_code, int64_t, "w: float4_e2m1fn_x2[n, k] cpu, i",
                     const DLTensor*, int64_t)
static int64_t fp4_code(const DLTensor* w, int64_t i) { return packed_code(w, 4, i); }
MP_EXPORT_TYPED_FUNC(fp4_code, int64_t, "w: float4_e2m1fn[...] cpu, i", const DLTensor*, int64_t)
static int64_t fp6_code(const DLTensor* w, int64_t i) { return packed_code(w, 6, i); }
MP_EXPORT_TYPED_FUNC(fp6_code, int64_t, "w: float6_e3m2fn[n] cpu, i", const DLTensor*, int64_t)
static int64_t fp8_address(const DLTensor* x) {
  return (int64_t)((uintptr_t)x->data + x->byte_offset);
}
MP_EXPORT_TYPED_FUNC(fp8_address, int64_t, "x: float8_e4m3fn[n] cpu", const DLTensor*)

/* Host-code bugs in the signature itself: reported, never a crash or a wrong read. */
static int64_t unclosed(const DLTensor* x) { return x->ndim; }
MP_EXPORT_TYPED_FUNC(unclosed, int64_t, "x: float32[n", const DLTensor*)
static int64_t too_many(const DLTensor* x) { return x->ndim; }
MP_EXPORT_TYPED_FUNC(too_many, int64_t, "x: float32[n], y", const DLTensor*)
static int64_t no_such_dtype(const DLTensor* x) { return x->ndim; }
MP_EXPORT_TYPED_FUNC(no_such_dtype, int64_t, "x: float31[n]", const DLTensor*)
static int64_t no_such_flag(const DLTensor* x) { return x->ndim; }
MP_EXPORT_TYPED_FUNC(no_such_flag, int64_t, "x: float32[n] contiguous", const DLTensor*)
"""


@pytest.fixture(scope="module")
def library_path(tmp_path_factory):
    return modpack.csource_module(HOST).export_library(
        tmp_path_factory.mktemp("signatures") / "typed.so")


@pytest.fixture(scope="module")
def lib(library_path):
    return modpack.load_module(library_path)


def test_good_calls_run(lib):
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    lib["affine"](x, out)
    assert np.array_equal(out, 2 * x + 1)
    m = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert lib["column_sum"](m, 1) == m[:, 1].sum()
    assert lib["column_sum"](m[:, ::2], 1) == m[:, 2].sum()  # strided: accepted, honoured
    assert lib["column_sum"](m.T, 0) == m[0].sum()
    rgb = np.zeros((5, 3), np.uint8)
    assert lib["shapes"](rgb, np.array(7, np.float32), np.zeros((2, 2, 2), np.int16)) == 5010
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = np.zeros((2, 4), np.float32)
    lib["matmul"](a, b, c)
    assert np.array_equal(c, a @ b)
    assert lib["first"](np.array([41, 1], np.int64)) == 41
    assert lib["first"](np.zeros(0, np.int64)) == -1  # empty is an array of extent 0


def _misaligned_floats(n: int) -> np.ndarray:
    raw = np.zeros(4 * n + 1, np.uint8)
    return raw[1:].view(np.float32)


# The README's affine on the inputs that crashed or corrupted memory before it was typed.
AFFINE_CASES = {
    "longer input": (lambda: np.arange(16, dtype=np.float32), None,
                     r"argument 1 \(out\) must be float32\[n\] cpu: dimension 0 is 8, but n = 16 "
                     r"from argument 0 \(x\)"),
    "shorter output": (None, lambda: np.zeros(4, np.float32),
                       r"argument 1 \(out\) must be float32\[n\] cpu: dimension 0 is 4, but n = 8"),
    "float64 input": (lambda: np.arange(8, dtype=np.float64), None,
                      r"argument 0 \(x\) must be float32\[n\] cpu: its dtype is float64"),
    "strided view": (lambda: np.arange(16, dtype=np.float32)[::2], None,
                     r"argument 0 \(x\) must be float32\[n\] cpu: it is strided, not compact "
                     r"row-major \(pass a contiguous copy: numpy.ascontiguousarray\)"),
    "a matrix": (lambda: np.zeros((2, 4), np.float32), None,
                 r"argument 0 \(x\) must be float32\[n\] cpu: it has 2 dimensions"),
    "a scalar": (lambda: 3.0, None, r"argument 0 \(x\) must be float32\[n\] cpu: got float"),
    "None": (lambda: None, None, r"argument 0 \(x\) must be float32\[n\] cpu: got None"),
    "misaligned": (lambda: _misaligned_floats(8), None,
                   r"argument 0 \(x\) must be float32\[n\] cpu: its first element is not aligned "
                   r"to 4 bytes"),
}


@pytest.mark.parametrize("case", sorted(AFFINE_CASES))
def test_affine_refuses_what_it_cannot_read(lib, case):
    make_x, make_out, message = AFFINE_CASES[case]
    x = make_x() if make_x else np.arange(8, dtype=np.float32)
    out = make_out() if make_out else np.full(8, -7.0, np.float32)
    before = out.copy()
    with pytest.raises(modpack.ArgumentError, match="^affine: " + message):
        lib["affine"](x, out)
    assert np.array_equal(out, before)  # refused before the code ran: nothing written
    good = np.zeros(8, np.float32)
    lib["affine"](np.ones(8, np.float32), good)  # and the library still works
    assert (good == 3).all()


@pytest.mark.parametrize("args, message", [
    (lambda: (np.zeros((2, 3), np.float32), np.zeros((4, 4), np.float32),
              np.zeros((2, 4), np.float32)),
     r"argument 1 \(b\) must be float32\[k, m\]: dimension 0 is 4, but k = 3 from argument 0 "
     r"\(a\)"),
    (lambda: (np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32),
              np.zeros((2, 5), np.float32)),
     r"argument 2 \(c\) must be float32\[n, m\]: dimension 1 is 5, but m = 4 from argument 1 "
     r"\(b\)"),
    (lambda: (np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32),
              np.zeros((2, 4), np.float32).T),
     r"argument 2 \(c\) must be float32\[n, m\]: dimension 0 is 4, but n = 2 from argument 0 "
     r"\(a\)"),
])
def test_shape_relations_between_arguments(lib, args, message):
    with pytest.raises(modpack.ArgumentError, match="^matmul: " + message):
        lib["matmul"](*args())


def test_fixed_and_rank_zero_extents(lib):
    with pytest.raises(modpack.ArgumentError,
                       match=r"argument 0 \(rgb\) must be uint8\[\*, 3\]: dimension 1 is 4 where "
                             r"the signature says 3 \(shape \[5, 4\]\)"):
        lib["shapes"](np.zeros((5, 4), np.uint8), np.array(1, np.float32), np.zeros(1))
    with pytest.raises(modpack.ArgumentError,
                       match=r"argument 1 \(scalar\) must be float32\[\]: it has 1 dimension$"):
        lib["shapes"](np.zeros((5, 3), np.uint8), np.ones(1, np.float32), np.zeros(1))


def test_a_packed_function_checks_with_the_same_rules(lib):
    with pytest.raises(modpack.ArgumentError,
                       match=r"^first: argument 0 \(x\) must be int64\[n\] cpu: its dtype is "
                             r"int32"):
        lib["first"](np.zeros(3, np.int32))
    with pytest.raises(modpack.ArgumentError, match=r"names 1 parameter, but the function takes 2"):
        lib["first"](np.zeros(3, np.int64), 1)


@pytest.mark.parametrize("name, message", [
    ("unclosed", r"\"x: float32\[n\" is malformed at character 13: expected `,` or `\]`"),
    ("too_many", r"\"x: float32\[n\], y\" names 2 parameters, but the function takes 1"),
    ("no_such_dtype", r"\"x: float31\[n\]\" is malformed at character 4: unknown dtype"),
    ("no_such_flag", r"\"x: float32\[n\] contiguous\" is malformed at character 15: unknown "
                     r"flag"),
])
def test_a_wrong_signature_is_reported_as_the_host_codes_bug(lib, name, message):
    with pytest.raises(modpack.ArgumentError, match=f"^{name}: its declared signature " + message):
        lib[name](np.zeros(2, np.float32))


def test_every_dtype_name_is_the_runtimes_own(lib):
    """The signature parser's names are exactly what mp_dtype_string prints: every array of
    each dtype matches its own name and no other."""
    import ml_dtypes

    from modpack.runtime.binding import ffi
    from modpack.runtime.binding import lib as runtime
    from modpack.runtime.dtypes import dtype_to_dl

    dtypes = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
              ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
              ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz]
    names = []
    for dtype in dtypes:
        array = np.zeros(3, dtype)
        dl = ffi.new("DLDataType*")
        dl.code, dl.bits, dl.lanes = dtype_to_dl(array.dtype)
        buffer = ffi.new("char[64]")
        name = ffi.string(runtime.mp_dtype_string(dl[0], buffer, 64)).decode()
        names.append(name)
        lib["check"](f"x: {name}[3]", array)  # its own name: accepted
        other = "float32" if name != "float32" else "int32"
        with pytest.raises(modpack.ArgumentError, match=f"its dtype is {name}"):
            lib["check"](f"x: {other}[3]", array)
    assert len(set(names)) == len(dtypes)


FP4_VALUES = [[0.0, 0.5, 1.0, -6.0], [3.0, 2.0, -1.0, 1.5], [4.0, -0.5, 6.0, 0.0]]


def fp4_codes(values):
    """The 4-bit codes of float4 values, one a byte (as ml_dtypes holds them)."""
    import ml_dtypes

    return np.asarray(values, ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(-1).tolist()


def test_low_precision_dtypes_are_named_in_signatures_and_read_as_dlpack_packs_them(lib):
    """float8 arrays of ml_dtypes pass in place; float4 values packed in pairs
    (modpack.pack_float4: float4_e2m1fn_x2, n x k bytes) and packed alone (modpack.array of
    ml_dtypes values: float4_e2m1fn, half a byte each) and 6-bit values straddling bytes reach
    host code bit for bit where DLPack 1.1 puts them, the first value in the low bits."""
    import ml_dtypes

    f8 = np.array([0.5, -448.0, 3.0], ml_dtypes.float8_e4m3fn)
    assert lib["fp8_address"](f8) == f8.ctypes.data  # no copy
    codes = fp4_codes(FP4_VALUES)
    pairs = modpack.pack_float4(np.array(FP4_VALUES, ml_dtypes.float4_e2m1fn))
    assert pairs.dtype == modpack.float4_e2m1fn_x2 and pairs.shape == (3, 2)
    assert [lib["fp4_pair_code"](pairs, i) for i in range(12)] == codes
    assert lib["fp4_pair_code"](pairs, 12) == -1
    packed = modpack.array(np.array(FP4_VALUES, ml_dtypes.float4_e2m1fn)[:, :3])  # 9 values
    assert packed.shape == (3, 3) and packed.nbytes == 5
    assert [lib["fp4_code"](packed, i) for i in range(10)] == \
        [c for row in np.array(codes).reshape(3, 4) for c in row[:3]] + [-1]
    f6 = np.array([1.0, -3.0, 0.25, 28.0, -0.0625, 2.0, 7.0], ml_dtypes.float6_e3m2fn)
    packed6 = modpack.array(f6)
    assert packed6.nbytes == 6  # 42 bits
    assert [lib["fp6_code"](packed6, i) for i in range(7)] == f6.view(np.uint8).tolist()


def test_a_wrong_low_precision_dtype_or_packing_names_both(lib):
    """A dtype other than the signature's is refused naming both; the same float4 format in the
    other packing (values against pairs) says what each counts; a numpy float4/float6 array of
    ml_dtypes (one value per byte, not DLPack's packing) is refused naming the ways out."""
    import ml_dtypes

    f8 = np.zeros(3, ml_dtypes.float8_e4m3fn)
    with pytest.raises(modpack.ArgumentError,
                       match=r"^check: argument 0 \(x\) must be float8_e5m2\[n\]: its dtype is "
                             r"float8_e4m3fn$"):
        lib["check"]("x: float8_e5m2[n]", f8)
    pairs = modpack.pack_float4(np.zeros((2, 4), np.float32))
    with pytest.raises(modpack.ArgumentError,
                       match=r"must be float4_e2m1fn\[\.\.\.\] cpu: its dtype is float4_e2m1fn_x2, "
                             r"the same format packed otherwise \(a lanes-1 dtype counts values"):
        lib["fp4_code"](pairs, 0)
    packed = modpack.array(np.zeros((2, 4), ml_dtypes.float4_e2m1fn))
    with pytest.raises(modpack.ArgumentError,
                       match=r"must be float4_e2m1fn_x2\[n, k\] cpu: its dtype is float4_e2m1fn, "
                             r"the same format packed otherwise"):
        lib["fp4_pair_code"](packed, 0)
    with pytest.raises(modpack.ArgumentError,
                       match=r"must be float6_e3m2fn\[n\] cpu: its dtype is float6_e2m3fn$"):
        lib["fp6_code"](modpack.array(np.zeros(4, ml_dtypes.float6_e2m3fn)), 0)
    for name in ("float4_e2m1fn", "float6_e2m3fn"):
        unpacked = np.zeros(8, getattr(ml_dtypes, name))
        with pytest.raises(modpack.ArgumentError,
                           match=rf"^argument 0: the array is a numpy {name} array, which "
                                 rf"ml_dtypes holds one value per byte, but DLPack 1.1's {name} "
                                 r"\(and modpack's\) is packed.* modpack.array\(x\)"):
            lib["touch"](unpacked)
    with pytest.raises(modpack.ArgumentError, match=r"modpack.pack_float4\(x\)"):
        lib["touch"](np.zeros(8, ml_dtypes.float4_e2m1fn))


def test_the_low_precision_names_are_the_runtimes_own(lib):
    """float6, float4 and the packed pair are named in signatures exactly as mp_dtype_string
    names them, and each matches its own arrays only."""
    import ml_dtypes

    from modpack.runtime.dtypes import dtype_name

    arrays = {
        "float4_e2m1fn_x2": modpack.pack_float4(np.zeros(6, np.float32)),
        "float4_e2m1fn": modpack.array(np.zeros(5, ml_dtypes.float4_e2m1fn)),
        "float6_e2m3fn": modpack.array(np.zeros(5, ml_dtypes.float6_e2m3fn)),
        "float6_e3m2fn": modpack.array(np.zeros(5, ml_dtypes.float6_e3m2fn)),
    }
    assert [dtype_name(17, 4, 2), dtype_name(17, 4, 1), dtype_name(15, 6, 1),
            dtype_name(16, 6, 1)] == list(arrays)
    for name, array in arrays.items():
        lib["check"](f"x: {name}[*] cpu", array)
        for other in arrays:
            if other != name:
                with pytest.raises(modpack.ArgumentError, match=f"its dtype is {name}"):
                    lib["check"](f"x: {other}[*]", array)


def test_device_arrays_are_refused_by_host_only_parameters(lib):
    if modpack.device_count("opencl") == 0:
        pytest.skip("no OpenCL device (scripts/dev.sh installs PoCL)")
    x = modpack.array(np.arange(8, dtype=np.float32), device="opencl:0")
    with pytest.raises(modpack.ArgumentError,
                       match=r"argument 0 \(x\) must be float32\[n\] cpu: it is on opencl:0"):
        lib["affine"](x, np.zeros(8, np.float32))


def test_the_checks_hold_from_c_too(library_path, runtime_prefix, tmp_path):
    """The check lives in the runtime: a C caller's DLTensor gets the same refusal."""
    from conftest import build_c_program, run
    exe = build_c_program(runtime_prefix, r"""
#include <stdio.h>
#include "modpack/modpack.h"
int main(int argc, char** argv) {
  (void)argc;
  mp_module_t* root; mp_function_t* f;
  if (mp_module_load_from_file(argv[1], 0, &root) || mp_module_get_function(root, "affine", 1, &f))
    return 2;
  float x[8] = {0}, out[8] = {0};
  int64_t n = 8, short_n = 3;
  DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  DLTensor tout = {out, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &short_n, NULL, 0};
  mp_value_t args[2] = {mp_tensor(&tx), mp_tensor(&tout)}, ret;
  mp_status_t s = mp_function_call(f, args, 2, &ret);
  printf("%d %s\n", (int)s, mp_error_message());
  mp_function_release(f);
  mp_module_release(root);
  return 0;
}
""", tmp_path / "call")
    out = run(exe, library_path)
    assert out.startswith("1 affine: argument 1 (out) must be float32[n] cpu: dimension 0 is 3, "
                          "but n = 8 from argument 0 (x)"), out


# ---- arrays whose bytes cannot be addressed ---------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

FLOAT32 = (2, 32, 1)
REAL = object()  # data: a real 4 KiB buffer


class Crafted:
    """A DLPack capsule over a DLTensor written field by field, as a faulty or hostile producer
    can hand one over (the capsule goes to the call as it is: nothing normalises it on the way).
    Keeps its parts alive, and is kept alive itself for the whole session: the capsule points
    into it, and tests pass ``Crafted(...).capsule`` with no other reference to the object."""

    alive: ClassVar[list[Crafted]] = []

    def __init__(self, shape, *, dtype=FLOAT32, strides=None, byte_offset=0, data=REAL,
                 device=(1, 0)):
        self.buffer = np.zeros(4096, np.uint8)
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.managed = DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = self.buffer.ctypes.data if data is REAL else data
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(*dtype)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = byte_offset
        self.capsule = _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)
        Crafted.alive.append(self)


MAX = r"9223372036854775807"  # PTRDIFF_MAX
TOP = 0xFFFF_FFFF_FFFF_F000  # the last page of a 64-bit address space

# Each array a DLPack producer could pass before, and why it is refused now. "compact" ones are
# also passed to affine, whose parameters take compact float32 vectors only.
OVERFLOW_CASES = {
    "shape [2^32, 2^32] over 4 KiB": (
        dict(shape=[1 << 32, 1 << 32]), False,
        rf"its shape \[4294967296, 4294967296\] of 4-byte elements is more than {MAX} "
        r"bytes \(PTRDIFF_MAX\)"),
    "extents times itemsize wrap to 0": (
        dict(shape=[1 << 62]), True,
        rf"its shape \[4611686018427387904\] of 4-byte elements is more than {MAX} "
        r"bytes \(PTRDIFF_MAX\)"),
    "2^63 bytes": (
        dict(shape=[1 << 61]), True,
        rf"its shape \[2305843009213693952\] of 4-byte elements is more than {MAX} "
        r"bytes \(PTRDIFF_MAX\)"),
    "an empty array with an impossible extent": (
        dict(shape=[0, 1 << 62]), False,
        rf"its shape \[0, 4611686018427387904\] of 4-byte elements is more than {MAX} "
        r"bytes \(PTRDIFF_MAX\)"),
    "a negative extent": (dict(shape=[4, -1]), False, r"dimension 1 is negative \(-1\)"),
    "elements of no size": (
        dict(shape=[1 << 40, 1 << 40], dtype=(2, 0, 1)), False,
        r"its elements have no size \(a dtype of 0 bits and 1 lanes\)"),
    "byte_offset 2^63": (
        dict(shape=[4], byte_offset=1 << 63), True,
        rf"its byte_offset 9223372036854775808 is more than {MAX} \(PTRDIFF_MAX\)$"),
    "byte_offset plus the bytes past PTRDIFF_MAX": (
        dict(shape=[1024], byte_offset=(1 << 63) - 1024), True,
        rf"its byte_offset 9223372036854774784 plus the 4096 bytes its elements reach is more "
        rf"than {MAX} \(PTRDIFF_MAX\)$"),
    "data plus byte_offset wraps": (
        dict(shape=[4], data=TOP, byte_offset=0x2000), True,
        r"its data pointer 0xfffffffffffff000 plus byte_offset 8192 wraps around the address "
        r"space"),
    "the elements wrap past the end": (
        dict(shape=[2048], data=TOP), True,
        r"its elements end 8192 bytes past data 0xfffffffffffff000 \+ byte_offset 0, past the "
        r"end of the address space"),
    "strides times extents overflow": (
        dict(shape=[4], strides=[1 << 62]), False,
        rf"its strides \[4611686018427387904\] over shape \[4\] \(of 4-byte elements\) reach "
        rf"more than {MAX} bytes \(PTRDIFF_MAX\)"),
    "a stride of INT64_MIN": (
        dict(shape=[2, 2], strides=[-(1 << 63), 1]), False,
        rf"its strides \[-9223372036854775808, 1\] over shape \[2, 2\] \(of 4-byte elements\) "
        rf"reach more than {MAX} bytes \(PTRDIFF_MAX\)"),
    "negative strides below address 0": (
        dict(shape=[8192], strides=[-1], data=0x1000), False,
        r"its elements start 32764 bytes below data 0x1000 \+ byte_offset 0 \(negative "
        r"strides\), below address 0"),
    "4-bit values in threes: neither packed nor whole bytes": (
        dict(shape=[4], dtype=(17, 4, 3)), False,
        r"its elements are 12 bits \(4 bits x 3 lanes\), which do not pack: DLPack packs an "
        r"element under a byte"),
    "2^63 packed float4 values, in 2^62 bytes": (
        dict(shape=[1 << 62, 2], dtype=(17, 4, 1)), False,
        rf"its shape \[4611686018427387904, 2\] of 4-bit packed elements is more than {MAX} "
        r"elements or bytes \(PTRDIFF_MAX\)"),
    "packed float4 values below address 0": (
        dict(shape=[8192], dtype=(17, 4, 1), strides=[-1], data=0x100), False,
        r"its elements start 4096 bytes below data 0x100 \+ byte_offset 0 \(negative strides\)"),
    "a strided span wrapping past the end": (
        dict(shape=[8], dtype=(0, 8, 1), strides=[1 << 45], data=0xFFFF_8000_0000_0000), False,
        r"its elements end 246290604621825 bytes past data 0xffff800000000000 \+ byte_offset 0, "
        r"past the end of the address space"),
}


@pytest.mark.parametrize("case", sorted(OVERFLOW_CASES))
def test_arrays_whose_bytes_cannot_be_addressed_never_reach_host_code(lib, case):
    fields, compact, why = OVERFLOW_CASES[case]
    x = Crafted(**fields)
    runs = lib["run_count"]()
    with pytest.raises(modpack.ArgumentError,
                       match=r"^touch: argument 0 \(x\) must be any\[\.\.\.\] strided: " + why):
        lib["touch"](x.capsule)
    # Untyped functions too: their wrapper refuses it with the same words.
    with pytest.raises(modpack.ArgumentError,
                       match=r"^touch_untyped: argument 0 is an array whose bytes cannot be "
                             r"addressed: " + why):
        lib["touch_untyped"](x.capsule)
    assert lib["run_count"]() == runs  # neither ran
    if compact:
        out = np.full(8, -7.0, np.float32)
        with pytest.raises(modpack.ArgumentError,
                           match=r"^affine: argument 0 \(x\) must be float32\[n\] cpu: " + why):
            lib["affine"](x.capsule, out)
        assert (out == -7).all()


def test_empty_strided_and_reversed_arrays_stay_valid(lib):
    runs = lib["run_count"]()
    for fields in (dict(shape=[0], data=None), dict(shape=[0, 3], data=None, strides=[0, 0]),
                   dict(shape=[3, 0], strides=[1 << 62, -(1 << 62)]), dict(shape=[]),
                   dict(shape=[1, 4], strides=[1 << 62, 1]),  # extent 1: its stride reaches nothing
                   dict(shape=[4, 3], strides=[-3, 1], byte_offset=36)):
        assert lib["touch"](Crafted(**fields).capsule) == runs + 1
        assert lib["touch_untyped"](Crafted(**fields).capsule) == runs + 2
        runs += 2
    out = np.zeros(0, np.float32)
    lib["affine"](Crafted([0], data=None).capsule, out)
    m = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert lib["column_sum"](m[::-1], 1) == m[:, 1].sum()  # numpy's negative strides
    assert lib["column_sum"](m[::-1, ::-2], 0) == m[:, 3].sum()


def test_devices_are_named_as_the_runtime_names_them(lib):
    with pytest.raises(modpack.ArgumentError,
                       match=r"^check: argument 0 \(x\) must be float32\[n\] opencl: it is on "
                             r"cpu:0$"):
        lib["check"]("x: float32[n] opencl", np.zeros(3, np.float32))
    with pytest.raises(modpack.ArgumentError, match=r"must be float32\[n\] cpu: it is on cuda:1$"):
        lib["check"]("x: float32[n] cpu", Crafted([4], device=(2, 1)).capsule)
    with pytest.raises(modpack.ArgumentError,
                       match=r"must be float32\[n\] cpu: it is on DLPack device type 13, device 0 "
                             r"\(a type this runtime does not know\)$"):
        lib["check"]("x: float32[n] cpu", Crafted([4], device=(13, 0)).capsule)


COPIES = r"""
#include <stdint.h>
#include <stdio.h>
#include "modpack/modpack.h"

/* Crafted DLTensors through the C API: a typed and an untyped host function called with
 * mp_function_call, then the runtime's own readers of arrays (copies, sizes). */
static void report(const char* what, mp_status_t s) {
  printf("%s: %d %s\n", what, (int)s, s ? mp_error_message() : "ok");
}

int main(int argc, char** argv) {
  (void)argc;
  mp_module_t* root;
  mp_function_t *typed, *untyped, *count;
  if (mp_module_load_from_file(argv[1], 0, &root) ||
      mp_module_get_function(root, "touch", 1, &typed) ||
      mp_module_get_function(root, "touch_untyped", 1, &untyped) ||
      mp_module_get_function(root, "run_count", 1, &count))
    return 2;
  static float buffer[1024];
  int64_t huge[2] = {INT64_C(1) << 32, INT64_C(1) << 32}, wide = INT64_C(1) << 62, n = 1024;
  int64_t down = -1, far = INT64_C(1) << 62;
  DLTensor cases[] = {
      {buffer, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, huge, NULL, 0},
      {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &wide, NULL, 0},
      {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, UINT64_C(1) << 63},
      {(void*)(uintptr_t)UINT64_C(0xfffffffffffff000), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n,
       NULL, 0},
      {(void*)(uintptr_t)0x100, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, &down, 0},
      {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, &far, 0},
  };
  const char* names[] = {"shape", "itemsize", "offset", "wrap", "below", "strides"};
  mp_value_t ret;
  for (int i = 0; i < 6; ++i) {
    mp_value_t arg = mp_tensor(&cases[i]);
    char what[64];
    snprintf(what, sizeof what, "typed %s", names[i]);
    report(what, mp_function_call(typed, &arg, 1, &ret));
    snprintf(what, sizeof what, "untyped %s", names[i]);
    report(what, mp_function_call(untyped, &arg, 1, &ret));
  }
  report("run_count", mp_function_call(count, NULL, 0, &ret));
  printf("runs: %lld\n", (long long)ret.v_int64);

  /* A copy reads one array and writes another: both must be addressable. */
  DLTensor good = {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  int64_t wrapped_n = (INT64_C(1) << 62) + 4; /* 4 * extent wraps to 16 bytes */
  DLTensor wrapped = {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &wrapped_n, NULL, 0};
  report("copy from", mp_array_copy(&wrapped, &good));
  report("copy to", mp_array_copy(&good, &cases[3]));
  printf("nbytes: %llu %llu %llu\n", (unsigned long long)mp_array_nbytes(&good),
         (unsigned long long)mp_array_nbytes(&wrapped),
         (unsigned long long)mp_array_nbytes(&cases[0]));
  DLDevice cpu = {kDLCPU, 0};
  void* top = (void*)(uintptr_t)UINT64_C(0xfffffffffffffff0);
  report("device copy offset", mp_device_copy(buffer, UINT64_C(1) << 63, cpu, buffer, 0, cpu, 16));
  report("device copy wrap", mp_device_copy(buffer, 0, cpu, top, 0, cpu, 64));
  report("device copy fine", mp_device_copy(buffer, 0, cpu, buffer, 64, cpu, 64));
  mp_function_release(typed);
  mp_function_release(untyped);
  mp_function_release(count);
  mp_module_release(root);
  return 0;
}
"""


def test_c_callers_and_copies_get_the_same_refusals(library_path, runtime_prefix, tmp_path):
    from conftest import build_c_program, run
    exe = build_c_program(runtime_prefix, COPIES, tmp_path / "copies")
    lines = dict(line.split(": ", 1) for line in run(exe, library_path).splitlines())
    typed = "1 touch: argument 0 (x) must be any[...] strided: "
    untyped = "1 touch_untyped: argument 0 is an array whose bytes cannot be addressed: "
    expected = {
        "shape": "its shape [4294967296, 4294967296] of 4-byte elements is more than",
        "itemsize": "its shape [4611686018427387904] of 4-byte elements is more than",
        "offset": "its byte_offset 9223372036854775808 is more than",
        "wrap": "its elements end 4096 bytes past data 0xfffffffffffff000",
        "below": "its elements start 4092 bytes below data 0x100 ",
        "strides": "its strides [4611686018427387904] over shape [1024]",
    }
    for name, why in expected.items():
        assert lines[f"typed {name}"].startswith(typed + why), lines[f"typed {name}"]
        assert lines[f"untyped {name}"].startswith(untyped + why), lines[f"untyped {name}"]
    assert lines["runs"] == "0"  # host code never ran
    assert lines["copy from"].startswith(
        "1 array copy refuses the source array: its shape [4611686018427387908] of 4-byte "
        "elements is more than 9223372036854775807 bytes"), lines["copy from"]
    assert lines["copy to"].startswith(
        "1 array copy refuses the destination array: its elements end 4096 bytes past data "
        "0xfffffffffffff000"), lines["copy to"]
    assert lines["nbytes"] == "4096 0 0"  # never a wrapped product
    assert lines["device copy offset"].startswith("1 mp_device_copy: 16 bytes at offset "
                                                  "9223372036854775808 of the source"), lines
    assert lines["device copy wrap"].startswith("1 mp_device_copy: 64 bytes at offset 0 of the "
                                                "destination"), lines
    assert lines["device copy fine"] == "0 ok"


def test_inspect_shows_each_signature(library_path):
    proc = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(library_path)],
                          capture_output=True, text=True, check=True)
    assert "  affine(x: float32[n] cpu, out: float32[n] cpu)\n" in proc.stdout
    assert "  column_sum(m: float64[rows, cols] strided, column)\n" in proc.stdout
    assert "  first\n" in proc.stdout  # packed: it checks, but declares nothing to tools
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "modpack", "inspect", str(library_path), "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert report["signatures"]["matmul"] == "a: float32[n, k], b: float32[k, m], c: float32[n, m]"
    assert "first" in report["functions"] and "first" not in report["signatures"]
