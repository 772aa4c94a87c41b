"""Export the quickstart's library for the C example: ``python make_deploy.py OUT.so``.

The same library as examples/quickstart/demo.py: host C code with an ``affine`` function
(out = x * weights + bias) importing a const module that carries ``weights`` and ``bias``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

import modpack


def quickstart_host_code() -> str:
    """The quickstart's HOST_CODE, reused so that the two examples cannot drift apart."""
    path = Path(__file__).resolve().parents[1] / "quickstart" / "demo.py"
    spec = importlib.util.spec_from_file_location("modpack_quickstart_demo", path)
    assert spec is not None and spec.loader is not None, path
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo.HOST_CODE


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {Path(argv[0]).name} OUT.so", file=sys.stderr)
        return 2
    out = Path(argv[1])
    host = modpack.csource_module(quickstart_host_code())
    host.import_module(modpack.const_module({
        "weights": np.arange(8, dtype=np.float32) / 4,
        "bias": np.full(8, 0.5, dtype=np.float32),
    }))
    host.export_library(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
