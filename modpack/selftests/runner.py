"""Running a library's self-tests on this machine: :func:`selftest`, ``modpack selftest``.

The library is loaded as any load loads it (its seal, checksums and, with trusted keys, its
signatures checked first), its bundle read from its index (``mp_module_selftests``), and each
test run: every array argument copied to a device of the test's type, the function called, the
device synchronised, and what it wrote and returned compared with what the test expects. A
test that cannot run (no such function, no such device, a call that fails) is an error, not a
crash: the other tests still run, and the report says which failed how.

Why only on request: a self-test runs the library's code, on devices, with inputs of their own
size; loading a library, inspecting or verifying it never runs one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, NotFoundError, UnavailableError
from ..runtime.array import Array, array, device_type_name, parse_device
from ..runtime.binding import ffi, lib
from ..runtime.devices import device_count, synchronize
from ..runtime.module import LoadedModule
from .bundle import decode_bundle
from .spec import CheckedTest, Scalar

__all__ = ["SelfTestResult", "library_selftests", "run_selftests", "selftest"]

_EXACT_KINDS = "bUSO"  # bool, str, bytes, object: compared for equality, no tolerance


@dataclass(frozen=True)
class SelfTestResult:
    """One self-test's outcome: ``status`` is ``"pass"``, ``"fail"`` (it ran, and an output
    differs: ``message`` says where and by how much), ``"error"`` (it could not run: no such
    function or device, the call failed) or ``"skipped"`` (its device type is not the one
    asked for). ``max_abs_error`` and ``max_rel_error`` are over every compared output element
    (None when nothing was compared)."""

    name: str
    function: str
    device: str
    status: str
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        """The result as strict JSON holds it (an infinite error as the string "inf")."""
        return {k: repr(v) if isinstance(v, float) and not math.isfinite(v) else v
                for k, v in asdict(self).items()}


def selftest(library: str | os.PathLike[str] | LoadedModule, device: str | None = None, *,
             trusted_keys: Iterable[Any] | None = None,
             trusted_oms: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None
             ) -> list[SelfTestResult]:
    """Run the self-tests the library carries (``export_library(..., selftests=[...])``) and
    return one :class:`SelfTestResult` each, in the order they were exported.

    |library| is a path (``.so``, ``.tar``), a registry reference ``oci://HOST/REPO:TAG``
    (pulled for this machine's devices into the local store first, as
    :func:`modpack.load_module` pulls it: the ``oci`` extra) or a loaded module. |device|
    (``"opencl:1"``, or a type, ``"cuda"`` for device 0) runs the tests of that device type on
    that device, the CPU's tests too, and skips the others; ``None`` runs each test on device 0
    of its type. ``trusted_keys`` and ``trusted_oms``: as :func:`modpack.load_module` (a signed
    load; an OMS bundle to verify first).

    Raises NotFoundError for a library without self-tests, FormatError for a damaged bundle;
    a test that fails or cannot run is a result, not an exception.

    Examples
    --------
    >>> results = modpack.selftest("deploy.so", device="opencl:0")
    >>> all(r.passed for r in results)
    True
    """
    chosen = _device(device)
    if isinstance(library, LoadedModule):
        return run_selftests(library, library_selftests(
            library, library.library_path or "the library"), chosen)
    from ..loader import load_module

    shown = os.fsdecode(os.fspath(library))
    loaded = load_module(library, trusted_keys=trusted_keys, trusted_oms=trusted_oms)
    if not isinstance(loaded, LoadedModule):
        raise ArgumentError(f"{shown}: its root is a module a Python loader made; self-tests "
                            "run on libraries whose root modpack loads")
    return run_selftests(loaded, library_selftests(loaded, shown), chosen)


def library_selftests(root: LoadedModule, where: str) -> list[CheckedTest]:
    """The self-tests the library of |root| carries (its bundle, read and checked)."""
    span = ffi.new("mp_const_byte_span_t*")
    lib.mp_module_selftests(root._handle, span)
    if span.size == 0:
        raise NotFoundError(f"{where} carries no self-tests: export it with "
                            "export_library(..., selftests=[modpack.SelfTest(...)])")
    return decode_bundle(bytes(ffi.buffer(span.data, span.size)), where)


def run_selftests(root: LoadedModule, tests: Sequence[CheckedTest],
                  device: tuple[str, int] | None = None) -> list[SelfTestResult]:
    """Run |tests| on the tree of |root|; |device| (type, id) as :func:`selftest` says."""
    return [_run(root, test, device) for test in tests]


def _device(device: str | None) -> tuple[str, int] | None:
    if device is None:
        return None
    device_type, device_id = parse_device(device)  # ArgumentError for an unknown one
    return device_type_name(device_type), device_id


def _run(root: LoadedModule, test: CheckedTest, chosen: tuple[str, int] | None
         ) -> SelfTestResult:
    if chosen is None:
        where = (test.device, 0)
    elif test.device == chosen[0]:
        where = chosen
    elif test.device == "cpu":
        where = ("cpu", 0)
    else:
        return SelfTestResult(test.name, test.function, test.device, "skipped",
                              f"a test for {test.device}, and {chosen[0]}:{chosen[1]} was asked "
                              "for")
    device = f"{where[0]}:{where[1]}"
    result = _Result(test, device)
    start = time.perf_counter()
    try:
        if where[0] != "cpu" and device_count(where[0]) <= where[1]:
            raise UnavailableError(f"no {device} on this machine ({device_count(where[0])} "
                                   f"{where[0]} devices)")
        function = root.get_function(test.function, query_imports=True)
        args = [_placed(a, device) for a in test.args]
        returned = function(*args)
        if where[0] != "cpu":
            synchronize(device)
        problems = [p for k, expected in test.expected
                    if (p := result.compare(f"argument {k}", _host(args[k]), expected))]
        if test.returns is not None:
            problem = result.compare_scalar(returned, test.returns)
            if problem:
                problems.append(problem)
    except Exception as exc:  # a Python loader's function raises its own exceptions
        return result.done("error", f"{type(exc).__name__}: {exc}", start)
    return result.done("fail" if problems else "pass", "; ".join(problems), start)


def _placed(value: np.ndarray | Scalar, device: str) -> Any:
    """An argument as the call gets it: an array copied (writable) to |device|."""
    if not isinstance(value, np.ndarray):
        return value
    if device.startswith("cpu"):
        return np.array(value, order="C", copy=True)
    return array(value, device=device)


def _host(value: Any) -> np.ndarray:
    return value.numpy(copy=True) if isinstance(value, Array) else np.asarray(value)


class _Result:
    """The errors of one test's outputs, gathered as they are compared."""

    def __init__(self, test: CheckedTest, device: str) -> None:
        self.test, self.device = test, device
        self.abs_error: float | None = None
        self.rel_error: float | None = None

    def done(self, status: str, message: str, start: float) -> SelfTestResult:
        return SelfTestResult(self.test.name, self.test.function, self.device, status, message,
                              self.abs_error, self.rel_error, time.perf_counter() - start)

    def _errors(self, abs_error: float, rel_error: float) -> None:
        self.abs_error = max(self.abs_error or 0.0, abs_error)
        self.rel_error = max(self.rel_error or 0.0, rel_error)

    def compare(self, what: str, actual: np.ndarray, expected: np.ndarray) -> str:
        """'' when |actual| matches |expected| within the test's tolerances, else what
        differs: how many elements, the first of them, and the largest errors."""
        rtol, atol = self.test.rtol, self.test.atol
        if expected.dtype.kind in _EXACT_KINDS:
            bad = actual != expected
            if expected.dtype.kind == "b":
                self._errors(float(bad.any()), float(bad.any()))
        else:
            a, e = _numeric(actual), _numeric(expected)
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                same = (a == e) | (np.isnan(a) & np.isnan(e))  # infinities, NaN as themselves
                diff = np.where(same, 0.0, np.abs(a - e))
                diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN or an infinity alone
                bad = ~same & ~(diff <= atol + rtol * np.abs(e))
                rel = np.where(same, 0.0, np.where(e != 0, diff / np.abs(e), np.inf))
            self._errors(float(diff.max(initial=0.0)), float(rel.max(initial=0.0)))
        count = int(np.count_nonzero(bad))
        if not count:
            return ""
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        at = first if len(first) != 1 else first[0]
        tolerance = ("" if expected.dtype.kind in _EXACT_KINDS
                     else f" beyond rtol {rtol:g}, atol {atol:g}")
        return (f"{what}: {count} of {expected.size} elements differ{tolerance}, first at "
                f"[{at}]: {actual[first]} where {expected[first]} was expected")

    def compare_scalar(self, actual: Any, expected: Scalar) -> str:
        """'' when the call returned |expected|: numbers within the test's tolerances (exactly
        when both are ints), anything else equal and of the same type."""
        if _is_number(expected) and _is_number(actual):
            assert isinstance(expected, (int, float))
            if isinstance(expected, int) and isinstance(actual, int):
                if actual == expected:
                    return ""
            else:
                got, want = float(actual), float(expected)
                diff = abs(got - want)
                if math.isnan(got) and math.isnan(want):
                    return ""
                self._errors(diff if math.isfinite(diff) else math.inf,
                             diff / abs(want) if want else (0.0 if not diff else math.inf))
                if got == want or diff <= self.test.atol + self.test.rtol * abs(want):
                    return ""
        elif actual == expected and type(actual) is type(expected):
            return ""
        return f"it returned {actual!r} where {expected!r} was expected"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numeric(values: np.ndarray) -> np.ndarray:
    """|values| in a type arithmetic is exact enough in: complex and floats as complex128 or
    float64 (bfloat16 and the float8 formats included), integers as float64 (the errors are
    reported, not computed exactly)."""
    if values.dtype.kind == "c":
        return values.astype(np.complex128)
    return values.astype(np.float64)
