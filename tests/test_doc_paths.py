"""Every repository path the docs name exists: the README, docs/*.md and the folders' own
README files name files and folders for a newcomer to open (``csrc/src/load/``,
``modpack/format/seal.py``), and a move that leaves a stale name behind sends them nowhere.

Read as paths: a backticked word that starts with one of the repository's top-level folders
(a header named as it is included, ``modpack/modpack.h``, is looked for under
``csrc/include/``), and every relative Markdown link target (from the doc's own folder). A
``*`` is a glob that must match something; a placeholder component (``<key>``, or ``x`` in the
walk-through of a new kind) stands for any name and is not looked up. A shorter path written
inside a folder's table (``exporter/plan.py``, ``load/tree.c``, ``slim/``) must be the end of
some file or folder the repository tracks."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT

_TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
              and p.name not in {"build", "wheelhouse"})
_TICKED = re.compile(r"`((?:" + "|".join(map(re.escape, _TOP)) + r")/[^`\s]*)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PLACEHOLDER = re.compile(r"<[^>]+>|(?:^|[/_])x(?:[/._]|$)")
# Made by building or running something, named as where output lands.
_MADE = ("build/", "wheelhouse/", ".venv/", "modpack/lib/", "benchmarks/results/")


_SHORT = re.compile(r"`([A-Za-z0-9_-]+/[A-Za-z0-9_./-]*(?:\.(?:py|c|h|hpp|sh|toml|cmake)|/))`")


@cache
def _tracked() -> frozenset[str]:
    """Every file and folder git tracks, as relative paths (folders with a trailing /)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    paths = set(out)
    for file in out:
        parent = Path(file).parent
        while parent != Path("."):
            paths.add(f"{parent.as_posix()}/")
            parent = parent.parent
    return frozenset(paths)


def _docs() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += sorted(p for p in ROOT.glob("*/**/README.md")
                   if not any(part.startswith(".") or part in {"build", "node_modules"}
                              for part in p.relative_to(ROOT).parts))
    return docs


def _named(doc: Path, line: str) -> list[tuple[str, Path]]:
    """(name as written, where it should be) for each path |line| of |doc| names."""
    found = []
    for match in _TICKED.finditer(line):
        name = match[1].split("#", 1)[0].split(":", 1)[0].rstrip(".,;")
        if name.startswith(_MADE) or _PLACEHOLDER.search(name):
            continue
        where = ROOT / name
        if name.startswith("modpack/") and name.endswith((".h", ".hpp")) and not where.exists():
            where = ROOT / "csrc" / "include" / name
        found.append((name, where))
    for match in _SHORT.finditer(line):
        name = match[1]
        if match[1].split("/", 1)[0] in _TOP or name.startswith(("lib/", "build/")) \
                or _PLACEHOLDER.search(name):
            continue  # whole paths are checked above; lib/, build/: an install's, a build's
        if not any(t == name or t.endswith(f"/{name}") for t in _tracked()):
            found.append((name, ROOT / "no such path" / name))
    for match in _LINK.finditer(line):
        target = match[1].split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target) or _PLACEHOLDER.search(target):
            continue
        found.append((target, (doc.parent / target)))
    return found


def _exists(where: Path) -> bool:
    text = str(where)
    if "*" in text or "?" in text:
        return any(ROOT.glob(str(where.relative_to(ROOT))))
    return where.exists()


def test_the_reader_finds_paths() -> None:
    named = [n for doc in _docs() for line in doc.read_text().splitlines()
             for n, _ in _named(doc, line)]
    assert len(set(named)) > 50, named  # the docs name many: a reader finding few is broken
    assert any(n.startswith("csrc/") for n in named)
    assert any(n.startswith("../") for n in named)  # relative links are read too


def test_every_path_the_docs_name_exists() -> None:
    stale = []
    for doc in _docs():
        for line_number, line in enumerate(doc.read_text().splitlines(), 1):
            stale += [f"{doc.relative_to(ROOT)}:{line_number}: {name}"
                      for name, where in _named(doc, line) if not _exists(where)]
    assert not stale, "paths named in the docs that do not exist:\n" + "\n".join(stale)
