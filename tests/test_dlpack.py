"""DLPack 1.x both ways: modpack arrays export versioned capsules (the read-only flag) to
consumers that ask for them and legacy ones otherwise; calls and ``modpack.from_dlpack`` /
``modpack.array`` take both; ``Array.numpy()`` is a view on the CPU. With numpy, PyTorch (the
CPU build, ``pip install torch==2.13.0``; scripts/dev.sh installs it) and JAX (``jax[cpu]``),
each skipped, saying so, where it is not installed. Pointers are compared: no copy is taken
for one that is not."""

from __future__ import annotations

import ctypes
import gc
from typing import Any, ClassVar

import numpy as np
import pytest

import modpack

HOST = r"""
#include <stdint.h>
#include "modpack/backend.h"
/* where the array's first element is */
static int64_t address(const DLTensor* x) { return (int64_t)((uintptr_t)x->data + x->byte_offset); }
MP_EXPORT_FUNC(address, int64_t, const DLTensor*)
static void fill(DLTensor* out, double v) {
  float* z = (float*)((char*)out->data + out->byte_offset);
  for (int64_t i = 0; i < out->shape[0]; ++i) z[i] = (float)v;
}
MP_EXPORT_TYPED_VOID_FUNC(fill, "out: float32[n] cpu, v", DLTensor*, double)
static double total(const DLTensor* x) {
  const float* v = (const float*)((const char*)x->data + x->byte_offset);
  double s = 0;
  for (int64_t i = 0; i < x->shape[0]; ++i) s += v[i];
  return s;
}
MP_EXPORT_TYPED_FUNC(total, double, "x: float32[n] cpu", const DLTensor*)
"""

NUMPY_2_1 = np.lib.NumpyVersion(np.__version__) >= "2.1.0"  # reads versioned capsules
needs_numpy_2_1 = pytest.mark.skipif(not NUMPY_2_1,
                                     reason=f"numpy {np.__version__} reads only legacy DLPack")


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Any:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": np.arange(8, dtype=np.float32)}))
    return modpack.load_module(host.export_library(tmp_path_factory.mktemp("dl") / "dl.so"))


@pytest.fixture
def weights(lib: Any) -> np.ndarray:
    """The const module's weights: a read-only numpy view into the loaded library."""
    w = lib.imported_modules[0].arrays["w"]
    assert not w.flags.writeable
    return w


def address(x: Any) -> int:
    return np.from_dlpack(x).ctypes.data if not isinstance(x, np.ndarray) else x.ctypes.data


# ---- capsules, read through ctypes -------------------------------------------------------


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Versioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


READ_ONLY, IS_COPIED, SUBBYTE_PADDED = 1, 2, 4
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def capsule_name(capsule: Any) -> str:
    return _get_name(capsule).decode()


def versioned(capsule: Any) -> Versioned:
    return Versioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


class Crafted:
    """A versioned capsule over four float32s (or 16 bytes said to be another dtype), of any
    version and flags; kept alive for the session (the capsule points into it; no
    deleter)."""

    alive: ClassVar[list[Crafted]] = []

    def __init__(self, major: int = 1, flags: int = 0,
                 dtype: tuple[int, int, int] = (2, 32, 1)) -> None:
        self.data = np.arange(4, dtype=np.float32)
        self.shape = (ctypes.c_int64 * 1)(4)
        self.managed = Versioned(major=major, minor=0, flags=flags)
        t = self.managed.dl_tensor
        t.data, t.device_type, t.ndim = self.data.ctypes.data, 1, 1
        t.code, t.bits, t.lanes = dtype
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        self.capsule = _capsule_new(ctypes.addressof(self.managed), b"dltensor_versioned", None)
        Crafted.alive.append(self)


# ---- modpack arrays out ------------------------------------------------------------------


