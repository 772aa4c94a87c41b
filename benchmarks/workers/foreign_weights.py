"""Worker of benchmarks/foreign_weights.py: one measurement in a fresh process.

Argument: a JSON object with ``mode``:

- ``prepare``: in ``dir``, ``size`` bytes of float32 weights, 3 arrays per shard, as 3
  safetensors shards with their index (written by the safetensors package), as one modpack
  weight file and as 3 modpack weight files of the shards' arrays, three libraries over them
  (host code reading the arrays), a signed copy of the safetensors one, and two adapters (new
  arrays) of ``adapter`` bytes each. Prints the paths.
- ``load``: time ``load_module(path)`` (options: ``verify``, ``keys``), then read every array
  once (not timed), report the time and the memory the load added.
- ``hash``: time the chunked SHA-256 of the safetensors arrays alone, on every core: what a
  signed load must at least do.
- ``hold``: load ``path`` (with ``overlays``), read every page of every array, report this
  process's memory and the model's share of it, then hold until stdin closes.
- ``swap``: load ``path`` with the adapter ``a``, then time ``swap_overlays([b])``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import modpack

HOST = r"""
#include "modpack/backend.h"
static double first_of(const char* name) {
  const DLTensor* w;
  if (mp_backend_get_array(name, &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
static double probe(void) { return first_of("s0.a0"); }
MP_EXPORT_FUNC0(probe, double)
"""


def status() -> dict[str, int]:
    """This process's memory, in bytes (/proc/self/status)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) * 1024
    return out


def mapped(paths: list[str]) -> dict[str, int]:
    """Rss and Pss (bytes) of this process's mappings of |paths| (/proc/self/smaps)."""
    totals = {"rss": 0, "pss": 0, "private": 0}
    wanted = {os.path.realpath(p) for p in paths}
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:
                inside = len(fields) >= 6 and fields[5] in wanted
            elif inside and fields[0] in ("Rss:", "Pss:"):
                totals[fields[0][:-1].lower()] += int(fields[1]) * 1024
            elif inside and fields[0] in ("Private_Clean:", "Private_Dirty:"):
                totals["private"] += int(fields[1]) * 1024
    return totals


def arrays_of(root: modpack.LoadedModule) -> list[np.ndarray]:
    return [m.arrays[n] for m in root.imported_modules for n in m.arrays]


def prepare(a: dict) -> dict:
    from safetensors.numpy import save_file

    from modpack.format.signatures import sign_library

    folder = Path(a["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    per_array = a["size"] // 9 // 4 // 4096 * 4096
    rng = np.random.default_rng(1)
    arrays, weight_map, mpw_shards = {}, {}, []
    for s in range(3):
        shard = {f"s{s}.a{k}": rng.standard_normal(per_array, dtype=np.float32)
                 for k in range(3)}
        name = f"model-{s + 1:05d}-of-00003"
        save_file(shard, str(folder / f"{name}.safetensors"))
        weight_map.update(dict.fromkeys(shard, f"{name}.safetensors"))
        arrays.update(shard)
        mpw_shards.append(modpack.save_weights(shard, folder / f"{name}.mpw"))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    modpack.save_weights(arrays, folder / "model.mpw")
    libraries = {}
    for name, sources in (("st", [index]), ("mpw", [folder / "model.mpw"]),
                          ("mpw3", mpw_shards)):
        host = modpack.csource_module(HOST)
        for source in sources:
            host.import_module(modpack.weights_module(source))
        libraries[name] = str(host.export_library(folder / f"{name}.so"))
    key = folder / "key.pem"
    if not key.exists():
        import subprocess
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)],
                       check=True)
        subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out",
                        str(folder / "key.pub.pem")], check=True)
    signed = folder / "st-signed.so"
    signed.write_bytes(Path(libraries["st"]).read_bytes())
    sign_library(signed, key)
    adapters = []
    for k in range(2):
        adapter = folder / f"adapter{k}.safetensors"
        save_file({f"lora.a{k}": rng.standard_normal(a["adapter"] // 4, dtype=np.float32)},
                  str(adapter))
        adapters.append(str(adapter))
    shards = sorted(str(folder / n) for n in set(weight_map.values()))
    return {"libraries": libraries, "signed": str(signed), "pub": str(folder / "key.pub.pem"),
            "shards": shards, "mpw": str(folder / "model.mpw"),
            "mpw_shards": [str(p) for p in mpw_shards], "adapters": adapters,
            "bytes": per_array * 4 * 9}


def load(a: dict) -> dict:
    options = {}
    if not a.get("verify", True):
        options["verify_checksums"] = False
    if a.get("keys"):
        options["trusted_keys"] = a["keys"]
    before = status()
    t0 = time.perf_counter()
    root = modpack.load_module(a["path"], **options)
    seconds = time.perf_counter() - t0
    after = status()
    total = sum(float(x[0]) + float(x[-1]) for x in arrays_of(root))
    assert np.isfinite(total) and root["probe"]() != -1
    return {"load_s": seconds, "anon_growth": after["RssAnon"] - before["RssAnon"],
            "shmem_growth": after["RssShmem"] - before["RssShmem"]}


def hash_arrays(a: dict) -> dict:
    from modpack.weights.format import chunked_sha256

    weights = [modpack.load_weights(p, verify_checksums=False) for p in a["shards"]]
    views = [w[n] for w in weights for n in w]
    for v in views:  # in the page cache, as for the loads
        v.sum()
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(chunked_sha256, views))
    return {"hash_s": time.perf_counter() - t0}


def hold(a: dict) -> dict:
    before = status()
    root = modpack.load_module(a["path"], overlays=a.get("overlays") or None)
    total = sum(float(x.sum(dtype=np.float64)) for x in arrays_of(root))  # every page
    for overlay in a.get("overlays") or []:  # the adapter's pages too (the same mapping)
        adapter = modpack.load_weights(overlay, verify_checksums=False)
        total += sum(float(adapter[n].sum(dtype=np.float64)) for n in adapter)
    after = status()
    files = [*a["shards"], *(a.get("overlays") or [])]
    result = {"anon_growth": after["RssAnon"] - before["RssAnon"],
              "base": mapped(a["shards"]), "overlays": mapped(a.get("overlays") or []),
              "all": mapped(files), "sum": total}
    print(json.dumps(result), flush=True)
    sys.stdin.read()
    return result


def swap(a: dict) -> dict:
    root = modpack.load_module(a["path"], overlays=[a["a"]])
    t0 = time.perf_counter()
    root.swap_overlays([a["b"]])
    return {"swap_s": time.perf_counter() - t0}


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    result = {"prepare": prepare, "load": load, "hash": hash_arrays, "hold": hold,
              "swap": swap}[args["mode"]](args)
    if args["mode"] != "hold":
        print(json.dumps(result))
