"""modpack's loggers, under ``logging.getLogger("modpack")``.

- ``modpack.load``: the phases of each load (file check, signature, weight files, dlopen,
  placing payloads, index, checksums, loaders + tree), each with its time, at ``DEBUG``: the
  same lines ``MODPACK_LOG_LOADING=1`` prints to stderr. The runtime reports them only while
  this logger is enabled for ``DEBUG`` (:mod:`modpack.runtime.load_log`), so a load costs
  nothing more when it is not.
- ``modpack.export``: the steps of ``export_library`` (compiling each host module, the link,
  writing the blob and its payloads, the weight file, the seal) with their times at
  ``DEBUG``, and one line per finished export at ``INFO``.
- ``modpack.progress``: the progress of long operations on large files at ``INFO``, where no
  bar is drawn (:mod:`modpack.progress`).

As a library should, modpack adds no handler but a ``NullHandler``: the application decides
where records go, e.g. ``logging.basicConfig(level=logging.DEBUG)``, or
``logging.getLogger("modpack").setLevel(logging.DEBUG)`` with a handler of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["export_log", "load_log", "logger", "timed"]

logger = logging.getLogger("modpack")
logger.addHandler(logging.NullHandler())
load_log = logging.getLogger("modpack.load")
export_log = logging.getLogger("modpack.export")


@contextmanager
def timed(log: logging.Logger, message: str, *args: object) -> Iterator[None]:
    """Log ``message % args`` and the time the block took at ``DEBUG`` once it ends well;
    nothing (not even a clock read) while |log| is not enabled for ``DEBUG``."""
    if not log.isEnabledFor(logging.DEBUG):
        yield
        return
    start = time.perf_counter()
    yield
    log.debug(message + ": %.1f ms", *args, (time.perf_counter() - start) * 1e3)
