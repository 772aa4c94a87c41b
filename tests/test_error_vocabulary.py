"""Every error modpack raises is a ModpackError (modpack/errors.py), read from the source.

The package's ``raise`` statements are read with ``ast``: one that raises a built-in exception
class (``ValueError``, ``TypeError``, ``KeyError``, ``RuntimeError``, ``OSError``, ...) fails
the test, naming the file and line. For a wrong argument, raise ``ArgumentError``, which is
also a ``ValueError`` and a ``TypeError``, so callers catching those keep working; a missing
thing is ``NotFoundError`` (a ``KeyError``) or ``MissingFileError`` (a
``FileNotFoundError``); see errors.py for the rest. Exception classes the package defines must
derive from ModpackError too. The C call path (``runtime/calls.c``) is read the same way: it
raises modpack's classes, handed to it at init.

What stays allowed, and why:

- re-raising: ``raise``, ``raise exc`` (an exception object caught or made elsewhere, such as
  the one ``error_from_status`` returns), ``raise type(exc)(...)`` (the caught class, with more
  context);
- ``NotImplementedError`` in a method: a base class's method a subclass must implement;
- ``ImportError`` when modpack itself cannot be imported (its C runtime is not built, or the
  headers and the Python structs disagree): Python's import system and ``try: import ...
  except ImportError`` expect that class, and no modpack class exists yet at that point;
- ``runtime/build_ffi.py``: the build script setup.py runs before the package exists;
- exceptions raised by user code that the runtime called (a Python loader, a Python function
  host code calls) reach the caller as themselves, by design (errors.py,
  runtime/callbacks.py): they are not raised by a ``raise`` of the package, so nothing here
  sees them.

The base class itself, ``ModpackError(...)``, says only "something went wrong": where a
subclass says what (a wrong argument, damage, something missing, a tool that failed), that
subclass is raised. The few bare ones left are listed in ``BARE_MODPACK_ERRORS`` with why no
subclass fits; a new one fails the test, naming its file and line.
"""

from __future__ import annotations

import ast
import builtins
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT

import modpack.errors

PACKAGE = ROOT / "modpack"
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
MODPACK_ERRORS = {name for name in modpack.errors.__all__
                  if issubclass(getattr(modpack.errors, name), modpack.errors.ModpackError)}
EXEMPT_FILES = {"modpack/runtime/build_ffi.py"}
# Raises of built-in classes in files other engineers own, reported to them, by file and class.
# When one is fixed, lower its count here (the test fails until then, so the list stays true).
PENDING: Counter[tuple[str, str]] = Counter()
# Where ModpackError itself is made, by file: refusals no subclass of errors.py names.
BARE_MODPACK_ERRORS: Counter[str] = Counter({
    # A module being built runs no functions (a state, not an argument; a Python loader's
    # module answering it is "absent", runtime/callbacks.py); a kind that is not
    # binary-serializable has no payload (asked of the module itself).
    "modpack/modules/base.py": 3,
    # A kind's payload_size() and payload_chunks() disagree: a bug of that kind, which may be
    # a user's Python kind, so not InternalError ("a bug in modpack").
    "modpack/exporter/serializer.py": 1,
    # Every signature slot of the seal is taken: nothing damaged, missing or mistyped.
    "modpack/format/signatures.py": 1,
    # A host-only library has nothing to slim (.so and .tar): `modpack slim` exits 1 for it,
    # and an ArgumentError would make that 2.
    "modpack/tools/slim/library.py": 2,
})


def _raised_name(node: ast.expr) -> str | None:
    """The name of the class a raise's expression names (``X`` in ``raise X`` and
    ``raise X(...)``, ``mod.X``), or None when it is not a name (a call's result, ``type(e)``)."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


class _Raises(ast.NodeVisitor):
    """Every raise of a built-in exception class, with what encloses it."""

    def __init__(self, tree: ast.Module) -> None:
        self.found: list[tuple[int, str, bool]] = []  # line, class, raised in a method
        self._scopes: list[ast.AST] = []
        self.visit(tree)

    def _scoped(self, node: ast.AST) -> None:
        self._scopes.append(node)
        self.generic_visit(node)
        self._scopes.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Raise(self, node: ast.Raise) -> None:
        name = None if node.exc is None else _raised_name(node.exc)
        if name in BUILTIN_EXCEPTIONS:
            in_method = len(self._scopes) >= 2 and isinstance(self._scopes[-2], ast.ClassDef)
            self.found.append((node.lineno, name, in_method))
        self.generic_visit(node)


def _allowed(name: str, in_method: bool) -> bool:
    return (name == "NotImplementedError" and in_method) or name == "ImportError"


def bare_raises() -> list[tuple[str, int, str]]:
    """(file, line, class) of every raise of a built-in exception class the rules refuse."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        shown = path.relative_to(ROOT).as_posix()
        if shown in EXEMPT_FILES:
            continue
        for line, name, in_method in _Raises(ast.parse(path.read_text())).found:
            if not _allowed(name, in_method):
                out.append((shown, line, name))
    return out


