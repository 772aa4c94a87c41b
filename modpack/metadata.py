"""A library's metadata: ``export_library(..., metadata={...})``, provenance that travels
inside the artifact.

What the user gives (a dict of JSON values: producer, compiler and driver versions, source
revision, license, anything) is stored with what modpack knows itself, under ``"modpack"``: its
version, and the C compiler and target the host code was built with. The text goes into the
blob's index (format 1.2, docs/format.md), so the index checksum, the seal and signatures cover
it, and every reader of the library finds it: ``LoadedModule.metadata``, ``modpack inspect``,
``mp_module_metadata`` in C.

Why canonical JSON (sorted keys, no spaces): exports are reproducible, so the same tree and the
same metadata must give the same bytes; and nothing is added that changes from one export to
the next (no time, no path, no host name) unless the user gives it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import ArgumentError, FormatError
from .format.layout import MAX_METADATA, WRITER_VERSION
from .toolchain.cc import compiler_version, target_machine

__all__ = ["MAX_DEPTH", "MAX_METADATA", "PRODUCER_KEY", "decode_metadata", "encode_metadata",
           "producer_metadata"]

PRODUCER_KEY = "modpack"  # the key modpack writes its own part under; refused from users
MAX_DEPTH = 64  # levels of nesting a metadata value may have
_INT64 = (-(1 << 63), (1 << 63) - 1)  # what every JSON reader's integers hold


def producer_metadata(cc: str | None) -> dict[str, str]:
    """What modpack records of an export under ``"modpack"``: its version, and the C compiler
    (``cc --version``'s first line) and target triple of the host code, where it can tell."""
    found = {"version": ".".join(map(str, WRITER_VERSION)),
             "compiler": compiler_version(cc), "target": target_machine(cc)}
    return {key: value for key, value in found.items() if value}


def encode_metadata(metadata: Mapping[str, Any] | None, producer: Mapping[str, Any]) -> bytes:
    """The bytes a library stores: |metadata| (the user's) with |producer| under
    ``"modpack"``, as canonical UTF-8 JSON. ArgumentError, naming the key, for a value JSON
    cannot hold exactly, the reserved key, or more than ``MAX_METADATA`` bytes."""
    given: Mapping[str, Any] = {} if metadata is None else metadata
    if not isinstance(given, Mapping):
        raise ArgumentError(f"metadata must be a dict of JSON values with str keys, not a "
                            f"{type(given).__name__}")
    if PRODUCER_KEY in given:
        raise ArgumentError(f"metadata key {PRODUCER_KEY!r} is reserved: modpack records its own "
                            "version, compiler and target there; put yours under another key")
    _check_json(given)
    document = {**given, PRODUCER_KEY: dict(producer)}
    data = _canonical(document)
    if len(data) > MAX_METADATA:
        largest = max(given, key=lambda k: len(_canonical(given[k])), default=None)
        hint = (f"; the largest is {largest!r}, {len(_canonical(given[largest]))} bytes"
                if largest is not None else "")
        raise ArgumentError(f"metadata is {len(data)} bytes as JSON, more than the "
                            f"{MAX_METADATA} a library holds{hint}: keep large data in a file "
                            "of its own and record its name and digest")
    return data


def decode_metadata(data: bytes, where: str) -> dict[str, Any]:
    """The metadata stored as |data| (read from |where|, for messages); FormatError for bytes
    that are not UTF-8 JSON text of one object, which modpack never writes."""
    try:
        value = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: its metadata is not UTF-8 JSON ({exc}); the file was "
                          "damaged, or made by another tool: export it again") from None
    if not isinstance(value, dict):
        raise FormatError(f"{where}: its metadata is a JSON {type(value).__name__}, not an "
                          "object; the file was damaged, or made by another tool: export it "
                          "again")
    return value


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _check_json(metadata: Mapping[str, Any]) -> None:
    """Refuse, naming where, what JSON would not hold exactly: keys that are not str, values
    of other types (a datetime, a numpy number, a set), integers beyond 64 bits, floats that
    are not finite, strings that are not Unicode text (lone surrogates), and nesting deeper
    than MAX_DEPTH. Iterative, so a deep value cannot exhaust Python's recursion."""
    stack: list[tuple[Any, str, int]] = [(metadata, "metadata", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ArgumentError(f"{where}: metadata may nest {MAX_DEPTH} levels deep at most")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ArgumentError(f"{where}: the key {key!r} is not a str; metadata keys "
                                        "are str")
                _check_text(key, f"{where}: the key {key!r}")
                stack.append((item, f"{where}[{key!r}]", depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, where)
        elif value is None or isinstance(value, bool):
            continue
        elif type(value) is int:
            if not _INT64[0] <= value <= _INT64[1]:
                raise ArgumentError(f"{where} = {value} does not fit in 64 bits, which JSON "
                                    "readers hold exactly; give it as a str")
        elif type(value) is float:
            if not math.isfinite(value):
                raise ArgumentError(f"{where} = {value}: JSON has no NaN or infinity; give it "
                                    "as a str or leave it out")
        else:
            hint = (" (a numpy value: give value.item())" if type(value).__module__ == "numpy"
                    else "")
            raise ArgumentError(f"{where} is a {type(value).__name__}{hint}, which JSON cannot "
                                "hold: give a str, int, float, bool, None, list or dict")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ArgumentError(f"{where} is not Unicode text (it holds a lone surrogate)") from None
