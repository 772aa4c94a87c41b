"""Rows 7-9: swapping a loaded tree's weights (``swap_weights``).

Modes (the JSON argument's ``mode``):
  swap     load ``lib`` (its weight file is ``files[0]``; signed when ``keys`` is given), then
           ``swaps`` times, alternating to ``files[1]``, ``files[0]``, ...: time ``check``, a
           fresh ``modpack.load_weights(next)`` (open + checksums, and with ``keys`` the
           signature and every array's digest); drop it (which unmaps it) and gc.collect(),
           each timed apart; then
           time ``swap_weights(next)``. No view is held, so each swap opens and checks a file
           that is not mapped. Not timed: weight_at reads the new values, and the file swapped
           away from is unmapped.
  threads  load the small library (``files[0]``); 4 threads call consistent() (which releases
           the GIL) until each has made ``calls`` calls and the main thread has made ``swaps``
           swaps, alternating between the two files; the swaps are spread evenly over the
           calls (swap k waits until k/(swaps+1) of all the calls are made). Counts calls,
           results other than 1001 and 2002 ("mixed"), and errors.
  rss      load the small library; ``warm`` swaps, then VmRSS; ``measured`` more swaps, then
           VmRSS again (one consistent() call after each swap, gc.collect() before readings).
"""

from __future__ import annotations

import gc
import statistics
import threading
import time

import _common as c
import weights_common as wc

import modpack


def swap(a: dict) -> dict:
    keys = a.get("keys")
    files = a["files"]
    samples = [{int(i): v for i, v in s.items()} for s in a["samples"]]
    root = modpack.load_module(a["lib"], **({"trusted_keys": keys} if keys else {}))
    weight_at = root["weight_at"]
    checks, releases, collects, swaps, ok, unmapped = [], [], [], [], True, True
    for k in range(a["swaps"]):
        nxt = (k + 1) % 2
        t0 = c.now()
        wf = modpack.load_weights(files[nxt], **({"trusted_keys": keys} if keys else {}))
        checks.append(c.now() - t0)
        t0 = c.now()
        del wf  # the last reference: unmaps the file
        t1 = c.now()
        gc.collect()
        releases.append(t1 - t0)
        collects.append(c.now() - t1)
        t0 = c.now()
        root.swap_weights(files[nxt])
        swaps.append(c.now() - t0)
        ok = ok and all(weight_at(i) == v for i, v in samples[nxt].items())
        unmapped = unmapped and wc.mappings_of(files[1 - nxt]) == 0
    return {"check_s": statistics.median(checks), "release_s": statistics.median(releases),
            "collect_s": statistics.median(collects), "swap_s": statistics.median(swaps),
            "checks": checks, "releases": releases, "collects": collects, "swaps": swaps,
            "values_ok": ok, "old_file_unmapped": unmapped, "signed": bool(keys)}


def threads(a: dict) -> dict:
    files = a["files"]
    root = modpack.load_module(a["lib"])
    consistent = root["consistent"]
    per_thread, total_swaps, nthreads = a["calls"], a["swaps"], a.get("threads", 4)
    results: list[list[int]] = [[] for _ in range(nthreads)]
    errors: list[str] = []
    swaps_done = threading.Event()

    def call(out: list[int]) -> None:
        while len(out) < per_thread or not swaps_done.is_set():
            try:
                out.append(consistent())
            except Exception as exc:  # counted, not fatal: the run reports them
                errors.append(f"{type(exc).__name__}: {exc}")
                out.append(-2)

    workers = [threading.Thread(target=call, args=(r,)) for r in results]
    swap_times = []
    t_start = c.now()
    for t in workers:
        t.start()
    try:
        goal = per_thread * nthreads
        for k in range(total_swaps):
            due = goal * (k + 1) // (total_swaps + 1)
            while sum(map(len, results)) < due:
                time.sleep(0.0002)
            t0 = c.now()
            root.swap_weights(files[(k + 1) % 2])
            swap_times.append(c.now() - t0)
    finally:
        swaps_done.set()
        for t in workers:
            t.join()
    elapsed = c.now() - t_start
    every = [r for out in results for r in out]
    counts: dict[str, int] = {}
    for r in every:
        counts[str(r)] = counts.get(str(r), 0) + 1
    mixed = sum(n for r, n in counts.items() if r not in ("1001", "2002", "-2"))
    return {"calls": len(every), "calls_per_thread": [len(r) for r in results],
            "results": counts, "mixed": mixed, "errors": len(errors),
            "first_errors": errors[:3], "swaps": len(swap_times),
            "swap_median_s": statistics.median(swap_times) if swap_times else None,
            "swap_max_s": max(swap_times) if swap_times else None, "elapsed_s": elapsed}


def rss(a: dict) -> dict:
    files = a["files"]
    root = modpack.load_module(a["lib"])
    consistent = root["consistent"]
    done, bad = 0, 0

    def run(count: int) -> None:
        nonlocal done, bad
        for _ in range(count):
            done += 1
            k = done % 2
            root.swap_weights(files[k])
            bad += consistent() != (1001, 2002)[k]

    run(a["warm"])
    gc.collect()
    first = wc.status()
    run(a["measured"])
    gc.collect()
    second = wc.status()
    return {"swaps_before": a["warm"], "swaps_after": a["warm"] + a["measured"],
            "vmrss_before": first["VmRSS"], "vmrss_after": second["VmRSS"],
            "vmrss_growth": second["VmRSS"] - first["VmRSS"],
            "anon_growth": second["RssAnon"] - first["RssAnon"],
            "wrong_results": bad,
            "mappings": wc.mappings_of(files[0]) + wc.mappings_of(files[1])}


if __name__ == "__main__":
    args = c.args()
    c.emit({"swap": swap, "threads": threads, "rss": rss}[args["mode"]](args))