def test_the_reader_finds_bare_raises():
    source = (
        "from .errors import ArgumentError\n"
        "def f(x):\n"
        "    if x: raise ValueError('no')\n"
        "    raise ArgumentError('fine')\n"
        "def g():\n"
        "    try:\n"
        "        pass\n"
        "    except OSError as exc:\n"
        "        raise exc\n"
        "    raise KeyError\n"
        "class Base:\n"
        "    def todo(self):\n"
        "        raise NotImplementedError('subclasses')\n"
        "def h():\n"
        "    raise NotImplementedError\n"
    )
    found = [(line, name) for line, name, in_method in _Raises(ast.parse(source)).found
             if not _allowed(name, in_method)]
    assert found == [(3, "ValueError"), (10, "KeyError"), (15, "NotImplementedError")]


def test_every_raise_in_the_package_is_a_modpack_error():
    found = Counter((path, name) for path, _, name in bare_raises())
    new = [(path, line, name) for path, line, name in bare_raises()
           if found[(path, name)] > PENDING[(path, name)]]
    assert not new, (
        "raise a modpack error (modpack/errors.py: ArgumentError for a wrong argument, it is "
        f"also a ValueError and a TypeError) instead of a built-in one at: {new}")
    fixed = {key: PENDING[key] - found[key] for key in PENDING if found[key] < PENDING[key]}
    assert not fixed, f"fixed, so lower their counts in PENDING: {fixed}"


def test_the_package_defines_no_exception_outside_the_hierarchy():
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {_raised_name(b) for b in node.bases}
            warning = any(issubclass(getattr(builtins, b), Warning) for b in bases
                          if b in BUILTIN_EXCEPTIONS)
            if (bases & BUILTIN_EXCEPTIONS and not bases & MODPACK_ERRORS and not warning
                    and node.name != "ModpackError"):
                outside.append((path.relative_to(ROOT).as_posix(), node.name))
    assert outside == []


def _bare_modpack_errors(tree: ast.AST) -> list[int]:
    """The lines where |tree| makes ModpackError itself: ``raise ModpackError(...)``, and any
    other call of it (``return ModpackError(...)`` for a caller to raise)."""
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _raised_name(node) == "ModpackError")


def test_the_reader_finds_bare_modpack_errors():
    source = (
        "from . import errors\n"
        "from .errors import ArgumentError, ModpackError\n"
        "class Mine(ModpackError):\n"
        "    pass\n"
        "def f(x):\n"
        "    if x: raise ModpackError('what went wrong?')\n"
        "    raise ArgumentError('x is wrong')\n"
        "def g():\n"
        "    return errors.ModpackError('for the caller to raise')\n"
        "def h(exc):\n"
        "    if isinstance(exc, ModpackError): raise\n"
        "    raise Mine('typed')\n"
    )
    assert _bare_modpack_errors(ast.parse(source)) == [6, 9]


def test_the_bare_modpack_error_is_made_only_where_no_subclass_fits():
    """A ``raise ModpackError(...)`` that a typed error (ArgumentError, FormatError,
    NotFoundError, UnavailableError, CompileError, ...) would describe fails here, naming its
    file and line; so does one of the listed refusals fixed without lowering its count."""
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = _bare_modpack_errors(ast.parse(path.read_text()))
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    new = {path: lines for path, lines in found.items()
           if len(lines) > BARE_MODPACK_ERRORS[path]}
    assert not new, (
        "raise the modpack error that says what went wrong (modpack/errors.py: ArgumentError "
        "for a caller's wrong argument, FormatError for damaged bytes, NotFoundError for a "
        f"missing thing, UnavailableError for a missing tool, ...), not ModpackError, at: {new}")
    fixed = {path: count - len(found.get(path, []))
             for path, count in BARE_MODPACK_ERRORS.items() if len(found.get(path, [])) < count}
    assert not fixed, f"fixed, so lower their counts in BARE_MODPACK_ERRORS: {fixed}"


