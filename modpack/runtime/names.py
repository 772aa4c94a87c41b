"""The name a user most likely meant, for "did you mean" in a not-found message: the rule of
the runtime's own (csrc/src/core/names.c), so that a misspelt array name gets the same
suggestion from ``module.arrays[...]`` as from host code's ``mp_backend_get_array``."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import NotFoundError

__all__ = ["closest", "no_such_array"]

_MAX_NAME = 255  # longer names are never compared, as in C


def closest(given: str, names: Iterable[str]) -> str | None:
    """The first of |names| nearest to |given| within a third of the longer name's length in
    edits (one for short names; never |given| itself), or None: an unrelated name is never
    offered."""
    if len(given) > _MAX_NAME:
        return None
    best, best_distance = None, None
    for name in names:
        if len(name) > _MAX_NAME or name == given:
            continue
        within = max(max(len(given), len(name)) // 3, 1)
        if abs(len(given) - len(name)) > within:
            continue
        distance = _edit_distance(given, name)
        if distance <= within and (best_distance is None or distance < best_distance):
            best, best_distance = name, distance
    return best


def no_such_array(name: object, names: Iterable[str], where: str) -> NotFoundError:
    """The error for an array |name| that |where| (e.g. "the const module") does not hold,
    with the closest of its |names| offered."""
    meant = closest(name, names) if isinstance(name, str) else None
    hint = f" (did you mean {meant!r}?)" if meant is not None else ""
    return NotFoundError(f"no array named {name!r} in {where}{hint}")


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein's: the fewest insertions, deletions and substitutions from |a| to |b|."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            above = row[j]
            row[j] = min(above + 1, row[j - 1] + 1, diagonal + (ca != cb))
            diagonal = above
    return row[-1]
