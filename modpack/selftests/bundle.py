"""The self-test bundle: how a library stores its self-tests, in its blob's index (format 1.2,
docs/format.md "Metadata and self-tests"). modpack writes it at export and reads it to run the
tests; the C reader only locates it (``mp_module_selftests``).

Layout, little-endian::

    0   8  magic            "MPTESTS\\0"
    8   4  version          1 (another: IncompatibleError, upgrade modpack)
    12  4  reserved         0
    16  8  manifest_size    bytes of the manifest, UTF-8 JSON, at byte 32
    24  8  data_offset      where the arrays' bytes start: a multiple of 64, after the manifest
    32     manifest         {"version": 1, "arrays": [...], "tests": [...]}
    data_offset  arrays     each at a multiple of 64 from data_offset, zeros between; the
                            bundle ends where the last one does

Each array is ``{"dtype", "shape", "offset", "size"}`` (its bytes, C order, little-endian, at
``data_offset + offset``); each test ``{"name", "function", "device", "rtol", "atol", "args",
"expected", "returns"?}``, its arguments ``{"type": "array", "array": i}``, ``{"type": "int",
"value": n}``, ``{"type": "float", "value": "0x1.8p+1"}`` (``float.hex``: exact, NaN and
infinities too), ``{"type": "str", "value": s}`` or ``{"type": "none"}``, its expectations
``{"arg": k, "array": i}``. The same tests give the same bytes (sorted keys, no spaces, no
times), as exports are reproducible.

Why not the const payload or a weight file for the arrays: those are modules a runtime loads
(an older one would refuse a new kind of module), and self-tests are data nothing runs unless
asked; in the index, every runtime that reads format 1 skips them, while the seal and the
signatures still cover them.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError, IncompatibleError, UnavailableError
from ..format.layout import ALIGNMENT, align_up
from ..runtime.dtypes import ML_DTYPE_NAMES, as_dtype, dtype_name, dtype_to_dl
from .spec import CheckedTest, Scalar

__all__ = ["MAGIC", "VERSION", "decode_bundle", "encode_bundle", "json_scalar",
           "selftest_summary"]

MAGIC = b"MPTESTS\0"
VERSION = 1
_HEADER = struct.Struct("<8sIIQQ")  # magic, version, reserved, manifest_size, data_offset
_MAX_NDIM = 32  # as the runtime's arrays


def encode_bundle(tests: list[CheckedTest]) -> bytes:
    """The bundle of |tests| (checked: :func:`.spec.check_selftests`); b"" for none."""
    if not tests:
        return b""
    arrays: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    cursor = 0

    def stored(array: np.ndarray) -> int:
        nonlocal cursor
        data = np.ascontiguousarray(array).tobytes()
        offset = align_up(cursor, ALIGNMENT)
        chunks.append(bytes(offset - cursor) + data)
        cursor = offset + len(data)
        arrays.append({"dtype": dtype_name(*dtype_to_dl(array.dtype)),
                       "shape": list(array.shape), "offset": offset, "size": len(data)})
        return len(arrays) - 1

    records = []
    for test in tests:
        args = [{"type": "array", "array": stored(a)} if isinstance(a, np.ndarray)
                else _scalar_record(a) for a in test.args]
        expected = [{"arg": k, "array": stored(a)} for k, a in test.expected]
        record: dict[str, Any] = {"name": test.name, "function": test.function,
                                  "device": test.device, "rtol": test.rtol, "atol": test.atol,
                                  "args": args, "expected": expected}
        if test.returns is not None:
            record["returns"] = _scalar_record(test.returns)
        records.append(record)
    manifest = json.dumps({"version": VERSION, "arrays": arrays, "tests": records},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    data_offset = align_up(_HEADER.size + len(manifest), ALIGNMENT)
    head = _HEADER.pack(MAGIC, VERSION, 0, len(manifest), data_offset) + manifest
    return head + bytes(data_offset - len(head)) + b"".join(chunks)


def _scalar_record(value: Scalar) -> dict[str, Any]:
    if value is None:
        return {"type": "none"}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    return {"type": "float", "value": float(value).hex()}


def decode_bundle(data: bytes, where: str) -> list[CheckedTest]:
    """The tests the bundle |data| holds (read from |where|, for messages), their arrays
    read-only views into |data|. FormatError, saying what, for a bundle modpack did not
    write; IncompatibleError for one of a later version."""
    view = memoryview(data)
    if len(view) < _HEADER.size:
        raise _damaged(where, f"{len(view)} bytes, less than its {_HEADER.size}-byte header")
    magic, version, reserved, manifest_size, data_offset = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise _damaged(where, f"its magic is {magic!r}, not {MAGIC!r}")
    if version != VERSION:
        raise IncompatibleError(f"{where}: its self-tests are of version {version}; this modpack "
                                f"reads version {VERSION}: upgrade modpack to run them")
    if (reserved != 0 or manifest_size > len(view) - _HEADER.size
            or data_offset % ALIGNMENT or data_offset < _HEADER.size + manifest_size
            or data_offset > len(view)):
        raise _damaged(where, f"its header (manifest {manifest_size} bytes, data at "
                              f"{data_offset}, reserved {reserved}) does not fit its "
                              f"{len(view)} bytes")
    try:
        manifest = json.loads(bytes(view[_HEADER.size:_HEADER.size + manifest_size]))
        if not isinstance(manifest, dict) or manifest.get("version") != VERSION:
            raise _Damaged("it is not a version 1 manifest")
        arrays = [_array(a, view, data_offset) for a in manifest["arrays"]]
        tests = [_test(t, arrays) for t in manifest["tests"]]
    except _NeedsPackage as exc:
        raise UnavailableError(f"{where}: its self-tests need a package: {exc}") from None
    except _Damaged as exc:
        raise _damaged(where, f"its manifest does not hold: {exc}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            OverflowError) as exc:
        raise _damaged(where, f"its manifest does not hold ({type(exc).__name__}: {exc})"
                       ) from None
    return tests


class _Damaged(FormatError):
    """What is wrong with a bundle, before the file it is in is named (decode_bundle)."""


class _NeedsPackage(UnavailableError):
    """A dtype whose numpy type comes from a package this install lacks (ml_dtypes)."""


def _array(record: dict[str, Any], view: memoryview, data_offset: int) -> np.ndarray:
    name = str(record["dtype"])
    try:
        dtype = as_dtype(name)
    except ArgumentError as exc:
        if name in ML_DTYPE_NAMES:  # not damage: a package to install
            raise _NeedsPackage(str(exc)) from None
        raise
    shape = tuple(_count(n) for n in record["shape"])
    offset, size = _count(record["offset"]), _count(record["size"])
    if len(shape) > _MAX_NDIM or math.prod(shape) * dtype.itemsize != size:
        raise _Damaged(f"an array of {size} bytes is not {record['dtype']}{list(shape)}")
    if offset % ALIGNMENT or offset > len(view) - data_offset or \
            size > len(view) - data_offset - offset:
        raise _Damaged(f"an array [{offset}, +{size}) lies outside the data")
    start = data_offset + offset
    array = np.frombuffer(view[start:start + size], dtype=dtype).reshape(shape)
    array.flags.writeable = False
    return array


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _Damaged(f"{value!r} is not a count")
    return value


def _test(record: dict[str, Any], arrays: list[np.ndarray]) -> CheckedTest:
    args = tuple(arrays[_count(a["array"])] if a["type"] == "array" else _scalar(a)
                 for a in record["args"])
    expected = []
    for e in record["expected"]:
        k, array = _count(e["arg"]), arrays[_count(e["array"])]
        arg = args[k]
        if not isinstance(arg, np.ndarray) or arg.shape != array.shape or \
                arg.dtype != array.dtype:
            raise _Damaged(f"expected[{k}] does not match argument {k}")
        expected.append((k, array))
    returns = _scalar(record["returns"]) if "returns" in record else None
    texts = [record["name"], record["function"], record["device"]]
    if not all(isinstance(t, str) and t for t in texts):
        raise _Damaged("a test's name, function and device are non-empty str")
    rtol, atol = (float(record[k]) for k in ("rtol", "atol"))
    if not all(math.isfinite(x) and x >= 0 for x in (rtol, atol)):
        raise _Damaged("tolerances are finite and >= 0")
    return CheckedTest(texts[0], texts[1], args, tuple(expected), returns, rtol, atol, texts[2])


def _scalar(record: dict[str, Any]) -> Scalar:
    kind = record["type"]
    if kind == "none":
        return None
    value = record["value"]
    if kind == "int" and type(value) is int:
        return value
    if kind == "float" and isinstance(value, str):
        return float.fromhex(value)
    if kind == "str" and isinstance(value, str):
        return value
    raise _Damaged(f"{record!r} is not an argument")


def _damaged(where: str, what: str) -> FormatError:
    return FormatError(f"{where}: its self-tests are damaged: {what}; the file was damaged or "
                       "made by another tool: export it again")


def selftest_summary(test: CheckedTest) -> dict[str, Any]:
    """What ``modpack inspect`` shows of a test: its name, function, device and tolerances,
    each argument as ``{"dtype", "shape"}`` (an array) or its value, the arguments it checks,
    and the value it expects returned (when it checks one)."""
    args = [{"dtype": dtype_name(*dtype_to_dl(a.dtype)), "shape": list(a.shape)}
            if isinstance(a, np.ndarray) else json_scalar(a) for a in test.args]
    summary: dict[str, Any] = {"name": test.name, "function": test.function,
                               "device": test.device, "rtol": test.rtol, "atol": test.atol,
                               "args": args, "checks": [k for k, _ in test.expected]}
    if test.returns is not None:
        summary["returns"] = json_scalar(test.returns)
    return summary


def json_scalar(value: Scalar) -> Scalar:
    """|value| as strict JSON holds it: a float that is not finite as its name ("nan")."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value