def test_refusals_that_were_bare_modpack_errors_say_what_went_wrong(tmp_path: Path,
                                                                   monkeypatch):
    """A sample of the raises retyped from the bare ModpackError, one per kind of wrong: each
    is now the class that names it, its message as before, and still a ModpackError."""
    import importlib
    import io
    import os

    import numpy as np

    import modpack
    from modpack.format.elf64 import Elf64

    demangle = importlib.import_module("modpack.toolchain.demangle")  # (the package re-exports
    # its function under the module's name)

    def without_cxxfilt() -> None:
        with monkeypatch.context() as patched:
            patched.setattr(demangle.shutil, "which", lambda tool: None)
            demangle.demangle(["_Z1kPf"])

    a, b = modpack.const_module({"a": np.zeros(2)}), modpack.const_module({"b": np.zeros(2)})
    a.import_module(b)
    host = modpack.csource_module("int x;")
    twins = modpack.csource_module("int x;")
    for _ in range(2):
        twins.import_module(modpack.cuda_module(binaries={"ptx": _PTX}, name="twin"))
    elf32 = b"\x7fELF\x01\x01\x01" + bytes(57)
    cases = [
        (lambda: b.import_module(a), modpack.ArgumentError, "would create a cycle"),
        (lambda: host.export_library(tmp_path / "x.o", system_lib="not an identifier"),
         modpack.ArgumentError, "system_lib must be a C identifier"),
        (lambda: host.export_library(tmp_path / "x.exe"), modpack.ArgumentError,
         r"export_library writes a shared library \(.so, or .so.N\)"),
        (lambda: twins.export_library(tmp_path / "twins.so"), modpack.ArgumentError,
         r"device modules share the names \['twin'\]"),
        (lambda: modpack.cuda_module(binaries={"ptx": _PTX}, functions={"k": ["void*", "int32"]}),
         modpack.ArgumentError, r"kernel k has 2 parameters in its record \(k\(void\*, int32\)\) "
                                r"but 1 in the compiled PTX"),
        (lambda: modpack.cuda_module(binaries={"ptx": _PTX.split(".visible")[0]}),
         modpack.ArgumentError, r"the compute_80 PTX defines no kernel \(.entry\)"),
        (lambda: Elf64(io.BytesIO(elf32), "x.so"), modpack.IncompatibleError,
         r"x.so: placing the blob needs a 64-bit little-endian shared library \(got ELF32"),
        (without_cxxfilt, modpack.UnavailableError,
         r"reading C\+\+ kernel names needs c\+\+filt"),
    ]
    for attempt, cls, message in cases:
        with pytest.raises(cls, match=message) as caught:
            attempt()
        assert isinstance(caught.value, modpack.ModpackError)
    assert not (tmp_path / "twins.so").exists() and not (tmp_path / "x.exe").exists()
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(modpack.ModpackOSError, match="is not writable by this user"):
            host.export_library(locked / "x.so")


def test_the_c_call_path_raises_modpack_errors():
    # PyErr_NoMemory (a MemoryError) and the ImportError of a broken build stay.
    source = (PACKAGE / "runtime" / "calls.c").read_text()
    builtin = sorted(set(re.findall(r"PyExc_(\w+)", source)) - {"ImportError"})
    assert builtin == [], f"calls.c raises built-in {builtin}: use argument_error or internal()"


def test_errors_keep_the_builtin_classes_callers_catch():
    assert issubclass(modpack.ArgumentError, ValueError)
    assert issubclass(modpack.ArgumentError, TypeError)
    assert issubclass(modpack.NotFoundError, KeyError)
    assert issubclass(modpack.MissingFileError, FileNotFoundError)
    assert all(issubclass(getattr(modpack.errors, n), modpack.ModpackError)
               for n in MODPACK_ERRORS)


def test_exempt_and_pending_files_exist():
    for path in [*EXEMPT_FILES, *(p for p, _ in PENDING)]:
        assert (ROOT / path).is_file(), path


def test_wrong_arguments_on_the_authoring_side_raise_modpack_errors(tmp_path: Path):
    """Wrong arguments of each kind the audit found raising bare ValueError or TypeError: a
    kernel argument spec, an export option, a device module's option, a dtype, an import,
    device binaries."""
    import numpy as np

    import modpack
    from modpack.modules.kernel_info import KernelArg

    host = modpack.csource_module("int x;")
    attempts = [
        lambda: KernelArg.parse("float33*"),
        lambda: host.export_library(tmp_path / "x.so", packer="gcc"),
        lambda: modpack.opencl_module("__kernel void k(__global float* x) {}", build_options=3),
        lambda: modpack.empty(3, "float128x"),
        lambda: modpack.const_module({"a": np.zeros(2)}).import_module("not a module"),
        lambda: modpack.cuda_module(binaries={"sm_80": b"garbage"}),
    ]
    for attempt in attempts:
        try:
            attempt()
        except modpack.ModpackError:
            continue
        except Exception as exc:  # the point: which class it is
            raise AssertionError(f"{type(exc).__name__} is not a ModpackError: {exc}") from exc
        raise AssertionError("no error raised")


