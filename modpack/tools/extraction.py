"""``modpack extract FILE DIR``: a library's contents as plain files, without running it — each
module's payload, the code of device modules whose layout is known, ``const`` arrays as
``.npy``, ``manifest.json`` with the tree, type keys, kernel records and arrays' metadata, and
what the library carries besides modules: ``metadata.json``, and ``selftests.json`` with each
self-test's arrays as ``.npy`` in ``selftests/``.
Reads modpack's libraries (``.so``, ``.tar``, system-library ``.o``) and TVM's.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError
from ..files.names import safe_file_name
from ..format.code_frames import decode_frame
from ..format.payload_views import code_pieces
from ..interop.tvm import decode_device_payload
from ..progress import Progress
from ..runtime.binding import check, ffi, lib
from ..runtime.dtypes import display_name
from ..runtime.module import LoadedModule, wrap_module
from ..selftests.bundle import decode_bundle, json_scalar
from .json_schema import dumps
from .verdict import NOT_DAMAGE, check_file, damaged, outcome
from .weight_reports import extract_weight_file, is_weight_file

__all__ = ["extract_library"]

_CODE_SUFFIXES = {"cl": ".cl", "ptx": ".ptx", "cubin": ".cubin", "fatbin": ".fatbin",
                  "cuda": ".cu", "spv": ".spv", "metal": ".metal", "hsaco": ".hsaco"}


def _const_arrays(payload: bytes, folder: Path, index: int) -> list[dict[str, Any]]:
    """Each array of a ``const`` payload saved as ``.npy``, parsed by the runtime's loader (the
    same checks as a load; nothing runs)."""
    buffer = ffi.from_buffer(payload)
    span = ffi.new("mp_const_byte_span_t*")
    span.data = ffi.cast("const uint8_t*", buffer)
    span.size = len(payload)
    out = ffi.new("mp_module_t**")
    check(lib.mp_module_load_from_payload(b"const", span[0], out))
    module = wrap_module(out[0])
    lib.mp_module_release(out[0])
    assert isinstance(module, LoadedModule)  # the built-in const loader, not a Python one
    saved = []
    for k, (name, array) in enumerate(module.arrays.items()):
        file = folder / safe_file_name(f"{index}-{k}", name, ".npy")
        np.save(file, np.ascontiguousarray(array))
        saved.append({"name": name, "dtype": display_name(array.dtype), "shape": list(array.shape),
                      "file": file.relative_to(folder.parent).as_posix()})
    del module
    return saved


def _extract_file(path: str, shown: str, out: Path, judged: bool = True,
                  progress: Progress | None = None) -> dict[str, Any]:
    """|judged|: refuse what a load would refuse (False for a .tar's member, whose archive
    was judged whole)."""
    from .inspection import inspect_library

    report = inspect_library(path)  # validates everything (payload checksums too), runs nothing
    if progress is not None:
        progress.phase("checked")
    loads = report.get("loads")
    if judged and loads is not None and not loads["ok"] and loads["stage"] not in NOT_DAMAGE:
        raise FormatError(f"{shown} {outcome(loads['stage'])}, so nothing is extracted: "
                          f"{loads['message']}")
    blob = report["blob"]
    data = b""
    if blob is not None:
        with open(path, "rb") as f:
            f.seek(blob["file_offset"])
            data = f.read(blob["size"])
    (out / "modules").mkdir()
    (out / "arrays").mkdir()
    for m in report["modules"]:
        if not m["size"]:
            continue
        payload = data[m["offset"]:m["offset"] + m["size"]]
        stem = safe_file_name(str(m["index"]), m["type_key"], "")
        payload_file = out / "modules" / f"{stem}.bin"
        payload_file.write_bytes(payload)
        if progress is not None:
            progress(len(payload))
        m["payload_file"] = payload_file.relative_to(out).as_posix()
        decoded = (decode_device_payload(m["type_key"], payload)
                   if report.get("producer") == "tvm" else None)
        if decoded is not None:
            code_file = out / "modules" / (stem + _CODE_SUFFIXES.get(decoded["format"], ".code"))
            code_file.write_bytes(decoded["code"])
            m["code_file"] = code_file.relative_to(out).as_posix()
        if m["type_key"] == "const" and report.get("producer") == "modpack":
            m["arrays"] = _const_arrays(payload, out / "arrays", m["index"])
        if report.get("producer") == "modpack":
            files = _device_code(m, payload, out / "modules", stem)
            if files:
                m["code_files"] = [f.relative_to(out).as_posix() for f in files]
    _extras(report, data, out)
    report["path"] = shown
    return report


def _extras(report: dict[str, Any], data: bytes, out: Path) -> None:
    """The metadata as ``metadata.json``; the self-tests as ``selftests.json`` (each test with
    its arguments and expectations, arrays as ``.npy`` files in ``selftests/``)."""
    if report.get("metadata") is not None:
        (out / "metadata.json").write_text(
            json.dumps(report["metadata"], indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        report["metadata_file"] = "metadata.json"
    blob = report.get("blob") or {}
    if not blob.get("selftests_size"):
        return
    start = blob["selftests_offset"]
    tests = decode_bundle(data[start:start + blob["selftests_size"]], report["path"])
    folder = out / "selftests"
    folder.mkdir()

    def saved(test: int, what: str, array: np.ndarray) -> dict[str, Any]:
        file = folder / f"{test}-{what}.npy"
        np.save(file, array)
        return {"dtype": str(array.dtype), "shape": list(array.shape),
                "file": file.relative_to(out).as_posix()}

    records = []
    for i, t in enumerate(tests):
        args = [saved(i, f"arg{k}", a) if isinstance(a, np.ndarray) else {"value": json_scalar(a)}
                for k, a in enumerate(t.args)]
        expected = {str(k): saved(i, f"expected{k}", a) for k, a in t.expected}
        record = {"name": t.name, "function": t.function, "device": t.device, "rtol": t.rtol,
                  "atol": t.atol, "args": args, "expected": expected}
        if t.returns is not None:
            record["returns"] = json_scalar(t.returns)
        records.append(record)
    (out / "selftests.json").write_text(dumps({"tests": records}))
    report["selftests_file"] = "selftests.json"


def _device_code(module: dict[str, Any], payload: bytes, folder: Path, stem: str) -> list[Path]:
    """The code of a modpack device module, as its kind's loader places it in the payload: an
    OpenCL module's source (``.cl``) and prebuilt binaries; a CUDA module's PTX (``.ptx``),
    cubins (``.cubin``) and fatbins (``.fatbin``), one file per variant; a ROCm module's code
    objects (``.hsaco``), one per target ID; a Vulkan module's SPIR-V shaders (``.spv``)."""
    framed = bool(module.get("code_frames"))
    written = []
    for piece in code_pieces(module["type_key"], module.get("contents") or {}):
        if piece.what == "source":
            name = f"{stem}{piece.suffix}"
        elif piece.tag:
            name = safe_file_name(f"{stem}-{piece.index}", piece.tag, piece.suffix)
        else:
            name = f"{stem}-{piece.index}{piece.suffix}"
        if 0 <= piece.offset and piece.offset + piece.size <= len(payload):
            data = payload[piece.offset:piece.offset + piece.size]
            if framed:  # the code itself, decoded and checked as a load would
                data = decode_frame(data)
            (folder / name).write_bytes(data[:-1] if piece.nul and data.endswith(b"\0")
                                        else data)
            written.append(folder / name)
    return written


