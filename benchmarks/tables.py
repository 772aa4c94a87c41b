"""What the benchmark scripts share: medians over the results of worker processes, and their
tables, aligned for the terminal and in Markdown for RESULTS.md. Each script decides its own
rows and columns; this only turns cells into text."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any


def med(results: list[dict[str, Any]] | None, field: str | Callable[[dict], Any]
        ) -> float | None:
    """The median of |field| (a key, or a function of a result) over the results that did not
    fail; None when there is none."""
    values = [field(r) if callable(field) else r.get(field)
              for r in results or [] if "error" not in r]
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def error_of(results: list[dict[str, Any]] | None) -> str | None:
    """The first failure among |results|, if any."""
    return next((r["error"] for r in results or [] if "error" in r), None)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """|rows| under |headers|, each column as wide as its widest cell."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*(str(c) for c in row)) for row in rows]
    return "\n".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """|rows| under |headers| as a Markdown table (a "|" inside a cell escaped)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out)
