"""Long operations on large files show their progress (modpack/progress.py): a bar on a
terminal, INFO lines on ``modpack.progress`` elsewhere (bytes, total, throughput; a line when
each starts and ends), for exports, save_weights, sign, verify, extract and signed loads; the
command line prints those lines on stderr; below ``MODPACK_PROGRESS_MIN_BYTES`` (64 MiB by
default; small here) an operation says nothing."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import VADD_C
from test_signing import write_key

import modpack
from modpack import progress
from modpack.format.signatures import sign_library
from modpack.tools.extraction import extract_library

ARRAY = np.arange(1 << 18, dtype=np.float32)  # 1 MiB


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "modpack.progress"]


def said(messages: list[str], head: str) -> bool:
    """Whether |messages| hold |head|'s first line (its size) and its last (done, bytes in
    seconds, throughput)."""
    started = any(re.fullmatch(rf"{re.escape(head)}: \d+\.\d (KiB|MiB)", m) for m in messages)
    ended = any(re.fullmatch(rf"{re.escape(head)}: done, \d+\.\d (KiB|MiB) in \d+\.\d\d s "
                             r"\(\d+ MB/s\)", m) for m in messages)
    return started and ended


@pytest.fixture
def reporting(monkeypatch, caplog):
    """Operations of 64 KiB and more report, and modpack.progress records are captured."""
    monkeypatch.setenv("MODPACK_PROGRESS_MIN_BYTES", str(64 << 10))
    caplog.set_level(logging.INFO, logger="modpack.progress")
    return caplog


def tree() -> modpack.Module:
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": ARRAY}))
    return host


def test_every_long_operation_reports_its_progress(reporting, tmp_path):
    """export_library, save_weights, sign_library, verify_library, extract_library and a
    signed load each say when they start (the bytes) and end (bytes, seconds, MB/s)."""
    caplog = reporting
    library = tree().export_library(tmp_path / "deploy.so")
    assert said(lines(caplog), "export deploy.so")
    weights = modpack.save_weights({"w": ARRAY}, tmp_path / "w.mpw")
    assert said(lines(caplog), "save w.mpw")
    private, public = write_key(tmp_path, "key")
    sign_library(library, private)
    assert said(lines(caplog), f"sign {library}")
    assert f"sign {library}: seal checked" in " ".join(lines(caplog))
    sign_library(weights, private)
    assert said(lines(caplog), f"sign {weights}")
    assert modpack.verify_library(library, [public])["ok"]
    assert said(lines(caplog), f"verify {library}")
    assert any(m.startswith(f"verify {library}: signatures checked (") for m in lines(caplog))
    extract_library(library, tmp_path / "out")
    assert said(lines(caplog), f"extract {library}")
    modpack.load_module(library, trusted_keys=[public])
    assert said(lines(caplog), f"load (signed) {library}")


def test_small_operations_say_nothing(monkeypatch, caplog, tmp_path):
    """Under the threshold (its default, 64 MiB), none of them logs a line: exporting a
    kilobyte is not news."""
    monkeypatch.delenv("MODPACK_PROGRESS_MIN_BYTES", raising=False)
    caplog.set_level(logging.INFO, logger="modpack.progress")
    library = tree().export_library(tmp_path / "deploy.so")
    modpack.save_weights({"w": ARRAY}, tmp_path / "w.mpw")
    private, public = write_key(tmp_path, "key")
    sign_library(library, private)
    modpack.verify_library(library, [public])
    extract_library(library, tmp_path / "out")
    modpack.load_module(library, trusted_keys=[public])
    assert lines(caplog) == []
    assert progress.min_bytes() == 64 << 20


def test_lines_while_it_runs_say_how_far(reporting):
    """Between the first and the last line, one every few seconds (here: every update) with
    the bytes done, the total, the share and the throughput; a failed operation has no last
    line."""
    caplog = reporting
    progress._INTERVAL, interval = 0.0, progress._INTERVAL
    try:
        with progress.Progress("copy", "big.bin", 4 << 20) as p:
            for _ in range(4):
                p(1 << 20)
        with pytest.raises(RuntimeError), progress.Progress("copy", "bad.bin", 1 << 20):
            raise RuntimeError
    finally:
        progress._INTERVAL = interval
    messages = lines(caplog)
    assert "copy big.bin: 2.0 MiB of 4.0 MiB (50 %), " in " | ".join(messages)
    assert re.search(r"copy big\.bin: 4\.0 MiB of 4\.0 MiB \(100 %\), \d+ MB/s",
                     " ".join(messages))
    assert messages[-1] == "copy bad.bin: 1.0 MiB"  # started, never said done


def test_a_terminal_gets_a_bar_and_no_lines(reporting, monkeypatch):
    """On a terminal, tqdm's bar (the build extra) and no line; without tqdm (a load-only
    install), lines."""
    caplog = reporting

    class Terminal:
        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(progress.sys, "stderr", Terminal())
    with progress.Progress("save", "w.mpw", 1 << 20) as p:
        assert p._bar is not None and p._bar.total == 1 << 20
        p(1 << 19)
    assert lines(caplog) == []
    real = progress.importlib.import_module

    def no_tqdm(name: str, *args: object) -> object:
        if name == "tqdm":
            raise ImportError("No module named 'tqdm'")
        return real(name, *args)

    monkeypatch.setattr(progress.importlib, "import_module", no_tqdm)
    with progress.Progress("save", "w.mpw", 1 << 20) as p:
        assert p._bar is None
    assert said(lines(caplog), "save w.mpw")


def test_the_command_line_prints_the_lines_on_stderr(tmp_path):
    """modpack sign, verify and extract off a terminal: the lines on stderr (CI logs), the
    report alone on stdout (--json stays JSON)."""
    library = tree().export_library(tmp_path / "deploy.so")
    private, public = write_key(tmp_path, "key")
    env = {**os.environ, "MODPACK_PROGRESS_MIN_BYTES": str(64 << 10)}

    def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "modpack", *map(str, args)], env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc

    signed = cli("sign", library, "--key", private)
    assert said(signed.stderr.splitlines(), f"sign {library}"), signed.stderr
    verified = cli("verify", library, "--key", public, "--json")
    assert said(verified.stderr.splitlines(), f"verify {library}"), verified.stderr
    assert json.loads(verified.stdout)["ok"] is True
    extracted = cli("extract", library, tmp_path / "out")
    assert said(extracted.stderr.splitlines(), f"extract {library}"), extracted.stderr
    quiet = subprocess.run([sys.executable, "-m", "modpack", "verify", str(library)],
                           capture_output=True, text=True)  # the default threshold: silent
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_the_threshold_variable(monkeypatch):
    """A count of bytes; 0 reports everything; anything else is the default."""
    for value, expected in (("0", 0), ("4096", 4096), ("", 64 << 20), ("lots", 64 << 20),
                            ("-5", 0)):
        monkeypatch.setenv("MODPACK_PROGRESS_MIN_BYTES", value)
        assert progress.min_bytes() == expected, value
