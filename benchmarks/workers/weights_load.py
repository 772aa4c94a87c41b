"""Rows 2-6: one load of a large library, weights inside it or in a weight file.

One mode. Arguments: ``path`` (the library), ``keys`` (trusted public keys: a signed load, or
null), ``verify`` (payload checksums), ``first_use`` (verify_on_first_use), ``samples`` (index ->
the value w must hold there), ``mapped`` (the file the weights must be mapped from), ``hold``.

Times ``modpack.load_module`` alone (the package imported first) and reads /proc/self/status
right before and after it. Then, not timed: the first call of weight_at (with
verify_on_first_use, the one that hashes w), a check of the sample values through weight_at,
and how the weights' file is mapped. With ``hold``: sums every element of w (so every page of
it is read), prints the result, and holds the library until a line arrives on stdin (row 4:
the parent reads /proc/PID/smaps meanwhile).
"""

from __future__ import annotations

import sys

import _common as c
import numpy as np
import weights_common as wc

import modpack


def load(a: dict) -> dict:
    options = {}
    if a.get("keys"):
        options["trusted_keys"] = a["keys"]
    if not a.get("verify", True):
        options["verify_checksums"] = False
    if a.get("first_use"):
        options["verify_on_first_use"] = True
    before = wc.status()
    t0 = c.now()
    root = modpack.load_module(a["path"], **options)
    load_s = c.now() - t0
    after = wc.status()

    weight_at = root["weight_at"]
    samples = {int(i): v for i, v in a["samples"].items()}
    first = min(samples)
    t0 = c.now()
    value = weight_at(first)
    first_call_s = c.now() - t0
    ok = value == samples[first] and all(weight_at(i) == v for i, v in samples.items())
    result = {
        "load_s": load_s, "first_call_s": first_call_s, "roundtrip_ok": ok,
        "options": {k: v for k, v in options.items() if k != "trusted_keys"},
        "signed": bool(a.get("keys")),
        "growth": {k: after[k] - before[k] for k in ("VmRSS", "RssAnon", "RssFile", "RssShmem")},
        "anon_shmem_growth": (after["RssAnon"] + after["RssShmem"])
        - (before["RssAnon"] + before["RssShmem"]),
        "mappings_of_weights_file": wc.mappings_of(a["mapped"]) if a.get("mapped") else None,
        "modules": [m.type_key for m in root.imported_modules],
    }
    if a.get("hold"):
        w = root.imported_modules[0].arrays["w"]
        result["sum"] = float(w.sum(dtype=np.float64))  # reads every page of w
        result["held_status"] = wc.status()
        c.emit(result)
        sys.stdin.readline()  # hold the library until the parent has measured
        del w
        return {}
    return result


if __name__ == "__main__":
    out = load(c.args())
    if out:
        c.emit(out)
