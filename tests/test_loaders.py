"""The loader registry from Python: user module kinds, errors from loaders, thread safety."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest
from conftest import VADD_C, consts, run_python

import modpack
from modpack.runtime.binding import loader_names


class Blobby(modpack.BinaryModule):
    """A user kind: a bytes payload plus a function computed from it."""

    type_key = "test.blobby"

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = bytes(data)

    def save_to_binary(self) -> bytes:
        return self.data

    def get_function(self, name, query_imports=False):
        if name == "blobby_len":
            return lambda: len(self.data)
        raise KeyError(name)


@pytest.fixture(scope="module", autouse=True)
def blobby_loader():
    @modpack.register_loader("test.blobby")
    def load_blobby(payload: memoryview) -> modpack.Module:
        assert payload.readonly
        return Blobby(payload)

    yield
    modpack.unregister_loader("test.blobby")


def test_user_kind_round_trips_and_is_called_from_host(tmp_path):
    host = modpack.csource_module(VADD_C + r"""
static int64_t call_blobby(int64_t unused) {
  (void)unused;
  void* f; mp_value_t ret;
  if (mp_backend_get_function("blobby_len", &f) != MP_OK) return -1;
  if (mp_backend_call(f, NULL, 0, &ret) != MP_OK) return -2;
  return ret.v_int64;
}
MP_EXPORT_FUNC(call_blobby, int64_t, int64_t)
""")
    user = Blobby(b"hello modpack")
    host.import_module(user)
    user.import_module(consts(1))
    root = modpack.load_module(host.export_library(tmp_path / "user.so"))
    (loaded,) = root.imported_modules
    assert isinstance(loaded, Blobby) and loaded.data == b"hello modpack"
    (child,) = loaded.imported_modules
    assert child.type_key == "const" and list(child.arrays) == ["c1"]
    assert root["call_blobby"](0) == len(b"hello modpack")


def test_duplicate_registration_is_refused():
    with pytest.raises(modpack.ModpackError, match="already registered"):
        modpack.register_loader("const")(lambda p: None)


def test_invalid_type_keys_are_refused():
    with pytest.raises(modpack.ModpackError, match="invalid type key"):
        modpack.register_loader("_lib")(lambda p: None)


def test_loader_failure_is_reported_with_context(tmp_path):
    class Broken(modpack.BinaryModule):
        type_key = "test.broken"

        def save_to_binary(self) -> bytes:
            return b"x"

    @modpack.register_loader("test.broken")
    def load_broken(payload):
        raise ValueError("payload says no")

    try:
        host = modpack.csource_module(VADD_C)
        host.import_module(Broken())
        path = host.export_library(tmp_path / "broken.so")
        # The loader's own exception, with its traceback and the runtime's context as a note.
        with pytest.raises(ValueError, match="payload says no") as caught:
            modpack.load_module(path)
        assert not isinstance(caught.value, modpack.ModpackError)
        assert any(frame.name == "load_broken" for frame in caught.traceback)
        notes = getattr(caught.value, "__notes__", [])
        if sys.version_info >= (3, 11):
            assert any(r"module[1] (test.broken)" in note for note in notes), notes
    finally:
        modpack.unregister_loader("test.broken")
    assert "test.broken" not in loader_names()


def test_concurrent_loads_share_one_tree(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(100.0)}))
    paths = [host.export_library(tmp_path / f"t{i}.so") for i in range(3)]
    results: list = []
    errors: list = []

    def work(path):
        try:
            for i in range(60):
                root = modpack.load_module(path)
                results.append((path, id(root), root.imported_modules[0].arrays["w"].sum()))
                add = root["add_int"]
                del root  # drop the tree while another thread may be loading it again
                assert add(i, 1) == i + 1
                if i % 7 == 0:
                    gc.collect()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in paths for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {r[2] for r in results} == {4950.0}


KEEPER_SCRIPT = r"""
import sys
import modpack
from modpack.tools.inspection import inspect_library

class Keeper(modpack.BinaryModule):
    type_key = "test.keeper"

    def __init__(self, data):
        super().__init__()
        self.data = data

    def save_to_binary(self):
        return bytes(self.data)

kept = []

@modpack.register_loader("test.keeper")
def load_keeper(payload):
    assert payload.readonly
    kept.append(payload)  # the zero-copy view, kept past the loader's return
    return Keeper(b"")

payload = bytes(range(256)) * 4096  # 1 MiB: its own pages of the mapping
host = modpack.csource_module("int placeholder;")
host.import_module(Keeper(payload))
path = host.export_library(sys.argv[1])
report = inspect_library(path)
assert [m["type_key"] for m in report["modules"]] == ["_lib", "test.keeper"], report
(view,) = kept
assert view.readonly
# Inspection has closed its mapping of the file by now: the view must still hold the bytes.
assert view.tobytes() == payload
print("ok")
"""


def test_loader_views_outlive_inspection(tmp_path):
    """A loader run by ``modpack inspect`` (no library) may keep its view: the view must not
    point into the mapping inspection closes. In a child, since a dangling view crashes."""
    assert run_python(KEEPER_SCRIPT, str(tmp_path / "keeper.so")) == "ok\n"


class Summer(modpack.BinaryModule):
    """A Python module whose function host code calls with an array."""

    type_key = "test.summer"

    def save_to_binary(self) -> bytes:
        return b"s"

    def get_function(self, name, query_imports=False):
        if name == "py_sum":
            return lambda array, scale: float(array.sum() * scale)
        if name == "py_fill":
            def fill(array):
                array[:] = 7  # a writable CPU array, seen in place
                return array.size
            return fill
        raise KeyError(name)


def test_host_code_passes_arrays_to_python_functions(tmp_path):
    modpack.register_loader("test.summer")(lambda payload: Summer())
    try:
        host = modpack.csource_module(r"""
#include "modpack/backend.h"
static double total(const DLTensor* x) {
  void* f; mp_value_t ret;
  if (mp_backend_get_function("py_sum", &f) != MP_OK) return -1;
  mp_value_t args[2] = {mp_tensor((DLTensor*)x), mp_float(2.0)};
  if (mp_backend_call(f, args, 2, &ret) != MP_OK) return -2;
  return ret.v_float64;
}
MP_EXPORT_FUNC(total, double, const DLTensor*)
static int64_t fill(DLTensor* x) {
  void* f; mp_value_t ret;
  if (mp_backend_get_function("py_fill", &f) != MP_OK) return -1;
  mp_value_t args[1] = {mp_tensor(x)};
  if (mp_backend_call(f, args, 1, &ret) != MP_OK) return -2;
  return ret.v_int64;
}
MP_EXPORT_FUNC(fill, int64_t, DLTensor*)
""")
        host.import_module(Summer())
        root = modpack.load_module(host.export_library(tmp_path / "py.so"))
        x = np.arange(10, dtype=np.float32)
        assert root["total"](x) == 90.0
        assert root["total"](x[::3]) == 2.0 * (0 + 3 + 6 + 9)
        y = np.zeros((2, 3), np.int16)
        assert root["fill"](y) == 6 and (y == 7).all()
    finally:
        modpack.unregister_loader("test.summer")
