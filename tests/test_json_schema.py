"""Every ``--json`` output and every JSON file ``modpack extract`` writes carries
``schema_version`` first, and its top-level keys are the ones docs/json.md documents for it, in
that order (the registry's ``pull --json`` is checked in test_oci.py); the TypedDicts of
``verify_library`` and ``preflight`` name the same keys."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import VADD_C
from json_docs import check_keys, sections

import modpack
from modpack.cli.main import build_parser
from modpack.reports import PreflightReport, VerifyReport


def cli(*args: str | Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "modpack", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert proc.returncode in (0, 1), proc.stderr
    output: dict[str, Any] = json.loads(proc.stdout)
    return output


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """A library with a const module, metadata and a self-test: every optional part shows."""
    tmp = tmp_path_factory.mktemp("json")
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(4, dtype=np.float32)}))
    return host.export_library(tmp / "deploy.so", metadata={"model": "json"},
                               selftests=[modpack.SelfTest("add_int", [2, 3], returns=5)])


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return modpack.save_weights({"w": np.ones(3, np.float32)},
                                tmp_path_factory.mktemp("json-w") / "w.mpw")


def test_inspect_verify_preflight_selftest(library, weights, tmp_path):
    """Each command's --json, for a library and (inspect, verify) a weight file."""
    check_keys(cli("inspect", library, "--json"), "`modpack inspect --json` (a library)")
    check_keys(cli("inspect", weights, "--json"), "`modpack inspect --json` (a weight file)")
    check_keys(cli("verify", library, "--json"), "`modpack verify --json`")
    check_keys(cli("verify", weights, "--json"), "`modpack verify --json`")
    check_keys(cli("preflight", library, "--device", "host", "--json"),
               "`modpack preflight --json`")
    check_keys(cli("selftest", library, "--json"), "`modpack selftest --json`")
    check_keys(cli("cache", "list", "--json", env={"MODPACK_CACHE": str(tmp_path / "store")}),
               "`modpack cache list --json`")


def test_a_foreign_library_and_a_tar_keep_the_schema(tmp_path):
    """A library modpack did not make (producer null) and a .tar export have the same keys."""
    source = tmp_path / "f.c"
    source.write_text("int f(void) { return 1; }\n")
    foreign = tmp_path / "libforeign.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", foreign, source], check=True)
    report = cli("inspect", foreign, "--json")
    assert report["producer"] is None
    check_keys(report, "`modpack inspect --json` (a library)")
    tar = modpack.csource_module(VADD_C).export_library(tmp_path / "deploy.tar")
    check_keys(cli("inspect", tar, "--json"), "`modpack inspect --json` (a library)")


def test_what_extract_writes(library, weights, tmp_path):
    """manifest.json (a library's, with its metadata and self-test files; a weight file's) and
    selftests.json."""
    assert subprocess.run([sys.executable, "-m", "modpack", "extract", str(library),
                           str(tmp_path / "lib")]).returncode == 0
    manifest = json.loads((tmp_path / "lib" / "manifest.json").read_text())
    check_keys(manifest, "`modpack extract`: `manifest.json` (a library)")
    assert manifest["metadata_file"] == "metadata.json"
    assert manifest["selftests_file"] == "selftests.json"
    check_keys(json.loads((tmp_path / "lib" / "selftests.json").read_text()),
               "`modpack extract`: `selftests.json`")
    assert subprocess.run([sys.executable, "-m", "modpack", "extract", str(weights),
                           str(tmp_path / "w")]).returncode == 0
    check_keys(json.loads((tmp_path / "w" / "manifest.json").read_text()),
               "`modpack inspect --json` (a weight file)")


def test_every_json_flag_is_documented():
    """A command given --json gets a section of docs/json.md (or this test fails)."""
    parser = build_parser()
    commands: set[str] = set()

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for action in p._actions:
            if "--json" in action.option_strings:
                commands.add(prefix)
            if isinstance(action, argparse._SubParsersAction):  # a command's subcommands
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())

    walk(parser, "")
    titles = " ".join(sections())
    for command in commands:
        assert f"`modpack {command} --json`" in titles, f"modpack {command} --json"
    assert {"inspect", "verify", "preflight", "selftest", "pull", "cache list"} <= commands


def test_the_typed_reports_name_the_documented_keys():
    """``modpack.reports``' TypedDicts, which mypy checks users against, and the page agree."""
    for typed, title in ((VerifyReport, "`modpack verify --json`"),
                         (PreflightReport, "`modpack preflight --json`")):
        keys, _ = sections()[title]
        assert ["schema_version", *typed.__annotations__] == keys, title
