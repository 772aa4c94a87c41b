"""A kind is one place: every built-in kind, from the runtime's one list
(csrc/src/kinds/builtin.c, read through ``mp_builtin_kind``), has each piece the recipe in
csrc/src/kinds/README.md names — its C folder and payload header, its Python writer and factory,
its C unit test, its fuzz seeds, its rows in the README and docs/format.md — and the places that
once listed kinds by hand now follow the list."""

from __future__ import annotations

import importlib.util
import re

import pytest
from conftest import ROOT

import modpack
from modpack.modules.kernel_info import builtin_kinds, launch_tags

KINDS = builtin_kinds()


def _corpus_maker():
    spec = importlib.util.spec_from_file_location(
        "make_fuzz_corpus", ROOT / "csrc" / "tests" / "make_fuzz_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_list_is_the_runtimes():
    assert KINDS[:3] == ("const", "opencl", "cuda")
    assert len(set(KINDS)) == len(KINDS)
    source = (ROOT / "csrc" / "src" / "kinds" / "builtin.c").read_text()
    listed = re.findall(r"&mp_(\w+)_kind,", source)
    assert tuple(listed) == KINDS


@pytest.mark.parametrize("key", KINDS)
def test_each_kind_has_every_place_of_the_recipe(key):
    c_folder = ROOT / "csrc" / "src" / "kinds" / key
    assert c_folder.is_dir(), f"csrc/src/kinds/{key}/"
    assert (ROOT / "csrc" / "include" / "modpack" / "kinds" / f"{key}.h").is_file()
    if launch_tags(key):  # a device kind: the template's files
        for name in (f"{key}_module.h", f"{key}_payload.c", f"{key}_module.c",
                     f"{key}_preflight.c"):
            assert (c_folder / name).is_file(), f"csrc/src/kinds/{key}/{name}"
    assert (ROOT / "modpack" / "modules" / key / "__init__.py").is_file()
    assert callable(getattr(modpack, f"{key}_module")), f"modpack.{key}_module"
    assert (ROOT / "csrc" / "tests" / f"test_{key}_payload.c").is_file()
    readme = (ROOT / "README.md").read_text()
    assert f"| `{key}` |" in readme, f"README.md's module-kind table has no row for {key}"
    formats = (ROOT / "docs" / "format.md").read_text()
    assert f"| `{key}` |" in formats, f"docs/format.md's kind table has no row for {key}"


def test_the_fuzz_corpus_has_writer_seeds_of_every_kind():
    maker = _corpus_maker()
    made = {module.type_key for module in maker.writer_modules().values()}
    assert set(KINDS) <= made, set(KINDS) - made
    # Selectors: blob, weight file, weights payload, then the list in its order (as
    # fuzz_payloads.c numbers them).
    assert [maker.SELECTOR[k] for k in KINDS] == list(range(3, 3 + len(KINDS)))


def test_no_hand_written_kind_lists_remain():
    fuzz = (ROOT / "csrc" / "tests" / "fuzz_payloads.c").read_text()
    assert '"opencl"' not in fuzz and "mp_builtin_kind" in fuzz
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "opencl_payload" not in cmake and "test_*_payload.c" in cmake