def extract_library(path: str | os.PathLike[str],
                    directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Write the contents of the library at |path| into |directory| (new, or empty) and return
    the manifest also written there as ``manifest.json`` (with ``schema_version`` first:
    docs/json.md). Above ``MODPACK_PROGRESS_MIN_BYTES`` (64 MiB), it shows its progress
    (:mod:`modpack.progress`)."""
    shown = os.fspath(path)
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ArgumentError(f"cannot extract into {out}: it exists and is not an empty folder; "
                            "give a new folder")
    if not Path(shown).is_file():
        raise FormatError(f"{shown} is not a library file")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with Progress("extract", shown, os.path.getsize(shown)) as progress:
            if shown.endswith(".tar"):
                manifest = _extract_tar(shown, out, progress)
            elif is_weight_file(shown):
                return extract_weight_file(shown, out)
            else:
                manifest = _extract_file(shown, shown, out, progress=progress)
            (out / "manifest.json").write_text(dumps(manifest))
    except BaseException:
        # Nothing half-written left behind, and the caller's own (empty) folder kept.
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    return manifest


def _extract_tar(shown: str, out: Path, progress: Progress) -> dict[str, Any]:
    """A ``.tar`` export: refused as its load refuses it (:mod:`modpack.tools.verdict`: the tar
    seal, the rule for its members, its objects, its blob), its blob taken from the object
    that holds it."""
    from .inspection import inspect_library

    verdict = check_file(shown)
    if damaged(verdict):
        raise FormatError(f"{shown} {outcome(verdict.stage)}, so nothing is extracted: "
                          f"{verdict.message}")
    with tempfile.TemporaryDirectory(prefix="modpack-extract-") as scratch, \
            tarfile.open(shown) as tar:
        try:
            tar.extractall(scratch, filter="data")  # plain names only: the verdict's rule
        except (tarfile.TarError, OSError) as exc:
            raise FormatError(f"{shown}: cannot extract its members safely: {exc}") from None
        objects = sorted(Path(scratch).glob("*.o"))
        if not objects:
            raise FormatError(f"{shown} holds no object files; it is not a modpack .tar export")
        with_blob = [o for o in objects if inspect_library(o)["blob"] is not None]
        manifest = _extract_file(os.fspath(with_blob[0] if with_blob else objects[0]), shown,
                                 out, judged=False, progress=progress)
    tar_report = inspect_library(shown)
    manifest.update(functions=tar_report["functions"], signatures=tar_report["signatures"],
                    seal=tar_report["seal"], content_digest=tar_report["content_digest"])
    return manifest
