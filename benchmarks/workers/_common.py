"""What every benchmark worker shares: memory readings, timers, and the way a worker reports.

A worker is run by ``benchmarks/run.py`` in a fresh child process, as
``python workers/<name>.py '<json arguments>'``, and prints one JSON object as the last line of
its stdout. This file uses only the standard library, so it also runs in a TVM virtualenv.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

MiB = 1 << 20


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmRSS: resident now, VmHWM: peak resident)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def rss() -> int:
    return status_bytes("VmRSS")


def peak_rss() -> int:
    return status_bytes("VmHWM")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def children_peak_rss() -> int:
    """The largest ru_maxrss of any waited-for descendant. Caution: Linux keeps the high-water
    mark across exec, so a child forked from a big process inherits the parent's RSS into this
    figure; the tool wrapper of run.py gives the true figure of each compiler/linker."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def meminfo_bytes(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class ShmemSampler:
    """Samples the machine-wide ``Shmem`` of /proc/meminfo (tmpfs such as /dev/shm) every few
    ms while active; ``peak_increase`` is the largest rise over the value at the start. Other
    processes' tmpfs use adds noise, so read it as an estimate."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start = self.peak = meminfo_bytes("Shmem")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, meminfo_bytes("Shmem"))

    def __enter__(self) -> ShmemSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_increase(self) -> int:
        return self.peak - self.start


def tool_log(path: str | None) -> list[dict[str, Any]]:
    """Parse the wrapper's log: one ``<seconds> <max RSS KiB> <command...>`` line per tool."""
    if not path or not Path(path).exists():
        return []
    out = []
    for line in Path(path).read_text().splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[1].isdigit():
            continue  # e.g. "Command exited with non-zero status 1"
        command = parts[2] if len(parts) > 2 else ""
        out.append({"seconds": float(parts[0]), "peak_rss": int(parts[1]) * 1024,
                    "tool": _tool_kind(command), "command": command[:300]})
    return out


def toolchain_peak(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest toolchain RSS: from the wrapper's log, else (no GNU time) RUSAGE_CHILDREN,
    which overstates it (see children_peak_rss)."""
    if tools:
        return {"toolchain_peak": max(t["peak_rss"] for t in tools),
                "toolchain_peak_source": "GNU time wrapper"}
    return {"toolchain_peak": children_peak_rss(),
            "toolchain_peak_source": "RUSAGE_CHILDREN (an upper bound)"}


def _tool_kind(command: str) -> str:
    words = command.split()
    if "-dumpmachine" in words:
        return "probe"
    if "-shared" in words:
        return "link"
    sources = [w for w in words if w.endswith((".S", ".s"))]
    if "-c" in words and sources:
        return "assemble"
    if "-c" in words:
        return "compile"
    return "other"


def now() -> float:
    return time.perf_counter()


def args() -> dict[str, Any]:
    return json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def emit(result: dict[str, Any]) -> None:
    """Report |result| to run.py (the last line of stdout)."""
    result.setdefault("pid", os.getpid())
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


HOST_C = r"""
#include "modpack/backend.h"

/* y = x + 1 on an int64 scalar */
static int64_t add_one_scalar(int64_t x) { return x + 1; }
MP_EXPORT_FUNC(add_one_scalar, int64_t, int64_t)

/* out[i] = x[i] + 1 on float32 vectors */
static void add_one(DLTensor* x, DLTensor* out) {
  const float* xv = (const float*)x->data;
  float* ov = (float*)out->data;
  for (int64_t i = 0; i < x->shape[0]; ++i) ov[i] = xv[i] + 1.0f;
}
MP_EXPORT_VOID_FUNC(add_one, DLTensor*, DLTensor*)
"""

# The like-for-like row: the same C loop compiled into both runtimes' libraries by the same
# compiler at the same level (cc -O2 for modpack, c++ -O2 for tvm-ffi's typed export), so the
# rows compare the runtimes, not gcc's code against TVM's vectorised LLVM IR.
ADD_ONE_LOOP = r"""
static void add_one_loop(const float* xv, float* ov, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ov[i] = xv[i] + 1.0f;
}
"""

SAME_C_MODPACK = r"""
#include "modpack/backend.h"
""" + ADD_ONE_LOOP + r"""
static void add_one(DLTensor* x, DLTensor* out) {
  add_one_loop((const float*)x->data, (float*)out->data, x->shape[0]);
}
MP_EXPORT_VOID_FUNC(add_one, DLTensor*, DLTensor*)
"""

SAME_C_TVM = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
extern "C" {
""" + ADD_ONE_LOOP + r"""
}
static void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView out) {
  add_one_loop(static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()),
               x.shape()[0]);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, add_one);
"""
