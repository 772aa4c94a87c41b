"""A writer racing loads, as a hostile local user would race them: another process rewrites a
region of a file, flipping it between two versions every few hundred microseconds, while the
test loads the file over and over and counts what each load did."""

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


def race(path: Path, at: int, versions: tuple[bytes, bytes], load: Callable[[], str],
         loads: int = 200) -> dict[str, int]:
    """Run |load| |loads| times while another process flips the bytes at |at| of |path|
    between |versions| (of one length), and count the outcomes: what |load| returns ("loaded",
    say), or the class name of a ModpackError it raises (a load that wants finer outcomes
    catches its errors and returns them). Anything else it raises fails the test."""
    assert len(versions[0]) == len(versions[1])
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIP, str(path), str(at), versions[0].hex(), versions[1].hex()],
        stdout=subprocess.PIPE, text=True)
    outcomes: dict[str, int] = {}
    try:
        assert flipper.stdout is not None and flipper.stdout.readline() == "flipping\n"
        for _ in range(loads):
            try:
                outcome = load()
            except modpack.ModpackError as e:
                outcome = type(e).__name__
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        flipper.kill()
        flipper.wait()
    return outcomes
