"""Weights at scale and trust: signed loads, weight files, shared pages, swaps (issue 18).

    python benchmarks/weights_and_trust.py                 # 512 MiB, 5 fresh processes/figure
    python benchmarks/weights_and_trust.py --quick         # 64 MiB, 3 repeats (under a minute)
    python benchmarks/weights_and_trust.py --mib 2048 --repeats 3 --workdir /data/scratch

Rows (every timed figure from a fresh child process running workers/weights_*.py; the files
warm in the page cache; the table gives medians):
   1  the hashes a signed load needs, alone: SHA-256 of the signed library file; the chunked
      SHA-256 of the weight file's arrays on os.cpu_count() threads
   2  signed load, weights inside the library: time, and RssAnon + RssShmem growth
   3  signed load, weights in a weight file: the same
   4  4 processes signed-loading the same file, every page read: the payload mappings' PSS
      together, in copies of the payload (both forms)
   5  unsigned load with and without payload checksums (both forms)
   6  signed load with verify_on_first_use, no array touched
   7  swap_weights of a weight file against a fresh load_weights of the same file (unsigned and,
      as an extra, in a signed tree)
   8  4 threads calling while the main thread swaps: mixed results and errors
   9  VmRSS over 1,000 swaps
  10  export with weights= against export with the const inside, and save_weights alone

Prints one table (row, figure, target, met?) and writes every raw worker result as JSON.
See benchmarks/README.md for the method.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tables
from run import _tail, fmt_bytes, fmt_time, source_state
from tables import error_of, med, text_table

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
MiB = 1 << 20
GiB = 1 << 30
PROCESSES = 4  # row 4
THREADS = 4  # row 8


class WorkerFailed(RuntimeError):
    pass


# ---- running workers ------------------------------------------------------------------------


class Bench:
    def __init__(self, opts: argparse.Namespace, work: Path) -> None:
        self.opts = opts
        self.work = work
        self.raw: dict[str, list[dict[str, Any]]] = {}
        self.started = time.monotonic()
        self.files: dict[str, str] = {}
        self.manifest: dict[str, Any] = {}
        self.swap_plan: dict[str, int] = {}

    def log(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=sys.stderr,
              flush=True)

    def command(self, script: str, params: dict[str, Any]) -> list[str]:
        return [sys.executable, str(WORKERS / script), json.dumps(params)]

    def worker(self, script: str, params: dict[str, Any], timeout: float = 900
               ) -> dict[str, Any]:
        """Run workers/|script| in a fresh process; its last stdout line is the JSON result."""
        os.sync()  # start from no dirty pages, so earlier writes do not slow this one
        busy, waited = self.wait_quiet()
        try:
            proc = subprocess.run(self.command(script, params), capture_output=True, text=True,
                                  cwd=WORKERS, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(f"{script} {params.get('mode')}: timed out after "
                               f"{timeout:.0f}s") from None
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise WorkerFailed(f"{script} {params.get('mode')}: exit {proc.returncode}: "
                               f"{_tail(proc.stderr + proc.stdout)}")
        result = json.loads(lines[-1])
        result["busy_cores_before"], result["waited_for_quiet_s"] = busy, waited
        return result

    def wait_quiet(self) -> tuple[float, float]:
        """(cores busy with other work right before a worker, seconds waited): with
        --quiet-wait S, waits up to S seconds for the machine to be idle (under 0.25 cores
        busy over 0.3 s)."""
        started = time.monotonic()
        busy = machine_busy(0.3 if self.opts.quiet_wait > 0 else 0.15)
        while busy >= 0.25 and time.monotonic() - started < self.opts.quiet_wait:
            busy = machine_busy()
        return busy, time.monotonic() - started

    def record(self, key: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """fn()'s result (or the error) appended to raw[key]."""
        try:
            result = fn()
        except WorkerFailed as exc:
            self.log(f"{key}: FAILED: {exc}")
            result = {"error": str(exc)}
        self.raw.setdefault(key, []).append(result)
        return result


def machine_busy(interval: float = 0.3) -> float:
    """Cores busy (not idle, not waiting for I/O) over |interval| seconds, from /proc/stat."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields[:8]), fields[3] + fields[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    cores = os.cpu_count() or 1
    return cores * (1 - (idle1 - idle0) / max(1, total1 - total0))


def resident(path: str) -> int | None:
    """Bytes of |path| in the page cache, when `fincore` can tell."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=False).stdout.strip()
    return int(out) if out.isdigit() else None


