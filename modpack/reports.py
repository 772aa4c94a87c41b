"""The shapes of the reports :func:`modpack.verify_library` and :func:`modpack.preflight`
return, as ``TypedDict``\\ s, so that a type checker knows their keys (``report["ok"]`` is a
bool, ``report["okay"]`` an error). At run time they are plain dicts: the same objects
``modpack verify --json`` and ``modpack preflight --json`` print, with ``schema_version``
added first (docs/json.md documents every key, and a test holds the two together).
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["PreflightAnswer", "PreflightModule", "PreflightReport", "Signature", "VerifyCheck",
           "VerifyReport"]


class _CheckFields(TypedDict):
    check: str  # "seal", "payloads", "weight files", "loaders", "machine", "code", ...
    ok: bool | None  # None: not checked (the message says why)
    covers: str  # what the check vouches for when it holds
    message: str | None  # why it failed or was not made; None when it holds


class VerifyCheck(_CheckFields, total=False):
    """One row of :class:`VerifyReport`'s ``checks``; signature rows carry the key ids."""

    key_id: str  # a signature checked against a trusted key: whose (hex SHA-256 of the key)
    key_ids: list[str]  # the signature row of a check without keys: the signatures present


class Signature(TypedDict):
    """A signature the file carries: whose, and (checked against trusted keys) whether its key
    is trusted and it holds."""

    key_id: str
    trusted: bool
    valid: bool


class VerifyReport(TypedDict):
    """What :func:`modpack.verify_library` returns: ``ok`` only when no check failed (a check
    not made, ``ok`` None, does not fail)."""

    path: str
    ok: bool
    checks: list[VerifyCheck]
    signatures: list[Signature]


class PreflightAnswer(TypedDict, total=False):
    """The code one device would get from a module: the variant chosen and why, the ones it
    would fall back to; or (``fits`` False) why none fits, with the variants the file has.
    A module whose kernels each choose (CUDA, ROCm) answers per kernel, in ``kernels``; for a
    device of this machine (``--device host``), one whose builds the kernel cache keeps
    (OpenCL programs, CUDA's PTX, Vulkan pipelines) says in ``kernel_cache`` whether a load
    would find them there: ``{"state": "hit" | "miss" | "off" | "unused", "detail": ...}``
    ("unused": the device gets code it builds nothing from)."""

    device: str
    fits: bool
    variant: str
    kind: str
    reason: str
    fallbacks: list[str]
    variants: list[Any]
    kernels: list[dict[str, Any]]
    kernel_cache: dict[str, str]


class PreflightModule(TypedDict):
    """One module of the library: ``status`` is ``"fits"``, ``"no-code"``,
    ``"other-device"`` or ``"no-device-code"`` (host code, constants), with the reason for any
    but the first, and an answer per device asked about."""

    index: int
    type_key: str
    size: int
    status: str
    reason: str | None
    answers: list[PreflightAnswer]


class PreflightRead(TypedDict):
    """How much of the file the answer read (its index and variant tables, never code)."""

    bytes: int
    reads: int


class PreflightReport(TypedDict):
    """What :func:`modpack.preflight` returns: ``fits`` when every module has code for the
    device (``reason`` says which has none), the devices asked about (``devices``: each
    ``{"device", "type", "arch"}``) and those this machine lacks (``unavailable``: each
    ``{"type", "message"}``)."""

    path: str
    device: str
    devices: list[dict[str, Any]]
    unavailable: list[dict[str, Any]]
    modules: list[PreflightModule]
    fits: bool
    reason: str | None
    read: PreflightRead
