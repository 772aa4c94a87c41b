"""What ``modpack inspect``, ``verify`` and ``extract`` say of a weight file (``modpack sign``
signs one as it signs a library: :mod:`modpack.format.signatures`).

Every check is the runtime's own reader's (``csrc/src/weights/``), so the tools and a load
agree on every file: what inspect reports, verify checks and extract writes is what a load
would hand out, and a file a load refuses makes each of them fail.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModpackError
from ..files.names import safe_file_name
from ..format.signatures import is_weight_file, read_signatures, signature_checks
from ..runtime.binding import check, ffi, lib
from ..runtime.trust import TrustedKey, trusted_keys_array
from ..runtime.weight_files import describe_module, load_options, load_weights
from .json_schema import dumps

__all__ = ["extract_weight_file", "inspect_weight_file", "is_weight_file", "verify_weight_file"]

COVERS = {  # what each check vouches for
    "seal": "every byte but the arrays: header, records, names, shapes, padding",
    "arrays": "each array's bytes, by its XXH3 checksum in the index, and zeros between",
    "digests": "each array's bytes, by its SHA-256 in the index; the index by the content "
               "digest",
    "signature": "the content digest (so every name, dtype, shape and array), by the signer's "
                 "Ed25519 key",
}


def _open(path: str, flags: int) -> Any:
    options = load_options(flags)
    out = ffi.new("mp_module_t**")
    check(lib.mp_weights_load(os.fsencode(path), options.pointer, out))
    return ffi.gc(out[0], lib.mp_module_release)


def inspect_weight_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The weight file at |path| as the runtime reads it (checksums checked): its format, size,
    alignment, content digest, seal, signers and every array with its place and digests."""
    shown = os.fspath(path)
    info = describe_module(_open(shown, 0))["weight_file"]
    sha = hashlib.sha256()
    with open(shown, "rb") as f:
        header = f.read(12)
        f.seek(0)
        while chunk := f.read(1 << 24):
            sha.update(chunk)
    return {
        "path": shown,
        "kind": "weight file",
        "producer": "modpack",
        "format_version": [int.from_bytes(header[8:10], "little"),
                           int.from_bytes(header[10:12], "little")],
        "size": info["size"],
        "alignment": info["alignment"],
        "digest": info["digest"],
        "file_sha256": f"sha256:{sha.hexdigest()}",
        "index_size": info["index_size"],
        "data": {"offset": info["data_offset"], "size": info["data_size"]},
        "seal": {"state": "valid"},
        "signed_by": [s["key_id"] for s in read_signatures(shown)],
        "arrays": info["arrays"],
    }


def verify_weight_file(path: str | os.PathLike[str],
                       trusted_keys: Iterable[TrustedKey] | None = None) -> dict[str, Any]:
    """Every check a weight file admits, without using it: the seal, every array's checksum,
    every array's digest and the content digest, and with |trusted_keys| its signatures. The
    same report as :func:`modpack.verify_library`."""
    shown = os.fspath(path)
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, message: str | None = None, **extra: Any) -> None:
        checks.append({"check": name, "ok": ok, "covers": COVERS[name], "message": message,
                       **extra})

    status = lib.mp_seal_check_file(os.fsencode(shown), ffi.new("mp_seal_v1_t*"))
    add("seal", status == 0, None if status == 0 else _message())
    for name, flags in (("arrays", 0), ("digests", lib.MP_LOAD_CHECK_DIGESTS |
                                        lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)):
        try:
            _open(shown, flags)
            add(name, True)
        except ModpackError as exc:
            add(name, False, str(exc))
    keys = trusted_keys_array(trusted_keys) if trusted_keys else None
    rows, signatures = signature_checks(shown, keys, "weight file", COVERS["signature"])
    checks.extend(rows)
    ok = all(c["ok"] is not False for c in checks)
    return {"path": shown, "ok": ok, "checks": checks, "signatures": signatures}


def _message() -> str:
    from ..runtime.binding import string

    return string(lib.mp_error_message())


def extract_weight_file(path: str | os.PathLike[str], out: Path) -> dict[str, Any]:
    """Every array of the weight file at |path| as ``.npy`` in |out|/arrays, and the manifest
    (the :func:`inspect_weight_file` report, each array with its file)."""
    report = inspect_weight_file(path)
    arrays = load_weights(path, verify_checksums=False)  # inspect checked them
    (out / "arrays").mkdir()
    for index, entry in enumerate(report["arrays"]):
        file = out / "arrays" / safe_file_name(str(index), entry["name"], ".npy")
        np.save(file, np.ascontiguousarray(arrays[entry["name"]]))
        entry["file"] = file.relative_to(out).as_posix()
    (out / "manifest.json").write_text(dumps(report))
    return report


def weight_file_report_lines(report: dict[str, Any]) -> list[str]:
    """``modpack inspect``'s text for a weight file."""
    lines = [report["path"],
             f"  weight file      format {report['format_version'][0]}."
             f"{report['format_version'][1]}, {report['size']} bytes, arrays aligned to "
             f"{report['alignment']}",
             f"  content digest   {report['digest']}",
             f"  file             {report['file_sha256']}",
             f"  seal             {report['seal']['state']}",
             f"  signed by        {', '.join(k[:16] for k in report['signed_by']) or '-'}",
             f"  arrays           {len(report['arrays'])}"]
    for a in report["arrays"]:
        shape = ", ".join(str(n) for n in a["shape"])
        lines.append(f"    {a['name']}: {a['dtype']}[{shape}]  {a['size']} bytes at "
                     f"{a['offset']}  xxh3 {a['checksum']}  {a['digest'][:23]}...")
    return lines