def evict(path: str) -> None:
    """Drop |path| from the page cache (its pages are clean after fsync, so
    POSIX_FADV_DONTNEED evicts them without privileges)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(*paths: str) -> None:
    """Read each file once, so its pages are in the page cache (exports and save_weights hand
    their pages to the disk and drop them from the cache as they go)."""
    buf = bytearray(8 * MiB)
    for path in dict.fromkeys(paths):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def warm_run(b: Bench, key: str, script: str, params: dict[str, Any], *files: str
             ) -> dict[str, Any]:
    """One worker with |files| warm; records how much of the first was cached right before."""
    def go() -> dict[str, Any]:
        warm(*files)
        cached = resident(files[0]) if files else None
        result = b.worker(script, params)
        result["resident_before"] = cached
        return result
    return b.record(key, go)


# ---- the rows -------------------------------------------------------------------------------


def prepare(b: Bench) -> None:
    b.log(f"making the files: {b.opts.mib} MiB payload, two libraries, four weight files, "
          "signed")
    m = b.worker("weights_files.py", {"mode": "prepare", "dir": str(b.work / "files"),
                                      "size": b.opts.mib * MiB}, timeout=1800)
    b.manifest, b.files = m, m["files"]
    # Drop every file from the page cache and read it back once, so that all are cached the
    # same way, as after a first read from disk (readahead: large folios). save_weights leaves
    # stray pages of its file in the cache (the first 1 MiB, one page every 32 MiB); a file
    # read back around them stayed in small pages here, and every later load hashed it
    # through its mapping 2-4x slower.
    for path in m["files"].values():
        evict(path)
    warm(*m["files"].values())


def loads(b: Bench) -> None:
    """Rows 1, 2, 3, 5 and 6, interleaved repeat by repeat so drift hits all alike."""
    f, pub = b.files, [b.manifest["pub"]]
    samples = b.manifest["samples"]["a"]
    big = (f["inside"], f["ext"], f["a"])
    for i in range(b.opts.repeats):
        b.log(f"rows 1-3, 5, 6: hashes and loads, repeat {i + 1}/{b.opts.repeats}")
        warm_run(b, "hash_library", "weights_hash.py", {"mode": "sha256", "path": f["inside"]},
                 *big)
        warm_run(b, "hash_weight_file", "weights_hash.py",
                 {"mode": "chunked", "path": f["a"]}, f["a"])
        cases = {
            "signed_inside": (f["inside"], {"keys": pub, "mapped": f["inside"]}),
            "signed_file": (f["ext"], {"keys": pub, "mapped": f["a"]}),
            "unsigned_off_inside": (f["inside"], {"verify": False}),
            "unsigned_off_file": (f["ext"], {"verify": False, "mapped": f["a"]}),
            "unsigned_on_inside": (f["inside"], {}),
            "unsigned_on_file": (f["ext"], {"mapped": f["a"]}),
            "signed_first_use_file": (f["ext"], {"keys": pub, "first_use": True,
                                                 "mapped": f["a"]}),
        }
        for key, (path, extra) in cases.items():
            weights = f["a"] if path == f["ext"] else path
            warm_run(b, key, "weights_load.py",
                     {"path": path, "samples": samples, **extra}, weights, path)


def smaps_pss(pid: int, paths: set[str]) -> dict[str, int]:
    """Pss and Rss (bytes) of the mappings of /proc/|pid|/smaps whose file is one of |paths|."""
    out = {"Pss": 0, "Rss": 0, "Private_Dirty": 0, "mappings": 0}
    inside = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=5)
            if "-" in head[0] and not head[0].endswith(":"):
                name = head[5].strip() if len(head) > 5 else ""
                inside = name in paths
                out["mappings"] += inside
            elif inside and len(head) == 3 and head[2] == "kB":
                field = head[0].rstrip(":")
                if field in out:
                    out[field] += int(head[1]) * 1024
    return out


def shared(b: Bench) -> None:
    """Row 4: PROCESSES processes signed-load one file, read every page, and hold; the parent
    sums the PSS of the payload's mappings over them."""
    f, pub = b.files, [b.manifest["pub"]]
    payload = b.manifest["size"]
    for i in range(b.opts.repeats):
        for form, lib, mapped in (("inside", f["inside"], f["inside"]),
                                  ("file", f["ext"], f["a"])):
            b.log(f"row 4: {PROCESSES} processes signed-loading ({form}), "
                  f"repeat {i + 1}/{b.opts.repeats}")

            def group(lib: str = lib, mapped: str = mapped) -> dict[str, Any]:
                warm(mapped, lib)
                params = {"path": lib, "keys": pub, "mapped": mapped, "hold": True,
                          "samples": b.manifest["samples"]["a"]}
                os.sync()
                busy, waited = b.wait_quiet()
                started = time.perf_counter()
                children = [subprocess.Popen(b.command("weights_load.py", params), cwd=WORKERS,
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True)
                            for _ in range(PROCESSES)]
                try:
                    reports = []
                    for child in children:
                        line = child.stdout.readline() if child.stdout else ""
                        if not line.strip():
                            child.wait(timeout=60)
                            raise WorkerFailed(f"weights_load.py hold: exit {child.returncode}:"
                                               f" {_tail(child.stderr.read())}")
                        reports.append(json.loads(line))
                    all_loaded = time.perf_counter() - started
                    measured = [smaps_pss(child.pid, {mapped}) for child in children]
                finally:
                    for child in children:
                        try:
                            child.stdin.write("\n")
                            child.stdin.flush()
                        except (BrokenPipeError, OSError):
                            pass
                    for child in children:
                        child.wait(timeout=120)
                pss = sum(m["Pss"] for m in measured)
                return {"copies": pss / payload, "pss_total": pss,
                        "rss_total": sum(m["Rss"] for m in measured),
                        "per_process": measured, "all_loaded_s": all_loaded,
                        "load_s": [r["load_s"] for r in reports],
                        "roundtrip_ok": all(r["roundtrip_ok"] for r in reports),
                        "sums": [r["sum"] for r in reports],
                        "busy_cores_before": busy, "waited_for_quiet_s": waited}

            b.record(f"shared_{form}", group)


