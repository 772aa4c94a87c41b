"""numpy arrays passed to calls reach host code exactly as numpy lays them out, whichever way
the call reads them: in place from numpy's array struct (the fast path, taken once a probe
array read that way matched what numpy says of it) or through the buffer protocol (subclasses
of unusual dtypes, byte-swapped arrays). Host code reports what it was given, and each report
is checked against numpy's own view of the array: data address, rank, dtype, shape, strides
(none for a C-contiguous array) and the read-only flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modpack
from modpack.runtime import function
from modpack.runtime.dtypes import dtype_to_dl

HOST = r"""
#include "modpack/backend.h"

/* Writes what it sees of |x| into |out| (int64): data address, ndim, dtype code, bits, lanes,
 * byte_offset, whether strides are given, then shape and strides. */
static int describe(const DLTensor* x, DLTensor* out) {
  int64_t* o = out->data;
  int k = 0;
  o[k++] = (int64_t)(intptr_t)x->data;
  o[k++] = x->ndim;
  o[k++] = x->dtype.code;
  o[k++] = x->dtype.bits;
  o[k++] = x->dtype.lanes;
  o[k++] = (int64_t)x->byte_offset;
  o[k++] = x->strides != NULL;
  for (int d = 0; d < x->ndim; ++d) o[k++] = x->shape[d];
  for (int d = 0; x->strides && d < x->ndim; ++d) o[k++] = x->strides[d];
  return k;
}
MP_EXPORT_FUNC(describe, int, const DLTensor*, DLTensor*)

/* Writes into |x|: only for writable arrays. */
static int fill(DLTensor* x) {
  ((unsigned char*)x->data)[0] = 7;
  return 0;
}
MP_EXPORT_FUNC(fill, int, DLTensor*)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> modpack.runtime.module.LoadedModule:
    path = tmp_path_factory.mktemp("numpy") / "describe.so"
    return modpack.load_module(modpack.csource_module(HOST).export_library(path))


def seen(lib, x: np.ndarray) -> dict:
    out = np.zeros(80, np.int64)
    n = lib["describe"](x, out)
    o = [int(v) for v in out[:n]]
    ndim = o[1]
    return {"data": o[0], "ndim": ndim, "dtype": tuple(o[2:5]), "byte_offset": o[5],
            "shape": tuple(o[7:7 + ndim]),
            "strides": tuple(o[7 + ndim:7 + 2 * ndim]) if o[6] else None}


def expected(x: np.ndarray) -> dict:
    contiguous = x.flags.c_contiguous
    return {"data": x.ctypes.data, "ndim": x.ndim, "dtype": tuple(dtype_to_dl(x.dtype)),
            "byte_offset": 0, "shape": x.shape if x.ndim else (),
            "strides": None if contiguous else tuple(s // x.itemsize for s in x.strides)}


def test_numpy_arrays_are_read_in_place_here():
    # The numpy of this machine has the layout calls.c reads; if a numpy ever differs, calls
    # take the buffer protocol and this test says so (the others still hold).
    assert function.NUMPY_IN_PLACE


class Subclass(np.ndarray):
    """An ndarray subclass of its own, as libraries make (np.memmap is another)."""


M = np.arange(60, dtype=np.float64).reshape(5, 12)
CASES = {
    "float32 vector": np.arange(10, dtype=np.float32),
    "int64 matrix": np.arange(12, dtype=np.int64).reshape(3, 4),
    "columns, strided": M[:, ::2],
    "reversed": np.arange(9, dtype=np.int32)[::-1],
    "transposed": M.T,
    "rank 0": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 3), np.uint16),
    "bool": np.array([True, False, True]),
    "float16": np.ones(4, np.float16),
    "complex64": np.ones(3, np.complex64),
    "longlong": np.ones(3, np.longlong),
    "uint64, rows of a matrix": np.ones((4, 4), np.uint64)[::2],
    "a size-1 axis": np.ones((3, 1), np.int8)[:, ::-1],
    "explicitly little-endian": np.ones(3, np.dtype("<f4")),
    "memmap subclass": None,  # made in the test: a file
    "a subclass": np.ones((2, 2)).view(Subclass)[:, 1:],
}


@pytest.mark.parametrize("case", CASES)
def test_host_code_sees_the_array_as_numpy_lays_it_out(lib, case, tmp_path):
    x = CASES[case]
    if x is None:
        x = np.memmap(tmp_path / "m.bin", np.float32, "w+", shape=(6,))
    assert seen(lib, x) == expected(x)


def test_read_only_arrays_stay_read_only(lib):
    x = np.zeros(4, np.uint8)
    x.flags.writeable = False
    with pytest.raises(modpack.ArgumentError, match="argument 0 is a read-only array"):
        lib["fill"](x)
    assert x[0] == 0
    y = np.zeros(4, np.uint8)
    lib["fill"](y)
    assert y[0] == 7
    view = np.frombuffer(b"\0\0\0\0", np.uint8)  # read-only memory of a bytes object
    with pytest.raises(modpack.ArgumentError, match="read-only"):
        lib["fill"](view)


