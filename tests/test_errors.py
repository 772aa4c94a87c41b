"""Errors: every runtime status code has its class (also the built-in exception a Python
programmer would catch), and an exception raised inside a Python callback reaches the caller as
itself, traceback included."""

from __future__ import annotations

import sys

import pytest
from conftest import VADD_C

import modpack
from modpack.runtime.binding import EXCEPTIONS, error_from_status, lib
from modpack.tools.inspection import inspect_library

STATUS_CODES = {name: getattr(lib, name) for name in dir(lib) if name.startswith("MP_ERR_")}


def test_every_status_code_has_a_class():
    assert set(STATUS_CODES.values()) == set(EXCEPTIONS), "a status code without a class"
    assert len(set(EXCEPTIONS.values())) == len(EXCEPTIONS), "two codes share a class"
    for name, code in STATUS_CODES.items():
        lib.mp_error_set(code, f"boom {name}".encode())
        exc = error_from_status(code)
        assert isinstance(exc, modpack.ModpackError) and str(exc) == f"boom {name}"
    builtins = {
        lib.MP_ERR_INVALID_ARGUMENT: (ValueError, TypeError),
        lib.MP_ERR_NOT_FOUND: (KeyError,),
        lib.MP_ERR_IO: (OSError,),
        lib.MP_ERR_RESOURCE_EXHAUSTED: (MemoryError,),
    }
    for code, bases in builtins.items():
        assert all(issubclass(EXCEPTIONS[code], base) for base in bases), (code, bases)


def test_argument_errors_are_value_errors(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static int narrow(int x) { return x; }
MP_EXPORT_FUNC(narrow, int, int)
""")
    root = modpack.load_module(host.export_library(tmp_path / "narrow.so"))
    assert root["narrow"](7) == 7
    with pytest.raises(ValueError, match="argument 0 = 9999999999 does not fit int"):
        root["narrow"](9999999999)
    with pytest.raises(modpack.ArgumentError, match=r"argument 0: .* does not fit in 64 bits"):
        root["narrow"](1 << 70)
    with pytest.raises(modpack.ArgumentError, match="NUL"):
        root["narrow\0junk"]


def test_a_missing_file_is_one_class_everywhere(tmp_path):
    missing = tmp_path / "absent.so"
    for attempt in (modpack.load_module, inspect_library):
        with pytest.raises(modpack.MissingFileError) as caught:
            attempt(missing)
        assert isinstance(caught.value, FileNotFoundError)
        assert isinstance(caught.value, modpack.NotFoundError)
        assert "absent.so" in str(caught.value)


def test_a_library_dlopen_refuses_is_an_os_error(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
extern int modpack_test_symbol_nobody_defines(void);
static int64_t calls_missing(int64_t x) { return x + modpack_test_symbol_nobody_defines(); }
MP_EXPORT_FUNC(calls_missing, int64_t, int64_t)
""")
    path = host.export_library(tmp_path / "unresolved.so")
    with pytest.raises(OSError, match="modpack_test_symbol_nobody_defines") as caught:
        modpack.load_module(path)
    assert isinstance(caught.value, modpack.ModpackOSError)


class Thrower(modpack.BinaryModule):
    """A user kind whose function raises: host code calls it, Python catches it."""

    type_key = "test.thrower"

    def save_to_binary(self) -> bytes:
        return b"t"

    def get_function(self, name, query_imports=False):
        if name != "explode":
            raise KeyError(name)

        def explode(x):
            raise ZeroDivisionError(f"exploded on {x}")

        return explode


def test_an_exception_in_a_python_function_called_from_host_code_comes_back(tmp_path):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
MP_EXPORT_PACKED(call_explode) {
  (void)self; (void)num_args;
  void* f;
  mp_status_t s = mp_backend_get_function("explode", &f);
  return s != MP_OK ? s : mp_backend_call(f, args, 1, out_ret);
}
""")
    host.import_module(Thrower())
    modpack.register_loader("test.thrower")(lambda payload: Thrower())
    try:
        root = modpack.load_module(host.export_library(tmp_path / "thrower.so"))
        with pytest.raises(ZeroDivisionError, match="exploded on 7") as caught:
            root["call_explode"](7)
        assert any(frame.name == "explode" for frame in caught.traceback)
        # The parked exception is used once: a later, unrelated failure is the runtime's.
        with pytest.raises(modpack.NotFoundError):
            root["no_such_function"]
    finally:
        modpack.unregister_loader("test.thrower")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_a_failing_python_loader_keeps_its_class_and_gets_the_context_as_a_note(tmp_path):
    class Strict(modpack.BinaryModule):
        type_key = "test.strict"

        def save_to_binary(self) -> bytes:
            return b"s"

    def load_strict(payload):
        raise LookupError("strict says no")

    host = modpack.csource_module(VADD_C)
    host.import_module(Strict())
    modpack.register_loader("test.strict")(load_strict)
    try:
        path = host.export_library(tmp_path / "strict.so")
        with pytest.raises(LookupError, match="strict says no") as caught:
            modpack.load_module(path)
        assert any("strict.so" in note and "test.strict" in note
                   for note in caught.value.__notes__)
    finally:
        modpack.unregister_loader("test.strict")


def test_a_source_folder_shadowing_the_installed_package_is_named(tmp_path):
    """Python run from a repository's root imports its ``modpack`` folder, whose runtime is
    not built, before the installed package; the message said "install the package". It names
    the folder imported and the one it shadows, and says to run from elsewhere or build the
    checkout; with nothing installed to shadow, it says to build it."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    package = Path(modpack.__file__).parent
    checkout = tmp_path / "checkout"
    shutil.copytree(package, checkout / "modpack",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "lib", "include"))
    shadowed = subprocess.run([sys.executable, "-c", "import modpack"], cwd=checkout,
                              capture_output=True, text=True)
    last = shadowed.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: modpack was imported from "
                           f"{checkout.resolve() / 'modpack'}, a source folder whose C runtime "
                           "(modpack._rt) is not built; it shadows the modpack installed in "
                           f"{package}"), last
    assert "Run from another folder" in last and "`pip install -e .`" in last
    # Without site's set-up (-S) no finder knows the installed package; its dependencies stay
    # importable through PYTHONPATH (unless a wheel's modpack lies there too).
    import sysconfig

    sites = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if any((Path(site) / "modpack").is_dir() for site in sites):
        return  # installed as a wheel: run from there, the copy always shadows it
    alone = subprocess.run([sys.executable, "-S", "-c", "import modpack"], cwd=checkout,
                           capture_output=True, text=True,
                           env={"PYTHONPATH": os.pathsep.join(sorted(sites))})
    last = alone.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: modpack's C runtime (modpack._rt) is not built in "
                           f"{checkout.resolve() / 'modpack'}: install the package"), last
