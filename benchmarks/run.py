"""modpack benchmarks, side by side with Apache TVM when a TVM environment is given.

    python benchmarks/run.py [--quick] [--sizes 64,512,2048] [--repeats N]
                             [--out benchmarks/results/latest.json]

    MODPACK_BENCH_TVM_PYTHON=/path/to/tvm-venv/bin/python python benchmarks/run.py

Workloads (every measurement in a fresh child process, see workers/):
  W1  a tiny C host (add_one_scalar, add_one): first call from Python and from C
  W2  one large const payload (64 MiB, 512 MiB, 2 GiB): export time and peak RSS, load time
      and RSS growth with payload checksums on and off, warm and cold (the file dropped from
      the page cache, against the disk's sequential read of the same file), hash bandwidth
  W3  a host importing 10,000 const modules of 1 KiB: export and load time
  W4  the seal check of a 1 MiB host library

Prints one table (median of the repeats) and writes every raw figure as JSON.
See benchmarks/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tables
from tables import error_of, med, text_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKERS = HERE / "workers"
MiB = 1 << 20
GiB = 1 << 30

TOOL_WRAPPER = """#!/bin/sh
# Runs the real compiler/linker under GNU time, appending "<seconds> <max RSS KiB> <command>"
# to $MODPACK_BENCH_TOOL_LOG. The tool is forked from `time` (a small process), so its
# ru_maxrss is its own, not the exporting Python process's inherited high-water mark.
# (MODPACK_BENCH_REAL_TOOL is left unquoted so that a $CC such as "gcc -m64" still works.)
exec /usr/bin/time -a -o "$MODPACK_BENCH_TOOL_LOG" -f "%e %M %C" $MODPACK_BENCH_REAL_TOOL "$@"
"""


class WorkerFailed(RuntimeError):
    pass


# ---- running workers ------------------------------------------------------------------------


class Bench:
    def __init__(self, opts: argparse.Namespace, work: Path) -> None:
        self.opts = opts
        self.work = work
        self.tvm_python = os.environ.get("MODPACK_BENCH_TVM_PYTHON") or None
        self.wrapper: Path | None = None
        if Path("/usr/bin/time").exists():
            self.wrapper = work / "tool-wrapper.sh"
            self.wrapper.write_text(TOOL_WRAPPER)
            self.wrapper.chmod(0o755)
        self.raw: dict[str, dict[str, Any]] = {"modpack": {}, "tvm": {}}
        self.started = time.monotonic()

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    def worker(self, side: str, script: str, params: dict[str, Any],
               tool_var: str | None = None, timeout: float = 1800) -> dict[str, Any]:
        """Run workers/|script| with the side's Python in a fresh process; its last stdout line
        is the JSON result. |tool_var| ("CC" or "CXX") routes the toolchain through the wrapper
        so its peak RSS is measured."""
        python = sys.executable if side == "modpack" else self.tvm_python
        assert python is not None
        env = dict(os.environ)
        env.pop("MODPACK_BENCH_TVM_PYTHON", None)
        params = dict(params)
        if tool_var and self.wrapper:
            log = self.work / f"tools-{time.monotonic_ns()}.log"
            default = "cc" if tool_var == "CC" else "g++"
            env["MODPACK_BENCH_REAL_TOOL"] = os.environ.get(tool_var) or default
            env["MODPACK_BENCH_TOOL_LOG"] = str(log)
            env[tool_var] = str(self.wrapper)
            params["tool_log"] = str(log)
        cap = int(self.opts.mem_cap_gib * GiB)

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        cmd = [python, str(WORKERS / script), json.dumps(params)]
        if self.opts.sync:
            os.sync()  # start from no dirty pages, so earlier writes do not throttle this one
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=WORKERS,
                                  timeout=timeout, preexec_fn=limit if cap > 0 else None)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(
                f"{script} {params.get('mode')}: timed out after {timeout:.0f}s") from None
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise WorkerFailed(f"{script} {params.get('mode')}: exit {proc.returncode}: "
                               f"{_tail(proc.stderr + proc.stdout)}")
        return json.loads(lines[-1])

    def repeat(self, side: str, key: str, count: int, fn: Callable[[int], dict[str, Any]]
               ) -> list[dict[str, Any]]:
        """Run fn(i) |count| times, storing results (or the error) under raw[side][key]."""
        results = self.raw[side].setdefault(key, [])
        for i in range(count):
            try:
                results.append(fn(i))
            except WorkerFailed as exc:
                self.log(f"{side} {key}: FAILED: {exc}")
                results.append({"error": str(exc)})
                break
        return results


def _tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-1200:]


# ---- the workloads --------------------------------------------------------------------------


def w1_first_call(b: Bench, side: str, c_program: Path | None) -> None:
    script = "mp_first_call.py" if side == "modpack" else "tvm_first_call.py"
    lib = b.work / f"{side}-tiny.so"
    b.log(f"{side} W1: tiny host, first call")
    exported = b.repeat(side, "w1_export", 1, lambda _: b.worker(
        side, script, {"mode": "export", "out": str(lib)}))
    if "error" in exported[-1]:
        return
    for kind in ("scalar", "array"):
        b.repeat(side, f"w1_python_{kind}", b.opts.repeats, lambda _, k=kind: b.worker(
            side, script, {"mode": "call", "path": str(lib), "kind": k}))
        if c_program is not None:
            b.repeat(side, f"w1_c_{kind}", b.opts.repeats, lambda _, k=kind: run_c(
                c_program, lib, k))
    # The host code like for like: the same C loop in both libraries (_common.ADD_ONE_LOOP).
    same = b.work / f"{side}-same-c.so"
    exported = b.repeat(side, "w1_export_same_c", 1, lambda _: b.worker(
        side, script, {"mode": "export", "out": str(same), "same_c": True}))
    if "error" in exported[-1]:
        return
    b.repeat(side, "w1_python_same_c", b.opts.repeats, lambda _: b.worker(
        side, script, {"mode": "call", "path": str(same), "kind": "array"}))
    if c_program is not None:
        b.repeat(side, "w1_c_same_c", b.opts.repeats, lambda _: run_c(c_program, same, "array"))


def run_c(program: Path, lib: Path, kind: str) -> dict[str, Any]:
    proc = subprocess.run([str(program), str(lib), kind, "100000"], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise WorkerFailed(f"{program.name} {kind}: exit {proc.returncode}: "
                           f"{_tail(proc.stderr + proc.stdout)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def w2_large(b: Bench, side: str, size_mib: int) -> None:
    size = size_mib * MiB
    repeats = b.opts.repeats if size_mib < 2048 else min(b.opts.repeats, b.opts.big_repeats)
    lib = b.work / f"{side}-large-{size_mib}.so"
    key = f"w2_{size_mib}"
    if side == "modpack":
        script, tool_var = "mp_large.py", "CC"
    else:
        script, tool_var = "tvm_large.py", "CXX"
    b.log(f"{side} W2 {size_mib} MiB: export x{repeats}")
    exports = b.repeat(side, f"{key}_export", repeats, lambda _: b.worker(
        side, script, {"mode": "export", "size": size, "seed": 1, "out": str(lib)},
        tool_var=tool_var))
    if side == "modpack":  # the floor, in the same minutes: one plain write of the payload
        floors = [b.work / f"{side}-write-{size_mib}-{i}.bin" for i in range(repeats)]
        b.repeat(side, f"{key}_write", repeats, lambda i: b.worker(
            side, script, {"mode": "write", "size": size, "seed": 1, "out": str(floors[i])}))
        for floor in floors:  # each a new file, as each export's is
            floor.unlink(missing_ok=True)
    ok = [r for r in exports if "error" not in r]
    if not ok or not lib.exists():
        lib.unlink(missing_ok=True)
        return
    digest = ok[0]["digest"]
    b.log(f"{side} W2 {size_mib} MiB: load x{repeats}")
    if side == "modpack":
        for _ in range(repeats):  # interleaved, so drift hits both alike
            for verify in (False, True):
                b.repeat(side, f"{key}_load_{'on' if verify else 'off'}", 1, lambda _, v=verify:
                         b.worker(side, script, {"mode": "load", "path": str(lib), "size": size,
                                                 "verify": v, "digest": digest}))
            b.repeat(side, f"{key}_mmap_hash", 1, lambda _: b.worker(
                side, script, {"mode": "mmap_hash", "path": str(lib)}))
        b.log(f"{side} W2 {size_mib} MiB: cold load and sequential read x{repeats}")
        for _ in range(repeats):  # each from a dropped page cache, the same file
            b.repeat(side, f"{key}_load_cold", 1, lambda _: cold(b, lib, lambda: b.worker(
                side, script, {"mode": "load", "path": str(lib), "size": size, "verify": True,
                               "digest": digest})))
            b.repeat(side, f"{key}_seq_read", 1, lambda _: cold(b, lib, lambda: b.worker(
                side, script, {"mode": "seq_read", "path": str(lib)})))
    else:
        b.repeat(side, f"{key}_load", repeats, lambda _: b.worker(
            side, script, {"mode": "load", "path": str(lib), "size": size, "digest": digest}))
    lib.unlink(missing_ok=True)
    # The same tree as a .tar (objects linked at load time, by both runtimes).
    tar = b.work / f"{side}-large-{size_mib}.tar"
    b.log(f"{side} W2 {size_mib} MiB: .tar export and load x{repeats}")
    b.repeat(side, f"{key}_tar_export", repeats, lambda _: b.worker(
        side, script, {"mode": "export", "size": size, "seed": 1, "out": str(tar)},
        tool_var=tool_var))
    if tar.exists():
        b.repeat(side, f"{key}_tar_load", repeats, lambda _: b.worker(
            side, script, {"mode": "load", "path": str(tar), "size": size, "verify": True,
                           "digest": digest}))
    tar.unlink(missing_ok=True)


def cold(b: Bench, path: Path, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """measure() with |path| dropped from the page cache first (its pages are clean after
    fsync, so POSIX_FADV_DONTNEED evicts them without privileges); records how much of the
    file was still cached, when `fincore` can tell."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    resident = None
    if shutil.which("fincore"):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, check=False).stdout.strip()
        resident = int(out) if out.isdigit() else None
    result = measure()
    result["resident_before"] = resident
    return result


