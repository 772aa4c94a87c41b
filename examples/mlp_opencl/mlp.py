"""A small model as a compiler would deploy it: a 3-layer MLP whose host code (mlp_host.c)
allocates workspaces, fetches its weights on the OpenCL device and runs the kernels of
mlp_kernels.cl, a kernel file as OpenCL projects write them, built with its own options. All
of it goes into one deploy.so unchanged: no functions=, no edits.

    python mlp.py build deploy.so   # export host code + OpenCL kernels + weights
    python mlp.py run deploy.so     # load (fresh process), run on opencl:0, check vs numpy

`python mlp.py deploy.so` does both, running the second step in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import modpack

HERE = Path(__file__).resolve().parent
BUILD_OPTIONS = "-DREAL=float -DWG=64 -DACTIVATION=1 -cl-mad-enable"  # GELU
IN, H1, H2, OUT = 64, 128, 64, 10


def weights() -> dict[str, np.ndarray]:
    """Deterministic weights, scaled as a trained layer's would be (1/sqrt(fan-in))."""
    rng = np.random.default_rng(2024)

    def layer(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)

    return {"w1": layer(H1, IN), "b1": rng.standard_normal(H1).astype(np.float32) * 0.1,
            "w2": layer(H2, H1), "b2": rng.standard_normal(H2).astype(np.float32) * 0.1,
            "w3": layer(OUT, H2)}


def inputs(batch: int) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((batch, IN)).astype(np.float32)


def reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """The same model in numpy, in float64."""
    def gelu(v: np.ndarray) -> np.ndarray:
        return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))

    h = {k: v.astype(np.float64) for k, v in w.items()}
    h1 = gelu(x @ h["w1"].T + h["b1"])
    h2 = gelu(h1 @ h["w2"].T + h["b2"])
    logits = h2 @ h["w3"].T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def build(path: Path) -> Path:
    host = modpack.csource_module((HERE / "mlp_host.c").read_text())
    host.import_module(modpack.opencl_module((HERE / "mlp_kernels.cl").read_text(),
                                             build_options=BUILD_OPTIONS))
    host.import_module(modpack.const_module(weights()))
    return host.export_library(path)


def run(path: Path, batch: int = 32) -> None:
    mlp_forward = modpack.load_module(path)["mlp_forward"]
    x = inputs(batch)
    probs = np.empty((batch, OUT), np.float32)
    t0 = time.perf_counter()
    mlp_forward(x, probs)  # first call: builds the program, uploads the weights
    first = time.perf_counter() - t0
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        mlp_forward(x, probs)
        times.append(time.perf_counter() - t0)
    error = float(np.abs(probs - reference(x, weights())).max())
    assert error < 1e-5, f"probabilities differ from numpy by {error}"
    print(f"device: {modpack.device_name('opencl:0')}")
    print(f"batch {batch}: first call (build, weight upload) {first * 1e3:.1f} ms, "
          f"steady state median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
    print(f"mlp_opencl (Python): OK, {batch}x{OUT} probabilities match numpy "
          f"(max abs error {error:.1e})")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] in ("build", "run"):
        (build if sys.argv[1] == "build" else run)(Path(sys.argv[2]))
    elif len(sys.argv) == 2:
        path = build(Path(sys.argv[1]))
        print(f"exported {path}")
        subprocess.run([sys.executable, __file__, "run", str(path)], check=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
