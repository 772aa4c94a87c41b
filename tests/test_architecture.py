"""The structure holds: no import cycles in the Python package, no cycles between the C
runtime's files (nor a lower layer reaching up), and one version everywhere.

Python imports are read from the source with ``ast``, every import counted (also those inside
functions, which are arrows all the same). C references are read from the runtime's object
files with ``nm``: file A depends on file B when A uses a symbol B defines.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT, run

import modpack
from modpack.runtime.binding import lib

PACKAGE = ROOT / "modpack"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of |graph|: its strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:  # iterative Tarjan
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_imports() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    # Extension modules (modpack._rt, built; its stub _rt.pyi) are leaves: `from .. import _rt`
    # imports the extension, not the package it sits in.
    extensions = {module_name(p.with_name(p.name.split(".")[0] + ".py"))
                  for pattern in ("*.so", "*.pyi") for p in PACKAGE.rglob(pattern)}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule when there is one.
                targets = [f"{base}.{a.name}"
                           if f"{base}.{a.name}" in files or f"{base}.{a.name}" in extensions
                           else base for a in node.names]
            for target in targets:
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def test_the_python_package_has_no_import_cycles():
    graph = python_imports()
    assert graph["modpack.loader"], "the import reader found nothing: check it"
    assert strongly_connected(graph) == []


def test_the_runtime_side_does_not_import_the_authoring_side_except_the_base_class():
    graph = python_imports()
    runtime = {m for m in graph if m.startswith("modpack.runtime")}
    authoring = {t for m in runtime for t in graph[m] if t.startswith("modpack.modules")}
    assert authoring <= {"modpack.modules.base"}, authoring


def test_the_tools_wing_sits_on_top():
    """modpack/tools/ (inspect, verify, extract, preflight, slim) reads libraries with what is
    below it; nothing below imports a tool, so the loaded side and the exporter never grow
    a dependency on a tool. Above the tools: the package's own names, the commands (cli/) and
    the registries' workflows (oci/: push slims and inspects, pull preflights)."""
    graph = python_imports()
    above = ("modpack.tools", "modpack.cli", "modpack.oci")
    # The one known arrow: a signed OMS load lists the library's weight files, which the
    # bundle also covers, with inspect_library (a lazy import on that path only).
    known = {("modpack.loader", "modpack.tools.inspection")}
    upward = sorted((m, t) for m, targets in graph.items() for t in targets
                    if t.startswith("modpack.tools") and not m.startswith(above)
                    and m != "modpack" and (m, t) not in known)
    assert graph["modpack.tools.slim.keep"], "the import reader found nothing in tools/"
    assert upward == []


def c_references(objects: Path) -> dict[str, set[str]]:
    defined: dict[str, str] = {}
    used: dict[str, set[str]] = defaultdict(set)
    for obj in sorted(objects.rglob("*.o")):
        name = obj.relative_to(objects).as_posix().removesuffix(".o")
        for line in subprocess.run(["nm", "-g", str(obj)], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "TDBRC":
                defined[fields[2]] = name
            elif len(fields) == 2 and fields[0] == "U":
                used[name].add(fields[1])
    graph: dict[str, set[str]] = defaultdict(set)
    for name, symbols in used.items():
        graph[name] |= {defined[s] for s in symbols if s in defined and defined[s] != name}
    return graph


@pytest.fixture(scope="module")
def c_graph(runtime_prefix: Path) -> dict[str, set[str]]:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    objects = runtime_prefix.parent / "build" / "CMakeFiles" / "modpack_runtime_objects.dir"
    graph = c_references(objects / "csrc" / "src")
    assert len(graph) > 20, f"found only {len(graph)} object files under {objects}"
    return graph


def test_the_c_runtime_has_no_cycles_between_files(c_graph):
    assert strongly_connected(c_graph) == []


def test_the_c_layers_only_reach_down(c_graph):
    """Each file of csrc/src uses only its own layer and those below it. The order, from the
    bottom: core < files < device, kinds < weights < library < load < tools. core knows nothing
    above it; files (sealed files on disk) know only core; device and kinds are one band (the
    entry point device/device.c registers the built-in kinds, which use the device API) and
    know no weight file, library, loading or tool; weight files know no kind and no library;
    the loaded library (library/) knows no loading and no tool; loading knows no tool. The
    registry knows no kind."""
    def layer(name: str) -> str:
        return name.split("/")[0]

    assert {layer(name) for name in c_graph} >= {"core", "files", "device", "kinds", "weights",
                                                  "library", "load", "tools"}, sorted(c_graph)
    below = {"core": set(), "files": {"core"}, "device": {"core", "files", "kinds"},
             "kinds": {"core", "files", "device"}, "weights": {"core", "files", "device"}}
    below["library"] = below["weights"] | {"kinds", "weights"}
    below["load"] = below["library"] | {"library"}
    below["tools"] = below["load"] | {"load"}
    for name, targets in c_graph.items():
        assert layer(name) in below, f"{name}: a folder of csrc/src the layer order leaves out"
        reached = {layer(t) for t in targets}
        assert reached <= below[layer(name)] | {layer(name)}, (name, targets)
    assert c_graph["core/registry.c"] <= {"core/error.c", "core/blob.c"}


def test_one_version_everywhere(runtime_prefix: Path):
    header = (ROOT / "csrc" / "include" / "modpack" / "modpack.h").read_text()
    numbers = [re.search(rf"#define MP_VERSION_{p} (\d+)", header).group(1)
               for p in ("MAJOR", "MINOR", "PATCH")]
    version = ".".join(numbers)
    out = modpack.runtime.binding.ffi.new("mp_version_t*")
    lib.mp_get_version(out)
    assert f"{out.major}.{out.minor}.{out.patch}" == version
    assert modpack.__version__ == version
    assert importlib.metadata.version("modpack") == version
    cmake = next(runtime_prefix.rglob("modpackConfigVersion.cmake")).read_text()
    assert f'set(PACKAGE_VERSION "{version}")' in cmake
    pc = next(runtime_prefix.rglob("modpack.pc")).read_text()
    assert f"Version: {version}" in pc
    assert run("pkg-config", "--modversion", next(runtime_prefix.rglob("modpack.pc"))).strip() \
        == version
