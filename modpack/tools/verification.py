"""Trust: the keys a caller trusts, and ``verify_library`` (``modpack verify``), which checks
everything about a library that can be checked without running it: its seal, every payload,
the device code in its code frames (decoded, as its first use decodes it), and its
signatures.

The checks themselves are the runtime's (the seal, the blob reader, Ed25519 over SHA-256 with
OpenSSL's libcrypto); this module gathers them into one report.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, cast

from ..errors import MissingFileError, ModpackError
from ..format.signatures import signature_checks
from ..progress import Progress
from ..reports import VerifyReport
from ..runtime.trust import TrustedKey, trusted_keys_array
from .verdict import check_file
from .weight_reports import is_weight_file, verify_weight_file

__all__ = ["TrustedKey", "trusted_keys_array", "verify_library"]

_COVERS = {  # what each check vouches for, shown with its result
    "blob": "the blob's structure: its module table and import tree",
    "seal": "every byte but the payloads: code, headers, symbol tables, the blob's index",
    "payloads": "each module's payload bytes, by the checksums in the blob's index",
    "weight files": "the weight files the library refers to: present, the very files it was "
                    "exported with, and intact",
    "loaders": "each module's kind has a loader in this process (what a load here needs; a "
               "kind a package registers loads where that package is imported)",
    "machine": "the library was built for this machine (what a load here needs; the other "
               "checks hold on any machine)",
    "code": "the device code stored in code frames (compress_code): every frame decodes to the "
            "code its header promises, as a load decodes it at the code's first use",
    "signature": "every byte of the sealed file (SHA-256), by the signer's Ed25519 key",
}


def verify_library(path: str | os.PathLike[str],
                   trusted_keys: Iterable[TrustedKey] | None = None) -> VerifyReport:
    """Check |path| without loading it: the seal, every payload and, when |trusted_keys| are
    given, that a signature by one of them holds (and none of theirs fails). Returns a
    :class:`~modpack.reports.VerifyReport`: ``{"path", "ok", "checks": [{"check", "ok",
    "covers", "message", ...}], "signatures"}``; ``ok`` is True only when every check holds
    (docs/json.md: ``modpack verify --json``). Above ``MODPACK_PROGRESS_MIN_BYTES`` (64 MiB),
    it shows its progress (:mod:`modpack.progress`)."""
    shown = os.fspath(path)
    if not os.path.isfile(shown):
        raise MissingFileError(f"no such library: {shown}")
    with Progress("verify", shown, os.path.getsize(shown)) as progress:
        return _verify(shown, trusted_keys, progress)


def _verify(shown: str, trusted_keys: Iterable[TrustedKey] | None,
            progress: Progress) -> VerifyReport:
    """verify_library's checks, each said to |progress| when made."""
    from .inspection import inspect_library

    if is_weight_file(shown):
        return cast(VerifyReport, verify_weight_file(shown, trusted_keys))
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, message: str | None = None, **extra: Any) -> None:
        checks.append({"check": name, "ok": ok, "covers": _COVERS[name], "message": message,
                       **extra})

    verdict = check_file(shown)  # what a load would say: the checks below agree with it
    progress.phase("seal, payloads and code checked")
    try:
        report: dict[str, Any] | None = inspect_library(shown)
    except ModpackError:
        report = None
    progress.phase("blob read")
    if report is not None and report.get("producer") == "tvm":  # nothing of ours to check
        add("blob", True, f"TVM's blob read: {len(report['modules'])} modules")
        add("seal", None, "TVM writes no seal: nothing covers this file's bytes")
        add("payloads", None, "TVM records no payload checksums")
        return cast(VerifyReport, {"path": shown, "ok": True, "checks": checks,
                                   "signatures": []})
    loads = (report or {}).get("loads") or {"ok": verdict.ok, "stage": verdict.stage,
                                             "message": verdict.message}
    stage = loads["stage"]

    def failed_at(*stages: str) -> str | None:
        return loads["message"] if not loads["ok"] and stage in stages else None

    add("seal", not failed_at("file", "seal"), failed_at("file", "seal"))
    later = "not checked: the seal does not hold" if failed_at("file", "seal") else None
    add("payloads", None if later else not failed_at("blob", "payloads"),
        later or failed_at("blob", "payloads") or (
            None if report is None or report["blob"] else "no blob: host code only"))
    if stage == "weight files" or _refers_to_weight_files(report):
        add("weight files", None if later else not failed_at("weight files"),
            later or failed_at("weight files"))
    if stage == "loaders":  # the file is sound; this process cannot load it
        add("loaders", None, f"not here: {loads['message']}")
    if stage == "machine":  # the file is sound; this machine cannot load it
        add("machine", None, f"not here: {loads['message']}")
    if stage == "code" or _has_code_frames(report):
        earlier = not loads["ok"] and stage != "code"
        add("code", None if earlier else not failed_at("code"),
            "not checked: an earlier check failed" if earlier else failed_at("code"))
    keys = trusted_keys_array(trusted_keys) if trusted_keys else None
    rows, signatures = signature_checks(shown, keys, "library", _COVERS["signature"])
    if keys:
        progress.phase("signatures checked")
    checks.extend(rows)
    ok = all(c["ok"] is not False for c in checks)
    return cast(VerifyReport, {"path": shown, "ok": ok, "checks": checks,
                               "signatures": signatures})


def _refers_to_weight_files(report: dict[str, Any] | None) -> bool:
    if not report:
        return False
    return any(m["type_key"] == "weights" for m in report["modules"])


def _has_code_frames(report: dict[str, Any] | None) -> bool:
    return report is not None and any(m.get("code_frames") for m in report["modules"])
