"""Progress of a layer's transfer: a bar per layer on a terminal (tqdm, which the build extra
installs), else INFO lines on the ``modpack.oci`` logger when a layer starts and ends (CI
logs, files, pipes: a bar there is noise)."""

from __future__ import annotations

import importlib
import logging
import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["LayerProgress"]

log = logging.getLogger("modpack.oci")


class LayerProgress:
    """``with LayerProgress("pull", "deploy.so", size, bar=None) as p: p(n)`` per n bytes.
    |bar| None: a bar when stderr is a terminal and tqdm is installed."""

    def __init__(self, verb: str, name: str, total: int, *, bar: bool | None = None,
                 start: int = 0) -> None:
        self.verb, self.name, self.total, self.done = verb, name, total, start
        self._bar: Any = None
        if bar is None:
            bar = sys.stderr.isatty()
        if bar:
            try:
                tqdm = importlib.import_module("tqdm").tqdm
                self._bar = tqdm(total=total, initial=start, unit="B", unit_scale=True,
                                 unit_divisor=1024, desc=f"{verb} {name}", leave=True)
            except ImportError:
                self._bar = None
        self._start = time.perf_counter()

    def __enter__(self) -> LayerProgress:
        if self._bar is None:
            resumed = f", resuming at {self.done} bytes" if self.done else ""
            log.info("%s %s: %s%s", self.verb, self.name, _size(self.total), resumed)
        return self

    def __call__(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        seconds = time.perf_counter() - self._start
        if self._bar is not None:
            self._bar.close()
        elif kind is None:
            rate = self.done / seconds / 1e6 if seconds > 0 else 0.0
            log.info("%s %s: done, %s in %.2f s (%.0f MB/s)", self.verb, self.name,
                     _size(self.done), seconds, rate)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover
