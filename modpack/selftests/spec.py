"""What a self-test is, as ``export_library(..., selftests=[...])`` takes it: :class:`SelfTest`
(or a dict of its fields), checked at export into :class:`CheckedTest`, whose every argument and
expectation is one the bundle stores exactly.

Why checked before any work: a self-test is data that runs later, on another machine; a value
it could not store exactly, or an expectation that can never hold (an output of another shape,
an argument that is not an array), should fail the export that makes it, naming the test, and
not the run on the target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Union

import numpy as np

from ..errors import ArgumentError
from ..runtime.binding import error_from_status, ffi, lib
from ..runtime.dtypes import dtype_to_dl

__all__ = ["CheckedTest", "Scalar", "SelfTest", "check_selftests"]

Scalar = Union[int, float, str, None]  # a scalar argument, as a call takes it
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class SelfTest:
    """A test a library carries: call ``function`` with ``args`` on a ``device`` of its type,
    then compare what it wrote into the arrays named in ``expected`` (argument index -> the
    array it should hold), and what it returned (``returns``, when given), within ``rtol`` and
    ``atol`` (``|actual - expected| <= atol + rtol * |expected|``, NaN matching NaN).

    Host functions write their results into arguments (``vadd(a, b, out)``), so an output is
    an argument: pass an array of the right shape and dtype (its contents are what the call
    starts with) and say what it holds after. ``args`` are numpy arrays and scalars (int,
    float, bool, str, None), as a call takes them; every array is copied to the test's device
    (``"cpu"``, ``"opencl"``, ``"cuda"``, ``"rocm"``, ``"vulkan"``) before the call. The
    function is found as ``lib.get_function(function, query_imports=True)`` finds it: a host
    function, or a device kernel called directly (its launch integers among ``args``).

    Examples
    --------
    >>> a = np.arange(8, dtype=np.float32)
    >>> modpack.SelfTest("vadd", [a, a, np.zeros(8, np.float32)], expected={2: 2 * a})
    """

    function: str
    args: Sequence[Any] = ()
    expected: Mapping[int, Any] = field(default_factory=dict)
    returns: Scalar = None  # None: the return value is not checked
    rtol: float = 1e-5
    atol: float = 1e-6
    device: str = "cpu"
    name: str | None = None  # default: the function's name (#2, #3, ... for repeats)


@dataclass(frozen=True)
class CheckedTest:
    """A self-test as the bundle stores it: its arguments are C-contiguous numpy arrays (copies)
    and Python scalars (a bool as the int a call makes of it), its expectations arrays of the
    argument's shape and dtype."""

    name: str
    function: str
    args: tuple[np.ndarray | Scalar, ...]
    expected: tuple[tuple[int, np.ndarray], ...]  # (argument index, array), by index
    returns: Scalar
    rtol: float
    atol: float
    device: str


_FIELDS = tuple(f.name for f in fields(SelfTest))


def check_selftests(selftests: Sequence[SelfTest | Mapping[str, Any]] | None
                    ) -> list[CheckedTest]:
    """Check ``export_library``'s |selftests| and take them as the bundle stores them;
    ArgumentError naming the test (``selftests[1] ('small')``) and what is wrong."""
    if selftests is None:
        return []
    if isinstance(selftests, (SelfTest, Mapping, str, bytes)) or not isinstance(
            selftests, Sequence):
        raise ArgumentError("selftests must be a list of modpack.SelfTest (or dicts of its "
                            f"fields), not a {type(selftests).__name__}")
    checked = [_check(_as_selftest(test, i), i) for i, test in enumerate(selftests)]
    return _named(checked, selftests)


def _as_selftest(test: SelfTest | Mapping[str, Any], index: int) -> SelfTest:
    if isinstance(test, SelfTest):
        return test
    if not isinstance(test, Mapping):
        raise ArgumentError(f"selftests[{index}] is a {type(test).__name__}: give a "
                            "modpack.SelfTest or a dict of its fields")
    unknown = sorted(str(k) for k in test if k not in _FIELDS)
    if unknown:
        raise ArgumentError(f"selftests[{index}] has unknown keys {unknown}; a self-test has "
                            f"{list(_FIELDS)}")
    if "function" not in test:
        raise ArgumentError(f"selftests[{index}] names no function")
    return SelfTest(**test)


def _check(test: SelfTest, index: int) -> CheckedTest:
    where = f"selftests[{index}]" + (f" ({test.name!r})" if isinstance(test.name, str) else "")
    if not isinstance(test.function, str) or not test.function or "\0" in test.function:
        raise ArgumentError(f"{where}: function must be a function's name, not "
                            f"{test.function!r}")
    if test.name is not None and (not isinstance(test.name, str) or not test.name
                                  or "\0" in test.name):
        raise ArgumentError(f"{where}: name must be a non-empty str, not {test.name!r}")
    if isinstance(test.args, (str, bytes, np.ndarray)) or not isinstance(test.args, Sequence):
        raise ArgumentError(f"{where}: args must be a list of the call's arguments, not a "
                            f"{type(test.args).__name__}")
    args = tuple(_argument(value, f"{where}: args[{i}]") for i, value in enumerate(test.args))
    if not isinstance(test.expected, Mapping):
        raise ArgumentError(f"{where}: expected must be a dict of argument index -> the array "
                            f"it holds after the call, not a {type(test.expected).__name__}")
    expected = tuple(sorted(_expectation(key, value, args, where)
                            for key, value in test.expected.items()))
    returns = test.returns
    if returns is not None:
        returns = _scalar(returns, f"{where}: returns")
    if not expected and returns is None:
        raise ArgumentError(f"{where} checks nothing: give expected={{index: array}} for the "
                            "arguments the function writes, or returns= for its result")
    return CheckedTest(test.name or test.function, test.function, args, expected, returns,
                       _tolerance(test.rtol, f"{where}: rtol"),
                       _tolerance(test.atol, f"{where}: atol"), _device_type(test.device, where))


def _argument(value: Any, where: str) -> np.ndarray | Scalar:
    if isinstance(value, np.ndarray):
        _storable_dtype(value.dtype, where)
        return np.array(value, order="C", copy=True)
    return _scalar(value, where)


def _scalar(value: Any, where: str) -> Scalar:
    if value is None or isinstance(value, str):
        if isinstance(value, str) and "\0" in value:
            raise ArgumentError(f"{where}: a str passed to a call may not hold a NUL character")
        return value
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    if isinstance(value, (int, np.integer)):
        if not _INT64[0] <= int(value) <= _INT64[1]:
            raise ArgumentError(f"{where}: {value} does not fit in 64 bits (int64)")
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise ArgumentError(f"{where} is a {type(value).__name__}: a self-test's arguments are numpy "
                        "arrays, int, float, bool, str or None (np.asarray(x) for an array)")


def _storable_dtype(dtype: np.dtype, where: str) -> None:
    if dtype.byteorder == ">" or dtype.hasobject or dtype.fields is not None:
        raise ArgumentError(f"{where} is an array of {dtype}, which a call cannot take: give a "
                            "native-endian bool, integer, float or complex array")
    try:
        dtype_to_dl(dtype)
    except ArgumentError as exc:
        raise ArgumentError(f"{where}: {exc}") from None


def _expectation(key: Any, value: Any, args: tuple[Any, ...], where: str
                 ) -> tuple[int, np.ndarray]:
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
        raise ArgumentError(f"{where}: expected is keyed by argument index (an int), not "
                            f"{key!r}")
    index = int(key)
    if not 0 <= index < len(args) or not isinstance(args[index], np.ndarray):
        what = ("no such argument" if not 0 <= index < len(args)
                else f"argument {index} is not an array")
        raise ArgumentError(f"{where}: expected[{index}]: {what}; expected names the array "
                            "arguments the function writes")
    arg = args[index]
    assert isinstance(arg, np.ndarray)
    if isinstance(value, np.ndarray) and value.dtype != arg.dtype:
        raise ArgumentError(f"{where}: expected[{index}] is {value.dtype}, but argument {index} "
                            f"is {arg.dtype}: give it as {arg.dtype}")
    try:
        array = np.array(value, dtype=arg.dtype, order="C", copy=True)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(f"{where}: expected[{index}] is not an array of {arg.dtype}: "
                            f"{exc}") from None
    if array.shape != arg.shape:
        raise ArgumentError(f"{where}: expected[{index}] has shape {array.shape}, but argument "
                            f"{index} has {arg.shape}")
    return index, array


def _tolerance(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{where} must be a number, not {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ArgumentError(f"{where} must be finite and >= 0, not {number}")
    return number


def _device_type(device: Any, where: str) -> str:
    """A device type the runtime knows (``"cpu"``, ``"opencl"``, ...): a self-test names the
    type, and which device of it runs the test is chosen when it runs."""
    if not isinstance(device, str) or ":" in device:
        raise ArgumentError(f"{where}: device must be a device type such as 'cpu' or 'opencl', "
                            f"not {device!r} (which device runs it is chosen when it runs: "
                            "modpack selftest --device opencl:1)")
    out = ffi.new("int32_t*")
    status = lib.mp_device_type_from_name(device.strip().lower().encode(), out)
    if status:
        raise ArgumentError(f"{where}: {error_from_status(status)}")
    return device.strip().lower()


def _named(checked: list[CheckedTest], given: Sequence[Any]) -> list[CheckedTest]:
    """Every test with a name of its own: a name the user gave is refused twice; a test left
    unnamed takes its function's name, then ``name#2``, ``name#3``, ... in order."""
    explicit = [t.name for t, g in zip(checked, given) if _given_name(g) is not None]
    twice = sorted({n for n in explicit if explicit.count(n) > 1})
    if twice:
        raise ArgumentError(f"selftests: the names {twice} are given to more than one test")
    taken = set(explicit)
    named = []
    for test, g in zip(checked, given):
        if _given_name(g) is None:
            name, k = test.name, 1
            while name in taken:
                k += 1
                name = f"{test.name}#{k}"
            test = replace(test, name=name)
        taken.add(test.name)
        named.append(test)
    return named


def _given_name(test: Any) -> str | None:
    name = test.name if isinstance(test, SelfTest) else test.get("name")
    return name if isinstance(name, str) else None
