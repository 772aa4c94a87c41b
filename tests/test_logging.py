"""The ``modpack`` logger: each load's phases (``modpack.load``, DEBUG, from the runtime) and
each export's steps (``modpack.export``); the runtime calls into Python for a load only while
``modpack.load`` logs DEBUG; ``MODPACK_LOG_LOADING`` still prints the phases to stderr."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import VADD_C

import modpack
from modpack.runtime import load_log

LOAD_PHASES = ["file check", "dlopen", "index", "checksums", "loaders + tree"]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(8, dtype=np.float32)}))
    return host.export_library(tmp_path_factory.mktemp("logging") / "logged.so")


def _phases(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.phase for r in caplog.records if r.name == "modpack.load"]


def test_a_load_logs_its_phases_at_debug(library, caplog):
    caplog.set_level(logging.DEBUG, logger="modpack")
    lib = modpack.load_module(library)
    assert lib["add_int"](2, 3) == 5
    assert _phases(caplog) == LOAD_PHASES
    for record in caplog.records:
        assert record.levelno == logging.DEBUG
        assert record.load_path == str(library)
        assert record.duration_ms >= 0
        assert record.getMessage().startswith(f"load {library}: {record.phase} ")
    checksums = next(r for r in caplog.records if r.phase == "checksums")
    assert "XXH3 over " in checksums.getMessage()


def test_loads_from_bytes_and_relinked_tar_exports_log_too(library, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="modpack.load")
    modpack.load_module_from_bytes(library.read_bytes())
    assert _phases(caplog) == LOAD_PHASES
    caplog.clear()
    host = modpack.csource_module(VADD_C)
    modpack.load_module(host.export_library(tmp_path / "relinked.tar"))
    assert "dlopen" in _phases(caplog)


def test_with_logging_off_the_runtime_does_not_call_into_python(library, caplog):
    caplog.set_level(logging.DEBUG, logger="modpack")
    modpack.load_module(library)
    assert load_log._installed
    caplog.clear()
    caplog.set_level(logging.INFO, logger="modpack")
    modpack.load_module(library)
    assert caplog.records == []
    assert not load_log._installed  # the callback was removed before the load


def test_a_disabled_logger_gets_nothing(library, caplog):
    caplog.set_level(logging.DEBUG, logger="modpack")
    logging.getLogger("modpack.load").disabled = True
    try:
        modpack.load_module(library)
    finally:
        logging.getLogger("modpack.load").disabled = False
    assert _phases(caplog) == []


def test_an_export_logs_its_steps(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="modpack")
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(1000, dtype=np.float32)}))
    out = host.export_library(tmp_path / "steps.so", weights=tmp_path / "steps.mpw")
    records = [r for r in caplog.records if r.name == "modpack.export"]
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert any(m.startswith("compile host module 0 (c): ") for m in debug), debug
    assert any(m.startswith("write weight file steps.mpw (1 arrays): ") for m in debug), debug
    assert any(m.startswith("write the blob: 2 modules, ") for m in debug), debug
    assert any(m.startswith("link ") for m in debug), debug
    assert any(m.startswith("seal steps.so: ") for m in debug), debug
    assert all(m.endswith(" ms") for m in debug)
    (info,) = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert info.startswith(f"exported {out} ({out.stat().st_size} bytes) in ")


def test_exports_log_nothing_below_their_level(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="modpack")
    modpack.csource_module(VADD_C).export_library(tmp_path / "quiet.so")
    assert caplog.records == []


def test_the_package_logs_only_to_a_null_handler_by_default():
    handlers = logging.getLogger("modpack").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_the_environment_variable_still_prints_the_phases(library):
    code = ("import logging, sys, modpack\n"
            "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n"
            "modpack.load_module(sys.argv[1])\n")
    env = {**os.environ, "MODPACK_LOG_LOADING": "1"}
    proc = subprocess.run([sys.executable, "-c", code, str(library)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = [line for line in proc.stderr.splitlines() if line.startswith("modpack: load ")]
    assert [line.split(": ")[2].split("  ")[0].strip() for line in printed] == LOAD_PHASES
    logged = [line for line in proc.stdout.splitlines() if line.startswith("load ")]
    assert len(logged) == len(LOAD_PHASES)  # both, when both are asked for
