"""A writer racing loads, as a hostile local user would race them: another process rewrites a
region of a file, flipping it between two versions every few hundred microseconds (or renames
whole versions over its path, as updates are made), while the test loads the file over and over
and counts what each load did."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import modpack

FLIP = r"""
import os, sys, time
path, at = sys.argv[1], int(sys.argv[2])
versions = [bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])]
fd = os.open(path, os.O_WRONLY)
print("flipping", flush=True)
flips = 0
while True:
    os.pwrite(fd, versions[flips % 2], at)
    flips += 1
    time.sleep(0.0003)
"""


RENAME = r"""
import os, sys, time
path, versions = sys.argv[1], sys.argv[2:]
print("renaming", flush=True)
renames = 0
while True:
    new = f"{path}.new"
    with open(versions[renames % 2], "rb") as f, open(new, "wb") as out:
        out.write(f.read())
    os.replace(new, path)
    renames += 1
    time.sleep(0.0003)
"""


def race(path: Path, at: int, versions: tuple[bytes, bytes], load: Callable[[], str],
         loads: int = 200) -> dict[str, int]:
    """Run |load| |loads| times while another process flips the bytes at |at| of |path|
    between |versions| (of one length), and count the outcomes: what |load| returns ("loaded",
    say), or the class name of a ModpackError it raises (a load that wants finer outcomes
    catches its errors and returns them). Anything else it raises fails the test."""
    assert len(versions[0]) == len(versions[1])
    return _while_running([FLIP, str(path), str(at), versions[0].hex(), versions[1].hex()],
                          "flipping", load, loads)


def race_renames(path: Path, versions: tuple[Path, Path], load: Callable[[], str],
                 loads: int = 200) -> dict[str, int]:
    """As race, with another process writing copies of the files |versions| in turn beside
    |path| and renaming each over it."""
    return _while_running([RENAME, str(path), *map(str, versions)], "renaming", load, loads)


def _while_running(script: list[str], ready: str, load: Callable[[], str],
                   loads: int) -> dict[str, int]:
    writer = subprocess.Popen([sys.executable, "-c", *script], stdout=subprocess.PIPE, text=True)
    outcomes: dict[str, int] = {}
    try:
        assert writer.stdout is not None and writer.stdout.readline() == ready + "\n"
        for _ in range(loads):
            try:
                outcome = load()
            except modpack.ModpackError as e:
                outcome = type(e).__name__
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        writer.kill()
        writer.wait()
    return outcomes
