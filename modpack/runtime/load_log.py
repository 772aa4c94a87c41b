"""Load phases for the ``modpack.load`` logger (:mod:`modpack.log`), from the runtime.

The runtime times each phase of a load (core/trace.h) and reports it to stderr when
``MODPACK_LOG_LOADING`` is set, and to a callback when one is installed. The callback, which
calls into Python, is installed only while ``modpack.load`` is enabled for ``DEBUG``:
:func:`follow_logger` runs at the start of each load (one level check when logging is off)
and installs or removes it when the logger's level changed since. A load with logging off
thus makes no call into Python.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..log import load_log
from .binding import ffi, lib

__all__ = ["follow_logger"]

_installed = False


def follow_logger() -> None:
    """Install the runtime's phase callback if ``modpack.load`` logs ``DEBUG``, remove it if
    not (only when that changed)."""
    global _installed
    wanted = load_log.isEnabledFor(logging.DEBUG)
    if wanted is not _installed:
        lib.mp_trace_set_callback(lib._mp_py_load_phase if wanted else ffi.NULL)
        _installed = wanted


@ffi.def_extern()
def _mp_py_load_phase(path: Any, phase: Any, ms: float, detail: Any) -> None:
    shown = "<unnamed>" if path == ffi.NULL else os.fsdecode(ffi.string(path))
    name = ffi.string(phase).decode("utf-8", "replace")
    more = ffi.string(detail).decode("utf-8", "replace")
    load_log.debug("load %s: %s %.3f ms%s", shown, name, ms, f"  {more}" if more else "",
                   extra={"load_path": shown, "phase": name, "duration_ms": ms})


# Asked once now: a logger's first level check takes its cache-miss path (a lock and an
# exception, about 15 us), which would otherwise land in the process's first load.
follow_logger()