def test_consumers_of_dlpack_1_get_a_versioned_capsule_others_the_legacy_one():
    a = modpack.array(np.arange(4, dtype=np.float32))
    assert a.__dlpack_device__() == (1, 0)
    new = a.__dlpack__(max_version=(1, 0))
    assert capsule_name(new) == "dltensor_versioned"
    v = versioned(new)
    assert (v.major, v.minor, v.flags) == (1, 0, 0)  # the minor the consumer knows
    assert v.dl_tensor.data == a.data_ptr
    assert versioned(a.__dlpack__(max_version=(1, 7))).minor == 1  # ours: DLPack 1.1
    assert capsule_name(a.__dlpack__()) == "dltensor"
    assert capsule_name(a.__dlpack__(max_version=(0, 8))) == "dltensor"
    copied = versioned(a.__dlpack__(max_version=(1, 0), copy=True))
    assert copied.flags == IS_COPIED and copied.dl_tensor.data != a.data_ptr


@needs_numpy_2_1
def test_numpy_views_a_writable_array_writable():
    a = modpack.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = np.from_dlpack(a)
    assert view.flags.writeable and view.ctypes.data == a.data_ptr
    view[1, 2] = 42
    assert a.numpy()[1, 2] == 42
    assert np.from_dlpack(a, copy=False).ctypes.data == a.data_ptr
    copy = np.from_dlpack(a, copy=True)
    assert copy.ctypes.data != a.data_ptr and copy.flags.writeable
    copy[0, 0] = -1
    assert a.numpy()[0, 0] == 0


@needs_numpy_2_1
def test_the_weights_are_read_only_everywhere(lib, weights):
    w = modpack.from_dlpack(weights)  # zero-copy: the library's mapping
    assert w.read_only and w.data_ptr == weights.ctypes.data
    assert "read_only" in repr(w)
    view = np.from_dlpack(w)
    assert not view.flags.writeable and view.ctypes.data == weights.ctypes.data
    assert versioned(w.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    assert not w.numpy().flags.writeable and w.numpy().ctypes.data == w.data_ptr
    # Calls: a const parameter reads it in place; a writable one refuses it.
    assert lib["address"](w) == weights.ctypes.data
    assert lib["total"](w) == 28.0
    with pytest.raises(modpack.ArgumentError, match="argument 0 is a read-only array"):
        lib["fill"](w, 1.0)
    with pytest.raises(modpack.ArgumentError, match="read-only"):
        w.copy_from(np.zeros(8, np.float32))
    # A consumer of the legacy form cannot be told: it gets a copy of its own, or an error.
    legacy = w.__dlpack__()
    assert capsule_name(legacy) == "dltensor"
    with pytest.raises(modpack.DLPackError, match="read-only") as caught:
        w.__dlpack__(copy=False)
    assert isinstance(caught.value, BufferError)
    # modpack.array copies by default, and that copy is writable.
    mine = modpack.array(w)
    assert not mine.read_only and mine.data_ptr != w.data_ptr
    assert modpack.array(weights, copy=False).read_only


def test_numpy_is_a_view_on_the_cpu_and_keeps_the_array_alive():
    a = modpack.array(np.arange(4, dtype=np.int64))
    view = a.numpy()
    assert view.flags.writeable and view.ctypes.data == a.data_ptr
    view[0] = 7
    assert a.numpy()[0] == 7
    copy = a.numpy(copy=True)
    assert copy.ctypes.data != a.data_ptr and copy.tolist() == [7, 1, 2, 3]
    del a
    gc.collect()
    assert view.tolist() == [7, 1, 2, 3]  # the view holds the array


def test_a_device_the_array_is_not_on_is_refused_or_copied_to_the_cpu():
    a = modpack.array(np.arange(3, dtype=np.float32))
    assert versioned(a.__dlpack__(max_version=(1, 0), dl_device=(1, 0))).flags == 0
    with pytest.raises(modpack.DLPackError, match="device"):
        a.__dlpack__(max_version=(1, 0), dl_device=(4, 0))


# ---- capsules and producers in -----------------------------------------------------------


def test_calls_take_versioned_capsules_and_their_read_only_flag(lib):
    writable = Crafted()
    lib["fill"](writable.capsule, 2.5)
    assert writable.data.tolist() == [2.5] * 4
    assert lib["address"](Crafted().capsule) == Crafted.alive[-1].data.ctypes.data
    read_only = Crafted(flags=READ_ONLY)
    with pytest.raises(modpack.ArgumentError, match="read-only"):
        lib["fill"](read_only.capsule, 1.0)
    assert lib["total"](read_only.capsule) == 6.0
    with pytest.raises(modpack.ArgumentError, match=r"argument 0: a DLPack 2\.0 tensor"):
        lib["total"](Crafted(major=2).capsule)


def test_from_dlpack_takes_capsules_once():
    crafted = Crafted()
    a = modpack.from_dlpack(crafted.capsule)
    assert a.data_ptr == crafted.data.ctypes.data and a.shape == (4,)
    assert capsule_name(crafted.capsule) == "used_dltensor_versioned"
    with pytest.raises(modpack.ArgumentError, match="not an unused DLPack capsule"):
        modpack.from_dlpack(crafted.capsule)
    assert modpack.from_dlpack(Crafted(flags=READ_ONLY).capsule).read_only
    with pytest.raises(modpack.IncompatibleError, match=r"DLPack 2\.0"):
        modpack.from_dlpack(Crafted(major=2).capsule)
    legacy = np.arange(3.0).__dlpack__()
    assert modpack.from_dlpack(legacy).numpy().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(modpack.ArgumentError, match="does not implement __dlpack__"):
        modpack.from_dlpack([1, 2, 3])


def test_array_copies_unless_told_otherwise():
    host = np.arange(5, dtype=np.float64)
    assert modpack.array(host).data_ptr != host.ctypes.data
    assert modpack.array(host, copy=None).data_ptr == host.ctypes.data
    assert modpack.array(host, copy=False).data_ptr == host.ctypes.data
    assert modpack.array(host, dtype="float32", copy=None).dtype == np.float32  # must copy
    with pytest.raises(modpack.ArgumentError, match="needs a copy"):
        modpack.array(host, dtype="float32", copy=False)
    with pytest.raises(modpack.ArgumentError, match="copy=False"):
        modpack.array([1, 2, 3], copy=False)
    assert modpack.array([1, 2, 3], copy=None).numpy().tolist() == [1, 2, 3]


# ---- PyTorch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip(
        "torch", reason="PyTorch is not installed: pip install torch==2.13.0 (the CPU build; "
        "scripts/dev.sh installs it)")