def w4_seal(b: Bench) -> None:
    b.log("modpack W4: seal check of a 1 MiB host library")
    b.repeat("modpack", "w4_seal", b.opts.repeats, lambda _: b.worker(
        "modpack", "mp_large.py", {"mode": "seal", "out": str(b.work / "seal-host.so")}))


def w3_many(b: Bench, side: str) -> None:
    count = b.opts.modules
    lib = b.work / f"{side}-many.so"
    script = "mp_many.py" if side == "modpack" else "tvm_many.py"
    b.log(f"{side} W3 {count} modules: export and load x{b.opts.repeats}")
    params = {"count": count, "each": 1024, "seed": 2}
    exports = b.repeat(side, "w3_export", b.opts.repeats, lambda _: b.worker(
        side, script, {**params, "mode": "export", "out": str(lib)}))
    if side == "modpack":  # like for like: the host compiled before the clock, as TVM's is
        b.repeat(side, "w3_export_prebuilt", b.opts.repeats, lambda _: b.worker(
            side, script, {**params, "mode": "export", "out": str(lib), "prebuilt": True}))
    if any("error" not in r for r in exports) and lib.exists():
        b.repeat(side, "w3_load", b.opts.repeats, lambda _: b.worker(
            side, script, {**params, "mode": "load", "path": str(lib)}))
    lib.unlink(missing_ok=True)