def test_what_is_not_read_in_place_gets_the_same_answers_as_before(lib):
    swapped = np.arange(3, dtype=">f4")
    with pytest.raises(modpack.ArgumentError) as swapped_error:
        lib["describe"](swapped, np.zeros(80, np.int64))
    assert "argument 0" in str(swapped_error.value)
    fields = np.zeros(4, dtype=[("a", "<f4"), ("b", "u1")])["a"]  # stride 5: no element grid
    with pytest.raises(modpack.ArgumentError, match="argument 0"):
        lib["describe"](fields, np.zeros(80, np.int64))
    deep = np.zeros((1,) * 33, np.float32)
    with pytest.raises(modpack.ArgumentError, match="argument 0"):
        lib["describe"](deep, np.zeros(80, np.int64))
    objects = np.array([object()] * 2)
    with pytest.raises(modpack.ArgumentError, match="argument 0"):
        lib["describe"](objects, np.zeros(80, np.int64))


def test_bfloat16_arrays_take_the_buffer_protocol_and_arrive_as_bfloat16(lib):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is in the test extra")
    x = np.ones(4, ml_dtypes.bfloat16)
    assert seen(lib, x)["dtype"] == (4, 16, 1)  # kDLBfloat


def test_an_array_resized_or_reshaped_later_is_read_afresh(lib):
    x = np.arange(12, dtype=np.int32)
    assert seen(lib, x)["shape"] == (12,)
    x.shape = (3, 4)
    assert seen(lib, x) == expected(x)
    x.resize((20,), refcheck=False)
    assert seen(lib, x) == expected(x)


def test_calls_still_read_arrays_with_a_numpy_whose_layout_is_not_checked(tmp_path):
    # The fast path is only taken while the latest probe matched: once one did not, arrays
    # go through the buffer protocol, with the same results.
    lib_path = modpack.csource_module(HOST).export_library(tmp_path / "d.so")
    code = f"""
import numpy as np, modpack
from modpack.runtime import _calls
x = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
out = np.zeros(80, np.int64)
probe = np.zeros(2, np.float32)
# A probe that disagrees with what numpy says: the check refuses, and turns the fast path off.
wrong = (probe.ctypes.data + 4, (2,), (4,), 11, "=", True, True)
assert not _calls.numpy_in_place({{}}, probe, wrong)
n = modpack.load_module({str(lib_path)!r})["describe"](x, out)
print(list(out[:n]) == [x.ctypes.data, 2, 2, 64, 1, 0, 1, 3, 2, 4, 2])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parent)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stdout + proc.stderr


@pytest.mark.parametrize("array", [
    np.arange(10, dtype=np.float32), np.zeros((3, 4, 5), np.int64), np.array(3.5),
    np.zeros((0, 4), np.int8), np.arange(100_000, dtype=np.uint8),
    np.arange(300_000, dtype=np.float64),  # past the size at which the GIL is released
    np.ones(7, np.complex64), np.ones(5, np.bool_)],
    ids=lambda a: f"{a.dtype.str}{list(a.shape)}")
def test_array_digests_read_in_place_match_xxhash(array):
    """A const module's change check reads arrays in place: the digest is xxhash's XXH3-64
    of the same bytes, exactly."""
    import xxhash

    from modpack.runtime import _calls
    from modpack.runtime.digests import array_digest

    expected = xxhash.xxh3_64_intdigest(array.tobytes())
    if function.NUMPY_IN_PLACE:
        assert _calls.array_digest(array) == expected
    assert array_digest(array) == expected


def test_array_digests_of_arrays_not_read_in_place_fall_back():
    """A strided view, a byte-swapped array, a subclass or another object is not read in place
    (None): a const module makes an array of it first, or refuses it as before. The digest of
    an array then goes through the buffer protocol and agrees."""
    import xxhash

    from modpack.runtime import _calls
    from modpack.runtime.digests import array_digest

    strided = np.arange(20, dtype=np.float32)[::2]
    swapped = np.arange(10, dtype=">i4")
    for value in (strided, swapped, np.ma.masked_array([1, 2]), b"bytes", [1, 2]):
        assert _calls.array_digest(value) is None
    for array in (np.ascontiguousarray(strided), swapped):
        assert array_digest(array) == xxhash.xxh3_64_intdigest(array.tobytes())
    # What the fast path skips still happens on the long way:
    arrays = modpack.const_module({"s": strided, "l": [1, 2], "m": np.ma.masked_array([3])})
    assert all(a.flags.c_contiguous for a in arrays.arrays.values())
    with pytest.raises(modpack.ArgumentError, match="no DLPack equivalent"):
        modpack.const_module({"b": swapped})