def test_torch_tensors_in(lib, torch):
    t = torch.arange(8, dtype=torch.float32)
    assert lib["address"](t) == t.data_ptr()  # in place, no copy
    assert lib["total"](t) == 28.0
    out = torch.zeros(8, dtype=torch.float32)
    lib["fill"](out, 3.0)
    assert out.tolist() == [3.0] * 8
    view = t[2:]  # a byte_offset, or a data pointer further on: the same element either way
    assert lib["address"](view) == view.data_ptr()
    a = modpack.from_dlpack(t)
    assert a.data_ptr == t.data_ptr() and not a.read_only
    a.numpy()[0] = 100
    assert t[0].item() == 100
    del t
    gc.collect()
    assert a.numpy()[0] == 100  # the tensor lives as long as the array
    strided = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    s = modpack.from_dlpack(strided)
    assert s.strides == (1, 4) and s.data_ptr == strided.data_ptr()
    assert (s.numpy() == strided.numpy()).all()
    compact = modpack.array(strided, copy=None)  # a compact copy
    assert compact.strides is None and (compact.numpy() == strided.numpy()).all()


def test_modpack_arrays_out_to_torch(torch):
    a = modpack.array(np.arange(6, dtype=np.float32))
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr
    t[1] = 50
    assert a.numpy()[1] == 50
    del a
    gc.collect()
    assert t[1].item() == 50  # the array lives as long as the tensor
    t64 = torch.from_dlpack(modpack.array(np.arange(3, dtype=np.int64)))
    assert t64.dtype == torch.int64 and t64.tolist() == [0, 1, 2]


