"""The package keeps to what its oldest supported Python (3.9, pyproject.toml's requires-python)
runs, read from the source with ``ast``, so a 3.10 idiom fails here by file and line rather
than on a 3.9 host at import or deep in a call (tests/test_wheel.py runs the wheel on 3.9 too):

- 3.9's grammar: no ``match``, no ``except*``, no newer syntax (``ast.parse`` with
  ``feature_version``);
- no union of classes evaluated at run time: ``isinstance(x, int | float)``, an alias such as
  ``Key = str | os.PathLike``, or an annotation in a file without
  ``from __future__ import annotations`` (use a tuple, or ``typing.Union`` for an alias);
- no ``zip(..., strict=...)`` (use :func:`modpack.compat.zip_strict`), and no dataclass
  ``slots=`` / ``kw_only=``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "modpack"
OLDEST = (3, 9)
BUILTIN_TYPES = {"str", "bytes", "bytearray", "memoryview", "int", "float", "complex", "bool",
                 "list", "tuple", "dict", "set", "frozenset", "type", "object"}


def test_requires_python_names_the_oldest_version_checked_here():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=3\.9"$', pyproject, re.M)
    assert re.search(r'^target-version = "py39"$', pyproject, re.M)


def _sources() -> list[tuple[Path, str, ast.Module]]:
    return [(p, p.read_text(), ast.parse(p.read_text(), str(p))) for p in
            sorted(PACKAGE.rglob("*.py"))]


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def test_the_package_parses_with_the_oldest_grammar():
    for path, text, _ in _sources():
        ast.parse(text, str(path), feature_version=OLDEST)  # a SyntaxError names file and line


def _is_class_union(node: ast.AST) -> bool:
    """``A | B`` where an operand is clearly a class (a builtin type, a generic such as
    ``Mapping[str, int]``, None or another such union), not a union of flags (``os.O_RDONLY |
    os.O_CLOEXEC``)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)):
        return False

    def class_name(value: ast.AST) -> bool:
        return ((isinstance(value, ast.Name)
                 and (value.id in BUILTIN_TYPES or value.id[:1].isupper()))
                or (isinstance(value, ast.Attribute) and value.attr[:1].isupper()))

    def classy(operand: ast.AST) -> bool:
        # A subscripted class (list[int], Mapping[str, int]), not an item (words[0]).
        return ((isinstance(operand, ast.Name) and operand.id in BUILTIN_TYPES)
                or (isinstance(operand, ast.Subscript) and class_name(operand.value))
                or (isinstance(operand, ast.Constant) and operand.value is None)
                or (isinstance(operand, ast.Attribute) and operand.attr[:1].isupper()
                and not operand.attr.isupper())
                or _is_class_union(operand))

    return classy(node.left) or classy(node.right)


def _annotations(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        found: list[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            found += [arg.annotation for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs,
                                                 a.vararg, a.kwarg]
                      if arg is not None and arg.annotation is not None]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        inside |= {id(n) for a in found for n in ast.walk(a)}
    return inside


def test_no_union_of_classes_is_evaluated_at_run_time():
    found = []
    for path, text, tree in _sources():
        postponed = "from __future__ import annotations" in text
        annotations = _annotations(tree) if postponed else set()
        for node in ast.walk(tree):
            if _is_class_union(node) and id(node) not in annotations:
                found.append(f"{_where(path, node)}: {ast.get_source_segment(text, node)}")
    assert found == [], "3.9 cannot evaluate these (use a tuple or typing.Union):\n" + \
        "\n".join(dict.fromkeys(found))


def test_no_keyword_that_3_9_lacks():
    found = []
    for path, _, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            keywords = {k.arg for k in node.keywords}
            if name == "zip" and "strict" in keywords and path.name != "compat.py":
                found.append(f"{_where(path, node)}: zip(strict=): use compat.zip_strict")
            if name == "dataclass" and keywords & {"slots", "kw_only", "match_args"}:
                found.append(f"{_where(path, node)}: dataclass({keywords})")
    assert found == [], "\n".join(found)