# ---- C programs -----------------------------------------------------------------------------


# Both C programs bind their own imports when they start: otherwise the dynamic linker's lazy
# binding of the program's first call of an API function lands in whichever row calls it first
# (TVM's C API calls TVMFFIFunctionCall to load, so its binding is in the load; modpack's
# mp_function_call is first used by the first call).
BIND_NOW = ["-Wl,-z,now"]


def build_modpack_c(b: Bench) -> Path | None:
    """Build and install the runtime with CMake into a scratch prefix, then compile
    c/first_call.c against it with pkg-config."""
    if not (shutil.which("cmake") and shutil.which("pkg-config")):
        b.log("C first call skipped: cmake and pkg-config are needed")
        return None
    build, prefix = b.work / "rt-build", b.work / "rt-prefix"
    try:
        _run(["cmake", "-S", ROOT, "-B", build, f"-DCMAKE_INSTALL_PREFIX={prefix}",
              "-DCMAKE_BUILD_TYPE=Release", "-DMODPACK_BUILD_TESTS=OFF"])
        _run(["cmake", "--build", build, "-j2"])
        _run(["cmake", "--install", build])
        pcdirs = sorted(prefix.glob("lib*/pkgconfig"))
        env = {**os.environ, "PKG_CONFIG_PATH": str(pcdirs[0])}
        flags = _run(["pkg-config", "--cflags", "--libs", "modpack"], env=env).split()
        exe = b.work / "first_call"
        _run([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra",
              HERE / "c" / "first_call.c", *flags, f"-Wl,-rpath,{pcdirs[0].parent}",
              *BIND_NOW, "-o", exe])
        return exe
    except (subprocess.CalledProcessError, IndexError) as exc:
        b.log(f"C first call skipped: building the runtime failed: {exc}")
        return None