def test_torch_and_read_only_arrays(weights, torch):
    """torch asks for DLPack 1.0 and gets the read-only flag; torch has no read-only tensors,
    and 2.13 shares the memory anyway (writing it would write the library's weights: the
    flag says not to)."""
    w = modpack.from_dlpack(weights)
    seen: dict[str, Any] = {}

    class Spy:
        def __dlpack_device__(self) -> tuple[int, int]:
            return w.__dlpack_device__()

        def __dlpack__(self, **kwargs: Any) -> Any:
            capsule = w.__dlpack__(**kwargs)
            seen.update(kwargs, flags=versioned(capsule).flags)
            return capsule

    t = torch.from_dlpack(Spy())
    assert seen["max_version"][0] >= 1 and seen["flags"] == READ_ONLY
    assert t.data_ptr() == weights.ctypes.data
    assert t.tolist() == weights.tolist()


TORCH_LOW_PRECISION = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                       "float8_e8m0fnu", "float4_e2m1fn_x2"]


@pytest.mark.parametrize("name", TORCH_LOW_PRECISION)
def test_torch_float8_and_float4_pairs_both_ways_zero_copy(lib, torch, name):
    """A torch float8 or float4_e2m1fn_x2 tensor reaches host code in place, becomes a modpack
    array over its memory (numpy: the ml_dtypes type, or modpack.float4_e2m1fn_x2, the same
    bytes) and goes back to torch as the dtype it was, still in place."""
    if not hasattr(torch, name):
        pytest.skip(f"torch {torch.__version__} has no {name}")
    dtype = getattr(torch, name)
    raw = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    t = raw.view(dtype)
    assert lib["address"](t) == t.data_ptr()
    a = modpack.from_dlpack(t)
    assert a.data_ptr == t.data_ptr() and a.shape == (3, 4) and a.nbytes == 12
    assert f"dtype={name} " in repr(a)
    view = a.numpy()
    assert view.ctypes.data == t.data_ptr()
    assert view.view(np.uint8).tolist() == raw.tolist()
    assert view.dtype == (modpack.float4_e2m1fn_x2 if name.startswith("float4") else
                          np.dtype(getattr(pytest.importorskip("ml_dtypes"), name)))
    back = torch.from_dlpack(a)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()
    assert torch.equal(back.view(torch.uint8), raw)
    # numpy's form back to torch: a new array (a copy), the same dtype and bytes.
    again = torch.from_dlpack(modpack.array(view))
    assert again.dtype == dtype and torch.equal(again.view(torch.uint8), raw)