def swaps(b: Bench) -> None:
    """Rows 7, 8, 9."""
    f, pub, s = b.files, [b.manifest["pub"]], b.manifest["samples"]
    quick = b.opts.quick
    n_swaps = 4 if quick else 10
    for i in range(b.opts.repeats):
        b.log(f"row 7: swap_weights of the {b.opts.mib} MiB file x{n_swaps}, "
              f"repeat {i + 1}/{b.opts.repeats}")
        common = {"mode": "swap", "lib": f["ext"], "samples": [s["a"], s["b"]],
                  "swaps": n_swaps}
        warm_run(b, "swap", "weights_swap.py", {**common, "files": [f["a"], f["b"]]},
                 f["a"], f["b"], f["ext"])
        warm_run(b, "swap_signed", "weights_swap.py",
                 {**common, "keys": pub, "files": [f["a_signed"], f["b_signed"]]},
                 f["a_signed"], f["b_signed"], f["ext"], f["a"])
    small = {"lib": f["small"], "files": [f["s1"], f["s2"]]}
    calls, n_swaps = (2000, 20) if quick else (10000, 100)
    warm_swaps, measured = (50, 200) if quick else (100, 1000)
    b.swap_plan = {"calls": calls, "swaps": n_swaps, "warm": warm_swaps, "measured": measured}
    for i in range(b.opts.repeats):
        b.log(f"rows 8, 9: {THREADS} threads x {calls} calls during {n_swaps} swaps; "
              f"VmRSS over {measured} swaps, repeat {i + 1}/{b.opts.repeats}")
        b.record("threads", lambda: b.worker("weights_swap.py", {
            **small, "mode": "threads", "calls": calls, "swaps": n_swaps, "threads": THREADS}))
        b.record("swap_rss", lambda: b.worker("weights_swap.py", {
            **small, "mode": "rss", "warm": warm_swaps, "measured": measured}))


def exports(b: Bench) -> None:
    """Row 10: each export writes new files (the previous ones removed first, not timed)."""
    out, wout = b.work / "export" / "model.so", b.work / "export" / "model.mpw"
    out.parent.mkdir(exist_ok=True)
    for i in range(b.opts.repeats):
        b.log(f"row 10: exports of {b.opts.mib} MiB, repeat {i + 1}/{b.opts.repeats}")
        for kind in ("const", "weights", "save"):
            def go(kind: str = kind) -> dict[str, Any]:
                out.unlink(missing_ok=True)
                wout.unlink(missing_ok=True)
                return b.worker("weights_files.py", {
                    "mode": "export", "kind": kind, "size": b.opts.mib * MiB,
                    "out": str(out), "weights_out": str(wout)})
            b.record(f"export_{kind}", go)
    out.unlink(missing_ok=True)
    wout.unlink(missing_ok=True)


