"""Registry targets (issue 31), against a CNCF distribution registry on loopback
(tests/registry.py starts it; bytes are counted from its access log):

1. Pulling one device variant of a library pushed in 4 variants with 1 GiB of weights
   transfers that variant's library and the weights once; a second tag that changes only host
   code transfers only the new library (and its small config).
2. Pull throughput of a 1 GiB artifact into an empty store >= 0.8 x `skopeo copy` of the same
   artifact to a local directory (`dir:` transport), best of N each.
3. A load from the store after a verified pull (load_module("oci://...@digest"): stamps, no
   re-hash) <= 2 x a plain load of the same library and weights from a folder, each in a
   fresh process, median of N.

    .venv/bin/python benchmarks/oci_registry.py [--mib 1024] [--repeats 3]

Needs nvcc (the 4 variants are real cubins), skopeo and docker-registry (scripts/dev.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from registry import Registry  # noqa: E402

import modpack  # noqa: E402

HOST = r"""
#include "modpack/backend.h"
static double pick(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i] + %d;
}
MP_EXPORT_FUNC(pick, double, int64_t)
"""
ARCHES = ("sm_75", "sm_80", "sm_90", "sm_100")
LOAD = r"""
import sys, time, modpack
t = time.perf_counter()
lib = modpack.load_module(sys.argv[1])
dt = time.perf_counter() - t
assert lib["pick"](3) == 3.0
print(dt)
"""


def library(folder: Path, weights: Path, offset: int, cubins: dict[str, bytes]) -> Path:
    host = modpack.csource_module(HOST % offset)
    host.import_module(modpack.cuda_module(binaries=cubins,
                                           functions={"scale": ["float32*", "int32"]}))
    host.import_module(modpack.weights_module(str(weights)))
    folder.mkdir(parents=True, exist_ok=True)
    return Path(host.export_library(folder / "deploy.so"))


def fresh_load(target: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", LOAD, target], capture_output=True, text=True,
                         env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="modpack-oci-bench-"))
    env = {**os.environ, "MODPACK_OCI_PLAIN_HTTP": "1", "MODPACK_CACHE": str(work / "store")}
    os.environ.update(env)
    results: dict[str, object] = {"mib": args.mib}
    try:
        kernel = work / "k.cu"
        kernel.write_text('extern "C" __global__ void scale(float* x, int n) { x[0] *= n; }\n')
        cubins = {}
        for arch in ARCHES:
            subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", str(work / arch),
                            str(kernel)], check=True)
            cubins[arch] = (work / arch).read_bytes()
        weights = work / "src" / "model.mpw"
        weights.parent.mkdir()
        modpack.save_weights({"w": np.arange(args.mib << 18, dtype=np.float32)}, weights)
        lib1 = library(work / "src", weights, 0, cubins)
        (work / "src2").mkdir()
        os.link(weights, work / "src2" / "model.mpw")
        lib2 = library(work / "src2", work / "src2" / "model.mpw", 1, cubins)
        with Registry(work / "registry") as reg:
            ref = f"{reg.url}/bench/model"
            t = time.perf_counter()
            modpack.push(lib1, f"{ref}:v1", variants=",".join(ARCHES), progress=False)
            results["push_4_variants_s"] = time.perf_counter() - t
            second = modpack.push(lib2, f"{ref}:v2", variants=",".join(ARCHES), progress=False)
            results["push_v2_uploaded_bytes"] = second.uploaded_bytes
            before = reg.blob_bytes_sent()
            pulled = modpack.pull(f"{ref}:v1", device="cuda:sm_90", progress=False)
            results["pull_one_variant_bytes"] = reg.blob_bytes_sent() - before
            results["variant_library_bytes"] = pulled.library.stat().st_size
            results["weights_bytes"] = weights.stat().st_size
            results["full_library_bytes"] = lib1.stat().st_size
            before = reg.blob_bytes_sent()
            pulled2 = modpack.pull(f"{ref}:v2", device="cuda:sm_90", progress=False)
            results["pull_v2_bytes"] = reg.blob_bytes_sent() - before
            results["v2_library_bytes"] = pulled2.library.stat().st_size

            # 2: throughput, a single manifest (no variants) of the same 1 GiB
            modpack.push(lib1, f"{ref}:plain", progress=False)
            mine, theirs = [], []
            for _ in range(args.repeats):
                shutil.rmtree(work / "store", ignore_errors=True)
                subprocess.run(["sync"], check=True)
                t = time.perf_counter()
                modpack.pull(f"{ref}:plain", progress=False)
                mine.append(time.perf_counter() - t)
                shutil.rmtree(work / "skopeo", ignore_errors=True)
                subprocess.run(["sync"], check=True)
                t = time.perf_counter()
                subprocess.run(["skopeo", "copy", "--src-tls-verify=false",
                                f"docker://{reg.host}/bench/model:plain",
                                f"dir:{work / 'skopeo'}"], check=True, capture_output=True)
                theirs.append(time.perf_counter() - t)
            size = weights.stat().st_size + lib1.stat().st_size
            results["pull_s"], results["skopeo_s"] = min(mine), min(theirs)
            results["pull_MBps"] = size / min(mine) / 1e6
            results["skopeo_MBps"] = size / min(theirs) / 1e6
            results["throughput_ratio"] = min(theirs) / min(mine)

            # 3: load from the store vs a plain load, fresh processes
            pulled = modpack.pull(f"{ref}:plain", progress=False)
            oci = [fresh_load(f"{ref}:plain@{pulled.manifest}", env)
                   for _ in range(args.repeats)]
            plain = [fresh_load(str(lib1), env) for _ in range(args.repeats)]
            results["load_store_ms"] = statistics.median(oci) * 1e3
            results["load_plain_ms"] = statistics.median(plain) * 1e3
            results["load_ratio"] = statistics.median(oci) / statistics.median(plain)
            tag = [fresh_load(f"{ref}:plain", env) for _ in range(args.repeats)]
            results["load_store_by_tag_ms"] = statistics.median(tag) * 1e3
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
