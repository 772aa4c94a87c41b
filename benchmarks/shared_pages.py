"""Many processes, one library: do N processes loading the same large library cost one copy?

    python benchmarks/shared_pages.py                  # 8 processes, 512 MiB of weights
    python benchmarks/shared_pages.py --processes 4 --mib 64

Exports one library holding a const array of --mib MiB, then starts --processes fresh Python
processes that each load it with checksums on (which reads every payload page) and touch every
page of the array once more. While all of them hold the library, the parent reads each one's
/proc/PID/smaps_rollup (RSS, PSS, shared and private pages) and the smaps entry of the mapping
that holds the array. Payload pages are file-backed, read-only and clean, so the kernel keeps
one copy in the page cache for all of them: the PSS total stays near one payload, while the
RSS total counts it once per process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import modpack

CHILD = r"""
import sys, numpy as np, modpack
root = modpack.load_module(sys.argv[1])
w = root.imported_modules[0].arrays["w"]
total = float(w[:: 4096 // w.itemsize].sum())  # one more read of every page
print(w.__array_interface__["data"][0], w.nbytes, total, flush=True)
sys.stdin.readline()  # hold the library until the parent has measured
"""


def rollup(pid: int) -> dict[str, int]:
    """smaps_rollup fields in bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields


def mapping_of(pid: int, address: int) -> dict[str, object]:
    """The smaps entry (permissions, file, sizes in bytes) of the mapping holding |address|."""
    entry: dict[str, object] = {}
    with open(f"/proc/{pid}/smaps") as f:
        inside = False
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                inside = lo <= address < hi
                if inside:
                    entry = {"perms": head[1], "file": head[5] if len(head) > 5 else ""}
            elif inside and len(head) == 3 and head[2] == "kB":
                entry[head[0].rstrip(":")] = int(head[1]) * 1024
    return entry


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def measure(processes: int, payload_mib: int) -> tuple[int, float, list[tuple[int, dict, dict]]]:
    """(payload bytes, seconds until all had loaded, [(pid, smaps_rollup, payload mapping)]),
    measured while all |processes| hold the library."""
    with tempfile.TemporaryDirectory(prefix="modpack-shared-") as scratch:
        path = Path(scratch) / "shared.so"
        host = modpack.csource_module('#include "modpack/backend.h"\n')
        host.import_module(modpack.const_module(
            {"w": np.random.default_rng(0).random(payload_mib << 18, dtype=np.float32)}))
        host.export_library(path)
        children = [subprocess.Popen([sys.executable, "-c", CHILD, str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                    for _ in range(processes)]
        try:
            started = time.perf_counter()
            rows = []
            for child in children:
                address, nbytes, _ = child.stdout.readline().split()
                rows.append((child.pid, int(address), int(nbytes)))
            loaded = time.perf_counter() - started
            measured = [(pid, rollup(pid), mapping_of(pid, address)) for pid, address, _ in rows]
        finally:
            for child in children:
                child.stdin.write("\n")
                child.stdin.flush()
                child.wait()
    return rows[0][2], loaded, measured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--mib", type=int, default=512, help="payload size in MiB")
    opts = p.parse_args(argv)
    payload, loaded, measured = measure(opts.processes, opts.mib)
    print(f"{opts.processes} processes loading one {mib(payload)} library "
          f"(all loaded in {loaded:.2f} s)\n")
    header = ("pid", "RSS", "PSS", "shared clean", "private", "payload mapping",
              "its PSS", "its private dirty")
    lines = [header]
    for pid, r, m in measured:
        lines.append((str(pid), mib(r["Rss"]), mib(r["Pss"]), mib(r["Shared_Clean"]),
                      mib(r["Private_Clean"] + r["Private_Dirty"]),
                      f"{m.get('perms')} {Path(str(m.get('file'))).name}", mib(m.get("Pss", 0)),
                      mib(m.get("Private_Dirty", 0))))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    for row in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    rss = sum(r["Rss"] for _, r, _ in measured)
    pss = sum(r["Pss"] for _, r, _ in measured)
    payload_pss = sum(int(m.get("Pss", 0)) for _, _, m in measured)
    print(f"\ntotal RSS {mib(rss)} ({rss / payload:.2f} payloads); total PSS {mib(pss)} "
          f"({pss / payload:.2f} payloads); the payload mappings' PSS together "
          f"{mib(payload_pss)} ({payload_pss / payload:.2f} copies of the payload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