# ---- the table ------------------------------------------------------------------------------


def fmt_growth(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / MiB:+.2f} MiB" if abs(n) < 10 * MiB else f"{n / MiB:+.1f} MiB"


def spread(results: list[dict[str, Any]] | None, field: str,
           fmt: Callable[[Any], str] = fmt_time) -> str:
    values = [r[field] for r in results or [] if "error" not in r and r.get(field) is not None]
    if len(values) < 2:
        return ""
    return f"repeats {fmt(min(values))}-{fmt(max(values))}"


def build_rows(b: Bench) -> list[dict[str, Any]]:
    raw, size = b.raw, b.opts.mib * MiB
    n = f"{b.opts.mib} MiB"
    rows: list[dict[str, Any]] = []

    def row(number: str, name: str, value: float | None, fmt: Callable[[Any], str],
            target: str = "", met: bool | None = None, note: str = "",
            results: list[dict[str, Any]] | None = None) -> None:
        error = error_of(results)
        figure = fmt(value) if value is not None else (f"failed: {error[:80]}" if error
                                                       else "-")
        rows.append({"row": number, "name": name, "value": value, "figure": figure,
                     "target": target, "met": met, "note": note, "error": error})

    def ok_all(results: list[dict[str, Any]] | None, field: str) -> bool:
        return all(r.get(field, True) for r in results or [] if "error" not in r)

    lib_hash = med(raw.get("hash_library"), "hash_s")
    lib_size = b.manifest["file_sizes"]["inside"]
    row("1", "hash: SHA-256 of the library file", lib_hash, fmt_time,
        note=(f"{lib_size / lib_hash / 1e9:.2f} GB/s over the {fmt_bytes(lib_size)} file; "
              f"{spread(raw.get('hash_library'), 'hash_s')}") if lib_hash else "",
        results=raw.get("hash_library"))
    hr = raw.get("hash_weight_file")
    chunk_hash = med(hr, "hash_s")
    threads = next((r["threads"] for r in hr or [] if "threads" in r), "?")
    row("1", "hash: chunked SHA-256 of the weight file", chunk_hash, fmt_time,
        note=(f"{size / chunk_hash / 1e9:.2f} GB/s on {threads} threads; digests match the "
              f"file's: {ok_all(hr, 'digests_match_the_file')}; {spread(hr, 'hash_s')}")
        if chunk_hash else "", results=hr)

    for number, key, what, base, base_name in (
            ("2", "signed_inside", f"signed load, weights inside ({n})", lib_hash,
             "library hash"),
            ("3", "signed_file", f"signed load, weights in a weight file ({n})", chunk_hash,
             "chunked hash")):
        res = raw.get(key)
        t = med(res, "load_s")
        limit = 1.25 * base + 5e-3 if base else None
        row(number, f"{what}: time", t, fmt_time,
            f"<= 1.25 x {base_name} + 5 ms = {fmt_time(limit)}" if limit else "",
            (t <= limit) if (t and limit) else None,
            (f"{t / base:.2f}x the {base_name}; values ok: {ok_all(res, 'roundtrip_ok')}; "
             f"{spread(res, 'load_s')}") if (t and base) else "", res)
        g = med(res, "anon_shmem_growth")
        row(number, f"{what}: RSS growth (RssAnon + RssShmem)", g, fmt_growth, "<= 16 MiB",
            (g <= 16 * MiB) if g is not None else None,
            f"RssFile {fmt_growth(med(res, lambda r: r['growth']['RssFile']))} (the payload, "
            "file-backed)" if g is not None else "", res)

    for form, label in (("inside", "weights inside"), ("file", "weight file")):
        res = raw.get(f"shared_{form}")
        copies = med(res, "copies")
        row("4", f"{PROCESSES} processes signed-loading, {label}: payload PSS together", copies,
            lambda v: f"{v:.2f} copies", "<= 1.1 copies",
            (copies <= 1.1) if copies is not None else None,
            (f"payload RSS together {med(res, 'rss_total') / size:.2f} copies; all "
             f"{PROCESSES} loaded in {fmt_time(med(res, 'all_loaded_s'))}; every sum and "
             f"value ok: {ok_all(res, 'roundtrip_ok')}") if copies is not None else "", res)

    for verify, label in ((False, "without checksums"), (True, "with checksums")):
        for form, where in (("inside", "weights inside"), ("file", "weight file")):
            res = raw.get(f"unsigned_{'on' if verify else 'off'}_{form}")
            t = med(res, "load_s")
            row("5", f"unsigned load {label}, {where}", t, fmt_time,
                "" if verify else "<= 1 ms", None if verify or t is None else t <= 1e-3,
                spread(res, "load_s"), res)

    res = raw.get("signed_first_use_file")
    t = med(res, "load_s")
    row("6", "signed load, verify_on_first_use, weight file (no array touched)", t, fmt_time,
        "<= 5 ms", (t <= 5e-3) if t is not None else None, spread(res, "load_s"), res)
    row("6", "  then the first call reading w (hashes w)", med(res, "first_call_s"), fmt_time,
        note=f"values ok: {ok_all(res, 'roundtrip_ok')}" if res else "", results=res)

    for key, label in (("swap", ""), ("swap_signed", " (extra: signed tree, signed files)")):
        res = raw.get(key)
        sw, ch, rel = med(res, "swap_s"), med(res, "check_s"), med(res, "release_s")
        signed = key == "swap_signed"
        limit = ch + 5e-3 if ch is not None else None
        row("7", f"swap_weights of a {n} weight file{label}", sw, fmt_time,
            "" if signed else (f"<= check + 5 ms = {fmt_time(limit)}" if limit else ""),
            None if signed or sw is None or limit is None else sw <= limit,
            (f"swap - check = {fmt_time(sw - ch) if sw >= ch else '-' + fmt_time(ch - sw)}; "
             f"values ok: {ok_all(res, 'values_ok')}, old file unmapped: "
             f"{ok_all(res, 'old_file_unmapped')}") if (sw and ch) else "", res)
        row("7", "  check: a fresh load_weights of the same file"
            + (" with trusted_keys" if signed else ""), ch, fmt_time,
            note=(f"then dropping it (unmapping the file): {fmt_time(rel)}, gc.collect() "
                  f"{fmt_time(med(res, 'collect_s'))}") if rel is not None else "",
            results=res)

    res = raw.get("threads")
    good = [r for r in res or [] if "error" not in r]
    if good:
        calls = int(statistics.median(r["calls"] for r in good))
        mixed, errors = sum(r["mixed"] for r in good), sum(r["errors"] for r in good)
        n_swaps, per_thread = b.swap_plan["swaps"], b.swap_plan["calls"]
        want = THREADS * per_thread
        fewest = min(min(r["calls_per_thread"]) for r in good)
        met = (mixed == 0 and errors == 0 and fewest >= per_thread
               and all(r["swaps"] == n_swaps for r in good))
        both = all(r["results"].get("1001") and r["results"].get("2002") for r in good)
        slowest = max(r["swap_max_s"] for r in good)
        row("8", f"{THREADS} threads x {per_thread:,} calls during {n_swaps} swaps", calls,
            lambda v: f"{v:,} calls, {mixed} mixed, {errors} errors",
            f"0 mixed, 0 errors, >= {want:,} calls", met,
            f"calls: median of {len(good)} runs, fewest {min(r['calls'] for r in good):,} "
            f"(fewest by one thread {fewest:,}); mixed and errors: the sum over all runs; "
            f"both versions seen in every run: {both}; a swap during the calls: median "
            f"{fmt_time(med(good, 'swap_median_s'))}, slowest {fmt_time(slowest)}; "
            f"a run {fmt_time(med(good, 'elapsed_s'))}", res)
    else:
        row("8", f"{THREADS} threads calling during swaps", None, str, results=res)

    res = raw.get("swap_rss")
    g = med(res, "vmrss_growth")
    good = [r for r in res or [] if "error" not in r]
    before, after = b.swap_plan["warm"], b.swap_plan["warm"] + b.swap_plan["measured"]
    row("9", f"RSS over {after - before:,} swaps (VmRSS after {after:,} vs after {before})",
        g, fmt_growth, "<= 1 MiB",
        (g <= MiB) if g is not None else None,
        (f"max {fmt_growth(max(r['vmrss_growth'] for r in good))}; RssAnon median "
         f"{fmt_growth(med(good, 'anon_growth'))}; wrong results "
         f"{sum(r['wrong_results'] for r in good)}; weight-file mappings at the end "
         f"{sorted({r['mappings'] for r in good})}") if good else "", res)

    ew, ec, es = (raw.get(f"export_{k}") for k in ("weights", "const", "save"))
    tw, tc, ts = med(ew, "export_s"), med(ec, "export_s"), med(es, "export_s")
    limit = 1.1 * tc if tc else None
    row("10", f"export with weights= ({n})", tw, fmt_time,
        f"<= 1.1 x const export = {fmt_time(limit)}" if limit else "",
        (tw <= limit) if (tw and limit) else None,
        f"{tw / tc:.2f}x the const export; {spread(ew, 'export_s')}" if (tw and tc) else "", ew)
    row("10", f"export with the const inside ({n})", tc, fmt_time,
        note=spread(ec, "export_s"), results=ec)
    row("10", f"save_weights alone ({n})", ts, fmt_time, note=spread(es, "export_s"),
        results=es)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(text_table(["row", "", "figure", "target", "met?"],
                     [[r["row"], r["name"], r["figure"], r["target"],
                       {True: "yes", False: "NO", None: ""}[r["met"]]] for r in rows]))
    print()
    for r in rows:
        if r["note"]:
            print(f"  {r['row']:>2} {r['name'].strip()}: {r['note']}")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The table as Markdown (for RESULTS.md)."""
    return tables.markdown_table(
        ["row", "", "figure (median)", "target", "met?", "notes"],
        [[r["row"], r["name"].strip(), r["figure"], r["target"],
          {True: "**yes**", False: "**no**", None: ""}[r["met"]], r["note"]] for r in rows])


# ---- metadata and main ----------------------------------------------------------------------


def metadata(b: Bench) -> dict[str, Any]:
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

    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE")
                                        * os.sysconf("SC_PHYS_PAGES") / GiB, 1),
                    "loadavg_at_start": os.getloadavg()},
        "versions": {"python": platform.python_version(), "numpy": numpy.__version__,
                     "modpack": modpack.__version__},
        "source": {**source_state(), "package_sha256": package_digest(Path(modpack.__file__))},
        "options": vars(b.opts),
    }


def package_digest(init: Path) -> str:
    """SHA-256 over the imported modpack package's Python files and compiled runtime (names and
    bytes): which code was measured, when the tree has local changes."""
    import hashlib

    h = hashlib.sha256()
    folder = init.parent
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".so", ".h"):
            h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=512, help="payload size in MiB (default 512)")
    p.add_argument("--repeats", type=int, default=5,
                   help="fresh processes per figure (default 5); the table shows medians")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 64 MiB, 3 repeats, fewer swaps and calls (under a minute)")
    p.add_argument("--workdir",
                   help="scratch folder, kept (default: a new temp folder, removed)")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                   help="before each worker, wait up to S seconds for the machine to be idle "
                   "(a shared machine); default 0: no wait (each result still records how "
                   "busy the machine was)")
    p.add_argument("--out", default=str(HERE / "results" / "weights_latest.json"))
    p.add_argument("--markdown-from", metavar="JSON",
                   help="print the table of an earlier run's JSON as Markdown, and exit")
    opts = p.parse_args(argv)
    if opts.quick:
        opts.mib, opts.repeats = 64, 3
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.markdown_from:
        print(markdown_table(json.loads(Path(opts.markdown_from).read_text())["rows"]))
        return 0
    work = Path(opts.workdir) if opts.workdir else Path(tempfile.mkdtemp(prefix="modpack-wt-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()  # /proc/PID/smaps names files by their resolved paths
    b = Bench(opts, work)
    b.log(f"scratch: {work}")
    meta = metadata(b)
    try:
        prepare(b)
        loads(b)
        shared(b)
        swaps(b)
        exports(b)
        rows = build_rows(b)
        busy = sorted(r["busy_cores_before"] for results in b.raw.values() for r in results
                      if r.get("busy_cores_before") is not None)
        meta["busy_cores_before_workers"] = {
            "median": statistics.median(busy), "max": busy[-1],
            "share_over_0.5": sum(x > 0.5 for x in busy) / len(busy)} if busy else None
        result = {"meta": meta, "manifest": b.manifest, "rows": rows, "raw": b.raw,
                  "elapsed_s": time.monotonic() - b.started}
        out = Path(opts.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print_table(rows)
        if busy:
            q = meta["busy_cores_before_workers"]
            print(f"\nother work on the machine right before each worker: median {q['median']:.2f}"
                  f" cores busy, max {q['max']:.2f}; over 0.5 cores before "
                  f"{q['share_over_0.5']:.0%} of the workers")
        print(f"\nwrote {out} ({result['elapsed_s']:.0f} s)")
    finally:
        if not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