# A PTX with one entry, enough for cuda_module(binaries=) to read records from functions=.
_PTX = (".version 8.0\n.target sm_80\n.address_size 64\n"
        ".visible .entry k(.param .u64 x) { ret; }\n")


def test_a_kernel_spec_of_the_wrong_type_is_named_with_what_is_accepted():
    """A kernel's spec that is no list, dict or KernelInfo (``functions={"k": 5}``) was a
    bare TypeError from iterating it; each device kind that takes functions= (they share
    kernel_info.kernel_infos) now names the kernel and the accepted forms."""
    import modpack

    kinds = {
        "opencl": lambda f: modpack.opencl_module("__kernel void k(__global float* x) {}",
                                                  functions=f),
        "cuda": lambda f: modpack.cuda_module(binaries={"ptx": _PTX}, functions=f),
    }
    if shutil.which("clang"):  # ROCm's records come after clang builds the code object
        kinds["rocm"] = lambda f: modpack.rocm_module("__kernel void k(__global float* x) {}",
                                                      targets=["gfx90a"], functions=f)
    cases = [
        ({"k": 5}, r"kernel k: its spec is a list of argument specs such as \['float32\*', "
                   r"'int32'\], a dict with 'args' .* or a KernelInfo, not 5"),
        ({"k": None}, r"kernel k: its spec .* not None"),
        ({"k": {"args": 5}}, r"kernel k: 'args' must be a list of argument specs"),
        ({"k": {"args": [], "launch": 5}}, r"kernel k: 'launch' must be a list of tags, got 5"),
        ({"k": {"args": [], "fixed": 5}}, r"kernel k: 'fixed' must map launch tags to ints"),
        (5, r"functions must map kernel names to argument specs .* or be a list of KernelInfo"),
    ]
    for make in kinds.values():
        for functions, message in cases:
            with pytest.raises(modpack.ArgumentError, match=message):
                make(functions)
    assert kinds["cuda"]({"k": ["void*"]}).functions[0].signature() == "k(void*)"


def test_an_llvm_signature_of_the_wrong_type_is_named():
    """``llvm_module(ir, signatures={"f": 5})`` was a TypeError from the signature regex; a
    name, a signature or a mapping of the wrong type now says what is accepted. So do the
    device kinds' options= (compiler flags), OpenCL binaries= and llvm's triple=."""
    import modpack

    ir = "define i64 @f(i64 %x) {\n  ret i64 %x\n}\n"
    cases = [
        (lambda: modpack.llvm_module(ir, signatures={"f": 5}),
         r"function f: its signature is a C signature \(a str such as "
         r"'double\(DLTensor\*, int64_t\)'\), not 5"),
        (lambda: modpack.llvm_module(ir, signatures={5: "int64_t(int64_t)"}),
         r"signatures maps function names \(str\) to C signatures, not 5"),
        (lambda: modpack.llvm_module(ir, signatures=["f"]),
         r"signatures maps each function's name to its C signature, .* not list"),
        (lambda: modpack.llvm_module(ir, triple=64), r"triple must be a target triple"),
        (lambda: modpack.cuda_module(binaries={"ptx": _PTX}, options=5),
         r"cuda_module: options must be a list of compiler flags"),
        (lambda: modpack.rocm_module("__kernel void k() {}", targets=["gfx90a"], options=[5]),
         r"rocm_module: options holds 5; each compiler flag is a str"),
        (lambda: modpack.opencl_module("__kernel void k(__global float* x) {}", binaries=5),
         r"binaries must map 'platform/device/driver' keys to program binaries"),
        (lambda: modpack.opencl_module("__kernel void k(__global float* x) {}",
                                       binaries={"p/d/1": 5}),
         r"binaries\['p/d/1'\]: a program binary is bytes"),
    ]
    for attempt, message in cases:
        with pytest.raises(modpack.ArgumentError, match=message):
            attempt()
    assert modpack.llvm_module(ir, signatures={"f": "int64_t(int64_t)"}).signatures