def build_tvm_c(b: Bench) -> Path | None:
    """Compile c/tvm_first_call.c against the TVM venv's tvm_ffi headers and libtvm_ffi.so."""
    assert b.tvm_python
    try:
        home = _run([b.tvm_python, "-c",
                     "import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))"]).strip()
        exe = b.work / "tvm_first_call"
        _run([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra",
              f"-I{home}/include", HERE / "c" / "tvm_first_call.c", f"-L{home}/lib",
              "-ltvm_ffi", f"-Wl,-rpath,{home}/lib", *BIND_NOW, "-o", exe])
        return exe
    except subprocess.CalledProcessError as exc:
        b.log(f"TVM C first call skipped: {exc}")
        return None


def _run(cmd: list[Any], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          check=False, timeout=600)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, [str(c) for c in cmd],
                                            proc.stdout, _tail(proc.stderr + proc.stdout))
    return proc.stdout


# ---- the table ------------------------------------------------------------------------------


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    if abs(n) >= 10 * GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / MiB:.1f} MiB"


def fmt_bw(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e9:.2f} GB/s"


def build_rows(b: Bench) -> list[dict[str, Any]]:
    """One row per figure: modpack and TVM medians, ratio TVM/modpack, target and verdict."""
    mp, tv = b.raw["modpack"], b.raw["tvm"]
    have_tvm = b.tvm_python is not None
    rows: list[dict[str, Any]] = []

    def row(name: str, m: float | None, t: float | None, fmt: Callable[[Any], str],
            target: str = "", met: bool | None = None, tvm_error: str | None = None,
            mp_error: str | None = None, ratio: bool = True, note: str = "") -> None:
        # TVM / modpack; not for byte figures where modpack's is within noise of zero
        r = (t / m) if (ratio and m and t and (fmt is not fmt_bytes or m >= MiB)) else None
        tvm_text = fmt(t) if t is not None else (
            f"failed: {tvm_error[:60]}" if tvm_error else ("-" if have_tvm else "(no TVM)"))
        rows.append({
            "workload": name, "modpack": m, "tvm": t, "ratio_tvm_over_modpack": r,
            "target": target, "met": met, "note": note,
            "modpack_text": fmt(m) if m is not None else (
                f"failed: {mp_error[:60]}" if mp_error else "-"),
            "tvm_text": tvm_text,
            "ratio_text": "-" if not r else (f"{r:.0f}x" if r >= 100 else f"{r:.2f}x"),
        })

    def at_most(m: float | None, bar: float | None, t: float | None) -> bool | None:
        """Whether modpack's figure is within |bar| (if any) and no slower than TVM's (if
        measured); None when modpack has no figure."""
        if m is None:
            return None
        return (bar is None or m <= bar) and (t is None or m <= t)

    def peak(r: dict) -> int:
        return max(r["python_peak"], r["toolchain_peak"])

    per_gib_at_512 = None
    for size_mib in sorted(b.opts.size_list):
        size = size_mib * MiB
        key = f"w2_{size_mib}"
        me, te = mp.get(f"{key}_export"), tv.get(f"{key}_export")
        on, off, tl = mp.get(f"{key}_load_on"), mp.get(f"{key}_load_off"), tv.get(f"{key}_load")
        is512 = size_mib == 512
        m, t = med(me, "export_s"), med(te, "export_s")
        r = (t / m) if (m and t) else None
        row(f"W2 {size_mib} MiB export: time", m, t, fmt_time,
            ">=10x faster than TVM" if is512 else "", (r >= 10) if (is512 and r) else None,
            error_of(te), error_of(me))
        floor = med(mp.get(f"{key}_write"), "write_s")
        row(f"W2 {size_mib} MiB write() + fdatasync of the payload, a new file (the floor)",
            floor,
            None, fmt_time, ratio=False,
            note=f"export = {m / floor:.2f}x this" if (m and floor) else "")
        per_gib, base = (m / (size / GiB) if m else None), per_gib_at_512
        if is512:
            per_gib_at_512 = per_gib
        big = size_mib >= 2048 and per_gib and base
        row(f"W2 {size_mib} MiB export: time per GiB", per_gib,
            t / (size / GiB) if t else None, fmt_time,
            "within 1.3x of 512 MiB's" if size_mib >= 2048 else "",
            (per_gib <= 1.3 * base) if big else None,
            note=f"{per_gib / base:.2f}x 512 MiB's" if big else "")
        m = med(me, peak)
        row(f"W2 {size_mib} MiB export: peak RSS (max of python, toolchain)", m, med(te, peak),
            fmt_bytes, note=f"{m / size:.2f}x payload" if m else "")
        m = med(me, "python_peak_above_arrays")
        row(f"W2 {size_mib} MiB export: python peak above caller's arrays",
            m, med(te, "python_peak_above_arrays"), fmt_bytes, "<= +64 MiB",
            (m <= 64 * MiB) if m is not None else None)
        m = med(me, "toolchain_peak")
        row(f"W2 {size_mib} MiB export: toolchain peak (cc/as/ld or g++)",
            m, med(te, "toolchain_peak"), fmt_bytes, "<= 64 MiB",
            (m <= 64 * MiB) if m is not None else None)
        m = med(me, "shmem_peak_increase")
        row(f"W2 {size_mib} MiB export: tmpfs (/dev/shm) peak growth, machine-wide",
            m, med(te, "shmem_peak_increase"), fmt_bytes, "~0 (< 8 MiB, machine noise)",
            (m < 8 * MiB) if m is not None else None, ratio=False)
        for phase in ("place_s", "pack_s", "seal_s", "compile_s", "assemble_s", "link_s"):
            if phase != "link_s" and not med(me, lambda r, p=phase: r["phases"].get(p)):
                continue
            row(f"W2 {size_mib} MiB export phase: {phase[:-2]}",
                med(me, lambda r, p=phase: r["phases"].get(p)),
                med(te, lambda r, p=phase: r["phases"].get(p)) if phase == "link_s" else None,
                fmt_time, ratio=False)
        row(f"W2 {size_mib} MiB export phase: TVM in-process (codegen + LLVM pack)", None,
            med(te, lambda r: r["phases"]["in_process_s"]), fmt_time, ratio=False)
        m_off = med(off, "load_s")
        row(f"W2 {size_mib} MiB load, checksums off: time (seal check included)", m_off,
            med(tl, "load_s"), fmt_time, "<= 1 ms" if is512 else "",
            (m_off <= 1e-3) if (is512 and m_off) else None, error_of(tl), error_of(off))
        m = med(off, "rss_increase")
        row(f"W2 {size_mib} MiB load, checksums off: RSS increase", m,
            med(tl, "rss_increase"), fmt_bytes, "<= +1 MiB" if is512 else "",
            (m <= 1 * MiB) if (is512 and m is not None) else None)
        m_on = med(on, "load_s")
        bw_resident = med(on, "hash_bw_resident")
        cost = (m_on - m_off) if (m_on and m_off) else None
        ideal = size / bw_resident if bw_resident else None
        row(f"W2 {size_mib} MiB load, checksums on: time", m_on, med(tl, "load_s"), fmt_time,
            "checksum cost <= 1.25x payload/XXH3 bw" if is512 else "",
            (cost <= 1.25 * ideal) if (is512 and cost and ideal) else None,
            error_of(tl), error_of(on),
            note=f"checksum cost {fmt_time(cost)} vs {fmt_time(ideal)} at XXH3 bw"
            if cost and ideal else "")
        row(f"W2 {size_mib} MiB load, checksums on: RSS increase", med(on, "rss_increase"),
            med(tl, "rss_increase"), fmt_bytes)
        row(f"W2 {size_mib} MiB load: peak RSS increase (checksums on)",
            med(on, "peak_increase"), med(tl, "peak_increase"), fmt_bytes)
        row(f"W2 {size_mib} MiB hash bw during load: payload/(t_on - t_off)",
            size / cost if cost and cost > 0 else None, None, fmt_bw, ratio=False)
        row(f"W2 {size_mib} MiB hash bw: XXH3 on resident pages", bw_resident, None, fmt_bw,
            ratio=False)
        row(f"W2 {size_mib} MiB hash bw: xxhash package's XXH3 on resident pages (reference)",
            med(on, "hash_bw_resident_xxhash"), None, fmt_bw, ratio=False)
        row(f"W2 {size_mib} MiB hash bw: XXH3 through a fresh mmap of the file",
            med(mp.get(f"{key}_mmap_hash"), "hash_bw_mmap"), None, fmt_bw, ratio=False)
        cold_runs, reads = mp.get(f"{key}_load_cold"), mp.get(f"{key}_seq_read")
        m_cold, m_read = med(cold_runs, "load_s"), med(reads, "seq_read_s")
        row(f"W2 {size_mib} MiB load, checksums on, cold (page cache dropped): time", m_cold,
            None, fmt_time, ratio=False, mp_error=error_of(cold_runs))
        row(f"W2 {size_mib} MiB cold sequential read of the same file (read(), 8 MiB)",
            m_read, None, fmt_time, ratio=False, mp_error=error_of(reads))
        speed = (m_read / m_cold) if (m_cold and m_read) else None
        row(f"W2 {size_mib} MiB cold load speed / sequential read speed", speed, None,
            lambda v: f"{v:.0%}", ">= 80%" if is512 else "",
            (speed >= 0.8) if (is512 and speed) else None, ratio=False,
            note=f"{fmt_bw(size / m_cold)} vs {fmt_bw(size / m_read)}" if speed else "")
        for what, name in (("export", "export_s"), ("load", "load_s")):
            mine, theirs = mp.get(f"{key}_tar_{what}"), tv.get(f"{key}_tar_{what}")
            m, t = med(mine, name), med(theirs, name)
            row(f"W2 {size_mib} MiB as a .tar: {what}" + (" (linked here, checksums on)"
                                                          if what == "load" else ""),
                m, t, fmt_time, "<= TVM", at_most(m, None, t), error_of(theirs),
                error_of(mine))

    seals = mp.get("w4_seal")
    m = med(seals, "seal_check_s")
    size = med(seals, "file_size")
    row(f"W4 seal check of a {fmt_bytes(size)} host library (warm)", m, None, fmt_time,
        "<= 1 ms", (m <= 1e-3) if m else None, mp_error=error_of(seals), ratio=False)

    count = b.opts.modules
    me, te = mp.get("w3_export"), tv.get("w3_export")
    m, t = med(me, "export_s"), med(te, "export_s")
    row(f"W3 {count} modules: export", m, t, fmt_time, "no slower than TVM (LLVM packer)",
        (m <= t) if (m and t) else None, error_of(te), error_of(me))
    mp_pre = mp.get("w3_export_prebuilt")
    m = med(mp_pre, "export_s")
    row(f"W3 {count} modules: export, host compiled before the clock as TVM's is", m, t,
        fmt_time, "no slower than TVM (LLVM packer)", (m <= t) if (m and t) else None,
        error_of(te), error_of(mp_pre))
    m, t = med(me, "build_s"), med(te, "build_s")
    row(f"W3 {count} modules: build the tree (before export)", m, t, fmt_time,
        "<= 25 ms and <= TVM", at_most(m, 25e-3, t))
    ml, tl = mp.get("w3_load"), tv.get("w3_load")
    m = med(ml, "load_s")
    row(f"W3 {count} modules: load", m, med(tl, "load_s"), fmt_time, "<= 10 ms",
        (m <= 10e-3) if m else None, error_of(tl), error_of(ml))
    row(f"W3 {count} modules: load RSS increase", med(ml, "rss_increase"),
        med(tl, "rss_increase"), fmt_bytes)

    for lang in ("python", "c"):
        for kind in ("scalar", "array"):
            mk, tk = mp.get(f"w1_{lang}_{kind}"), tv.get(f"w1_{lang}_{kind}")
            what = "add_one_scalar(41)" if kind == "scalar" else "add_one(x, out), 1024 float32"
            m, t = med(mk, "lookup_and_first_call_s"), med(tk, "lookup_and_first_call_s")
            bar = 10e-6 if lang == "python" else None
            row(f"W1 {lang}: lookup + first call, {what}", m, t, fmt_time,
                "<= 10 us and <= TVM" if bar else "<= TVM", at_most(m, bar, t),
                error_of(tk), error_of(mk))
            m, t = med(mk, "first_call_s"), med(tk, "first_call_s")
            row(f"W1 {lang}: first call alone, {what}", m, t, fmt_time, "<= TVM",
                at_most(m, None, t))
            m, t = med(mk, "steady_call_s"), med(tk, "steady_call_s")
            bar = 120e-9 if (lang, kind) == ("python", "scalar") else None
            row(f"W1 {lang}: steady-state call, {what}", m, t, fmt_time,
                "<= 120 ns and <= TVM" if bar else "<= TVM", at_most(m, bar, t),
                note="" if (lang, kind) != ("c", "array") else
                "TVM's loop is its vectorised LLVM IR, modpack's gcc -O2: see the same-C row")
        mk, tk = mp.get(f"w1_{lang}_same_c"), tv.get(f"w1_{lang}_same_c")
        m, t = med(mk, "steady_call_s"), med(tk, "steady_call_s")
        row(f"W1 {lang}: steady-state call, add_one(x, out), 1024 float32, the same C loop in both",
            m, t, fmt_time, "<= TVM", at_most(m, None, t), error_of(tk), error_of(mk))
    for lang, bar in (("python", 150e-6), ("c", 60e-6)):
        key = f"w1_{lang}_scalar"
        m, t = med(mp.get(key), "load_s"), med(tv.get(key), "load_s")
        row(f"W1 {lang}: load the tiny library", m, t, fmt_time,
            f"<= {bar * 1e6:.0f} us and <= TVM", at_most(m, bar, t))
    return rows


