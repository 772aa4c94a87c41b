"""Progress of long operations on large files: exports, ``save_weights``, ``sign``,
``verify``, ``extract``, signed loads (and, on the ``modpack.oci`` logger, pushes and pulls).

On a terminal (stderr is one) with tqdm installed (the build extra), a bar; anywhere else (CI
logs, files, pipes, where a bar is noise, or without tqdm) INFO lines on the
``modpack.progress`` logger: one when the operation starts, one every few seconds with the
bytes done, the total and the throughput, and one when it ends. Only operations on at least
``MODPACK_PROGRESS_MIN_BYTES`` bytes (default 64 MiB) report: a small one stays silent. The
command line sends these lines to stderr; a program gets them where its logging sends
``modpack.progress`` records, e.g. ``logging.basicConfig(level=logging.INFO)``.

    with Progress("sign", path, size) as progress:
        for chunk in chunks:
            ...
            progress(len(chunk))
        progress.phase("signature")  # a step whose bytes are not counted one by one
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["MIN_BYTES_VARIABLE", "Progress", "min_bytes", "size_text"]

log = logging.getLogger("modpack.progress")

MIN_BYTES_VARIABLE = "MODPACK_PROGRESS_MIN_BYTES"
_DEFAULT_MIN_BYTES = 64 << 20
_INTERVAL = 5.0  # seconds between two lines while it runs


def min_bytes() -> int:
    """The size from which an operation reports: ``$MODPACK_PROGRESS_MIN_BYTES`` (bytes; 0:
    every operation), else 64 MiB."""
    value = os.environ.get(MIN_BYTES_VARIABLE, "")
    try:
        return max(0, int(value)) if value.strip() else _DEFAULT_MIN_BYTES
    except ValueError:
        return _DEFAULT_MIN_BYTES


class Progress:
    """``with Progress(verb, name, total) as p: p(n)`` for each |n| bytes done.

    |verb| and |name| make the lines' head (``"sign deploy.so"``); |total| is the bytes the
    operation goes through. |bar|: True or False forces a bar or lines, None (the default)
    draws a bar when stderr is a terminal and tqdm is installed. |start|: bytes already done
    (a resumed download). |logger|: where lines go (``modpack.progress``). |threshold|: the
    smallest |total| that reports (None: :func:`min_bytes`). Calls after an exception inside
    the block end the bar and log no final line."""

    def __init__(self, verb: str, name: str | os.PathLike[str], total: int, *,
                 bar: bool | None = None, start: int = 0, logger: logging.Logger = log,
                 threshold: int | None = None) -> None:
        self.verb, self.name, self.total, self.done = verb, os.fspath(name), total, start
        self._log = logger
        self._bar: Any = None
        self._lines = False
        if total < (min_bytes() if threshold is None else threshold):
            return
        if bar is None:
            bar = sys.stderr.isatty()
        if bar:
            try:
                tqdm = importlib.import_module("tqdm").tqdm
                self._bar = tqdm(total=total, initial=start, unit="B", unit_scale=True,
                                 unit_divisor=1024, desc=f"{verb} {self.name}", leave=True,
                                 dynamic_ncols=True)
            except ImportError:  # a load-only install: lines instead
                self._bar = None
        self._lines = self._bar is None and logger.isEnabledFor(logging.INFO)
        self._start = self._last = time.perf_counter()
        self._counted = start

    def __enter__(self) -> Progress:
        if self._lines:
            resumed = f", resuming at {self.done} bytes" if self.done else ""
            self._log.info("%s %s: %s%s", self.verb, self.name, size_text(self.total), resumed)
        return self

    def __call__(self, n: int) -> None:
        """|n| more bytes done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._lines:
            now = time.perf_counter()
            if now - self._last >= _INTERVAL:
                self._last = now
                share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
                self._log.info("%s %s: %s of %s%s, %s", self.verb, self.name,
                               size_text(self.done), size_text(self.total), share,
                               _rate(self.done - self._counted, now - self._start))

    update = __call__  # tqdm's name, for loops written against a bar

    def phase(self, what: str) -> None:
        """A step done whose bytes were not counted (the runtime's checks, which run in C):
        said on the bar, or as a line with the time so far."""
        if self._bar is not None:
            self._bar.set_postfix_str(what, refresh=True)
        elif self._lines:
            self._log.info("%s %s: %s (%.2f s)", self.verb, self.name, what,
                           time.perf_counter() - self._start)

    def failed(self) -> None:
        """The operation failed without raising inside the block (a status code): no final
        line, and the bar is left where it stopped."""
        self._lines = False
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            if kind is None and self.done < self.total:
                self._bar.update(self.total - self.done)  # what was not counted byte by byte
            self._bar.close()
        elif self._lines and kind is None:
            seconds = time.perf_counter() - self._start
            done = max(self.done, self.total)
            self._log.info("%s %s: done, %s in %.2f s (%s)", self.verb, self.name,
                           size_text(done), seconds, _rate(done - self._counted, seconds))


def size_text(n: int) -> str:
    """|n| bytes as people read them: ``"512 bytes"``, ``"2.0 GiB"``."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:.0f} MB/s" if seconds > 0 else "- MB/s"
