"""Reading TVM's deployable libraries without running them, for ``inspect`` and ``extract``:
the blob TVM links into its ``.so`` — ``__tvm_ffi__library_bin`` (tvm-ffi, TVM 0.22 and on),
``__tvm_ffi_library_bin`` (TVM 0.21) or ``__tvm_dev_mblob`` (earlier) — its import tree, each
module's kind and payload, and what can be decoded of the kinds whose layout is known (CUDA
and OpenCL: their function table and code).

The layouts (all integers little-endian; ``str``/``bytes`` are a u64 length and the bytes):

* current: ``nbytes:u64, row_ptr:vec<u64>, child_indices:vec<u64>``, then per module
  ``kind:str`` and, unless the kind is ``_lib``, ``payload:bytes``;
* earlier: ``nbytes:u64, count:u64``, then per entry ``kind:str`` and the payload *unframed*,
  the last entry being ``_import_tree`` with the two vectors. An unknown kind there cannot be
  stepped over, so reading stops at it, saying so.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import FormatError
from ..runtime.dtypes import dtype_name

__all__ = ["BLOB_SYMBOLS", "decode_device_payload", "read_tvm_blob"]

# Newest first; the value says which layout the symbol's era wrote.
BLOB_SYMBOLS = {"__tvm_ffi__library_bin": "framed", "__tvm_ffi_library_bin": "unframed",
                "__tvm_dev_mblob": "unframed"}
# Kinds whose SaveToBytes is fmt, function infos, code (checked on TVM's CUDA and OpenCL
# modules); others keep layouts of their own and are shown as bytes.
_DEVICE_KINDS = ("cuda", "opencl")
_MAX_COUNT = 1 << 20  # no TVM blob holds more entries of anything; beyond is damage


class _Reader:
    """Bounds-checked little-endian reads over the blob's bytes."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError(f"{self.what}: truncated at byte {self.pos} (needs {n} more of "
                              f"{len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u64(self) -> int:
        (value,) = struct.unpack("<Q", self.take(8))
        return int(value)

    def count(self) -> int:
        n = self.u64()
        if n > _MAX_COUNT:
            raise FormatError(f"{self.what}: a count of {n} at byte {self.pos - 8} is not "
                              "plausible; the blob is damaged")
        return n

    def vec_u64(self) -> list[int]:
        n = self.count()
        return list(struct.unpack(f"<{n}Q", self.take(8 * n)))

    def bytes_(self) -> bytes:
        return self.take(self.u64())

    def str_(self) -> str:
        return self.bytes_().decode("utf-8", "replace")


def _device_payload(r: _Reader) -> dict[str, Any]:
    """TVM's CUDA/OpenCL ``SaveToBytes``: fmt, a map of function infos, the code."""
    fmt = r.str_()
    functions = []
    for _ in range(r.count()):
        key = r.str_()
        name = r.str_()
        arg_types = [dtype_name(*struct.unpack("<BBH", r.take(4))) for _ in range(r.count())]
        launch = [r.str_() for _ in range(r.count())]
        extra = [struct.unpack("<i", r.take(4))[0] for _ in range(r.count())]
        functions.append({"name": name or key, "arg_types": arg_types, "launch_tags": launch,
                          "arg_extra_tags": extra})
    code = r.bytes_()
    return {"format": fmt, "functions": functions, "code": code}


def decode_device_payload(kind: str, payload: bytes) -> dict[str, Any] | None:
    """What can be read of a device module's payload, or None for kinds not decoded. ``code``
    holds its bytes (OpenCL C source, PTX, a cubin)."""
    if kind not in _DEVICE_KINDS:
        return None
    try:
        return _device_payload(_Reader(payload, f"{kind} payload"))
    except FormatError:
        return None  # a layout from another TVM version: shown undecoded


def _read_framed(r: _Reader) -> tuple[list[int], list[int], list[tuple[str, int, bytes | None]]]:
    row_ptr, children = r.vec_u64(), r.vec_u64()
    modules: list[tuple[str, int, bytes | None]] = []
    for _ in range(max(len(row_ptr) - 1, 0)):
        kind = r.str_()
        if kind == "_lib":
            modules.append((kind, r.pos, None))
        else:
            start = r.pos + 8
            modules.append((kind, start, r.bytes_()))
    return row_ptr, children, modules


def _read_unframed(r: _Reader) -> tuple[list[int], list[int], list[tuple[str, int, bytes | None]],
                                        str | None]:
    modules: list[tuple[str, int, bytes | None]] = []
    row_ptr: list[int] = []
    children: list[int] = []
    for _ in range(r.count()):
        kind = r.str_()
        if kind == "_import_tree":
            row_ptr, children = r.vec_u64(), r.vec_u64()
        elif kind == "_lib":
            modules.append((kind, r.pos, None))
        elif kind in _DEVICE_KINDS:
            start = r.pos
            _device_payload(r)
            modules.append((kind, start, r.data[start:r.pos]))
        else:
            return row_ptr, children, modules, (
                f"module kind {kind!r} in TVM's earlier layout has no length: its payload and "
                "the modules after it cannot be read without TVM's own loader for it")
    return row_ptr, children, modules, None


def read_tvm_blob(blob: bytes, layout: str, shown: str) -> dict[str, Any]:
    """The report of a TVM blob: ``format_version``, ``modules`` (as modpack's inspect reports
    them, with ``contents`` decoded where the kind is known), ``import_tree`` and ``note``."""
    r = _Reader(blob, f"{shown}: TVM blob")
    nbytes = r.u64()
    if nbytes > len(blob) - 8:
        raise FormatError(f"{shown}: its TVM blob says {nbytes} bytes but {len(blob) - 8} "
                          "follow; the file is damaged")
    r.data = blob[:8 + nbytes]
    note = None
    if layout == "framed":
        row_ptr, children, modules = _read_framed(r)
    else:
        row_ptr, children, modules, note = _read_unframed(r)
    if not row_ptr:  # the oldest blobs had no tree: every module an import of the library
        row_ptr = [0, len(modules)] + [len(modules)] * len(modules)
        children = list(range(1, len(modules) + 1))
        modules.insert(0, ("_lib", 0, None))
    report_modules: list[dict[str, Any]] = []
    for i, (kind, offset, payload) in enumerate(modules):
        kids = children[row_ptr[i]:row_ptr[i + 1]] if i + 1 < len(row_ptr) else []
        contents = decode_device_payload(kind, payload) if payload is not None else None
        if contents is not None:
            contents = {k: v for k, v in contents.items() if k != "code"} | {
                "code_bytes": len(contents["code"])}
        report_modules.append({
            "index": i, "type_key": kind, "offset": offset,
            "size": len(payload) if payload is not None else 0, "checksum": None,
            "children": kids, "parents": [], "contents": contents,
        })
    for m in report_modules:
        for child in m["children"]:
            if 0 <= child < len(report_modules):
                report_modules[child]["parents"].append(m["index"])
    version = "tvm-ffi (TVM 0.22 and on)" if layout == "framed" else "TVM 0.21 or earlier"
    return {"format_version": version, "modules": report_modules,
            "import_tree": {"row_ptr": row_ptr, "child_indices": children}, "note": note}