def test_ml_dtypes_arrays_are_taken_in_place(torch):
    """numpy's DLPack exports no ml_dtypes type, yet from_dlpack takes a float8 or bfloat16
    array (strided, read-only) and float4_e2m1fn_x2 pairs in place, typed, on to torch."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = np.arange(12, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).reshape(3, 4)
    a = modpack.from_dlpack(f8)
    assert a.data_ptr == f8.ctypes.data and a.dtype == f8.dtype and not a.read_only
    t = torch.from_dlpack(a)
    assert t.dtype == torch.float8_e4m3fn and t.data_ptr() == f8.ctypes.data
    assert t.float().tolist() == f8.astype(np.float32).tolist()
    column = modpack.from_dlpack(f8[:, 1])
    assert column.strides == (4,) and column.numpy().tolist() == f8[:, 1].tolist()
    frozen = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    frozen.flags.writeable = False
    b = modpack.from_dlpack(frozen)
    assert b.read_only and b.data_ptr == frozen.ctypes.data and b.dtype == frozen.dtype
    pairs = modpack.pack_float4(np.ones((2, 4), np.float32))
    c = modpack.array(pairs, copy=None)
    assert c.data_ptr == pairs.ctypes.data and c.dtype == modpack.float4_e2m1fn_x2
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert torch.from_dlpack(c).dtype == torch.float4_e2m1fn_x2


def test_float4_values_from_numpy_to_torch_pairs(torch):
    """modpack.pack_float4 packs float4 values as torch.float4_e2m1fn_x2 does (value 2i in the
    low nibble of byte i); the pairs go to torch zero-copy and come back unpacked."""
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[0.5, -6.0, 1.5, 3.0], [0.0, 4.0, -1.0, 2.0]], ml_dtypes.float4_e2m1fn)
    pairs = modpack.array(modpack.pack_float4(values))
    t = torch.from_dlpack(pairs)
    assert t.dtype == torch.float4_e2m1fn_x2 and t.shape == (2, 2)
    assert t.data_ptr() == pairs.data_ptr
    codes = values.view(np.uint8)
    assert t.view(torch.uint8).tolist() == (codes[:, 0::2] | codes[:, 1::2] << 4).tolist()
    assert np.array_equal(modpack.unpack_float4(t), values)


def test_pack_float4_pairs_values_along_the_last_dimension():
    """pack_float4 rounds numbers to float4 and pairs them along the last dimension (value 2i
    in the low nibble of byte i), refusing an odd length or a scalar; unpack_float4 is its
    inverse and refuses what is not pairs."""
    pytest.importorskip("ml_dtypes")
    pairs = modpack.pack_float4([[1.0, 2.0, 3.1, -4.0]])  # 3.1 rounds to 3
    assert pairs.dtype == modpack.float4_e2m1fn_x2 and pairs.shape == (1, 2)
    assert pairs.view(np.uint8).tolist() == [[0x2 | 0x4 << 4, 0x5 | 0xE << 4]]
    assert modpack.unpack_float4(pairs).astype(np.float32).tolist() == [[1.0, 2.0, 3.0, -4.0]]
    with pytest.raises(modpack.ArgumentError, match=r"the shape \(2, 3\) has an odd one: pad "):
        modpack.pack_float4(np.zeros((2, 3), np.float32))
    with pytest.raises(modpack.ArgumentError, match="a scalar has none"):
        modpack.pack_float4(1.0)
    with pytest.raises(modpack.ArgumentError, match=r"takes float4_e2m1fn_x2 pairs .* not uint8"):
        modpack.unpack_float4(np.zeros(2, np.uint8))


def test_packed_float4_values_cross_to_numpy_by_copy_only():
    """An array of DLPack's float4_e2m1fn (lanes 1: two values a byte) is made from ml_dtypes
    values by a copy that packs them, has no numpy view (saying so), unpacks on request, and
    goes out and back in as a versioned capsule of the same type."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([0.5, -6.0, 1.5, 3.0, 4.0], ml_dtypes.float4_e2m1fn)
    a = modpack.array(values)
    assert a.packed and a.shape == (5,) and a.nbytes == 3 and a.dtype == values.dtype
    assert repr(a) == "<modpack.Array shape=(5,) dtype=float4_e2m1fn device=cpu:0>"
    raw = np.ctypeslib.as_array(ctypes.cast(a.data_ptr, ctypes.POINTER(ctypes.c_uint8)), (3,))
    codes = values.view(np.uint8)
    assert raw.tolist() == [codes[0] | codes[1] << 4, codes[2] | codes[3] << 4, codes[4]]
    with pytest.raises(modpack.ArgumentError,
                       match=r"a packed float4_e2m1fn array .* has no numpy view.* "
                             r"numpy\(copy=True\) unpacks a copy"):
        a.numpy()
    assert np.array_equal(a.numpy(copy=True), values)
    out = np.zeros(5, ml_dtypes.float4_e2m1fn)
    a.copy_to(out)
    assert np.array_equal(out, values)
    a.copy_from(values[::-1])
    assert np.array_equal(a.numpy(copy=True), values[::-1])
    capsule = a.__dlpack__(max_version=(1, 1))
    v = versioned(capsule)
    assert (v.dl_tensor.code, v.dl_tensor.bits, v.dl_tensor.lanes, v.flags) == (17, 4, 1, 0)
    b = modpack.from_dlpack(capsule)
    assert b.data_ptr == a.data_ptr and b.packed and b.nbytes == 3


