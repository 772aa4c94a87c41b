"""The JSON outputs' schema as docs/json.md documents it, read from its tables, so that tests
hold every output to the page (tests/test_json_schema.py, and the registry's in test_oci.py)."""

from __future__ import annotations

import re
from typing import Any

from conftest import ROOT

PAGE = ROOT / "docs" / "json.md"


def sections() -> dict[str, tuple[list[str], set[str]]]:
    """Each "## ..." section's title -> (its table's keys in order, the optional ones)."""
    found: dict[str, tuple[list[str], set[str]]] = {}
    title = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            found[title] = ([], set())
            continue
        row = re.match(r"\| `(\w+)` \| ([^|]*) \| (.*) \|$", line)
        if title is not None and row:
            found[title][0].append(row[1])
            if row[3].startswith("*optional*"):
                found[title][1].add(row[1])
    return found


def check_keys(output: dict[str, Any], title: str) -> None:
    """|output| has schema_version 1 first, every key its section documents but the optional
    ones, and no other, in the documented order."""
    keys, optional = sections()[title]
    assert keys, f"docs/json.md has no table under '## {title}'"
    got = list(output)
    assert got[:1] == ["schema_version"] and output["schema_version"] == 1, got
    assert [k for k in keys if k in output] == got, (title, got, keys)
    missing = set(keys) - optional - set(got)
    assert not missing, f"{title}: documented but absent: {sorted(missing)}"
