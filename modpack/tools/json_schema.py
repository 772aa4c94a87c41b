"""The version of the JSON modpack's tools write: every ``--json`` output (``modpack inspect``,
``verify``, ``preflight``, ``selftest``, ``pull``, ``cache list``) and ``modpack extract``'s
``manifest.json`` is one object whose first key, ``schema_version``, names the version of its
schema, documented in docs/json.md.

Rationale: tools parse these outputs, and a reader should be able to tell a change it does not
understand from a file it misreads. The version goes up when a key is removed or renamed, or
its type or meaning changes; a new key does not change it, so readers ignore keys they do not
know.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SCHEMA_VERSION", "dumps", "with_schema"]

SCHEMA_VERSION = 1


def with_schema(report: Mapping[str, Any]) -> dict[str, Any]:
    """|report| (a function's dict: inspect_library's, verify_library's, ...) as a JSON output
    holds it: ``schema_version`` first, then its keys."""
    return {"schema_version": SCHEMA_VERSION, **report}


def dumps(report: Mapping[str, Any]) -> str:
    """The JSON text of |report| with its schema version, indented, ending in a newline."""
    return json.dumps(with_schema(report), indent=2) + "\n"