def _shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with a figure or a failure to show."""
    return [r for r in rows if r["modpack"] is not None or r["tvm"] is not None
            or r["modpack_text"] != "-" or r["tvm_text"].startswith("failed")]


def _cells(r: dict[str, Any], met_text: dict[bool | None, str]) -> list[str]:
    met = met_text[r["met"]] + (f" ({r['note']})" if r["note"] else "")
    return [r["workload"], r["modpack_text"], r["tvm_text"], r["ratio_text"], r["target"], met]


_HEADERS = ["workload", "modpack", "TVM", "TVM/modpack", "target", "met?"]


def print_table(rows: list[dict[str, Any]]) -> None:
    print(text_table(_HEADERS, [_cells(r, {True: "yes", False: "NO", None: ""})
                                for r in _shown(rows)]))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The table as Markdown (for RESULTS.md)."""
    return tables.markdown_table(_HEADERS, [
        _cells(r, {True: "**yes**", False: "**no**", None: ""}) for r in _shown(rows)])


# ---- metadata and main ----------------------------------------------------------------------


def metadata(b: Bench) -> dict[str, Any]:
    def first_line(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
            return out.strip().splitlines()[0] if out.strip() else "?"
        except (OSError, subprocess.SubprocessError):
            return "?"

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    import modpack

    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE")
                                        * os.sysconf("SC_PHYS_PAGES") / GiB, 1)},
        "versions": {"python": platform.python_version(), "numpy": numpy.__version__,
                     "modpack": modpack.__version__, "cc": first_line(["cc", "--version"]),
                     "ld": first_line(["ld", "--version"]),
                     "ld.lld": first_line(["ld.lld", "--version"])},
        "source": source_state(),
        "options": {k: v for k, v in vars(b.opts).items() if k != "size_list"},
        "tvm_python": b.tvm_python,
    }
    if b.tvm_python:
        meta["versions"]["tvm"] = first_line([b.tvm_python, "-c", (
            "import tvm, tvm_ffi; print(f'apache-tvm {tvm.__version__}, "
            "apache-tvm-ffi {tvm_ffi.__version__}')")])
    return meta