def test_packed_float4_arrays_on_a_device():
    """Packed float4 values and pairs go to a device as their packed bytes and come back
    unpacked (numpy) or as they are (an array on the CPU)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if modpack.device_count("opencl") == 0:
        pytest.skip("no OpenCL device (scripts/dev.sh installs PoCL)")
    values = np.array([0.5, -6.0, 1.5, 3.0, 4.0], ml_dtypes.float4_e2m1fn)
    a = modpack.array(values, device="opencl:0")
    assert a.packed and a.nbytes == 3 and np.array_equal(a.numpy(), values)
    host = modpack.from_dlpack(a, device="cpu")
    assert host.packed and np.array_equal(host.numpy(copy=True), values)
    pairs = modpack.pack_float4(np.ones((2, 4), np.float32))
    b = modpack.array(pairs, device="opencl:0")
    assert b.dtype == modpack.float4_e2m1fn_x2 and b.numpy().tobytes() == pairs.tobytes()


def test_padded_sub_byte_tensors_are_refused_and_numpy_float4_is_not_dlpack():
    """A producer's padded float4 (one value per byte: DLPack 1.1's IS_SUBBYTE_TYPE_PADDED) is
    refused by calls and from_dlpack, since a DLTensor cannot carry the flag on; the flag on
    whole-byte types means nothing and is ignored. Numpy float4 arrays of ml_dtypes are padded
    too, and refused the same way where their memory would be taken as it is."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(modpack.ArgumentError,
                       match=r"a DLPack tensor of float4_e2m1fn its producer marks padded \(one "
                             r"value per byte, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED\): the "
                             r"runtime takes sub-byte types packed"):
        modpack.from_dlpack(Crafted(flags=SUBBYTE_PADDED, dtype=(17, 4, 1)).capsule)
    assert modpack.from_dlpack(Crafted(flags=SUBBYTE_PADDED).capsule).shape == (4,)
    with pytest.raises(modpack.ArgumentError,
                       match=r"modpack.array\(copy=False\): .*numpy float4_e2m1fn"):
        modpack.array(np.zeros(4, ml_dtypes.float4_e2m1fn), copy=False)


def test_calls_refuse_padded_sub_byte_capsules(lib):
    """The same refusal in the call path, naming the argument."""
    with pytest.raises(modpack.ArgumentError,
                       match=r"^argument 0: its producer marks the array padded \(one 6-bit value "
                             r"per byte, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED; dtype code "
                             r"16\), but modpack takes sub-byte types packed"):
        lib["address"](Crafted(flags=SUBBYTE_PADDED, dtype=(16, 6, 1)).capsule)
    assert lib["address"](Crafted(dtype=(16, 6, 1)).capsule) != 0  # packed: taken


# ---- JAX ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jnp() -> Any:
    pytest.importorskip("jax", reason="JAX is not installed: pip install 'jax[cpu]' "
                        "(scripts/dev.sh installs it)")
    import jax.numpy

    return jax.numpy


def test_jax_both_ways(lib, weights, jnp):
    a = modpack.array(np.arange(16, dtype=np.float32))  # 64-byte aligned, as JAX wants
    j = jnp.from_dlpack(a)
    assert j.unsafe_buffer_pointer() == a.data_ptr  # zero-copy
    assert j.tolist() == list(range(16))
    # The weights: JAX asks for the legacy form, which cannot say read-only, so it gets a copy
    # (it refused read-only numpy arrays: BufferError).
    w = modpack.from_dlpack(weights)
    jw = jnp.from_dlpack(w)
    assert jw.tolist() == weights.tolist()
    assert jw.unsafe_buffer_pointer() != weights.ctypes.data
    x = jnp.arange(8, dtype=jnp.float32)
    assert lib["address"](x) == x.unsafe_buffer_pointer()
    assert lib["total"](x) == 28.0
    m = modpack.from_dlpack(x)
    assert m.data_ptr == x.unsafe_buffer_pointer() and m.shape == (8,)