def source_state() -> dict[str, Any]:
    """The commit measured: git's view of ROOT, or a COMMIT file in a `git archive` copy."""
    import modpack

    state: dict[str, Any] = {"tree": str(ROOT), "modpack_imported_from": modpack.__file__}
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    if proc.returncode == 0:
        state["commit"] = proc.stdout.strip()
        status = subprocess.run(["git", "-C", str(ROOT), "status", "--short", "--", "modpack",
                                 "csrc"], capture_output=True, text=True, check=False).stdout
        state["local_changes_in_modpack_or_csrc"] = bool(status.strip())
    elif (ROOT / "COMMIT").is_file():
        state["commit"] = (ROOT / "COMMIT").read_text().strip()
        state["snapshot"] = "git archive of that commit"
    return state


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 64 MiB only, 1 repeat, 1000 modules")
    p.add_argument("--sizes", default="64,512,2048", help="W2 payload sizes in MiB")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per figure")
    p.add_argument("--big-repeats", type=int, default=3,
                   help="repeats for payloads of 2 GiB and more (capped by --repeats)")
    p.add_argument("--modules", type=int, default=10000, help="W3 module count")
    p.add_argument("--mem-cap-gib", type=float, default=20.0,
                   help="address-space cap (RLIMIT_AS) of every worker; 0 for none")
    p.add_argument("--no-sync", dest="sync", action="store_false",
                   help="do not flush dirty pages (os.sync) before each measurement")
    p.add_argument("--workdir", help="scratch folder (default: a new temp folder, removed)")
    p.add_argument("--skip-tvm", action="store_true", help="ignore MODPACK_BENCH_TVM_PYTHON")
    p.add_argument("--tvm-max-mib", type=int, default=2048,
                   help="largest W2 payload run through TVM (its export peaks near 5x payload)")
    p.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    p.add_argument("--markdown-from", metavar="JSON",
                   help="print the table of an earlier run's JSON as Markdown, and exit")
    opts = p.parse_args(argv)
    if opts.quick:
        opts.sizes, opts.repeats, opts.modules = "64", 1, 1000
    opts.size_list = [int(s) for s in opts.sizes.split(",") if s.strip()]
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.markdown_from:
        print(markdown_table(json.loads(Path(opts.markdown_from).read_text())["rows"]))
        return 0
    if opts.skip_tvm:
        os.environ.pop("MODPACK_BENCH_TVM_PYTHON", None)
    work = Path(opts.workdir) if opts.workdir else Path(tempfile.mkdtemp(prefix="modpack-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    b = Bench(opts, work)
    sides = ["modpack"] + (["tvm"] if b.tvm_python else [])
    b.log(f"sides: {', '.join(sides)}; scratch: {work}")
    meta = metadata(b)  # the source state at the start
    try:
        c_programs = {"modpack": build_modpack_c(b)}
        if b.tvm_python:
            c_programs["tvm"] = build_tvm_c(b)
        for side in sides:
            w1_first_call(b, side, c_programs.get(side))
        for side in sides:
            w3_many(b, side)
        w4_seal(b)
        for size in opts.size_list:
            for side in sides:
                if side == "tvm" and size > opts.tvm_max_mib:
                    b.log(f"tvm W2 {size} MiB: skipped (over --tvm-max-mib {opts.tvm_max_mib})")
                    continue
                w2_large(b, side, size)
        rows = build_rows(b)
        result = {"meta": meta, "rows": rows, "raw": b.raw,
                  "elapsed_s": time.monotonic() - b.started}
        out = Path(opts.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print_table(rows)
        print(f"\nwrote {out} ({result['elapsed_s']:.0f} s)")
    finally:
        if not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
